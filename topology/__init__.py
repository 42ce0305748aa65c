"""One topology model shared by the testbed and the controller.

- :mod:`topology.model`: Switch, Host, Port, Link, Layout; JSON save/load with validation.
- :mod:`topology.routing`: equal-cost next hops on any layout (networkx).
- one builder module per ``fabric.kind`` (:data:`KINDS`): ``spine_leaf``,
  ``fat_tree``, ``rail_optimized``, ``dual_plane``, ``dci`` (sites joined by long-haul links);
  :mod:`topology.scale_up` adds a scale-up
  domain per server to any of them; :mod:`topology.planes` cuts a layout of several planes
  into one routing view per plane.
- :mod:`topology.placement`: a layout's nodes on servers (a run over several servers).

A new topology is one module plus one entry in :data:`KINDS`. The module
defines ``KIND`` (its name), ``PARAMS`` (the ``fabric`` keys only it reads),
``check(fabric)`` (ValueError naming the bad key and what is allowed; the
scenario spec calls it before anything is built), ``edge_ports(fabric) ->
(host ports, uplinks)`` of a host-facing switch (``fabric.oversubscription``
derives the uplink rate from it) and ``from_spec(fabric, run_id) -> Layout``.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Dict

from topology import dci, dual_plane, fat_tree, rail_optimized, scale_up, spine_leaf
from topology.model import Layout

#: fabric.kind -> builder module (see the module docstring for what it defines)
KINDS: Dict[str, ModuleType] = {m.KIND: m for m in (spine_leaf, fat_tree, rail_optimized, dual_plane, dci)}
#: fabric.kind -> builder(fabric_section, run_id) -> Layout
BUILDERS: Dict[str, Callable[[Any, str], Layout]] = {kind: m.from_spec for kind, m in KINDS.items()}
#: every kind-specific fabric key, with the kinds that read it
KIND_PARAMS: Dict[str, tuple] = {}
for _kind, _m in KINDS.items():
    for _key in _m.PARAMS:
        KIND_PARAMS[_key] = KIND_PARAMS.get(_key, ()) + (_kind,)


def build(kind: str, fabric: Any, run_id: str) -> Layout:
    """Build the layout of ``fabric`` with the builder registered for ``kind``, plus a scale-up
    domain per server when ``fabric.scale_up`` is set (topology.scale_up).

    ``run_id``: the run's id, the prefix of every node name; ``""`` builds the layout as the
    scenario names it, before any run exists (validation and estimates: counts and short names).

    Raises ValueError naming ``fabric.kind`` and the kinds allowed.
    """
    try:
        builder = BUILDERS[kind]
    except KeyError:
        raise ValueError(f"fabric.kind = {kind!r} is not one of {sorted(BUILDERS)}") from None
    layout = builder(fabric, run_id)
    up = getattr(fabric, "scale_up", None)
    if up is not None:
        layout = scale_up.add(layout, up.gpus_per_server, fabric.host_link_bps * up.rate_multiple, fabric.buffer_bytes)
    return layout
