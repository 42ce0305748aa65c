"""FCT slowdown by flow size: slowdown.csv, the figure of the datacenter congestion-control papers.

Flows (fct.csv rows: ``size_bytes``, ``fct_us``, ``ideal_fct_us``, ``slowdown`` = fct_us / ideal_fct_us) are
put in size buckets by ascending upper edges: bucket i holds sizes in (edge[i-1], edge[i]], the first from 1
byte; per bucket the nearest-rank percentiles (testbed.results.tables.percentile_us) p50, p95 and p99 of the
slowdown, its mean, and ``n``, the flows the percentiles rest on (a p99 of fewer than 100 flows is their
largest). As HPCC's analysis prints them (analysis/fct_analysis.py: ``slow<1?1:slow``), a slowdown below 1
counts as 1 here; fct.csv keeps the measured ratio and ``below_ideal`` counts the bucket's flows under 1. On
this testbed a flow can beat the ideal of a serialized link by up to (burst_bytes + one frame) of its host
link's shaper (docs/link-model.md "busbw/link above 1": an idle port's bucket lets them leave at once, 17 KB
at 10 Mbit/s and path MTU 4096), so flows of a few frames often do. HPCC's analysis (alibaba-edu/High-Precision-Congestion-Control, analysis/fct_analysis.py) bins the
flows sorted by size into groups of equal count; an open-loop run takes as edges the sizes at equal steps of
its CDF (testbed.workloads.open_loop), so buckets hold equal counts in expectation and have the same edges
in every run of that CDF and scale.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from testbed.results.tables import percentile_us

SLOWDOWN_COLUMNS = ["bucket", "size_lo_bytes", "size_hi_bytes", "n", "slowdown_p50", "slowdown_p95",
                    "slowdown_p99", "slowdown_mean", "below_ideal", "fct_p50_us", "fct_p99_us"]

#: slowdown.csv in testbed.results.schema's terms: (name, description, written, columns)
SLOWDOWN_TABLE = ("slowdown", "one row per flow size bucket: FCT slowdown percentiles (testbed.results.slowdown)",
                  "open-loop runs (workload.open_loop)", """
    bucket         int   bucket index, smallest sizes first
    size_lo_bytes  int   smallest flow size the bucket holds, bytes
    size_hi_bytes  int   largest flow size the bucket holds, bytes
    n              int   flows in the bucket (the percentiles' samples)
    slowdown_p50   float median of fct_us / ideal_fct_us (fct.csv; ideal: alone on an idle path), below 1 as 1 (HPCC)
    slowdown_p95   float 95th percentile slowdown (nearest rank)
    slowdown_p99   float 99th percentile slowdown (nearest rank; the largest with fewer than 100 flows)
    slowdown_mean  float mean slowdown
    below_ideal    int   flows of the bucket whose measured slowdown (fct.csv) is below 1
    fct_p50_us     float median FCT, us
    fct_p99_us     float 99th percentile FCT (nearest rank), us
""")


def _pct(values, q: float):
    v = percentile_us(values, q) if len(values) else math.nan
    return None if math.isnan(v) else float(v)


def slowdown_table(fct: pd.DataFrame, edges_bytes) -> pd.DataFrame:
    """slowdown.csv (module docstring) of the fct.csv rows ``fct`` over the ascending upper bucket edges
    ``edges_bytes`` (bytes; repeated edges merged; a flow above the last edge joins the last bucket). Every
    bucket has its row, with n = 0 and empty figures when no flow fell in it. Raises ValueError for no edges."""
    edges = sorted({int(e) for e in edges_bytes})
    if not edges:
        raise ValueError("slowdown buckets need at least one edge")
    size = fct["size_bytes"].to_numpy(dtype=np.int64)
    idx = np.minimum(np.searchsorted(edges, size, side="left"), len(edges) - 1)
    rows = []
    for i, hi in enumerate(edges):
        b = fct[idx == i]
        raw, us = b["slowdown"].to_numpy(dtype=float), b["fct_us"].to_numpy(dtype=float)
        slow = np.maximum(raw, 1.0)  # HPCC's analysis: slow<1?1:slow
        rows.append({"bucket": i, "size_lo_bytes": edges[i - 1] + 1 if i else 1,
                     "size_hi_bytes": hi if i < len(edges) - 1 else max(hi, int(size.max()) if len(size) else hi),
                     "n": len(b), "slowdown_p50": _pct(slow, 50), "slowdown_p95": _pct(slow, 95),
                     "slowdown_p99": _pct(slow, 99), "slowdown_mean": float(slow.mean()) if len(slow) else None,
                     "below_ideal": int((raw < 1).sum()),
                     "fct_p50_us": _pct(us, 50), "fct_p99_us": _pct(us, 99)})
    return pd.DataFrame(rows, columns=SLOWDOWN_COLUMNS)


def format_slowdown(rows: list[dict]) -> list[str]:
    """slowdown.csv's rows (dicts) as printed lines: size range, n, p50, p95, p99, flows measured below 1."""
    def f(v):
        return "   n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:6.2f}"
    out = [f"# {'size (bytes)':>21} {'n':>5}    p50    p95    p99  below 1"]
    for r in rows:
        out.append(f"# {r['size_lo_bytes']:>10}-{r['size_hi_bytes']:<10} {r['n']:>5} {f(r['slowdown_p50'])} "
                   f"{f(r['slowdown_p95'])} {f(r['slowdown_p99'])} {r['below_ideal']:>8}")
    return out
