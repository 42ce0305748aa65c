"""``testbed.results.load(run_dir)``: a run directory's tables as pandas DataFrames.

>>> r = load("results/20261201T060000Z-quickstart-tb12ab")
>>> r.sizes[["size_bytes", "busbw_bps"]]          # a DataFrame (sizes.parquet, else sizes.csv)
>>> r["ports"], r.summary["faithful"], r.names     # also by key; summary.json as a dict; tables present

Each table is read on first use from ``NAME.parquet`` when present, else
``NAME.csv`` (testbed.results.parquet.read_csv_table: the same types), and
checked against its documented columns (testbed.results.schema, docs/tables.md):
a missing documented column raises :class:`TableError`; an undocumented one
is kept, with a warning.
"""
from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from testbed.results.parquet import read_csv_table
from testbed.results.schema import TABLES


class TableError(LookupError):
    """A run directory or one of its tables is missing or does not match its documented columns."""


class RunTables(Mapping):
    """The tables of one run directory (a read-only mapping name -> DataFrame of the tables present).

    ``run_dir``: the directory; ``names``: documented tables present in it; ``summary``, ``manifest``,
    ``topology``: its JSON files as dicts ({} when absent). ``r.NAME`` or ``r["NAME"]`` reads table NAME
    (cached); a documented table this run did not write raises :class:`TableError` naming the run dir.
    """

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self._cache: dict[str, pd.DataFrame] = {}

    @property
    def names(self) -> list[str]:
        return [n for n in TABLES if self._path(n) is not None]

    def _path(self, name: str) -> Path | None:
        for suffix in (".parquet", ".csv"):
            p = self.run_dir / f"{name}{suffix}"
            if p.is_file():
                return p
        return None

    def _json(self, name: str) -> dict:
        p = self.run_dir / name
        return json.loads(p.read_text()) if p.is_file() else {}

    @property
    def summary(self) -> dict:
        return self._json("summary.json")

    @property
    def manifest(self) -> dict:
        return self._json("manifest.json")

    @property
    def topology(self) -> dict:
        return self._json("topology.json")

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name in self._cache:
            return self._cache[name]
        if name not in TABLES:
            raise TableError(f"{name!r} is not a table of a run; documented tables: {', '.join(TABLES)}")
        path = self._path(name)
        if path is None:
            raise TableError(f"{self.run_dir} has no table {name!r} (neither {name}.parquet nor {name}.csv; "
                             f"it is written by {TABLES[name].written}); tables present: "
                             f"{', '.join(self.names) or 'none'}")
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else read_csv_table(path, TABLES[name])
        problems = TABLES[name].problems(frame.columns)
        missing = [p for p in problems if p.startswith("missing")]
        if missing:
            raise TableError(f"{path}: {'; '.join(missing)} (documented in docs/tables.md)")
        if problems:
            warnings.warn(f"{path}: {'; '.join(problems)} (not in docs/tables.md)", stacklevel=2)
        self._cache[name] = frame
        return frame

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name.startswith("_") or name not in TABLES:
            raise AttributeError(name)
        return self[name]

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"RunTables({str(self.run_dir)!r}, tables={self.names})"


def load(run_dir) -> RunTables:
    """The tables of ``run_dir`` (a directory ``testbed run`` wrote: it holds manifest.json).

    Raises TableError naming ``run_dir`` when it does not exist or is not a run directory.
    Tables are read when first used (see :class:`RunTables`).
    """
    p = Path(run_dir)
    if not p.is_dir():
        raise TableError(f"no run directory {str(p)!r}" + ("" if p.exists() else " (it does not exist)"))
    if not (p / "manifest.json").is_file():
        raise TableError(f"{p} is not a run directory (no manifest.json); a run directory is "
                         f"RESULTS/<UTC time>-<name>-<run id>/")
    return RunTables(p)
