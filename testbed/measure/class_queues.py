"""Per-class egress counters of every switch port, read around the traffic (``fabric.queue_backend: htb_classes``).

Each class of :mod:`dataplane.queues.htb_classes` has its own tbf leaf; the leaf's counters are that class's
alone (bytes and packets dequeued, tail drops: net/sched/sch_tbf.c). :func:`class_counters` reads every
leaf of the given ports in one netlink dump per class (dataplane.qdisc_sampler.QdiscDumper with the class's
parent handle); the runner reads them before and after the traffic, and :func:`class_queue_table` turns the two
readings into ``class_queues.csv`` (one row per switch port and class: what that class sent and dropped there
during the traffic). :func:`class_totals` sums it per class for summary.json's ``traffic_classes`` block.

A backend without classes (``htb_bfifo``: one FIFO per port) has no per-class counters: every function
gives None or an empty table then.
"""
from __future__ import annotations

import socket
from pathlib import Path
from typing import Optional

import pandas as pd

from testbed.results.rundir import RunDir
from testbed.spec.congestion import CLASS_DSCP_TEXT

#: class_queues.csv columns (testbed.results.schema)
CLASS_QUEUE_COLUMNS = ["port", "class", "dscp", "tx_bytes", "tx_pkts", "drops_pkts"]
#: counters summed per class (summary.json ``traffic_classes``)
CLASS_COUNTERS = ("tx_bytes", "tx_pkts", "drops_pkts")

#: port -> class -> (tx_bytes, tx_pkts, drops_pkts), cumulative since the leaf was installed
Counters = dict[str, dict[str, tuple[int, int, int]]]


def class_counters(ifnames: list[str], backend, class_names: tuple[str, ...]) -> Optional[Counters]:
    """Every class leaf's cumulative counters on the switch ports ``ifnames`` (root netns): port -> class name
    -> (tx_bytes, tx_pkts, drops_pkts). ``backend``: the fabric's queue backend (dataplane.queues); classes
    are read at ``backend.class_parent(i)`` for i, name in enumerate(``class_names``), the order the fabric
    installed them (testbed.spec.congestion.CLASS_NAMES). None when the backend has no classes or there are
    no ports. Raises RuntimeError naming a port without that class's leaf."""
    if not ifnames or not hasattr(backend, "class_parent"):
        return None
    from dataplane.qdisc_sampler import COUNTERS, QdiscDumper

    ifindexes = [socket.if_nametoindex(n) for n in ifnames]
    nc = len(COUNTERS)
    keep = [COUNTERS.index(c) for c in CLASS_COUNTERS]
    out: Counters = {n: {} for n in ifnames}
    for i, name in enumerate(class_names):
        dumper = QdiscDumper(ifindexes, parent=backend.class_parent(i))
        try:
            row = [0] * (nc * len(ifnames))
            dumper.dump_into(row)
        finally:
            dumper.close()
        for p, port in enumerate(ifnames):
            vals = tuple(row[p * nc + k] for k in keep)
            if min(vals) < 0:
                raise RuntimeError(f"class counters: switch port {port} has no leaf for class {name!r}")
            out[port][name] = vals
    return out


def class_queue_table(before: Optional[Counters], after: Optional[Counters], class_dscp: dict[str, str]
                      ) -> pd.DataFrame:
    """class_queues.csv: per port (sorted) and class (in ``after``'s order) ``after - before`` of each counter;
    ``class_dscp``: class name -> the DSCPs it takes as text (``26``; ``other`` for the default class). Empty
    (the columns only) when either reading is None. Raises ValueError when a counter went backwards (the
    leaf was recreated during the run)."""
    rows = []
    for port in sorted(after or {}) if before is not None else ():
        for name, vals in after[port].items():
            prev = before.get(port, {}).get(name, (0, 0, 0))
            d = [a - b for a, b in zip(vals, prev)]
            if min(d) < 0:
                raise ValueError(f"class counters of {port} class {name} went backwards ({d}): leaf recreated")
            rows.append({"port": port, "class": name, "dscp": class_dscp.get(name, ""),
                         **dict(zip(CLASS_COUNTERS, d))})
    return pd.DataFrame(rows, columns=CLASS_QUEUE_COLUMNS)


def class_totals(table: pd.DataFrame) -> dict[str, dict]:
    """summary.json ``traffic_classes.classes``: class -> its DSCPs and each counter of
    :data:`CLASS_COUNTERS` summed over the switch ports of :func:`class_queue_table` (first-seen class order).
    A packet crossing k switch ports counts k times (each port's egress queue sent it)."""
    out: dict[str, dict] = {}
    for name, g in table.groupby("class", sort=False):
        out[str(name)] = {"dscp": str(g["dscp"].iloc[0]), **{c: int(g[c].sum()) for c in CLASS_COUNTERS}}
    return out


def traffic_classes_block(run_dir: Path, before: Optional[Counters], after: Optional[Counters]) -> dict | None:
    """Write ``class_queues.csv`` (:func:`class_queue_table` of the readings ``before`` and ``after`` the traffic:
    per switch port and class, what it sent and dropped during the traffic) and return summary.json's
    ``traffic_classes`` block: ``classes`` (class -> ``dscp``, ``tx_bytes``, ``tx_pkts``, ``drops_pkts`` summed
    over the switch ports) and ``counted``, what those sums count. None without per-class counters (a backend of
    one queue per port). ECN marks and PFC pauses act on the lossless class alone; their totals are in the
    ``congestion`` block."""
    if before is None or after is None:
        return None
    table = class_queue_table(before, after, CLASS_DSCP_TEXT)
    RunDir(run_dir).write_table("class_queues", table)
    return {"classes": class_totals(table),
            "counted": "each switch egress port's class leaf during the traffic (a packet crossing k switch "
                       "ports counts k times); ECN marks and PFC pauses are the lossless class's (congestion block)"}
