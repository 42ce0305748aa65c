"""Time a run spends building and tearing down its fabric, per switch and per link.

Runs ``testbed run`` on spine-leaf fabrics of several sizes with a workload of one tiny all-reduce
(64 KiB over every host at 2 Mbit/s: at most half a second of traffic, well within the machine's
capacity), timestamps the progress lines on stderr as they arrive, and splits each run's wall-clock
time into phases:

- ``pre``: process start to the ``run tbXXXX: ...`` line (imports, validation, cleanup of dead
  runs, the capability probe, the run directory);
- ``build``: to ``fabric up: ...`` (controller, Mininet hosts, OVS bridges, veths, offloads, MTU,
  every egress queue, rate read-back, flows confirmed: testbed.emulation.fabric.Fabric.start);
- ``traffic``: to ``results written to ...; tearing down`` (agents, the op, writing the results);
- ``teardown``: to the process's exit (Fabric.stop, the summary).

Then it fits ``build_s`` and ``teardown_s`` each to ``fixed + per_switch x switches + per_link x
links + per_host x hosts`` by least squares over every run with every coefficient >= 0 (links: host
links and switch-to-switch links alike; a host's namespace and shell on top of its link), and
``pre`` + ``traffic`` to ``fixed + per_host x hosts`` (the agents start one process per host), and
prints the constants that testbed/spec/estimate.py holds (BUILD_S_FIXED ... AGENT_S_PER_HOST). The
default sizes vary switches, host links and switch-to-switch links apart: 1 spine x 2 leaves x 1
host (3 switches, 4 links), 1 x 8 x 1 (9, 16), 8 x 2 x 1 (10 switches, 16 of their 18 links between
switches), 1 x 2 x 8 (3 switches, 16 of 18 links to hosts), the quickstart 2 x 4 x 2 (6, 16), 2 x 4
x 8 (6, 40), 4 x 8 x 2 (12, 48) and 4 x 16 x 4 (20, 128), each ``--repeat`` times (about 5 minutes
for two). The constants in estimate.py are this script's output of 2026-12-02 on a 2-vCPU machine.
``--refit FILE...`` fits the runs of earlier ``--json`` files again without running anything.

Needs root and Open vSwitch; run it under the fabric lock on a quiet machine::

    flock /tmp/fabric.lock .venv/bin/python benchmarks/fabric_setup_cost.py [--repeat 2]
        [--sizes 1x2x1,2x4x2,...] [--json FILE] [--refit FILE...]
"""
from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SCENARIO = """
name: setup-cost-{s}x{l}x{h}
fabric: {{spines: {s}, leaves: {l}, hosts_per_leaf: {h}, host_link_bps: 2M, fabric_link_bps: 2M}}
workload: {{sizes: {{min_bytes: 64KiB, max_bytes: 64KiB}}, iterations: 1, warmup_iterations: 0}}
"""
DEFAULT_SIZES = "1x2x1,1x8x1,8x2x1,1x2x8,2x4x2,2x4x8,4x8x2,4x16x4"
SINGULAR = {"switches": "switch", "links": "link", "hosts": "host", "host_links": "host_link",
            "fabric_links": "fabric_link"}
#: stderr line prefixes that end each phase, in order
MARKS = (("pre", "run tb"), ("build", "fabric up:"), ("traffic", "results written to"))


def counts(spines: int, leaves: int, hosts_per_leaf: int) -> dict:
    """Switches, links (host links, switch-to-switch links) and hosts of a spine-leaf fabric."""
    return {"switches": spines + leaves, "links": leaves * hosts_per_leaf + spines * leaves,
            "host_links": leaves * hosts_per_leaf, "fabric_links": spines * leaves, "hosts": leaves * hosts_per_leaf}


def time_run(spines: int, leaves: int, hosts_per_leaf: int, workdir: Path) -> dict:
    """One ``testbed run``; seconds of each phase (module docstring) and the exit code."""
    scen = workdir / f"setup-{spines}x{leaves}x{hosts_per_leaf}.yaml"
    scen.write_text(SCENARIO.format(s=spines, l=leaves, h=hosts_per_leaf))
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(scen), "--results",
                             str(workdir / "res")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            bufsize=1)
    seen: dict[str, float] = {}
    lines = []
    for line in proc.stderr:
        lines.append(line)
        for phase, prefix in MARKS:
            if phase not in seen and line.startswith(prefix):
                seen[phase] = time.monotonic()
    proc.stdout.read()
    rc = proc.wait()
    t_end = time.monotonic()
    if len(seen) < len(MARKS):
        raise RuntimeError(f"run {spines}x{leaves}x{hosts_per_leaf} (exit {rc}) printed no "
                           f"{[p for p, _ in MARKS if p not in seen]} line: {''.join(lines)[-600:]}")
    marks = [t0] + [seen[p] for p, _ in MARKS] + [t_end]
    phases = dict(zip(["pre", "build", "traffic", "teardown"], np.diff(marks).tolist()))
    return {"size": f"{spines}x{leaves}x{hosts_per_leaf}", **counts(spines, leaves, hosts_per_leaf),
            **phases, "total": t_end - t0, "exit_code": rc}


def fit(rows: list[dict], y: str, xs: tuple[str, ...]) -> dict:
    """Least-squares ``y = fixed + sum(per_x * x)`` with every coefficient >= 0 (a cost cannot be negative:
    the best of the unconstrained fits over every subset of the terms whose coefficients are all >= 0);
    the coefficients (s) and the largest residual (s)."""
    a = np.array([[1.0] + [r[x] for x in xs] for r in rows])
    b = np.array([r[y] for r in rows])
    best = None
    for mask in itertools.product((True, False), repeat=a.shape[1]):
        cols = [i for i, keep in enumerate(mask) if keep]
        if not cols:
            continue
        sol, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
        if (sol < 0).any():
            continue
        coef = np.zeros(a.shape[1])
        coef[cols] = sol
        err = float(np.sum((a @ coef - b) ** 2))
        if best is None or err < best[0]:
            best = (err, coef)
    coef = best[1]
    return {"fixed": float(coef[0]), **{f"per_{SINGULAR[x]}": float(c) for x, c in zip(xs, coef[1:])},
            "max_residual": float(np.max(np.abs(a @ coef - b)))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="spines x leaves x hosts_per_leaf, comma-separated")
    ap.add_argument("--repeat", type=int, default=2, help="runs per size")
    ap.add_argument("--json", metavar="FILE", help="also write every run and the fits as JSON")
    ap.add_argument("--refit", metavar="FILE", nargs="+", help="fit the runs of earlier --json files; run nothing")
    args = ap.parse_args(argv)
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    rows = []
    print(f"{'size':>8} {'sw':>3} {'links':>5} {'pre':>6} {'build':>6} {'traffic':>7} {'teardown':>8} {'total':>6}")
    if args.refit:
        rows = [{**counts(*map(int, r["size"].split("x"))), **r} for f in args.refit
                for r in json.loads(Path(f).read_text())["runs"]]
    with tempfile.TemporaryDirectory(prefix="fabric_setup_cost-") as tmp:
        for _ in range(0 if args.refit else args.repeat):
            for s, l, h in sizes:
                rows.append(time_run(s, l, h, Path(tmp)))
    for r in rows:
        print(f"{r['size']:>8} {r['switches']:>3} {r['links']:>5} {r['pre']:>6.2f} {r['build']:>6.2f} "
              f"{r['traffic']:>7.2f} {r['teardown']:>8.2f} {r['total']:>6.2f}  exit {r['exit_code']}", flush=True)
    for r in rows:
        r["other"] = r["pre"] + r["traffic"]
    fits = {"build": fit(rows, "build", ("switches", "links", "hosts")),
            "teardown": fit(rows, "teardown", ("switches", "links", "hosts")),
            "other": fit(rows, "other", ("hosts",))}
    print()
    for name, f in fits.items():
        print(f"{name:>8}: " + ", ".join(f"{k} {v:.3f} s" for k, v in f.items()))
    b, t, o = fits["build"], fits["teardown"], fits["other"]
    print("\nconstants for testbed/spec/estimate.py:")
    for name, f in (("BUILD", b), ("TEARDOWN", t)):
        print(f"{name}_S_FIXED = {f['fixed']:.3f}\n{name}_S_PER_SWITCH = {f['per_switch']:.3f}\n"
              f"{name}_S_PER_LINK = {f['per_link']:.3f}\n{name}_S_PER_HOST = {f['per_host']:.3f}")
    print(f"RUN_FIXED_S = {o['fixed']:.3f}\nAGENT_S_PER_HOST = {o['per_host']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "fits": fits}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
