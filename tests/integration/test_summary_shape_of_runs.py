"""summary.json has one shape in every run (issue 30): a complete run, a run Ctrl-C'd during its traffic and a run
refused by the machine each write a summary.json that validates against the one JSON schema generated from
testbed.results.shape.RunSummary (testbed.results.summary_schema), with the same keys in the same order and a
``status`` saying how the run ended."""
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema

from conftest import EXIT_FAITHFUL, EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED, run_cli
from testbed.results.rundir import RunDir
from testbed.results.shape import INCOMPLETE, SUMMARY_KEYS, TRANSPORT_KEYS
from testbed.results.summary_schema import json_schema

FABRIC = "fabric: {spines: 1, leaves: 1, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M%s}\n"
COMPLETE = "name: shape-complete\n" + FABRIC % "" + \
    "workload: {sizes: {min_bytes: 32KiB, max_bytes: 64KiB, factor: 2}, iterations: 1, warmup_iterations: 0}\n"
LONG = "name: shape-cut\n" + FABRIC % "" + \
    "workload: {sizes: {min_bytes: 32KiB, max_bytes: 4MiB, factor: 2}, iterations: 1, warmup_iterations: 0}\n"


def _one_summary(results: Path) -> tuple[Path, dict]:
    (run_dir,) = list(results.iterdir())
    summary = RunDir(run_dir).summary
    jsonschema.validate(summary, json_schema())
    assert list(summary) == list(SUMMARY_KEYS) and list(summary["transport"]) == list(TRANSPORT_KEYS)
    return run_dir, summary


def test_a_complete_run_validates_with_status_complete(tmp_path):
    (tmp_path / "s.yaml").write_text(COMPLETE)
    res = run_cli("run", tmp_path / "s.yaml", "--results", tmp_path / "res", timeout=300)
    assert res.returncode in (EXIT_FAITHFUL, EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED), res.stderr
    run_dir, s = _one_summary(tmp_path / "res")
    assert s["status"] == "complete" and s["status_reason"] is None and s["complete"] is True
    assert s["ops_done"] == s["ops_planned"] == 2 and s["teardown"] == "done" and s["n_ranks"] == 2
    assert s["verdict"] in ("faithful", "not_faithful", "not_judged") and isinstance(s["faithful"], bool)
    assert s["fidelity"] and s["checks"] and s["controller"] is not None
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] > 0
    assert [r["size_bytes"] for r in s["sizes"]] == [32768, 65536]
    assert not (run_dir / "INCOMPLETE").exists()


def test_a_run_interrupted_by_sigint_validates_with_status_interrupted(tmp_path):
    (tmp_path / "s.yaml").write_text(LONG)
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(tmp_path / "s.yaml"), "--results",
                             str(tmp_path / "res")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, deadline = [], time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if re.match(r"\[\s*1/", line):  # one collective done: Ctrl-C during the traffic
            proc.send_signal(signal.SIGINT)
            break
    else:
        proc.kill()
    out, err = proc.communicate(timeout=180)
    err = "".join(seen) + err
    assert proc.returncode == 128 + signal.SIGINT, err
    run_dir, s = _one_summary(tmp_path / "res")
    assert s["status"] == "interrupted" and s["complete"] is False and s["verdict"] == INCOMPLETE
    assert s["status_reason"] == s["incomplete_reason"] == (run_dir / "INCOMPLETE").read_text().strip()
    assert "SIGINT during traffic after" in s["status_reason"] and 1 <= s["ops_done"] < s["ops_planned"] == 8
    assert s["fidelity"] == {} and s["checks"] == {} and s["faithful"] is None
    assert s["transport"]["posted_bytes"] is None and s["transport"]["loss_recovery"] is not None
    assert len(s["sizes"]) == s["ops_done"]


def test_a_run_refused_by_the_machine_validates_with_status_refused(tmp_path, monkeypatch):
    """A kernel datapath where this machine has none (exit 2 once the run has its id: the probe refuses it). Where
    the openvswitch module is loaded, Open vSwitch's probe is made to refuse instead (RunRefused, exit 4)."""
    results = tmp_path / "res"
    if not Path("/sys/module/openvswitch").exists():
        (tmp_path / "s.yaml").write_text(COMPLETE.replace("fabric_link_bps: 10M", "fabric_link_bps: 10M, "
                                                          "datapath: kernel"))
        res = run_cli("run", tmp_path / "s.yaml", "--results", results, timeout=120)
        assert res.returncode == 2, res.stderr
        assert "fabric.datapath: 'kernel' asked for" in res.stderr
        words, code = "refused: fabric.datapath: 'kernel' asked for", 2
    else:
        from testbed import api
        from testbed.measure.send_buffer import RunRefused
        from testbed.pipeline import runner

        def refuse(ctx):
            raise RunRefused("Open vSwitch is not usable (test)")
        monkeypatch.setattr(runner, "_probe", refuse)
        outcome = api.run_spec(_spec(tmp_path), results, quiet=True, print_results=False)
        assert outcome.exit_code == 4
        words, code = "refused: Open vSwitch is not usable (test)", 4
    run_dir, s = _one_summary(results)
    assert s["status"] == "refused" and s["status_reason"].startswith(words), (code, s["status_reason"])
    assert s["complete"] is False and s["verdict"] == INCOMPLETE and s["ops_done"] == 0 and s["ops_planned"] == 2
    assert s["controller"] is None and s["fidelity"] == {} and s["sizes"] == [] and s["teardown"] is None
    assert s["congestion"]["enabled"] is False and all(v is None for v in s["transport"].values())
    assert s["scenario"] == "shape-complete" and s["n_ranks"] == 2 and s["host_link_bps"] == 10_000_000
    assert (run_dir / "INCOMPLETE").read_text().strip() == s["status_reason"]
    assert sorted(p.name for p in run_dir.iterdir()) == ["INCOMPLETE", "summary.json"]  # nothing was built


def _spec(tmp_path):
    from testbed.workloads import load_scenario
    p = tmp_path / "s.yaml"
    p.write_text(COMPLETE)
    return load_scenario(p)
