"""``testbed run`` exit codes: documented in --help, derived from summary.json alone."""
import subprocess
import sys

from testbed.pipeline import runner


def test_exit_code_from_summary():
    ok = {"bytes": {"status": "passed", "reason": ""}}
    bad = {"bytes": {"status": "failed", "reason": "byte mismatch: ..."}}
    assert runner.exit_code({"complete": True, "faithful": True, "checks": ok}) == runner.EXIT_FAITHFUL == 0
    assert runner.exit_code({"complete": True, "faithful": False, "checks": ok}) == runner.EXIT_NOT_FAITHFUL == 3
    assert runner.exit_code({"complete": True, "faithful": False, "checks": bad}) == runner.EXIT_FAILED == 4
    assert runner.exit_code({"complete": False, "faithful": None}) == runner.EXIT_FAILED
    assert runner.EXIT_BAD_INPUT == 2 and runner.EXIT_INTERRUPTED_BASE == 128


def test_exit_codes_in_run_help():
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "run", "--help"], capture_output=True, text=True)
    assert res.returncode == 0
    for code in ("0 ", "3 ", "2 ", "4 ", "128+N"):
        assert f"\n  {code}" in res.stdout, code


def test_bad_scenario_exits_2(tmp_path, capsys, monkeypatch):
    import os

    from testbed import cli
    p = tmp_path / "bad.yaml"
    p.write_text("name: bad\nworkload: {sizes: {min_bytes: 1KiB, max_bytes: 1KiB}}\nfidelity: {max_spurious_retx_pkts: -1}\n")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert cli.main(["run", str(p), "--quiet"]) == runner.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("testbed: error: ") and "max_spurious_retx_pkts" in err


def test_a_reader_that_quits_early_changes_nothing():
    """`testbed ... | head`: output to a closed pipe is dropped, the command keeps its own exit code."""
    import os
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first line
    try:
        res = subprocess.run([sys.executable, "-m", "testbed.cli", "run", "--help"], stdout=w,
                             stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(w)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr
