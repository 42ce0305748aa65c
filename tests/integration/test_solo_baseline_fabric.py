"""Stored solo baselines on a real fabric (issue 18 item 6): ``testbed run --solo-from DIR`` reuses the solo
runs an earlier ``--solo`` made instead of running each job alone again, and refuses a changed job naming
it; ``testbed regress`` keeps them beside an entry's baseline (``solo: true``).

Scenario: scenarios/two_jobs_spread.yaml (quickstart fabric, 10 Mbit/s, two tenants' 4-rank ring
all-reduce jobs spread over the leaves, per-flow ECMP seed 1: one flow of each job hashed onto one uplink,
so both slow down about 2x) at 256 KiB, 3 timed iterations: each run about 10 s with set-up."""
import json
import time
from pathlib import Path

import yaml

from conftest import EXIT_FAITHFUL, EXIT_NOT_FAITHFUL, run_cli
from testbed.results.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
SIZE = {"min_bytes": "256KiB", "max_bytes": "256KiB"}
SLOWDOWN_BAND = 0.10     # the shared run again, against the same solo runs: JCT slowdown within 10 %
SLOWDOWN_MIN = 1.3       # the ECMP collision of seed 1 slows both jobs (1.99 at 512 KiB, docs/jobs.md)


def scenario(tmp_path, name: str, size_a=SIZE) -> Path:
    d = yaml.safe_load((REPO / "scenarios" / "two_jobs_spread.yaml").read_text())
    for j in d["jobs"]:
        j["workload"] = {**j["workload"], "sizes": SIZE, "iterations": 3}
    d["jobs"][0]["workload"]["sizes"] = size_a
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def run(scenario_path: Path, results: Path, *flags) -> tuple[dict, float]:
    """``testbed run SCENARIO --results RESULTS --quiet FLAGS``: (summary.json of the shared run, wall time s)."""
    t0 = time.monotonic()
    res = run_cli("run", scenario_path, "--results", results, "--quiet", *flags, timeout=400)
    took_s = time.monotonic() - t0
    assert res.returncode in (EXIT_FAITHFUL, EXIT_NOT_FAITHFUL), f"{flags}: {res.returncode}\n{res.stderr}"
    (summary,) = results.glob("*/summary.json")
    print(res.stdout[res.stdout.rfind("jobs:"):])
    return RunDir.open(summary.parent).summary, took_s


def slowdowns(summary: dict) -> dict:
    return {e["name"]: e["jct_slowdown"] for e in summary["jobs"]["jobs"]}


def test_solo_from_reuses_the_stored_solo_runs_and_refuses_a_changed_job(tmp_path):
    s = scenario(tmp_path, "two")
    first, first_s = run(s, tmp_path / "first", "--solo")
    # the solo runs the slowdowns rest on (a run the machine disturbed is run once more; both stay in solo/)
    solo_runs = sorted(Path(r["run_dir"]) for r in first["jobs"]["solo_baseline"]["runs"])
    assert len(solo_runs) == 2 and all(RunDir.open(p).summary["faithful"] for p in solo_runs)
    stored = sorted(p.parent for p in (tmp_path / "first" / "solo").glob("*/summary.json"))
    assert first["jobs"]["solo_baseline"]["from"] is None

    again, again_s = run(s, tmp_path / "again", "--solo-from", tmp_path / "first")
    assert not (tmp_path / "again" / "solo").exists()  # no solo run this time
    assert sorted(p.parent for p in (tmp_path / "first" / "solo").glob("*/summary.json")) == stored
    block = again["jobs"]
    assert block["solo_baseline"]["from"] == str(tmp_path / "first")
    assert sorted(r["run_dir"] for r in block["solo_baseline"]["runs"]) == [str(p) for p in solo_runs]
    assert block["solo_baseline"]["warnings"] == []
    for e, f in zip(block["jobs"], first["jobs"]["jobs"]):  # the same solo figures as the first run's
        assert (e["solo_run_dir"], e["solo_run_id"], e["solo_jct_s"]) == (f["solo_run_dir"], f["solo_run_id"],
                                                                          f["solo_jct_s"])
    assert block["interference"]["jobs"] == ["a", "b"]
    assert RunDir.open(again["run_dir"]).table("jobs")["jct_slowdown"].notna().all()
    one, two = slowdowns(first), slowdowns(again)
    print(f"JCT slowdowns with --solo: {one}; with --solo-from: {two}; wall time {first_s:.1f} s vs {again_s:.1f} s "
          f"(saved {first_s - again_s:.1f} s, {1 - again_s / first_s:.0%})")
    for job in "ab":
        assert one[job] >= SLOWDOWN_MIN and abs(two[job] / one[job] - 1) <= SLOWDOWN_BAND, (one, two)
    assert again_s < 0.6 * first_s  # one run instead of three

    changed = scenario(tmp_path, "changed", size_a={"min_bytes": "512KiB", "max_bytes": "512KiB"})
    res = run_cli("run", changed, "--results", tmp_path / "changed", "--quiet", "--solo-from", tmp_path / "first",
                  timeout=120)
    print(res.stderr)
    assert res.returncode == 2, res.stderr
    assert "job 'a'" in res.stderr and "job 'b'" not in res.stderr
    assert "jobs.0.workload.sizes.max_bytes: 262144 (stored) vs 524288 (this run)" in res.stderr
    assert not list((tmp_path / "changed").glob("*/manifest.json"))  # refused before anything was built


def _regress(suite: Path, *args):
    return run_cli("regress", suite, "--results", suite.parent / "res", *args, timeout=600)


def test_regress_keeps_a_solo_baseline_and_reuses_it(tmp_path):
    """``solo: true``: --update-baseline runs the entry with --solo and keeps its solo runs in
    baselines/two.solo/; the check runs the shared run only (--solo-from) and judges the slowdowns."""
    scenario(tmp_path, "two")
    suite = tmp_path / "suite.yaml"
    # the CPU check is off here (as in test_regress.py): this test is about keeping and reusing the solo
    # runs; on the shared 2-core machine a 2 s solo run was judged NOT faithful for 2 saturated seconds
    # once, and an unfaithful solo run is (rightly) not kept. The first test keeps the check on.
    suite.write_text(yaml.safe_dump({"name": "jobs", "overrides": {"fidelity": {"min_cpu_idle_pct": "off"}},
                                     "scenarios": [
        {"name": "two", "scenario": "two.yaml", "solo": True,
         "figures": ["jct_slowdown", "busbw_slowdown"]}]}))
    t0 = time.monotonic()
    made = _regress(suite, "--update-baseline")
    made_s = time.monotonic() - t0
    assert made.returncode == 0, made.stdout + made.stderr
    base = json.loads((tmp_path / "baselines" / "two.json").read_text())
    kept = sorted(p.relative_to(tmp_path / "baselines" / "two.solo").parts[0]
                  for p in (tmp_path / "baselines" / "two.solo").glob("*/*/manifest.json"))
    assert kept == ["solo", "solo"]
    t0 = time.monotonic()
    checked = _regress(suite)
    checked_s = time.monotonic() - t0
    print(checked.stdout)
    print(f"baseline slowdowns {({k: v for k, v in base['figures'].items() if 'slowdown' in k})}; "
          f"regress --update-baseline {made_s:.1f} s, regress {checked_s:.1f} s")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "jct_slowdown@a" in checked.stdout and "jct_slowdown@b" in checked.stdout
    session = sorted((tmp_path / "res").glob("*-regress-jobs"))[-1]  # the check's (the update's is first)
    runs = sorted(session.glob("two/*/summary.json"))
    assert len(runs) == 1 and not (session / "two" / "solo").exists()  # the shared run only
    kept_dir = tmp_path / "baselines" / "two.solo"
    assert RunDir.open(runs[0].parent).summary["jobs"]["solo_baseline"]["from"] == str(kept_dir.resolve())
    kept_bytes = sum(p.stat().st_size for p in kept_dir.rglob("*") if p.is_file())
    print(f"solo baseline kept: {kept_bytes} bytes for 2 runs")

    scenario(tmp_path, "two", size_a={"min_bytes": "512KiB", "max_bytes": "512KiB"})  # job a changed
    refused = _regress(suite)
    print(refused.stderr)
    assert refused.returncode == 2 and "scenarios.two.solo" in refused.stderr and "job 'a'" in refused.stderr
    assert len(list((tmp_path / "res").glob("*-regress-jobs"))) == 2  # refused before any run
