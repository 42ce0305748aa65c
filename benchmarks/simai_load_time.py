"""Load time of a SimAI/AICB workload file at real size: from nothing to a ready plan, before any fabric.

Times what ``testbed run SCENARIO`` does before it builds the fabric, for a SimAI file on a 12-host
spine-leaf fabric (2 spines x 6 leaves x 2 hosts, 10 Mbit/s hosts, 20 Mbit/s fabric links: the issue's
"12 hosts"; every 12-host fabric plans the same ops), in one process, phase by phase:

- ``import``: the testbed's modules (testbed.spec.scenario, testbed.pipeline.runner);
- ``load``: ``load_scenario`` (reads the YAML, reads the file, plans the replay once to check it);
- ``validate``: ``testbed.pipeline.runner._validate`` (the workload's plan again, the run-time estimate with the
  replay's compute timeline, the notes printed, the duration cap, the queue-pair peers and the capacity
  check), i.e. everything ``testbed run`` does before "run tb...";
- ``replay``: ``testbed.workloads.simai.plan.replay_plan`` (what the run does once the fabric is up: the plan again,
  checked against the ops it was given), reported apart;
- ``build``: the iteration's programs and tasks made (testbed.workloads.simai.programs: when the run first reads
  them, once the fabric is up; before the change that made loading fast they were made by every plan).

Prints each phase's seconds (min over ``--repeat`` runs after the first, which also pays the imports),
the plan's size (fabric ops, tasks, steps) and ``--profile N`` the N costliest functions of one load +
validate (cProfile, cumulative). No root needed; builds nothing. The figures before and after the
change that made this fast are in docs/simai.md.

Usage: ``python benchmarks/simai_load_time.py [FILE] [--size-scale 0.0001] [--hosts 2x6x2] [--repeat 3]
[--profile 25]``; FILE defaults to ``../shared/workloads/simai/workload_analytical.txt`` next to the
repository (SimAI's ``example/workload_analytical.txt``: 9,216 GPUs, TP 2, ep 16, pp 12, 1,789 rows).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_FILE = REPO.parent / "shared" / "workloads" / "simai" / "workload_analytical.txt"


def scenario_yaml(path: Path, size_scale: float, shape: str) -> str:
    spines, leaves, per_leaf = (int(x) for x in shape.split("x"))
    return (f"name: simai-load-time\nseed: 1\n"
            f"fabric: {{spines: {spines}, leaves: {leaves}, hosts_per_leaf: {per_leaf}, host_link_bps: 10M, "
            f"fabric_link_bps: 20M}}\n"
            f"workload:\n  simai: {{path: {str(path)!r}, size_scale: {size_scale}}}\n")


def once(scenario: Path, results: Path) -> dict:
    """Seconds per phase of one load (module docstring) and the plan's size."""
    t0 = time.perf_counter()
    from testbed.pipeline import runner
    from testbed.workloads.simai.plan import replay_plan
    from testbed.workloads import load_scenario
    t1 = time.perf_counter()
    spec = load_scenario(scenario)
    t2 = time.perf_counter()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        ops = runner._validate(spec, results, quiet=False, max_duration_s=1e12, over_capacity=True)
    t3 = time.perf_counter()
    replay = replay_plan(spec, ops)
    t4 = time.perf_counter()
    n_actions = sum(len(p) for p in replay.programs)
    t5 = time.perf_counter()
    return {"import": t1 - t0, "load": t2 - t1, "validate": t3 - t2, "replay": t4 - t3, "build": t5 - t4,
            "actions": n_actions,
            "ops": len(ops), "tasks": len(replay.tasks), "steps": len(replay.steps), "printed": out.getvalue()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT_FILE, help="a SimAI/AICB workload file")
    ap.add_argument("--size-scale", type=float, default=0.0001,
                    help="workload.simai.size_scale (sizes do not change the plan's cost; default 0.0001)")
    ap.add_argument("--hosts", default="2x6x2", metavar="SPINESxLEAVESxHOSTS", help="spine-leaf shape (2x6x2)")
    ap.add_argument("--repeat", type=int, default=3, help="timed loads after the first (default 3)")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest functions")
    ap.add_argument("--show", action="store_true", help="print what the validation printed (estimate, notes)")
    args = ap.parse_args()
    if not args.file.is_file():
        sys.exit(f"simai_load_time: no such file {args.file}: pass a SimAI workload file (SimAI's "
                 "example/workload_analytical.txt is the 9,216-GPU one)")
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "scenario.yaml"
        scenario.write_text(scenario_yaml(args.file.resolve(), args.size_scale, args.hosts))
        results = Path(tmp) / "results"
        results.mkdir()
        first = once(scenario, results)
        runs = [once(scenario, results) for _ in range(args.repeat)]
        if args.profile:
            import cProfile
            import pstats
            prof = cProfile.Profile()
            prof.enable()
            once(scenario, results)
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)
    best = {k: min(r[k] for r in runs) if runs else first[k] for k in ("load", "validate", "replay", "build")}
    print(f"{args.file.name} on {args.hosts} (spines x leaves x hosts per leaf): {first['ops']} fabric ops, "
          f"{first['tasks']} tasks, {first['actions']} actions, {first['steps']} steps per iteration")
    print(f"first load: import {first['import']:.2f} s, load_scenario {first['load']:.2f} s, validate "
          f"{first['validate']:.2f} s: {first['import'] + first['load'] + first['validate']:.2f} s before the "
          f"fabric; in the run: replay_plan {first['replay']:.2f} s, programs and tasks {first['build']:.2f} s")
    if runs:
        print(f"min of {len(runs)} more: load_scenario {best['load']:.2f} s, validate {best['validate']:.2f} s: "
              f"{best['load'] + best['validate']:.2f} s before the fabric; in the run: replay_plan "
              f"{best['replay']:.2f} s, programs and tasks {best['build']:.2f} s")
    if args.show:
        print(first["printed"], end="")


if __name__ == "__main__":
    main()
