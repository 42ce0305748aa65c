"""summary.json's ``load_balance.adaptive``: what the adaptive policy moved and how fast it reacted.

Input: the controller's events file (``controller.events.jsonl``;
controllers/adaptive_app.py writes one ``adaptive_moved`` event per changed
group at the switch's barrier reply). Output::

    {"changes": 2, "moves": 3, "reaction_ms_p50": 104.2, "reaction_ms_max": 311.0, "since_hot_ms_p50": 104.2,
     "since_hot_ms_max": 402.5,
     "first_change_ns": ..., "list": [{"switch": "l1", "group": 1, "buckets": 1, "reaction_ms": 104.2,
                                       "from": ["s1"], "to": ["s2"], "time_ns": ...}, ...]}

``changes``: group-mods confirmed; ``moves``: buckets moved; ``reaction_ms``:
from the first poll that saw the imbalance to the barrier reply after the
change; ``since_hot_ms``: from the first poll of the port-level imbalance
(its upper bound: it also counts polls whose bucket counters showed no useful move yet); percentiles by the nearest-rank method (as sizes.csv's).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from controllers.contract import AdaptiveMoved, Event, read_events
from testbed.results.tables import percentile_us


def adaptive_block(events: list[Event]) -> dict:
    """The block (module docstring) from the controller's events (controllers.contract records, any order;
    others ignored)."""
    rows = sorted((e for e in events if isinstance(e, AdaptiveMoved)), key=lambda e: e.time_ns)
    reaction = [e.reaction_ms for e in rows]
    since_hot = [e.since_hot_ms for e in rows]
    return {
        "changes": len(rows), "moves": sum(len(e.moves) for e in rows),
        "reaction_ms_p50": percentile_us(reaction, 50) if reaction else None, "reaction_ms_max": max(reaction, default=None),
        "since_hot_ms_p50": percentile_us(since_hot, 50) if since_hot else None,
        "since_hot_ms_max": max(since_hot, default=None),
        "first_change_ns": rows[0].time_ns if rows else None,
        "list": [{"switch": e.switch, "group": e.group, "buckets": len(e.moves),
                  "from": sorted({m.from_node for m in e.moves}, key=str),
                  "to": sorted({m.to_node for m in e.moves}, key=str),
                  "reaction_ms": e.reaction_ms, "time_ns": e.time_ns} for e in rows],
    }


def summary_adaptive(spec, run_dir: Path) -> Optional[dict]:
    """``summary["load_balance"]["adaptive"]`` for a run of the adaptive policy (with its settings); None for
    another policy."""
    settings = spec.load_balance.adaptive
    if settings is None:
        return None
    return dict(adaptive_block(read_events(run_dir)), **settings)
