"""Results of a run: tables with units in column names, nccl-tests-style summary, summary.json.

Formulas (nccl-tests doc/PERFORMANCE.md): for an all-reduce of S bytes that
took t seconds on n ranks, algbw = S / t and busbw = algbw * 2(n-1)/n. Here
both are in bit/s. ``busbw_ratio`` = busbw / (host link rate x payload
efficiency), where payload efficiency = payload bytes / frame bytes of a full
data packet (Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + payload + ICRC 4; the
emulated links carry no preamble, FCS or inter-frame gap): 1.0 means the ring
ran at the link's goodput.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def allreduce_busbw_factor(n_ranks: int) -> float:
    """nccl-tests bus bandwidth factor for all-reduce: 2(n-1)/n."""
    return 2.0 * (n_ranks - 1) / n_ranks


def ops_table(rank_rows: list[dict], op_meta: dict[int, dict], n_ranks: int) -> pd.DataFrame:
    """One row per collective operation.

    ``rank_rows``: every rank's op_done record (op_id, rank, t_start_ns,
    t_end_ns); ``op_meta[op_id]``: size_bytes, iteration, warmup.
    Columns: op_id, size_bytes, iteration, warmup, time_us, algbw_bps, busbw_bps.
    The operation's time runs from the first rank's start to the last rank's end.
    """
    df = pd.DataFrame(rank_rows)
    g = df.groupby("op_id").agg(t_start_ns=("t_start_ns", "min"), t_end_ns=("t_end_ns", "max")).reset_index()
    meta = pd.DataFrame([{"op_id": k, **v} for k, v in op_meta.items()])
    out = meta.merge(g, on="op_id")
    out["time_us"] = (out["t_end_ns"] - out["t_start_ns"]) / 1e3
    out["algbw_bps"] = out["size_bytes"] * 8 / (out["time_us"] / 1e6)
    out["busbw_bps"] = out["algbw_bps"] * allreduce_busbw_factor(n_ranks)
    return out.drop(columns=["t_start_ns", "t_end_ns"]).sort_values("op_id").reset_index(drop=True)


def size_table(ops: pd.DataFrame, n_ranks: int, goodput_bps: float) -> pd.DataFrame:
    """nccl-tests-style table per size over the timed (non-warmup) operations.

    Columns: size_bytes, count, time_us (mean, as nccl-tests), algbw_bps,
    busbw_bps (from the mean time), busbw_ratio (busbw / goodput_bps),
    p50_us, p99_us, p999_us (percentiles of per-operation time, linear interpolation).
    """
    timed = ops[~ops["warmup"]]
    rows = []
    for size, g in timed.groupby("size_bytes"):
        t = g["time_us"].to_numpy()
        mean_us = float(t.mean())
        algbw = size * 8 / (mean_us / 1e6)
        busbw = algbw * allreduce_busbw_factor(n_ranks)
        rows.append({"size_bytes": int(size), "count": len(t), "time_us": mean_us, "algbw_bps": algbw,
                     "busbw_bps": busbw, "busbw_ratio": busbw / goodput_bps,
                     "p50_us": float(np.percentile(t, 50)), "p99_us": float(np.percentile(t, 99)),
                     "p999_us": float(np.percentile(t, 99.9))})
    return pd.DataFrame(rows)


def _human_size(n: int) -> str:
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def format_size_table(sizes: pd.DataFrame) -> str:
    """The table as nccl-tests prints it, in Mbit/s and microseconds."""
    head = (f"{'size':>10} {'count':>5} {'time(us)':>11} {'algbw(Mb/s)':>11} {'busbw(Mb/s)':>11} "
            f"{'busbw/link':>10} {'p50(us)':>11} {'p99(us)':>11} {'p99.9(us)':>11}")
    lines = [head]
    for r in sizes.itertuples():
        lines.append(f"{_human_size(r.size_bytes):>10} {r.count:>5} {r.time_us:>11.0f} {r.algbw_bps / 1e6:>11.3f} "
                     f"{r.busbw_bps / 1e6:>11.3f} {r.busbw_ratio:>10.3f} {r.p50_us:>11.0f} {r.p99_us:>11.0f} "
                     f"{r.p999_us:>11.0f}")
    return "\n".join(lines)
