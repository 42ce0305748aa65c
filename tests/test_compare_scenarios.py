"""`testbed compare` of two different scenarios (issue 31 item 5): the stored regression baselines of the ring
all-reduce and of the DCQCN incast (regress/baselines/, real runs' figures) are refused, naming first how
the scenarios differ (name, fabric, workload), unless --allow-different; a baseline and a run of its own
scenario still compare. No fabric."""
import json
from pathlib import Path

import yaml

from testbed import cli
from testbed.process.exitcodes import EXIT_BAD_INPUT
from testbed.results.shape import stable_summary
from testbed.spec.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[1]
RING, INCAST = ROOT / "regress" / "baselines" / "allreduce_ring.json", ROOT / "regress" / "baselines" / "incast_dcqcn.json"


def test_two_baselines_of_different_scenarios_are_refused_naming_how_they_differ(capsys):
    assert cli.main(["compare", str(RING), str(INCAST)]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == "", "nothing compared"
    assert "ran different experiments" in err and "--allow-different" in err
    lines = err.splitlines()
    assert lines[1].strip().startswith("name: 'quickstart' vs 'incast_dcqcn'"), err
    sections = [ln.strip().split(":")[0] for ln in lines[1:] if ln.startswith("  ")]
    assert sections[:3] == ["name", "fabric", "workload"], err
    assert "REGRESSED" not in err


def test_allow_different_compares_them_after_saying_how_they_differ(capsys):
    assert cli.main(["compare", str(RING), str(INCAST), "--allow-different"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("WARNING: different experiments, compared because of --allow-different:\n"
                          "WARNING:   name: 'quickstart' vs 'incast_dcqcn'\nWARNING:   fabric: "), out
    assert "5 figures compared: 0 REGRESSED, 0 improved, 5 ok" in out


def _run_of(tmp_path: Path, baseline: Path) -> Path:
    """A run directory of the baseline's scenario (its file and the suite's overrides), as a run writes it."""
    doc = json.loads(baseline.read_text())
    data = yaml.safe_load((baseline.parent / doc["scenario"]).read_text())
    for over in doc["overrides"].values():
        for key, value in over.items():
            data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    spec = parse_scenario(data).model_dump(mode="json")
    d = tmp_path / f"20261208T010000Z-{spec['name']}-tb0001"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"run_id": "tb0001", "scenario": spec}))
    summary = {"run_id": "tb0001", "run_dir": str(d), "scenario": spec["name"], "n_ranks": 8, "status": "complete", "complete": True,
               "faithful": True, "verdict": "faithful", "violations": [], "not_judged": [], "checks": {},
               "fidelity": {}, "sizes": [], "congestion": {}, "transport": {"retx_pkts": 0, "timeouts": 0}}
    (d / "summary.json").write_text(json.dumps(stable_summary(summary)))
    return d


def test_a_baseline_and_a_run_of_its_own_scenario_compare(tmp_path, capsys):
    run = _run_of(tmp_path, RING)
    assert cli.main(["compare", str(RING), str(run)]) == 0
    out, err = capsys.readouterr()
    assert "WARNING" not in out and err == "" and "3 figures compared: 0 REGRESSED" in out
    assert cli.main(["compare", str(INCAST), str(run)]) == EXIT_BAD_INPUT
    assert "name: 'incast_dcqcn' vs 'quickstart'" in capsys.readouterr().err
