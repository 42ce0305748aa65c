"""One run directory, read and written through :class:`RunDir`; the results root checked before a run.

>>> run = RunDir.open("results/20261201T060000Z-quickstart-tb12ab")
>>> run.sizes[["size_bytes", "busbw_bps"]]      # a DataFrame: sizes.parquet, else sizes.csv
>>> run.table("qp_rates")                        # None: this run did not record qp_rates
>>> run.summary["faithful"], run.manifest["seed"], run.names

Tables are the documented ones of testbed.results.schema (:data:`TABLES`,
docs/tables.md). Each is read on first use from ``NAME.parquet`` when the run
wrote it, else ``NAME.csv`` with the schema's types (:func:`read_csv_table`),
and checked against its documented columns: a missing documented column
raises :class:`TableError` naming the file; an undocumented one is kept, with
a warning. A name that is not a documented table raises :class:`TableError`
naming it.

The rule for a table the run did not record (neither file): it is absent.
:meth:`RunDir.table` gives None, ``run[name]`` and ``run.name`` raise
:class:`TableError` naming the run directory and the runs that write it (a
run directory is a read-only Mapping of the tables present). A table the run
recorded with no rows is an empty DataFrame with the schema's columns.

The JSON files: :attr:`RunDir.summary`, :attr:`RunDir.manifest`,
:attr:`RunDir.topology` (dicts, {} when absent), :meth:`RunDir.layout`
(topology.json as a topology.model.Layout), :meth:`RunDir.events` (the
controller's event lines) and :attr:`RunDir.congestion_loop` (the congestion
loop's result file, typed). A file that is present but not JSON raises
:class:`TableError` naming it (the loop's result: controllers.contract.ContractError).

Writing (the runner): :meth:`RunDir.write_table`, :meth:`RunDir.write_summary`,
:meth:`RunDir.write_manifest`, :meth:`RunDir.write_parquet`,
:meth:`RunDir.mark_incomplete`, :meth:`RunDir.mark_complete`; every file is
replaced atomically (a reader never sees half a file).
"""
from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from controllers.contract import read_events
from controllers.loop_result import LoopResult, read_loop_result
from testbed.results import tables as atomic  # the atomic file writers: write_csv, write_json, INCOMPLETE
from testbed.results.schema import TABLES, Table
from testbed.spec.scenario import ScenarioError

log = logging.getLogger(__name__)

#: the file every run directory has from its start (testbed.pipeline.manifest)
MANIFEST_FILE = "manifest.json"
SUMMARY_FILE = "summary.json"
TOPOLOGY_FILE = "topology.json"


class TableError(LookupError):
    """A run directory or one of its tables is missing or does not match its documented columns."""


class NotARunDir(TableError, ValueError):
    """The path is missing, not a directory, or holds no run's files (the message names it)."""


class RunDir(Mapping):
    """One run directory: a read-only mapping table name -> DataFrame of the documented tables present,
    its JSON files, and the writers the runner uses.

    ``path``: the directory (:meth:`open` checks it is a run directory; the constructor does not, so the
    runner can write into a directory it has just made). Tables and JSON files are read once and cached;
    a write replaces the cached copy.
    """

    def __init__(self, path):
        self.path = Path(path)
        self._tables: dict[str, pd.DataFrame] = {}
        self._json: dict[str, dict] = {}

    @classmethod
    def open(cls, path) -> "RunDir":
        """The run directory ``path``; raises :class:`NotARunDir` naming it when it does not exist, is not
        a directory or has no manifest.json."""
        p = Path(path)
        if not p.exists():
            raise NotARunDir(f"{str(p)!r}: no such directory")
        if not p.is_dir():
            raise NotARunDir(f"{str(p)!r}: not a directory")
        if not (p / MANIFEST_FILE).is_file():
            raise NotARunDir(f"{str(p)!r}: not a run directory (no {MANIFEST_FILE}; a run directory is "
                             f"RESULTS/<UTC time>-<name>-<run id>/)")
        return cls(p)

    # --- tables -----------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """The documented tables this run recorded, in schema order."""
        return [n for n in TABLES if self.table_path(n) is not None]

    def table_path(self, name: str) -> Path | None:
        """The file table ``name`` is read from: ``NAME.parquet``, else ``NAME.csv``; None when neither is."""
        for suffix in (".parquet", ".csv"):
            p = self.path / f"{name}{suffix}"
            if p.is_file():
                return p
        return None

    def table(self, name: str) -> pd.DataFrame | None:
        """Table ``name`` as a DataFrame with the schema's types; None when the run did not record it.

        Raises TableError when ``name`` is no documented table or a documented column is missing."""
        spec = _spec(name)
        if name in self._tables:
            return self._tables[name]
        path = self.table_path(name)
        if path is None:
            return None
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else read_csv_table(path, spec)
        problems = spec.problems(frame.columns)
        missing = [p for p in problems if p.startswith("missing")]
        if missing:
            raise TableError(f"{path}: {'; '.join(missing)} (documented in docs/tables.md)")
        if problems:
            warnings.warn(f"{path}: {'; '.join(problems)} (not in docs/tables.md)", stacklevel=2)
        self._tables[name] = frame
        return frame

    def __getitem__(self, name: str) -> pd.DataFrame:
        frame = self.table(name)
        if frame is None:
            raise TableError(f"{self.path} has no table {name!r} (neither {name}.parquet nor {name}.csv; "
                             f"it is written by {TABLES[name].written}); tables present: "
                             f"{', '.join(self.names) or 'none'}")
        return frame

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name.startswith("_") or name not in TABLES:
            raise AttributeError(name)
        return self[name]

    def __contains__(self, name) -> bool:
        return name in TABLES and self.table_path(name) is not None

    def get(self, name, default=None):
        """Table ``name``, ``default`` when the run did not record it (TableError for no documented table)."""
        frame = self.table(name)
        return default if frame is None else frame

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r}, tables={self.names})"

    # --- JSON files -------------------------------------------------------------------------------
    def read_json(self, name: str) -> dict:
        """The JSON file ``name`` of the run directory ({} when absent; cached). TableError when not JSON."""
        if name not in self._json:
            p = self.path / name
            try:
                self._json[name] = json.loads(p.read_text()) if p.is_file() else {}
            except (ValueError, UnicodeDecodeError) as e:
                raise TableError(f"{p}: not JSON: {e}") from None
        return self._json[name]

    @property
    def summary(self) -> dict:
        """summary.json: the run's verdict and figures (testbed.pipeline.summary); {} before it is written."""
        return self.read_json(SUMMARY_FILE)

    @property
    def manifest(self) -> dict:
        """manifest.json: what the run was (testbed.pipeline.manifest)."""
        return self.read_json(MANIFEST_FILE)

    @property
    def topology(self) -> dict:
        """topology.json as a dict: ``switches``, ``hosts``, ``links`` (topology.model)."""
        return self.read_json(TOPOLOGY_FILE)

    def layout(self):
        """topology.json as a topology.model.Layout; TopologyError when absent or invalid."""
        from topology import model

        return model.load(self.path / TOPOLOGY_FILE)

    @property
    def congestion_loop(self) -> LoopResult | None:
        """The controller's congestion loop's result (controllers.loop_result.LoopResult: loop times, ECN and PFC
        counts); None when no loop ran. Raises controllers.contract.ContractError naming the file and the field
        when the file is not a LoopResult."""
        return read_loop_result(self.path)

    def events(self) -> list:
        """The controller's events (controllers.contract.read_events: typed records of
        controller.events.jsonl in file order, [] without a file; a torn last line is skipped, any other
        bad line raises controllers.contract.ContractError naming the file and line)."""
        return read_events(self.path)

    @property
    def incomplete(self) -> str | None:
        """The INCOMPLETE file's reason, None for a complete run."""
        p = self.path / atomic.INCOMPLETE_FILE
        return p.read_text().strip() if p.exists() else None

    @property
    def run_id(self) -> str:
        """The run id (summary.json, else manifest.json; "" when neither says)."""
        return self.summary.get("run_id") or self.manifest.get("run_id") or ""

    # --- facts of the run the readers share (report, analyses) ----------------------------------------
    @functools.cached_property
    def t0_ns(self) -> int | None:
        """The first traffic, Unix ns: earliest op start, message post or flow start; else the first sample of
        ports or cpu; None when no table has one (every ``*_ns`` column is on this one clock)."""
        starts = []
        for name, col in (("ops", "t_start_ns"), ("msgs", "t_post_ns"), ("fct", "start_ns")):
            df = self.table(name)
            if df is not None and col in df and df[col].notna().any():
                starts.append(int(df[col].min()))
        if not starts:
            for name in ("ports", "cpu"):
                df = self.table(name)
                if df is not None and "time_ns" in df and df["time_ns"].notna().any():
                    starts.append(int(df["time_ns"].min()))
        return min(starts) if starts else None

    @functools.cached_property
    def port_links(self) -> dict[str, tuple[str, float]]:
        """Switch port name (``<switch>-eth<N>``) -> (the node at the link's other end, the link's rate in
        bit/s) from topology.json (``links[].rate_bps``; 0 when absent); {} without a topology."""
        topo = self.topology
        switches = {s["name"] for s in topo.get("switches", [])}
        out = {}
        for link in topo.get("links", []):
            for end, other in (("a", "b"), ("b", "a")):
                if link.get(end) in switches:
                    out[f"{link[end]}-eth{link[f'{end}_port']}"] = (link[other], float(link.get("rate_bps") or 0))
        return out

    @functools.cached_property
    def host_names(self) -> dict[int, str]:
        """Rank -> host name (topology.json ``hosts``); {} without a topology."""
        return {int(h["rank"]): h["name"] for h in self.topology.get("hosts", []) if h.get("rank") is not None}

    # --- writers ----------------------------------------------------------------------------------
    def write_table(self, name: str, frame: pd.DataFrame) -> None:
        """Write documented table ``name`` as ``NAME.csv`` (no index), atomically, and its ``NAME.parquet``
        again when the run has one (readers prefer it: a stale copy would hide the write). TableError for
        another name."""
        spec = _spec(name)
        atomic.write_csv(frame, self.path / f"{name}.csv")
        if (self.path / f"{name}.parquet").is_file():
            self._parquet_copy(name, spec)
        self._tables.pop(name, None)

    def write_json(self, name: str, doc) -> None:
        """Write ``doc`` as the JSON file ``name`` (indented), atomically."""
        atomic.write_json(self.path / name, doc)
        self._json.pop(name, None)

    def write_summary(self, doc: dict) -> None:
        """Write summary.json, atomically."""
        self.write_json(SUMMARY_FILE, doc)

    def write_manifest(self, doc: dict) -> None:
        """Write manifest.json, atomically."""
        self.write_json(MANIFEST_FILE, doc)

    def write_parquet(self) -> list[str]:
        """Write ``NAME.parquet`` beside every documented ``NAME.csv`` (the same DataFrame, with the schema's
        types); return the names written. Atomic per file. Raises what pandas/pyarrow raise."""
        written = []
        for name, spec in TABLES.items():
            if (self.path / f"{name}.csv").is_file():
                self._parquet_copy(name, spec)
                written.append(name)
        return written

    def _parquet_copy(self, name: str, spec: Table) -> None:
        """``NAME.parquet`` from ``NAME.csv`` with the schema's types, atomically."""
        target = self.path / f"{name}.parquet"
        tmp = target.with_name(f".{target.name}.tmp")
        read_csv_table(self.path / f"{name}.csv", spec).to_parquet(tmp, engine="pyarrow", index=False)
        os.replace(tmp, target)
        self._tables.pop(name, None)

    def write_parquet_or_warn(self) -> None:
        """:meth:`write_parquet`, logging a warning instead of failing the run (the CSV files stay the record)."""
        try:
            self.write_parquet()
        except Exception as e:  # noqa: BLE001  a secondary format must not lose a measured run
            log.warning("Parquet copies of the tables in %s not written: %s", self.path, e)

    def mark_incomplete(self, reason: str) -> None:
        """Write ``INCOMPLETE`` holding ``reason`` (one line), atomically."""
        atomic.mark_incomplete(self.path, reason)

    def mark_complete(self) -> None:
        """Remove ``INCOMPLETE`` (no error if absent)."""
        atomic.mark_complete(self.path)


def _spec(name: str) -> Table:
    try:
        return TABLES[name]
    except KeyError:
        raise TableError(f"{name!r} is not a table of a run; documented tables: {', '.join(TABLES)}") from None


def read_csv_table(path: Path, spec: Table) -> pd.DataFrame:
    """``path`` (a CSV of table ``spec``) as a DataFrame with the documented types.

    ``str`` columns are text with "" for empty cells (not NaN); ``bool`` columns bool; the rest as pandas
    infers them (an int column with empty cells is float with NaN); a table with a header and no rows has
    the documented types. An empty file (a run with no rows and no header, e.g. rank_ops of a pattern
    run) gives the required columns and no rows.
    """
    text_columns = {c.name: str for c in spec.columns if c.dtype == "str" and "<N>" not in c.name}
    try:  # str columns read as text: a node list "3" or a group name "0" stays "3", not 3.0
        frame = pd.read_csv(path, low_memory=False, dtype=text_columns)
    except pd.errors.EmptyDataError:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(spec.column(c).dtype)) for c in spec.required()})
    for name in frame.columns:
        col = spec.column(name)
        if col is not None and frame.empty:  # a header only: pandas would make every column object
            frame[name] = frame[name].astype(_dtype(col.dtype))
        elif col is not None and col.dtype == "str":
            frame[name] = frame[name].astype(object).where(frame[name].notna(), "").astype(str)
        elif col is not None and col.dtype == "bool" and frame[name].notna().all():
            frame[name] = frame[name].astype(bool)
    return frame


def _dtype(kind: str) -> str:
    return {"int": "int64", "float": "float64", "str": "str", "bool": "bool"}[kind]


def check_results_root(root: Path) -> None:
    """Raise ScenarioError unless ``root`` is a writable directory or can be created (nothing is made):
    :func:`check_writable_dir` named ``--results``."""
    root = Path(root).absolute()
    check_writable_dir(root, f"--results {root}")


def check_writable_dir(directory: Path, label: str, *, may_create: bool = True) -> None:
    """Raise ScenarioError ``LABEL: reason`` unless ``directory`` is a writable directory or, with
    ``may_create``, can be created (nothing is made).

    Probes by really creating and removing a temporary file in ``directory`` or (``may_create``) in
    its nearest existing ancestor, so read-only mounts, files in the way and missing permissions are
    all caught before anything is built. Reasons: ``directory D does not exist`` (not ``may_create``),
    ``P is not a directory``, ``D is not writable: ERROR`` or ``cannot be created (P is not writable): ERROR``.
    """
    directory = Path(directory).absolute()
    probe_dir = directory
    while may_create and not probe_dir.exists():
        probe_dir = probe_dir.parent
    if not probe_dir.exists():
        raise ScenarioError(f"{label}: directory {directory} does not exist")
    if not probe_dir.is_dir():
        raise ScenarioError(f"{label}: {probe_dir} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe_dir):
            pass
    except OSError as e:
        what = f"{directory} is not writable" if probe_dir == directory else \
            f"cannot be created ({probe_dir} is not writable)"
        raise ScenarioError(f"{label}: {what}: {e.strerror}") from None


def check_output_file(path: str | os.PathLike, label: str) -> Path:
    """The absolute path of an output file the run will write at its end (relative: to the current
    directory), checked now: its directory must exist and be writable (:func:`check_writable_dir`, not
    created). Raises ScenarioError ``LABEL PATH: reason``."""
    path = Path(path).absolute()
    if path.is_dir() or path.name in ("", ".", ".."):
        raise ScenarioError(f"{label} {path}: is a directory; give a file name")
    check_writable_dir(path.parent, f"{label} {path}", may_create=False)
    return path
