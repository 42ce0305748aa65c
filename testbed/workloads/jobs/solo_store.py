"""Stored solo runs: ``testbed run --solo-from DIR`` reuses the solo (and pair) runs of an earlier
``testbed run --solo`` instead of running every job alone again; ``testbed regress`` keeps a trimmed copy
of them beside an entry's baseline.

Layout (what ``--solo`` writes into its results root, testbed.workloads.jobs.solo): ``DIR/solo/<run dir>/`` (one
job each) and, with three jobs or more, ``DIR/pairs/<run dir>/`` (two jobs each). A run directory used
here needs ``manifest.json`` (its ``scenario``: the pinned spec the run ran), ``summary.json`` and
``jobs.csv``: :func:`save` copies exactly these.

A stored run stands for a job (or a pair) of this run only when it ran exactly what
testbed.workloads.jobs.plan.pinned_spec makes of this scenario for it: the stored ``scenario`` is read back
(testbed.spec.scenario.parse_scenario, so a default added since is filled in as it is now) and must equal
this run's pinned spec in every key but the top-level ``name`` (fabric, transport, seed, controller, load
balance, congestion, tenants, the job's workload and hosts, ...). :func:`spec_sha256` is the hash of that
canonical form, recorded in summary.json ``jobs.solo_baseline``. Only complete (no ``INCOMPLETE``) and
faithful (summary.json ``faithful`` true) runs are used; of several the newest (manifest ``started_utc``).
Nothing is run to fill a gap: a job without one is refused (:class:`SoloBaselineError`) naming the job and
what differs in the nearest stored run.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from testbed.results.rundir import MANIFEST_FILE, SUMMARY_FILE, RunDir, TableError
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.workloads.jobs.plan import pinned_spec

#: where --solo puts the runs of one job, of two jobs (relative to its results root)
SOLO_FOLDER, PAIRS_FOLDER = "solo", "pairs"
#: the files of a stored run that --solo-from reads (testbed.workloads.jobs.solo.attach_solo)
KEPT_FILES = (MANIFEST_FILE, SUMMARY_FILE, "jobs.csv", "jobs.parquet")
#: differing keys named in an error, at most
_MAX_NAMED = 8


class SoloBaselineError(ScenarioError):
    """No faithful stored run matches a job (or pair); the message names each and what differs."""


def canonical(scenario: dict) -> dict:
    """A scenario as JSON data (``ScenarioSpec.model_dump(mode="json")``) without its top-level ``name``:
    what must be equal for a stored solo run to stand for a job."""
    return {k: v for k, v in scenario.items() if k != "name"}


def spec_sha256(scenario: dict) -> str:
    """sha256 (hex) of :func:`canonical` ``scenario`` as JSON with sorted keys."""
    text = json.dumps(canonical(scenario), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def differences(stored, now, path: str = "") -> list[str]:
    """Every dotted key path where ``stored`` and ``now`` (JSON data) differ, as ``PATH: STORED (stored) vs
    NOW (this run)``; lists of the same length are compared item by item (``jobs.0.hosts``)."""
    if isinstance(stored, dict) and isinstance(now, dict):
        return [d for k in sorted(set(stored) | set(now), key=str)
                for d in differences(stored.get(k, "absent"), now.get(k, "absent"), f"{path}.{k}" if path else str(k))]
    if isinstance(stored, list) and isinstance(now, list) and len(stored) == len(now):
        return [d for i, (a, b) in enumerate(zip(stored, now)) for d in differences(a, b, f"{path}.{i}")]
    if stored == now:
        return []
    return [f"{path or '(top)'}: {json.dumps(stored)} (stored) vs {json.dumps(now)} (this run)"]


@dataclass(frozen=True)
class StoredRun:
    """One run directory under DIR/solo or DIR/pairs. ``scenario``: its canonical spec, None when it cannot
    be read (``problem`` says why); ``problem`` also says why a readable run cannot be used (incomplete,
    NOT faithful)."""

    path: Path
    run_id: str
    jobs: tuple[str, ...]
    started_utc: str
    scenario: Optional[dict]
    problem: Optional[str]


def unusable(path) -> Optional[str]:
    """Why the run directory ``path`` cannot be a solo (or pair) baseline: ``incomplete (WHY)``, ``no
    summary.json``, ``NOT faithful (its violations, or what could not be judged)``, ``no jobs.csv``; None when
    it can. The one rule for the runs ``--solo-from`` reuses and the runs ``--solo`` makes
    (testbed.workloads.jobs.solo)."""
    path = Path(path)
    run = RunDir(path)
    summary = run.summary if (path / SUMMARY_FILE).is_file() else {}
    if run.incomplete is not None:
        return f"incomplete ({run.incomplete.strip()})"
    if not summary:
        return f"no {SUMMARY_FILE}"
    if summary.get("faithful") is not True:
        why = summary.get("violations") or summary.get("not_judged") or []
        return "NOT faithful (" + ("; ".join(why) or "see its summary.json") + ")"
    if run.table("jobs") is None:
        return "no jobs.csv"
    return None


def _stored(path: Path) -> StoredRun:
    run = RunDir(path)
    try:
        manifest = run.manifest
        spec = parse_scenario(manifest.get("scenario"), f"{path}/{MANIFEST_FILE} scenario")
    except (TableError, ScenarioError) as e:
        return StoredRun(path, path.name, (), "", None, f"its scenario cannot be read: {e}")
    jobs = tuple(j.name for j in spec.jobs)
    return StoredRun(path, manifest.get("run_id") or path.name, jobs, manifest.get("started_utc") or "",
                     canonical(spec.model_dump(mode="json")), unusable(path))


def stored_runs(folder: Path) -> list[StoredRun]:
    """The run directories (those with manifest.json) directly under ``folder``; [] when it does not exist."""
    if not folder.is_dir():
        return []
    return [_stored(p) for p in sorted(folder.iterdir()) if (p / MANIFEST_FILE).is_file()]


@dataclass(frozen=True)
class SoloBaseline:
    """The stored runs a run reuses. ``solo``: job -> run directory; ``pairs``: (job, job) -> run directory
    (empty with two jobs or fewer); ``root``: the DIR they were found under."""

    root: Path
    solo: dict
    pairs: dict


def _pick(what: str, want: dict, candidates: list[StoredRun], folder: Path) -> tuple[Optional[Path], Optional[str]]:
    """The newest usable stored run equal to ``want`` (canonical), or None and a sentence why not."""
    same = [r for r in candidates if r.scenario == want]
    usable = sorted((r for r in same if r.problem is None), key=lambda r: (r.started_utc, r.path.name))
    if usable:
        return usable[-1].path, None
    if same:
        return None, (f"{what}: the stored runs that match it cannot be used: "
                      + "; ".join(f"{r.path} is {r.problem}" for r in same))
    if not candidates:
        return None, f"{what}: no stored run of it under {folder}"
    readable = [r for r in candidates if r.scenario is not None]
    if not readable:
        return None, f"{what}: no readable stored run: " + "; ".join(f"{r.path}: {r.problem}" for r in candidates)
    nearest = min(readable, key=lambda r: (len(differences(r.scenario, want)), r.started_utc))
    diff = differences(nearest.scenario, want)
    more = f"; and {len(diff) - _MAX_NAMED} more" if len(diff) > _MAX_NAMED else ""
    return None, (f"{what}: the stored run {nearest.path} (run {nearest.run_id}) differs in "
                  + "; ".join(diff[:_MAX_NAMED]) + more)


def find(spec, root) -> SoloBaseline:
    """The stored solo runs of every job of ``spec`` (a ScenarioSpec with a jobs list) and, with three jobs or
    more, of every pair, under ``root`` (layout: module docstring), each checked to match exactly.

    Raises SoloBaselineError naming every job or pair without a usable match and the keys its nearest stored
    run differs in (nothing is run)."""

    root = Path(root)
    if not (root / SOLO_FOLDER).is_dir():
        raise SoloBaselineError(f"--solo-from {root}: no folder {root / SOLO_FOLDER}; give the results root of an "
                                f"earlier 'testbed run --solo' (it holds {SOLO_FOLDER}/ and {PAIRS_FOLDER}/) or a "
                                f"regression suite's solo baseline")
    names = [j.name for j in spec.jobs]
    groups = [(n,) for n in names] + (list(itertools.combinations(names, 2)) if len(names) > 2 else [])
    found: dict[tuple, Path] = {}
    problems = []
    for group in groups:
        folder = root / (SOLO_FOLDER if len(group) == 1 else PAIRS_FOLDER)
        want = canonical(pinned_spec(spec, list(group), "stored").model_dump(mode="json"))
        what = f"job {group[0]!r}" if len(group) == 1 else f"pair {group[0]!r}, {group[1]!r}"
        path, why = _pick(what, want, [r for r in stored_runs(folder) if r.jobs == group], folder)
        if path is None:
            problems.append(why)
        else:
            found[group] = path
    if problems:
        raise SoloBaselineError(f"--solo-from {root}: no faithful stored run matches this scenario for:\n  "
                                + "\n  ".join(problems))
    return SoloBaseline(root, {g[0]: p for g, p in found.items() if len(g) == 1},
                        {g: p for g, p in found.items() if len(g) == 2})


def source(run_dirs: list[Path]) -> list[dict]:
    """Where solo figures came from: per run directory its path, run id, jobs, start time, git commit,
    datapath, :func:`spec_sha256` and ``problem`` (:func:`unusable`: None for a usable baseline)
    (summary.json ``jobs.solo_baseline.runs``)."""
    out = []
    for p in run_dirs:
        m = RunDir(p).manifest
        scenario = m.get("scenario") or {}
        out.append({"run_dir": str(p), "run_id": m.get("run_id"), "jobs": [j["name"] for j in scenario.get("jobs", ())],
                    "started_utc": m.get("started_utc"), "git_commit": (m.get("versions") or {}).get("git_commit"),
                    "datapath": (m.get("backends") or {}).get("datapath"), "scenario_sha256": spec_sha256(scenario),
                    "problem": unusable(p)})
    return out


def save(results_root, dest) -> Path:
    """Copy the solo and pair runs of a ``--solo`` run's ``results_root`` into ``dest`` (replaced), keeping
    :data:`KEPT_FILES` of each (the layout --solo-from reads, a few kB a run); return ``dest``.
    Raises SoloBaselineError when ``results_root`` has no solo runs."""
    src, dest = Path(results_root), Path(dest)
    runs = [(sub, p) for sub in (SOLO_FOLDER, PAIRS_FOLDER) for p in sorted((src / sub).glob("*"))
            if (p / MANIFEST_FILE).is_file()]
    if not any(sub == SOLO_FOLDER for sub, _ in runs):
        raise SoloBaselineError(f"{src}: no solo runs under {src / SOLO_FOLDER} to keep")
    if dest.exists():
        shutil.rmtree(dest)
    for sub, p in runs:
        (dest / sub / p.name).mkdir(parents=True)
        for name in KEPT_FILES:
            if (p / name).is_file():
                shutil.copy2(p / name, dest / sub / p.name / name)
    return dest
