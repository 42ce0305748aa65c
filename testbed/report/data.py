"""How the report reads a run (a testbed.results.rundir.RunDir): tables with rows, one time axis, short names.

Every ``*_ns`` column is Unix-epoch ns on one clock (testbed.results.tables),
so :func:`t_s` puts them on one axis, seconds since the run's first traffic
(``RunDir.t0_ns``). Names drop the run id: ``tbb8f9l1-eth3`` -> ``l1-eth3``.
"""
from __future__ import annotations

import re

import pandas as pd

from testbed.results.rundir import RunDir


def rows(run: RunDir, name: str) -> pd.DataFrame | None:
    """Table ``name`` of ``run``; None when there is nothing to draw: the run did not record it, its file
    cannot be read, or it has no rows (:func:`lacking` says which)."""
    try:
        df = run.table(name)
    except Exception:  # noqa: BLE001  a damaged file: lacking() names the error
        return None
    return None if df is None or df.empty else df


def lacking(run: RunDir, name: str, absent: str = "", empty: str = "") -> str:
    """Why table ``name`` gives no rows, in words: ``ports.csv absent (<absent>)``, ``ports.csv unreadable:
    <the parse error>`` or ``ports.csv has no rows (<empty>)``; the part in brackets only when given.
    An empty string when the table has rows."""
    path = run.table_path(name)
    if path is None:
        return f"{name}.csv absent" + (f" ({absent})" if absent else "")
    try:
        df = run.table(name)
    except Exception as e:  # noqa: BLE001  whatever the reader raised is the reason
        why = str(e).removeprefix(f"{path}: ")
        return f"{path.name} unreadable: {type(e).__name__}: {why}"
    if df is None or df.empty:
        return f"{path.name} has no rows" + (f" ({empty})" if empty else "")
    return ""


def t_s(run: RunDir, time_ns) -> pd.Series:
    """``time_ns`` (Unix ns) as seconds since the run's first traffic (``run.t0_ns``; 0 when unknown)."""
    return (pd.Series(time_ns, dtype="float64") - float(run.t0_ns or 0)) / 1e9


def short_name(run: RunDir, name: str) -> str:
    """``name`` without the run id prefix."""
    rid = run.run_id
    return name[len(rid):] if rid and name.startswith(rid) else name


def host_name(run: RunDir, rank) -> str:
    """A rank's host name without the run id (topology.json), ``rank N`` when unknown."""
    name = run.host_names.get(int(rank))
    return short_name(run, name) if name else f"rank {rank}"


def port_label(run: RunDir, port: str) -> str:
    """A switch port name without the run id, with the node it leads to: ``tbb8f9l1-eth3`` -> ``l1-eth3 > s1``."""
    short = short_name(run, port)
    peer = run.port_links.get(port)
    return f"{short} > {short_name(run, peer[0])}" if peer else short


_PORT_RE = re.compile(r"-eth(\d+)$")


def port_sort_key(label: str) -> tuple:
    """Order ports by switch name then port number (``l1-eth2`` before ``l1-eth10``)."""
    name = label.split(" > ")[0]
    m = _PORT_RE.search(name)
    return (name[:m.start()] if m else name, int(m.group(1)) if m else 0)
