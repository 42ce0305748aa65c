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

A slowdown never rests silently on an unfaithful baseline. A solo or pair run is judged by the rule
``--solo-from`` uses for stored runs (testbed.workloads.jobs.solo_store.unusable). One whose verdict failed
only pacing checks (testbed.measure.verdict.disturbed_checks: the machine disturbed it) runs once more, and
summary.json ``jobs.solo_baseline.reruns`` names the run it replaced. One still not usable is kept and
marked: a warning in ``jobs.solo_baseline.warnings`` and on the console, a ``*`` on the slowdowns and
matrix cells that rest on it, and the exit code is the verdict's (3 NOT faithful, 6 not judged) even when
the shared run itself was faithful.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import sys
from pathlib import Path
from typing import Optional

import pandas as pd

from testbed.measure.verdict import disturbed_checks
from testbed.process.exitcodes import EXIT_FAITHFUL, EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED, exit_code
from testbed.workloads.jobs.plan import pinned_spec
from testbed.workloads.jobs.results import JOBS_ROW_KEY, format_jobs, tenant_entries, tenants_table
from testbed.workloads.jobs.solo_store import PAIRS_FOLDER, SOLO_FOLDER, unusable
from testbed.results.rundir import RunDir
from testbed.spec.estimate import format_duration
from testbed.spec.scenario import ScenarioError

#: runs of a jobs scenario with --solo that completed (faithful or not)
_COMPLETED = (EXIT_FAITHFUL, EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED)


def run_with_solo(spec, results_root, run_one, solo_from=None, quiet: bool = False) -> object:
    """Solo runs, (pair runs,) then the shared run with ``run_one(spec, results_root) -> RunOutcome``
    (testbed.pipeline.runner.run with the caller's options); the shared run's outcome, its run directory updated
    (module docstring) and its exit code the verdict's of every run the slowdowns rest on (:func:`exit_code_of`).
    A solo or pair run that does not complete stops there with its outcome. Before the first run the number of
    runs and their estimated duration in all are printed (stderr), and as each starts ``solo K of N (run I of
    T)``; ``quiet``: neither. ``solo_from``: a folder of stored solo runs (testbed.workloads.jobs.solo_store)
    used instead of running them; each is checked before anything runs. Raises ScenarioError when ``spec`` has
    no jobs list, SoloBaselineError (a ScenarioError) when a job has no matching stored run."""
    if not spec.jobs:
        raise ScenarioError(f"{'--solo-from' if solo_from else '--solo'} compares each job of a jobs list alone "
                            "and together; this scenario has one workload (give a jobs: list)")
    root = Path(results_root)
    reruns: list[dict] = []
    if solo_from is not None:
        from testbed.workloads.jobs.solo_store import find

        stored = find(spec, solo_from)
        solo, pairs = stored.solo, stored.pairs
    else:
        names = [j.name for j in spec.jobs]
        groups = [(n,) for n in names] + (list(itertools.combinations(names, 2)) if len(names) > 2 else [])
        runs = [(g, pinned_spec(spec, list(g), f"solo-{g[0]}" if len(g) == 1 else f"pair-{g[0]}-{g[1]}"))
                for g in groups]
        _say(estimate_line(spec, [s for _, s in runs]), quiet)
        solo, pairs = {}, {}
        for i, (group, s) in enumerate(runs):
            kind, k, n = (("solo", i + 1, len(names)) if len(group) == 1 else
                          ("pair", i + 1 - len(names), len(groups) - len(names)))
            what = (f"job {group[0]} alone on {', '.join(s.jobs[0].hosts)}" if kind == "solo" else
                    f"jobs {group[0]} and {group[1]} alone")
            marker = f"{kind} {k} of {n} (run {i + 1} of {len(groups) + 1})"
            out, replaced = _baseline_run(run_one, s, root / (SOLO_FOLDER if kind == "solo" else PAIRS_FOLDER),
                                          marker, what, quiet)
            if out.exit_code not in _COMPLETED or out.run_dir is None:
                return out
            if replaced is not None:
                reruns.append(replaced)
            if kind == "solo":
                solo[group[0]] = out.run_dir
            else:
                pairs[group] = out.run_dir
        _say(f"testbed: shared run (run {len(groups) + 1} of {len(groups) + 1}): jobs {', '.join(names)} together",
             quiet)
    out = run_one(spec, root)
    if out.run_dir is not None and out.exit_code in _COMPLETED:
        block = attach_solo(out.run_dir, solo, pairs, solo_from, reruns)
        print(format_jobs(block))
        for w in block["solo_baseline"]["warnings"]:
            print(f"testbed: warning: {w}")
        code = exit_code_of(out.exit_code, [*solo.values(), *pairs.values()])
        if code != out.exit_code:
            print(f"testbed: exit code {code}: a solo or pair run the slowdowns rest on is NOT faithful "
                  f"(jobs.solo_baseline.warnings)", file=sys.stderr)
            out = dataclasses.replace(out, exit_code=code)
    return out


def _say(line: str, quiet: bool) -> None:
    if not quiet:
        print(line, file=sys.stderr, flush=True)


def estimate_line(spec, baseline_specs: list) -> str:
    """``testbed: --solo: T runs (N solo, P pair, the shared run), estimated duration X in all`` for the solo
    and pair runs' specs ``baseline_specs`` and the shared run ``spec``: the sum of each run's own estimate
    (:func:`estimated_run_s`, the figure each run prints as it starts). Raises ScenarioError as planning does."""
    total_s = sum(estimated_run_s(s) for s in [*baseline_specs, spec])
    n_solo = len(spec.jobs)
    n_pair = len(baseline_specs) - n_solo
    return (f"testbed: --solo: {len(baseline_specs) + 1} runs ({n_solo} solo, "
            + (f"{n_pair} pair, " if n_pair else "") + f"the shared run), estimated duration "
            f"{format_duration(total_s)} in all")


def estimated_run_s(spec) -> float:
    """The estimated duration of one run of ``spec``, s: what the runner prints and checks against the cap
    (its workload's ``estimate_s`` of the planned ops plus ``extra_s``, testbed.pipeline.runner)."""
    from testbed.workloads import workload_for

    w = workload_for(spec)
    plan = w.plan()
    return w.estimate_s(plan.ops) + w.extra_s(plan)


def _baseline_run(run_one, s, folder: Path, marker: str, what: str, quiet: bool) -> tuple[object, Optional[dict]]:
    """One solo or pair run, once more when its verdict says the machine disturbed it (only pacing checks
    failed: testbed.measure.verdict.disturbed_checks); (the outcome used, None or the replaced run:
    ``run_dir``, ``run_id``, ``jobs``, ``disturbed`` check -> reason)."""
    _say(f"testbed: {marker}: {what}", quiet)
    out = run_one(s, folder)
    if out.exit_code not in _COMPLETED or out.run_dir is None:
        return out, None
    first = RunDir.open(out.run_dir)
    disturbed = disturbed_checks(first.summary)
    if not disturbed:
        return out, None
    print(f"testbed: {marker} again: its verdict says the machine disturbed it ("
          + "; ".join(f"{k}: {v}" for k, v in sorted(disturbed.items())) + "); running it once more",
          file=sys.stderr, flush=True)
    return run_one(s, folder), {"run_dir": str(out.run_dir), "run_id": first.run_id,
                                "jobs": [j.name for j in s.jobs], "disturbed": disturbed}


def exit_code_of(shared_code: int, baseline_dirs: list) -> int:
    """The exit code of a run with solo figures: the shared run's ``shared_code`` unless a solo or pair run
    in ``baseline_dirs`` cannot be a baseline (testbed.workloads.jobs.solo_store.unusable); then NOT faithful
    (testbed.process.exitcodes: 3) when any of these runs, the shared one included, is NOT faithful, else 6
    (not judged)."""
    codes = [shared_code] + [exit_code(RunDir.open(p).summary) or EXIT_NOT_FAITHFUL for p in baseline_dirs
                             if unusable(p) is not None]
    for code in (EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED):
        if code in codes:
            return code
    return shared_code


def _job(run_dir: Path, name: str) -> dict:
    return next(e for e in RunDir.open(run_dir).summary["jobs"]["jobs"] if e["name"] == name)


def _ratio(a, b) -> Optional[float]:
    return a / b if a is not None and b else None


def attach_solo(run_dir: Path, solo: dict[str, Path], pairs: dict[tuple[str, str], Path],
                solo_from=None, reruns: Optional[list] = None) -> dict:
    """Add the solo figures and the interference matrix to the shared run ``run_dir`` (module docstring);
    return its new ``jobs`` block. ``solo``: job -> its solo run directory; ``pairs``: (job, job) -> the
    pair's run directory (empty with two jobs); ``solo_from``: the folder they were stored in (None: made
    for this run); ``reruns``: the runs the machine disturbed and a run again replaced (:func:`_baseline_run`).
    ``jobs.solo_baseline``: ``from`` (that folder or None), ``runs`` (testbed.workloads.jobs.solo_store.source
    of each solo and pair run, with its ``problem``), ``reruns`` and ``warnings`` (a solo or pair run that
    cannot be a baseline: NOT faithful...; one on another OVS datapath than this run)."""
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
        "from": str(solo_from) if solo_from is not None else None, "runs": runs, "reruns": list(reruns or []),
        "warnings": [f"{'solo' if len(r['jobs']) == 1 else 'pair'} run {r['run_id']} ({', '.join(r['jobs'])}) is "
                     f"{r['problem']}: the slowdowns marked * rest on it" for r in runs if r["problem"]]
        + [f"solo run {r['run_id']} ({', '.join(r['jobs'])}) ran on the {r['datapath']} datapath, this run "
           f"on {datapath}: the slowdowns compare two machine classes" for r in runs if r["datapath"] != datapath]}
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
