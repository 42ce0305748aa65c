"""``testbed run --solo``: each job alone on the same fabric first, then all together; slowdowns and the
interference matrix.

Each job runs alone on the same fabric definition and the same hosts (its placement from the full
scenario, pinned as a ``hosts`` list, start_s 0), one run each, into ``RESULTS/solo/``; then the scenario
itself runs into ``RESULTS/`` and its run directory gets the solo figures: summary.json ``jobs.jobs[]``
``solo_busbw_ratio``, ``solo_jct_s``, ``busbw_slowdown`` (solo busbw / shared busbw), ``jct_slowdown``
(shared JCT / solo JCT), for a pattern job ``solo_fct_p50_us``, ``solo_fct_p99_us`` and ``fct_p99_slowdown``
(shared FCT p99 / solo FCT p99), for a SimAI job ``solo_iteration_s``, jobs.csv's solo columns (matched
on job, group, collective and size: testbed.workloads.jobs.results.JOBS_ROW_KEY; RunDir.write_table rewrites the
Parquet copies too), tenants.csv's ``jct_slowdown_max``, and
``jobs.interference``: the matrix M[i][j] = JCT of job i run with job j only / JCT of job i alone (1 on the
diagonal). With two jobs the pair run is the shared run itself; with N > 2 jobs every pair also runs alone
(N(N-1)/2 more runs, into ``RESULTS/pairs/``), so the matrix says who hurts whom, and the shared run's own
slowdowns say what all of them together do.

``testbed run --solo-from DIR`` reuses the solo (and pair) runs an earlier ``--solo`` stored under DIR
instead, each checked to be this job exactly (testbed.workloads.jobs.solo_store); the results are the same, and
summary.json ``jobs.solo_baseline`` says where the solo figures came from either way.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Optional

import pandas as pd

from testbed.workloads.jobs.plan import pinned_spec
from testbed.workloads.jobs.results import JOBS_ROW_KEY, format_jobs, tenant_entries, tenants_table
from testbed.results.rundir import RunDir
from testbed.spec.scenario import ScenarioError

#: runs of a jobs scenario with --solo that completed (faithful or not)
_COMPLETED = (0, 3, 6)


def run_with_solo(spec, results_root, run_one, solo_from=None) -> object:
    """Solo runs, (pair runs,) then the shared run with ``run_one(spec, results_root) -> RunOutcome``
    (testbed.pipeline.runner.run with the caller's options); the shared run's outcome, its run directory updated
    (module docstring). A solo or pair run that does not complete stops there with its outcome.
    ``solo_from``: a folder of stored solo runs (testbed.workloads.jobs.solo_store) used instead of running them; each
    is checked before anything runs. Raises ScenarioError when ``spec`` has no jobs list, SoloBaselineError
    (a ScenarioError) when a job has no matching stored run."""
    if not spec.jobs:
        raise ScenarioError(f"{'--solo-from' if solo_from else '--solo'} compares each job of a jobs list alone "
                            "and together; this scenario has one workload (give a jobs: list)")
    root = Path(results_root)
    if solo_from is not None:
        from testbed.workloads.jobs.solo_store import find

        stored = find(spec, solo_from)
        solo, pairs = stored.solo, stored.pairs
    else:
        solo, pairs = {}, {}
        for j in spec.jobs:
            out = run_one(pinned_spec(spec, [j.name], f"solo-{j.name}"), root / "solo")
            if out.exit_code not in _COMPLETED or out.run_dir is None:
                return out
            solo[j.name] = out.run_dir
        if len(spec.jobs) > 2:
            for a, b in itertools.combinations([j.name for j in spec.jobs], 2):
                out = run_one(pinned_spec(spec, [a, b], f"pair-{a}-{b}"), root / "pairs")
                if out.exit_code not in _COMPLETED or out.run_dir is None:
                    return out
                pairs[(a, b)] = out.run_dir
    out = run_one(spec, root)
    if out.run_dir is not None and out.exit_code in _COMPLETED:
        block = attach_solo(out.run_dir, solo, pairs, solo_from)
        print(format_jobs(block))
        for w in block["solo_baseline"]["warnings"]:
            print(f"testbed: warning: {w}")
    return out


def _job(run_dir: Path, name: str) -> dict:
    return next(e for e in RunDir.open(run_dir).summary["jobs"]["jobs"] if e["name"] == name)


def _ratio(a, b) -> Optional[float]:
    return a / b if a is not None and b else None


def attach_solo(run_dir: Path, solo: dict[str, Path], pairs: dict[tuple[str, str], Path],
                solo_from=None) -> dict:
    """Add the solo figures and the interference matrix to the shared run ``run_dir`` (module docstring);
    return its new ``jobs`` block. ``solo``: job -> its solo run directory; ``pairs``: (job, job) -> the
    pair's run directory (empty with two jobs); ``solo_from``: the folder they were stored in (None: made
    for this run). ``jobs.solo_baseline``: ``from`` (that folder or None), ``runs`` (testbed.workloads.jobs.solo_store.source
    of each solo and pair run) and ``warnings`` (a solo or pair run on another OVS datapath than this run)."""
    from testbed.workloads.jobs.solo_store import source

    run = RunDir.open(run_dir)
    summary = run.summary
    block = summary["jobs"]
    names = [e["name"] for e in block["jobs"]]
    for e in block["jobs"]:
        s = _job(solo[e["name"]], e["name"])
        e.update({"solo_run_dir": str(solo[e["name"]]), "solo_run_id": RunDir.open(solo[e["name"]]).run_id,
                  "solo_busbw_ratio": s["busbw_ratio"],
                  "solo_jct_s": s["jct_s"], "busbw_slowdown": _ratio(s["busbw_ratio"], e["busbw_ratio"]),
                  "jct_slowdown": _ratio(e["jct_s"], s["jct_s"]),
                  "solo_faithful": RunDir.open(solo[e["name"]]).summary.get("faithful")})
        if s.get("iteration_s") is not None:  # a SimAI job: its mean iteration alone
            e["solo_iteration_s"] = s["iteration_s"]
        if e.get("pattern") and s.get("pattern"):  # a pattern job: its flows' tail alone and together
            p, sp = e["pattern"], s["pattern"]
            e.update({"solo_fct_p50_us": sp["fct_p50_us"], "solo_fct_p99_us": sp["fct_p99_us"],
                      "fct_p99_slowdown": _ratio(p["fct_p99_us"], sp["fct_p99_us"])})
    matrix = []
    for a in names:
        row = []
        for b in names:
            if a == b:
                row.append(1.0)
                continue
            if not pairs:
                row.append(next(e["jct_slowdown"] for e in block["jobs"] if e["name"] == a))
                continue
            pair = pairs.get((a, b)) or pairs[(b, a)]
            row.append(_ratio(_job(pair, a)["jct_s"], _job(solo[a], a)["jct_s"]))
        matrix.append(row)
    block["interference"] = {
        "jobs": names, "jct_slowdown": matrix,
        "method": ("the shared run is the pair run" if not pairs else
                   f"each pair run alone ({len(pairs)} pair runs)") + "; JCT with the other job / JCT alone",
        "pair_run_dirs": {f"{a},{b}": str(p) for (a, b), p in pairs.items()}}
    runs = source([*solo.values(), *pairs.values()])
    datapath = (run.manifest.get("backends") or {}).get("datapath")
    block["solo_baseline"] = {
        "from": str(solo_from) if solo_from is not None else None, "runs": runs,
        "warnings": [f"solo run {r['run_id']} ({', '.join(r['jobs'])}) ran on the {r['datapath']} datapath, this run "
                     f"on {datapath}: the slowdowns compare two machine classes" for r in runs
                     if r["datapath"] != datapath]}
    block["tenants"] = tenant_entries(block["jobs"])
    jobs_csv = run.table("jobs")
    if jobs_csv is not None and len(jobs_csv):
        solo_rows = pd.concat([RunDir.open(p).table("jobs") for p in solo.values()])[
            [*JOBS_ROW_KEY, "busbw_ratio", "jct_s", "fct_p99_us"]].rename(
            columns={"busbw_ratio": "solo_busbw_ratio", "jct_s": "solo_jct_s", "fct_p99_us": "solo_fct_p99_us"})
        jobs_csv = jobs_csv.merge(solo_rows, on=JOBS_ROW_KEY, how="left")
        jobs_csv["busbw_slowdown"] = jobs_csv["solo_busbw_ratio"] / jobs_csv["busbw_ratio"]
        jobs_csv["jct_slowdown"] = jobs_csv["jct_s"] / jobs_csv["solo_jct_s"]
        jobs_csv["fct_p99_slowdown"] = jobs_csv["fct_p99_us"] / jobs_csv["solo_fct_p99_us"]
        run.write_table("jobs", jobs_csv)
    run.write_table("tenants", tenants_table(block["tenants"]))
    summary["jobs"] = block
    run.write_summary(summary)
    try:  # the report with the matrix (testbed.report)
        from testbed.report import write_report
        write_report(run.path)
    except Exception as e:  # noqa: BLE001  the tables and summary are written; say why the page is not
        print(f"testbed: warning: report.html not rewritten with the solo figures: {e}")
    return json.loads(json.dumps(block))
