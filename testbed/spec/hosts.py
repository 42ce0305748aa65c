"""Hosts as a scenario names them: a node's name without the run id (``h3``, ``l1``), by rank order, with
the short name of the switch each hangs off (``faults``, ``background``, ``workload.pattern``, perftest runs)."""
from __future__ import annotations

from topology.model import Layout
from traffic.patterns import HostInfo


def short(layout: Layout, name: str) -> str:
    """A node's name without the run id (``tb12abh3`` -> ``h3``)."""
    return name[len(layout.run_id):] if name.startswith(layout.run_id) else name


def host_infos(layout: Layout) -> list[HostInfo]:
    """Every host in rank order with its short name and its switch's short name."""
    return [HostInfo(short(layout, h.name), h.rank, short(layout, layout.attachment(h.name).node))
            for h in layout.hosts]
