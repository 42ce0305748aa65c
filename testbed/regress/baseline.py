"""Regression baselines: the figures of a faithful run, kept in the repository with the machine class.

A baseline file (``regress/baselines/<name>.json``)::

    {"name": "allreduce_ring", "scenario": "../../scenarios/quickstart.yaml", "overrides": {...},
     "made_utc": "20261201T063000Z", "run_id": "tb12ab", "git_commit": "...",
     "machine": {"cores": 2, "cpu_model": "...", "datapath": "user", "kernel": "6.1.0"},
     "figures": {"faithful": 1.0, "busbw_ratio@64KiB": 0.997, ...}}

Every figure of the run is kept (not only the checked ones), so a suite can
check more figures later without measuring again. The machine class is
cores, CPU model and OVS datapath: figures measured on another class are
compared all the same, with a warning (bands are relative where the figure
scales with the machine).
"""
from __future__ import annotations

import json
from pathlib import Path

from testbed.results.figures import figures
from testbed.results.rundir import RunDir

#: the machine facts that make a class (kernel is recorded, not compared)
CLASS_KEYS = ("cores", "cpu_model", "datapath")


def machine(run_dir: Path) -> dict:
    """This machine's class as the run in ``run_dir`` used it (datapath from its manifest.json)."""
    from testbed.measure.capacity import machine_facts

    manifest = RunDir(run_dir).manifest
    datapath = (manifest.get("backends") or {}).get("datapath", "unknown")
    return machine_facts(datapath)


def machine_mismatch(baseline: dict, now: dict) -> str | None:
    """A sentence naming the machine facts that differ from the baseline's class, None when the same."""
    then = baseline.get("machine") or {}
    diff = [f"{k} {then.get(k)!r} (baseline) vs {now.get(k)!r}" for k in CLASS_KEYS if then.get(k) != now.get(k)]
    return ("baseline made on another machine class: " + "; ".join(diff)) if diff else None


def make(name: str, scenario: str, overrides: dict, summary: dict, run_dir: Path) -> dict:
    """The baseline of a run: its figures, where it came from and the machine class."""
    manifest = RunDir(run_dir).manifest
    return {"name": name, "scenario": scenario, "overrides": overrides,
            "made_utc": manifest.get("started_utc"), "run_id": summary.get("run_id"),
            "git_commit": (manifest.get("versions") or {}).get("git_commit"),
            "machine": machine(run_dir), "figures": figures(summary)}


def save(baseline: dict, path: Path) -> Path:
    """Write ``baseline`` to ``path`` (folders made), keys in a stable order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(baseline, indent=2) + "\n", encoding="utf-8")
    return path


def load(path: Path) -> dict:
    """Read a baseline file; ValueError naming the file when it is not one."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("figures"), dict):
        raise ValueError(f"{path}: not a baseline (no 'figures' mapping)")
    return doc
