"""The latency-bandwidth fit of a size sweep: T = a + b S per collective, algorithm and group size.

Hockney's model (R. Hockney, "The communication challenge for MPP", Parallel Computing 1994):
an operation of S bytes takes a start-up time ``a`` plus ``b`` seconds per byte. For a
bandwidth-optimal algorithm the slope is the collective's busbw factor over the link's
goodput: b = factor(n) / B with B = host link rate x payload efficiency in bytes/s (ring
all-reduce: 2(n-1)/(n B), Patarasuk & Yuan 2009). The fit is least squares over the sweep's
sizes (numpy.polyfit, degree 1) of each size's time (time_us: first rank's start to last
rank's end, averaged over the iterations); R^2 = 1 - SS_res / SS_tot. (Weighting by 1 / T was
tried: it tilts b towards the small sizes, b / expected 1.013 against 1.004 unweighted on the same
4-rank sweep, so the slope, the figure the fit is for, stays unweighted.)

``a`` may come out negative here, and that is the emulation, not an error: after the idle moment
between operations HTB's bucket holds ``burst_bytes`` of tokens and the last frame is not serialized
again at the receiver (cut-through), so every operation can finish up to ``(burst_bytes + one frame)
x 8 / rate`` early (testbed.measure.link_model, "busbw/link above 1"): a constant shift of every T. The
row gives that bound as ``a_burst_floor_s`` (negative); an ``a`` below it is not explained by the
link model and the printed line says so.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

#: fewest distinct sizes a fit is made from
MIN_SIZES = 3


def fit_rows(sizes: pd.DataFrame, host_link_bps: float, efficiency: float,
             early_finish_s: float = 0.0) -> Optional[list]:
    """One dict per (collective, algorithm, group_size) of sizes.csv rows with at least MIN_SIZES
    sizes: ``a_s`` (s), ``a_burst_floor_s`` (``-early_finish_s``: the lowest ``a`` the link model
    explains, module doc), ``b_s_per_byte``, ``r2``, ``b_expected_s_per_byte`` (busbw_factor / B),
    ``b_ratio`` (b / expected), ``sizes`` (how many). None when no group has enough sizes.

    ``sizes``: columns size_bytes, time_us, collective, algorithm, group_size, busbw_factor.
    ``host_link_bps`` in bit/s; ``efficiency``: payload bytes / wire bytes; ``early_finish_s``: how much
    earlier than its serialization an operation may finish (HTB burst + one frame at the host link rate)."""
    if sizes is None or sizes.empty or "busbw_factor" not in sizes:
        return None
    goodput_bytes_s = host_link_bps * efficiency / 8
    out = []
    for (coll, alg, n), g in sizes.groupby(["collective", "algorithm", "group_size"], sort=True):
        g = g.dropna(subset=["time_us"])
        if g["size_bytes"].nunique() < MIN_SIZES:
            continue
        x, y = g["size_bytes"].to_numpy(float), g["time_us"].to_numpy(float) / 1e6
        b, a = np.polyfit(x, y, 1)
        ss_tot = float(((y - y.mean()) ** 2).sum())
        r2 = 1.0 - float(((y - (a + b * x)) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0
        expected = float(g["busbw_factor"].iloc[0]) / goodput_bytes_s
        out.append({"collective": coll, "algorithm": alg, "group_size": int(n), "sizes": int(len(g)),
                    "a_s": float(a), "b_s_per_byte": float(b), "r2": r2, "b_expected_s_per_byte": expected,
                    "b_ratio": float(b) / expected, "a_burst_floor_s": -float(early_finish_s)})
    return out or None


def fit_line(row: dict) -> str:
    """One printed line of a fit row, e.g. ``# fit (ring all-reduce, 8 ranks): T = 12.3 ms + S / 1.23 MB/s ...``."""
    a, floor = row["a_s"], row.get("a_burst_floor_s", 0.0)
    note = ""
    if a < 0:
        note = (f" (a < 0: each operation may end up to {-floor * 1e3:.2f} ms early, HTB's burst + one frame)"
                if a >= floor else f" (a below the {floor * 1e3:.2f} ms HTB burst can explain)")
    return (f"# fit ({row['algorithm']} {row['collective']}, {row['group_size']} ranks, {row['sizes']} sizes): "
            f"T = {a * 1e3:.2f} ms + {row['b_s_per_byte'] * 1e9:.1f} ns/B x S, R^2 {row['r2']:.4f}; "
            f"b / (busbw factor / link goodput) = {row['b_ratio']:.3f}{note}")
