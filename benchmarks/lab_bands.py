"""Measure a teaching lab's expected figures over N fresh runs and derive their bands (issue 22).

Runs every scenario file of ``labs/LAB`` N times with ``testbed run`` (real fabric, fresh each time),
taking the fabric lock (``/tmp/fabric.lock``, fcntl.flock) around each single run so that other
fabric jobs interleave; records each run's wall time (set-up and teardown included). Then reads
each figure of ``labs/LAB/expected.yaml`` from every run (testbed.labs.figures), prints the
per-run values and the band (min..max of the N runs widened by the file's margin), and with
``--write`` rewrites the bands file's bands, N, date, machine and measured lab time.

Run as root from the repository root:
``.venv/bin/python benchmarks/lab_bands.py 02_incast_dcqcn -n 10 --keep /tmp/bands --write``
A run NOT faithful (exit 3: the machine was busy) is made again, up to ATTEMPTS times, and never counted.
``--from`` reads the finished runs under ``--keep`` (KEEP/<scenario>/<round>/<run dir>) instead of running;
``--loo`` judges each round against the band of the other rounds (leave one out: how often a fresh run
would fall outside).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from testbed.labcheck.bands import LabBands, Measured, band_of, load, save, scenario_files, sync_readme
from testbed.labcheck.figures import read_figure
from testbed.regress.baseline import machine

ROOT = Path(__file__).resolve().parents[1]
LOCK = Path("/tmp/fabric.lock")


def run_once(scenario: Path, results: Path, flags: list[str] = (), timeout_s: float = 900) -> tuple[int, float]:
    """One fresh ``testbed run SCENARIO --results RESULTS --quiet`` under the fabric lock.

    Returns (exit code, wall seconds of the run itself, lock wait excluded)."""
    results.mkdir(parents=True, exist_ok=True)
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        t0 = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scenario), "--results", str(results),
                              "--quiet", *flags], capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
        wall_s = time.monotonic() - t0
    (results / "wall_s.json").write_text(json.dumps({"rc": res.returncode, "wall_s": round(wall_s, 1)}))
    if res.returncode not in COUNTED:
        print(f"  {scenario.name}: exit {res.returncode}\n{res.stderr[-2000:]}", file=sys.stderr)
    return res.returncode, wall_s


def run_lab(lab: str, n: int, keep: Path, run_flags: dict | None = None) -> None:
    """N rounds; each round runs every scenario file of the lab once, in name order, into
    KEEP/<scenario stem>/<round>/."""
    for i in range(n):
        for path in scenario_files(ROOT / "labs" / lab):
            out = keep / path.stem / f"{i:02d}"
            for attempt in range(1, ATTEMPTS + 1):
                if _kept(out):
                    break   # resumable: a finished faithful run is kept
                shutil.rmtree(out, ignore_errors=True)
                rc, wall_s = run_once(path, out, (run_flags or {}).get(path.stem, []))
                print(f"{lab} {path.stem} run {i + 1}/{n} attempt {attempt}: exit {rc}, {wall_s:.1f} s", flush=True)


#: Runs of one scenario and round before giving up: a run NOT faithful (exit 3) measured a busy machine, not the
#: lab, so it is made again rather than counted.
ATTEMPTS = 3
#: Exit codes of a run whose figures count: faithful, or completed with no check failed (testbed.process.exitcodes).
COUNTED = (0, 6)


def _kept(out: Path) -> bool:
    """A finished run under OUT whose exit code counts."""
    wall = out / "wall_s.json"
    return any(out.glob("*/summary.json")) and wall.is_file() and json.loads(wall.read_text())["rc"] in COUNTED


def collect(lab: Path, bands: LabBands, keep: Path) -> tuple[dict[str, list[float]], dict[str, list[float]], dict]:
    """Per figure name, its value in every finished round under KEEP (ratios per round); per scenario,
    each round's wall seconds; the machine of the newest run. FigureMissing when a run lacks a figure."""
    values: dict[str, list[float]] = {f.name: [] for f in bands.figures}
    wall: dict[str, list[float]] = {}
    machine_of = {}
    stems = [p.stem for p in scenario_files(lab)]
    rounds = sorted({r.name for s in stems for r in (keep / s).glob("*") if any(r.glob("*/summary.json"))})
    for r in rounds:
        dirs = {s: sorted((keep / s / r).glob("*/summary.json")) for s in stems}
        if not all(dirs.values()) or not all((keep / s / r / "wall_s.json").is_file() for s in stems):
            continue   # a round counts when every scenario of it finished
        codes = {s: json.loads((keep / s / r / "wall_s.json").read_text())["rc"] for s in stems}
        if any(c not in COUNTED for c in codes.values()):
            print(f"round {r} left out: a run failed (exit codes {codes})", file=sys.stderr)
            continue
        per_round = {}
        for s, (summary, *_) in dirs.items():
            run_dir = summary.parent
            wall_s = json.loads((keep / s / r / "wall_s.json").read_text())["wall_s"]
            if wall_s is not None:   # None: a run made elsewhere (e.g. by the integration test), not timed
                wall.setdefault(s, []).append(wall_s)
            machine_of = machine(run_dir)
            for f in bands.figures:
                if f.scenario == s:
                    per_round[f.name] = read_figure(run_dir, f.read)
        for f in bands.figures:
            if f.ratio:
                a, b = (per_round[n] for n in f.ratio)
                per_round[f.name] = a / b
            values[f.name].append(round(per_round[f.name], max(f.digits, 0) + 3))
    return values, wall, machine_of


def write(lab: Path, bands: LabBands, values: dict, wall: dict, machine_of: dict, note: str) -> None:
    """The bands file with these runs' values and bands, and the README's block rendered from it."""
    for f in bands.figures:
        f.runs = values[f.name]
        f.band = band_of(f.runs, bands.widen(f), f.widen_abs, f.digits, f.clip) if f.runs else None
    n = min(len(v) for v in values.values())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    bands.measured = Measured(date=time.strftime("%Y-%m-%d", time.gmtime()), n_runs=n, git_commit=commit.strip(),
                              machine={k: machine_of.get(k) for k in ("cores", "cpu_model", "datapath")}, note=note)
    bands.wall_s = wall
    save(bands, lab)
    readme = lab / "README.md"
    readme.write_text(sync_readme(readme.read_text(encoding="utf-8"), bands), encoding="utf-8")


def show(bands: LabBands, values: dict, wall: dict) -> None:
    for s, w in wall.items():
        print(f"wall s {s}: {w}")
    for f in bands.figures:
        v = values[f.name]
        b = band_of(v, bands.widen(f), f.widen_abs, f.digits, f.clip) if v else None
        print(f"{f.name:<28} n {len(v):>2} band {b}  runs {v}")


def leave_one_out(bands: LabBands, values: dict) -> None:
    """Each round judged against the band of the other rounds (how often a fresh run falls outside):
    prints, per round, the figures outside and the count over all rounds."""
    n = min(len(v) for v in values.values())
    outside = 0
    for k in range(n):
        missed = []
        for f in bands.figures:
            rest = values[f.name][:k] + values[f.name][k + 1:]
            lo, hi = band_of(rest, bands.widen(f), f.widen_abs, f.digits, f.clip)
            if not lo <= values[f.name][k] <= hi:
                missed.append(f"{f.name} {values[f.name][k]:g} outside {lo:g}..{hi:g}")
        outside += bool(missed)
        print(f"leave-one-out round {k + 1}: " + ("; ".join(missed) or "every figure inside"))
    print(f"leave-one-out: {outside} of {n} rounds had a figure outside the band of the other {n - 1}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lab", help="a folder of labs/, e.g. 02_incast_dcqcn")
    ap.add_argument("-n", type=int, default=10, help="fresh runs per scenario (default 10)")
    ap.add_argument("--keep", type=Path, required=True, help="where the runs go (resumable)")
    ap.add_argument("--from", dest="from_only", action="store_true", help="do not run: read the runs under --keep")
    ap.add_argument("--write", action="store_true", help="write expected.yaml's runs, bands, N, date, machine, "
                    "wall times, and the README's generated block")
    ap.add_argument("--loo", action="store_true", help="also judge each round against the band of the others")
    ap.add_argument("--add", action="store_true", help="keep the runs expected.yaml already records and add "
                    "these (their values and wall times)")
    ap.add_argument("--note", default="", help="a sentence for the README's measurement line")
    args = ap.parse_args()
    lab = ROOT / "labs" / args.lab
    bands = load(lab)
    if not args.from_only:
        run_lab(args.lab, args.n, args.keep, bands.run_flags)
    values, wall, machine_of = collect(lab, bands, args.keep)
    if args.add:   # the runs the bands file already records, then these
        fresh = min(len(v) for v in values.values())
        values = {f.name: list(f.runs or []) + values[f.name] for f in bands.figures}
        wall = {s: list((bands.wall_s or {}).get(s, [])) + w for s, w in wall.items()}
        print(f"{min(len(v) for v in values.values())} runs: {fresh} new, the rest recorded in expected.yaml")
    show(bands, values, wall)
    if args.loo and min(len(v) for v in values.values()) > 1:
        leave_one_out(bands, values)
    if args.write:
        write(lab, bands, values, wall, machine_of, args.note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
