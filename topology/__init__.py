"""One topology model shared by the testbed and the controller.

- :mod:`topology.model`: Switch, Host, Port, Link, Layout; JSON save/load with validation.
- :mod:`topology.routing`: equal-cost next hops on any layout (networkx).
- one builder module per ``fabric.kind`` (:data:`BUILDERS`): ``spine_leaf`` now.

A new topology is one module with ``from_spec(fabric, run_id) -> Layout``
plus one entry in :data:`BUILDERS`.
"""
from __future__ import annotations

from typing import Any, Callable, Dict

from topology import spine_leaf
from topology.model import Layout

#: fabric.kind -> builder(fabric_section, run_id) -> Layout
BUILDERS: Dict[str, Callable[[Any, str], Layout]] = {
    spine_leaf.KIND: spine_leaf.from_spec,
}


def build(kind: str, fabric: Any, run_id: str) -> Layout:
    """Build the layout of ``fabric`` with the builder registered for ``kind``.

    Raises ValueError naming ``fabric.kind`` and the kinds allowed.
    """
    try:
        builder = BUILDERS[kind]
    except KeyError:
        raise ValueError(f"fabric.kind = {kind!r} is not one of {sorted(BUILDERS)}") from None
    return builder(fabric, run_id)
