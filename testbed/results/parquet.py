"""Parquet beside CSV: every documented table of a run directory also as ``NAME.parquet``.

The tables are written as CSV by the rooms that measure them (the testbed, the
controller's congestion loop, the fault scheduler); once a run's tables are
all in, :func:`write_parquet` reads each documented ``NAME.csv``
(:func:`read_csv_table`: the column types of testbed.results.schema) and
writes ``NAME.parquet`` beside it with pyarrow (pandas ``to_parquet``), so
both files hold the same DataFrame. Undocumented CSV files are left alone.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import pandas as pd

from testbed.results.schema import TABLES, Table

log = logging.getLogger(__name__)


def read_csv_table(path: Path, spec: Table) -> pd.DataFrame:
    """``path`` (a CSV of table ``spec``) as a DataFrame with the documented types.

    ``str`` columns are text with "" for empty cells (not NaN); ``bool`` columns bool; the rest as pandas
    infers them (an int column with empty cells is float with NaN); a table with a header and no rows has
    the documented types. An empty file (a run with no rows and
    no header, e.g. rank_ops of a pattern run) gives the required columns and no rows.
    """
    try:
        frame = pd.read_csv(path, low_memory=False)
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


def write_parquet(run_dir: Path) -> list[str]:
    """Write ``NAME.parquet`` beside every documented ``NAME.csv`` in ``run_dir``; return the names written.

    Atomic per file (a reader never sees half a Parquet file). Raises what pandas/pyarrow raise.
    """
    written = []
    for name, spec in TABLES.items():
        csv = Path(run_dir) / f"{name}.csv"
        if not csv.is_file():
            continue
        target = csv.with_suffix(".parquet")
        tmp = target.with_name(f".{target.name}.tmp")
        read_csv_table(csv, spec).to_parquet(tmp, engine="pyarrow", index=False)
        os.replace(tmp, target)
        written.append(name)
    return written


def write_parquet_or_warn(run_dir: Path) -> None:
    """:func:`write_parquet`, logging a warning instead of failing the run (the CSV files stay the record)."""
    try:
        write_parquet(run_dir)
    except Exception as e:  # noqa: BLE001  a secondary format must not lose a measured run
        log.warning("Parquet copies of the tables in %s not written: %s", run_dir, e)
