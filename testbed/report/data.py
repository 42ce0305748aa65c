"""A run directory's tables, read once for the report (testbed.report).

Every table is read from the plain files the run wrote (``*.csv``,
``summary.json``, ``manifest.json``, ``topology.json``); a table the run did
not write is ``None``. Times: every ``*_ns`` column is Unix-epoch ns on one
clock (testbed.results.tables), so :meth:`RunData.t_s` puts them on one
axis, seconds since :attr:`RunData.t0_ns` (the first traffic of the run).
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pandas as pd

from testbed.report import NotARunDir


#: the files a run directory has from its start (testbed.results.manifest)
RUN_MARKER = "manifest.json"


def check_run_dir(run_dir: Path) -> Path:
    """``run_dir`` as a Path if it is a run directory; raise :class:`NotARunDir` naming it otherwise."""
    p = Path(run_dir)
    if not p.exists():
        raise NotARunDir(f"RUN_DIR {str(p)!r}: no such directory")
    if not p.is_dir():
        raise NotARunDir(f"RUN_DIR {str(p)!r}: not a directory")
    if not (p / RUN_MARKER).is_file():
        raise NotARunDir(f"RUN_DIR {str(p)!r}: not a run directory (no {RUN_MARKER}; a run directory is "
                         f"results/<UTC time>-<name>-<run id>/)")
    return p


class RunData:
    """Lazy, cached access to one run directory's files."""

    def __init__(self, run_dir: Path):
        self.run_dir = check_run_dir(run_dir)
        self._tables: dict[str, pd.DataFrame | None] = {}

    def table(self, name: str) -> pd.DataFrame | None:
        """``name``.csv as a DataFrame (read once); None when the run did not write it or it has no rows."""
        if name not in self._tables:
            self._tables[name] = _read_csv(self.run_dir / f"{name}.csv")
        return self._tables[name]

    def json(self, name: str) -> dict | None:
        """``name``.json, None when absent or unreadable."""
        try:
            return json.loads((self.run_dir / f"{name}.json").read_text())
        except (OSError, ValueError):
            return None

    @functools.cached_property
    def summary(self) -> dict:
        return self.json("summary") or {}

    @functools.cached_property
    def manifest(self) -> dict:
        return self.json("manifest") or {}

    @functools.cached_property
    def topology(self) -> dict:
        return self.json("topology") or {}

    def host_name(self, rank) -> str:
        """A rank's host name without the run id (topology.json), ``rank N`` when unknown."""
        for h in self.topology.get("hosts", []):
            if h.get("rank") == int(rank):
                return self._strip(h["name"])
        return f"rank {rank}"

    @functools.cached_property
    def incomplete(self) -> str | None:
        """The INCOMPLETE file's reason, None for a complete run."""
        p = self.run_dir / "INCOMPLETE"
        return p.read_text().strip() if p.exists() else None

    @functools.cached_property
    def run_id(self) -> str:
        return self.summary.get("run_id") or self.manifest.get("run_id") or ""

    @functools.cached_property
    def t0_ns(self) -> int | None:
        """The first traffic: earliest op start, message post or flow start; else the first queue sample."""
        starts = []
        for name, col in (("ops", "t_start_ns"), ("msgs", "t_post_ns"), ("fct", "start_ns")):
            df = self.table(name)
            if df is not None and col in df and df[col].notna().any():
                starts.append(int(df[col].min()))
        if not starts:
            for name in ("ports", "cpu"):
                df = self.table(name)
                if df is not None and "time_ns" in df:
                    starts.append(int(df["time_ns"].min()))
        return min(starts) if starts else None

    def t_s(self, time_ns) -> pd.Series:
        """``time_ns`` (Unix ns) as seconds since :attr:`t0_ns`."""
        return (pd.Series(time_ns, dtype="float64") - float(self.t0_ns or 0)) / 1e9

    def port_label(self, port: str) -> str:
        """A switch port name without the run id, with the node it leads to: ``tbb8f9l1-eth3`` -> ``l1-eth3 > s1``."""
        short = self._strip(port)
        peer = self.port_peers.get(port)
        return f"{short} > {self._strip(peer)}" if peer else short

    def _strip(self, name: str) -> str:
        rid = self.run_id
        return name[len(rid):] if rid and name.startswith(rid) else name

    @functools.cached_property
    def port_peers(self) -> dict[str, str]:
        """Switch port name (``<switch>-eth<N>``) -> the node at the link's other end (topology.json)."""
        return {port: peer for port, (peer, _) in self._links.items()}

    @functools.cached_property
    def port_rates_bps(self) -> dict[str, float]:
        """Switch port name -> its link's rate in bit/s (topology.json ``links[].rate_bps``)."""
        return {port: rate for port, (_, rate) in self._links.items()}

    @functools.cached_property
    def _links(self) -> dict[str, tuple[str, float]]:
        topo = self.topology
        switches = {s["name"] for s in topo.get("switches", [])}
        out = {}
        for link in topo.get("links", []):
            for end, other in (("a", "b"), ("b", "a")):
                if link.get(end) in switches:
                    out[f"{link[end]}-eth{link[f'{end}_port']}"] = (link[other], float(link.get("rate_bps") or 0))
        return out


_PORT_RE = re.compile(r"-eth(\d+)$")


def port_sort_key(label: str) -> tuple:
    """Order ports by switch name then port number (``l1-eth2`` before ``l1-eth10``)."""
    name = label.split(" > ")[0]
    m = _PORT_RE.search(name)
    return (name[:m.start()] if m else name, int(m.group(1)) if m else 0)


def _read_csv(path: Path) -> pd.DataFrame | None:
    if not path.is_file() or path.stat().st_size <= 1:
        return None
    try:
        df = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, OSError):
        return None
    return None if df.empty else df
