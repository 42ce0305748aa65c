"""Which experiment a run ran, and how two differ (``testbed compare`` refuses different experiments).

A run's scenario is the validated spec its manifest.json keeps (``scenario``). A regression baseline file
(``regress/baselines/<name>.json``, testbed.regress.baseline) keeps no spec but names its scenario file
(relative to the baseline file) and the overrides merged into it (``overrides.suite``, then
``overrides.entry``): its scenario is that file with those overrides, validated.

Two runs are one experiment when every setting of :data:`EXPERIMENT_SECTIONS` agrees; a setting ``auto``
on either side (resolved on the machine that ran it, e.g. ``congestion.ecn.marker``) matches any value.
The scenario's name alone does not make another experiment (a renamed copy of a file).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from testbed.results.rundir import SUMMARY_FILE, RunDir, TableError
from testbed.spec.scenario import parse_scenario
from testbed.spec.yaml_loader import ScenarioError, load_yaml, merge

#: scenario sections that make two runs different experiments
EXPERIMENT_SECTIONS = ("fabric", "workload", "jobs", "background", "congestion", "transport")
_ABSENT = "(absent)"


def baseline_scenario(doc: dict, file: Path) -> Optional[dict]:
    """The validated scenario (as manifest.json keeps it) of the baseline ``doc`` read from ``file``: its
    ``scenario`` file with ``overrides.suite`` then ``overrides.entry`` merged in. None when the baseline
    names no scenario file, the file is gone or no longer validates (then nothing tells the experiment)."""
    src = doc.get("scenario")
    if not isinstance(src, str):
        return None
    path = Path(src) if Path(src).is_absolute() else Path(file).parent / src
    try:
        data = load_yaml(path.read_text(encoding="utf-8"), str(path))
        overrides = doc.get("overrides") or {}
        for part in ("suite", "entry"):
            data = merge(data, overrides.get(part) or {})
        return parse_scenario(data, str(path)).model_dump(mode="json")
    except (OSError, ScenarioError, AttributeError):
        return None


def scenario_of(path: Path) -> Optional[dict]:
    """The scenario of a run directory or its summary.json (manifest.json ``scenario``) or of a baseline file
    (:func:`baseline_scenario`); None when it cannot be told (no readable manifest, an unknown file)."""
    path = Path(path)
    run = RunDir(path if path.is_dir() else path.parent)
    if path.is_file() and path.name != SUMMARY_FILE:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return baseline_scenario(doc, path) if isinstance(doc, dict) and "figures" in doc else None
    try:
        scenario = run.manifest.get("scenario")
    except (TableError, OSError, AttributeError):
        return None
    return scenario if isinstance(scenario, dict) else None


def _clip(value, limit: int = 48) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + " ..."


def _same(x, y) -> bool:
    """Two settings agree: equal, or ``auto`` on either side (nested mappings compared key by key)."""
    if isinstance(x, dict) and isinstance(y, dict):
        return all(_same(x.get(k, _ABSENT), y.get(k, _ABSENT)) for k in set(x) | set(y))
    return x == y or "auto" in (x, y)


def experiment_differences(a: Optional[dict], b: Optional[dict], shown: int = 3) -> tuple[list[str], list[str]]:
    """(one line per section of :data:`EXPERIMENT_SECTIONS` that differs, the name line) between two
    scenarios: ``fabric: 4 settings differ: fabric.leaves: 4 vs 2; ...`` (the first ``shown`` keys of each),
    and ``name: 'a' vs 'b'`` when the names differ. Both empty when either side is None (unknown)."""
    if a is None or b is None:
        return [], []
    lines = []
    for section in EXPERIMENT_SECTIONS:
        sa, sb = a.get(section), b.get(section)
        if not (isinstance(sa, dict) and isinstance(sb, dict)):
            sa, sb, section_of = {section: sa}, {section: sb}, ""
        else:
            section_of = f"{section}."
        keys = [k for k in sorted(set(sa) | set(sb)) if not _same(sa.get(k, _ABSENT), sb.get(k, _ABSENT))]
        if keys:
            each = "; ".join(f"{section_of}{k}: {_clip(sa.get(k, _ABSENT))} vs {_clip(sb.get(k, _ABSENT))}"
                             for k in keys[:shown])
            more = f"; and {len(keys) - shown} more" if len(keys) > shown else ""
            lines.append(f"{section}: {len(keys)} setting{'s differ' if len(keys) > 1 else ' differs'}: {each}{more}")
    name = [f"name: {a.get('name')!r} vs {b.get('name')!r}"] if a.get("name") != b.get("name") else []
    return lines, name
