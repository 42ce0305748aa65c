"""`testbed lab check` and the fidelity verdict (issue 31 item 4), and the one-run-directory example of its
--help, without a fabric. Run directories are written the way a run writes them: manifest.json with the lab
file's validated scenario, summary.json of the one shape (testbed.results.shape.stable_summary) holding, at
each figure's path, the value of the lab's first measured run (labs/NN/expected.yaml ``runs[0]``)."""
import json
import re
import shlex
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.labcheck import bands as bands_mod
from testbed.labcheck.check import check, lab_dir
from testbed.labcheck.command import EPILOG
from testbed.process.exitcodes import EXIT_LAB_UNFAITHFUL
from testbed.results.shape import stable_summary
from testbed.workloads import load_scenario

SPURIOUS = ("3 spurious retransmissions (duplicates at the responders that no lost packet explains; 41 "
            "retransmissions in all; allowed 0: fidelity.max_spurious_retx_pkts): a retransmission timer fired "
            "before an ACK that was on its way")


def _put(summary: dict, path: str, value: float) -> None:
    """Set ``value`` at a figure's summary path (testbed.labcheck.figures syntax: key, key[i], key[f=v])."""
    node = summary
    steps = path.split(".")
    for i, step in enumerate(steps):
        key, sel = re.fullmatch(r"([A-Za-z_]\w*)(?:\[([^\]]+)\])?", step).groups()
        last = i == len(steps) - 1
        if sel is None:
            node = node.setdefault(key, {}) if not last else node.__setitem__(key, value)
            continue
        items = node.setdefault(key, [])
        field, _, want = sel.partition("=")
        item = next((x for x in items if str(x.get(field)) == want), None)
        if item is None:
            item = {field: int(want) if want.isdigit() else want}
            items.append(item)
        node = item


def write_run(results: Path, lab: Path, stem: str, started: str, verdict: str = "faithful",
              violations: tuple = (), run_id: str = "") -> Path:
    """A run directory of ``labs/<lab>/<stem>.yaml`` whose figures are the lab's first measured run's."""
    spec = load_scenario(lab / f"{stem}.yaml").model_dump(mode="json")
    run_id = run_id or "tb" + started[-5:-1].lower()
    d = results / f"{started}-{spec['name']}-{run_id}"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"run_id": run_id, "started_utc": started, "scenario": spec}))
    doc = {"run_id": run_id, "run_dir": str(d), "scenario": spec["name"], "n_ranks": 8, "status": "complete",
           "complete": True, "faithful": verdict == "faithful", "verdict": verdict,
           "violations": list(violations), "not_judged": [], "checks": {}, "fidelity": {}, "sizes": [],
           "congestion": {}, "transport": {"posted_bytes": 4194304, "acked_bytes": 4194304,
                                           "delivered_bytes": 4194304, "order_errors": 0}}
    for f in bands_mod.load(lab).figures:
        if f.scenario == stem:
            _put(doc, f.read, int(f.runs[0]) if f.digits == 0 else f.runs[0])  # counts are integers
    (d / "summary.json").write_text(json.dumps(stable_summary(doc)))
    return d


def _lab6(tmp_path: Path, ecmp_verdict: str = "not_faithful") -> Path:
    lab = lab_dir("6")
    results = tmp_path / "results"
    write_run(results, lab, "packed", "20261208T010000Z")
    write_run(results, lab, "spread_ecmp", "20261208T010100Z", ecmp_verdict,
              (SPURIOUS,) if ecmp_verdict == "not_faithful" else ())
    write_run(results, lab, "spread_spray", "20261208T010200Z")
    return results


def test_lab6_all_faithful_passes(tmp_path, capsys):
    assert main(["lab", "check", "6", str(_lab6(tmp_path, "faithful"))]) == 0
    assert "RESULT: PASS" in capsys.readouterr().out


def test_an_unfaithful_run_fails_the_check_with_its_own_exit_code(tmp_path, capsys):
    results = _lab6(tmp_path)
    code = main(["lab", "check", "6", str(results)])
    out = capsys.readouterr().out
    assert code == EXIT_LAB_UNFAITHFUL == 7, out
    assert "RESULT: FAIL" in out and "RESULT: PASS" not in out
    run_line = next(ln for ln in out.splitlines() if "lab6-spread-ecmp" in ln and "spread_ecmp.yaml" in ln)
    assert "NOT faithful" in run_line
    flagged = [ln for ln in out.splitlines() if ln.startswith("FAIL") and "NOT faithful" in ln]
    assert len(flagged) == 1 and "3 spurious retransmissions" in flagged[0] and "--include-unfaithful" in flagged[0]
    assert "1 run NOT faithful" in out.splitlines()[-1]


def test_a_not_judged_run_is_unfaithful_too(tmp_path):
    v = check("6", _lab6(tmp_path, "not_judged"))
    assert not v.ok and len(v.unfaithful) == 1 and "-lab6-spread-ecmp-" in v.unfaithful[0]


def test_a_faithful_shared_run_on_an_unfaithful_solo_run_is_flagged(tmp_path, capsys):
    """`testbed run --solo`: the slowdowns rest on each job's solo run; one NOT faithful flags the run."""
    results = _lab6(tmp_path, "faithful")
    run = next(results.glob("*-lab6-spread-ecmp-*"))
    s = json.loads((run / "summary.json").read_text())
    s["jobs"]["jobs"][0].update(solo_faithful=False, busbw_slowdown=1.98)
    s["jobs"]["jobs"][1].update(solo_faithful=True, busbw_slowdown=1.99)
    (run / "summary.json").write_text(json.dumps(s))
    assert main(["lab", "check", "6", str(results)]) == EXIT_LAB_UNFAITHFUL
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("FAIL")]
    assert "the solo run of job a is NOT faithful" in line


def test_include_unfaithful_counts_the_run_and_still_flags_it(tmp_path, capsys):
    results = _lab6(tmp_path)
    assert main(["lab", "check", "6", str(results), "--include-unfaithful"]) == 0
    out = capsys.readouterr().out
    assert "RESULT: PASS" in out
    flagged = [ln for ln in out.splitlines() if ln.startswith("WARN") and "NOT faithful" in ln]
    assert len(flagged) == 1 and "counted (--include-unfaithful)" in flagged[0]
    assert "1 run NOT faithful, counted" in out.splitlines()[-1]


def test_a_figure_outside_its_band_still_fails_with_1_when_every_run_is_faithful(tmp_path, capsys):
    results = _lab6(tmp_path, "faithful")
    run = next(results.glob("*-lab6-packed-*"))
    s = json.loads((run / "summary.json").read_text())
    s["jobs"]["jobs"][0]["busbw_ratio"] = 0.5
    (run / "summary.json").write_text(json.dumps(s))
    assert main(["lab", "check", "6", str(results)]) == 1
    assert "below the band" in capsys.readouterr().out


def _help_example() -> list[str]:
    """The one-run-directory example of `testbed lab check --help`: its arguments after `lab check`."""
    examples = [shlex.split(ln)[3:5] for ln in EPILOG.splitlines() if ln.strip().startswith("testbed lab check")]
    (one,) = [args for args in examples if not args[1].endswith("/")]
    return one


def test_the_help_example_with_one_run_directory_passes(tmp_path, capsys):
    lab_arg, run_arg = _help_example()
    lab = lab_dir(lab_arg)
    started, rest = Path(run_arg).name.split("-", 1)
    stem = next(p.stem for p in bands_mod.scenario_files(lab)
                if load_scenario(p).name == rest.rsplit("-", 1)[0])
    run = write_run(tmp_path / "results", lab, stem, started, run_id=rest.rsplit("-", 1)[1])
    assert run.name == Path(run_arg).name, "the example's directory name is what a run of it is called"
    assert main(["lab", "check", lab_arg, str(run)]) == 0
    out = capsys.readouterr().out
    assert "RESULT: PASS" in out
    others = [p.stem for p in bands_mod.scenario_files(lab) if p.stem != stem]
    for other in others:   # the lab's other runs are not there: said, not failed
        assert any(ln.startswith("SKIP") and f"{other}.yaml" in ln for ln in out.splitlines()), other
    assert not any(ln.startswith("FAIL") for ln in out.splitlines())


def test_one_run_directory_not_faithful_fails_with_its_own_exit_code(tmp_path, capsys):
    lab_arg, run_arg = _help_example()
    lab = lab_dir(lab_arg)
    stem = bands_mod.scenario_files(lab)[0].stem
    run = write_run(tmp_path / "results", lab, stem, "20261208T010000Z", "not_faithful", (SPURIOUS,))
    assert main(["lab", "check", lab_arg, str(run)]) == EXIT_LAB_UNFAITHFUL
    assert main(["lab", "check", lab_arg, str(run), "--include-unfaithful"]) == 0
