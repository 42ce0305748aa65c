"""Results of a run: tables with units in column names, nccl-tests-style summary, the run directory's state.

Bandwidth (nccl-tests doc/PERFORMANCE.md): for a collective of S bytes that
took t seconds on n ranks, algbw = S / t and busbw = algbw x the factor of
its algorithm (``busbw_factor``; all-reduce 2(n-1)/n, all-gather (n-1)/n, ...:
traffic.collectives). Here both are in bit/s. ``busbw_ratio`` = busbw / (host link rate x payload
efficiency), where payload efficiency = payload bytes / frame bytes of a full
data packet (Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + payload + ICRC 4; the
emulated links carry no preamble, FCS or inter-frame gap): 1.0 means the ring
ran at the link's goodput.

Time of one collective, two ways (both in ``ops.csv`` and ``sizes.csv``):

- ``time_us``: the span, last rank's end minus first rank's start (every rank
  is told to start at once; the operation is over for the job when the last
  rank is done). ``algbw_bps``/``busbw_bps`` come from it.
- ``time_rank_avg_us``: each rank's own time (its end minus its start),
  averaged over the ranks that take part in the op (its groups: with
  ``testbed nccl -g N`` the N ranks, never the idle hosts), as nccl-tests
  reports by default (src/common.cu:
  every rank times its own iterations, then ``Allreduce(args, &deltaSec,
  average)`` with ``-a 1``, the mean over ranks). ``busbw_rank_avg_bps``
  comes from it. It is never above the span.

Percentiles of per-operation time (``p50_us``, ``p99_us``, ``p999_us``) use
the nearest-rank method (Hyndman & Fan 1996, definition 1; numpy
``method="inverted_cdf"``, computed here in exact arithmetic): the p-th
percentile of n sorted samples is the ceil(p/100 * n)-th smallest sample, so it is always one of the samples and
never above the maximum. A percentile needs enough samples to mean anything:
p99 needs 100, p99.9 needs 1000 (:data:`PERCENTILES`); with fewer it is NaN
in ``sizes.csv``, null in ``summary.json`` and ``n<100`` / ``n<1000`` in the
printed table. ``count`` (the number of samples) is next to them everywhere.

Clock: every ``*_ns`` time column of every table is Unix-epoch nanoseconds
from :func:`traffic.clock.unix_ns`, so tables join on time.

Run directory state: :func:`mark_incomplete` writes ``INCOMPLETE`` (the
reason, one line) as soon as the directory exists; :func:`mark_complete`
removes it once ``summary.json`` of a run with every measurement in is
written. A directory with ``INCOMPLETE`` holds partial results (or none).
"""
from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from dataplane.atomic_files import write_csv, write_json, write_text  # noqa: F401  (write_json: RunDir writes through this module)
from traffic import collectives

#: (percentile, column, fewest samples for which it is reported)
PERCENTILES = ((50.0, "p50_us", 1), (99.0, "p99_us", 100), (99.9, "p999_us", 1000))
PERCENTILE_METHOD = "nearest-rank (Hyndman & Fan 1996 def. 1, numpy method='inverted_cdf')"
INCOMPLETE_FILE = "INCOMPLETE"

OPS_COLUMNS = ["op_id", "size_bytes", "iteration", "warmup", "layer", "collective", "algorithm", "group",
               "group_size", "n_groups", "t_start_ns", "t_end_ns", "time_us",
               "time_rank_avg_us", "algbw_bps", "busbw_factor", "busbw_bps", "busbw_rank_avg_bps"]
SIZES_COLUMNS = ["size_bytes", "group_size", "time_us", "algbw_bps", "busbw_bps", "busbw_ratio", "time_rank_avg_us",
                 "busbw_rank_avg_bps", "count"] + [c for _, c, _ in PERCENTILES] + \
    ["collective", "algorithm", "busbw_factor"]


def percentile_us(values, q: float, min_samples: int = 1) -> float:
    """Nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``; NaN with fewer than ``min_samples``.

    Raises ValueError when ``q`` is outside (0, 100].
    """
    if not 0 < q <= 100:
        raise ValueError(f"q={q}: a percentile must be in (0, 100]")
    v = np.sort(np.asarray(values, dtype=float))
    if len(v) < max(1, min_samples):
        return math.nan
    rank = math.ceil(Fraction(str(q)) * len(v) / 100)  # exact: 0.999 * 1000 is 999, not 999.0000000000001
    return float(v[max(rank, 1) - 1])


def ops_table(rank_rows: list, op_meta: dict[int, dict], n_ranks: int) -> pd.DataFrame:
    """One row per collective operation, columns :data:`OPS_COLUMNS`.

    ``rank_rows``: the record of each rank that took part in each op
    (traffic.protocol.OpDone, or mappings with its fields: op_id, rank,
    t_start_ns, t_end_ns, ..., group_size optional); a record with
    ``group_size`` 0 (an agent in none of the op's groups: idle) is no rank
    of the op and is left out. ``op_meta[op_id]``: size_bytes, iteration, warmup, layer, and
    (testbed.workloads.plan.PlannedOp.meta) collective, algorithm, group, group_size,
    n_groups (defaults: allreduce, ring, all, ``n_ranks``, 1). busbw's factor
    is the algorithm's for ``group_size`` g, the ranks of each concurrent
    group (a SimAI TP or DP group, or nccl-tests' ``-g``).
    ``t_start_ns``/``t_end_ns``: first rank's start, last rank's end (Unix ns);
    ``time_us`` is their difference; ``time_rank_avg_us`` the mean over the
    ranks that took part of each rank's own end minus start. Operations without rank records are
    left out; no records gives an empty table with the same columns. With ``job`` in the op_meta (a
    jobs run) a ``job`` column follows; with ``in_place`` (workload.in_place) an ``in_place`` column.
    """
    if not rank_rows or not op_meta:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in OPS_COLUMNS})
    df = pd.DataFrame(rank_rows)
    if "group_size" in df:  # idle agents' records: not ranks of the op (nccl-tests averages over its ranks)
        df = df[df["group_size"].fillna(1).astype(int) != 0]
        if df.empty:
            return pd.DataFrame({c: pd.Series(dtype="float64") for c in OPS_COLUMNS})
    df["rank_time_ns"] = df["t_end_ns"] - df["t_start_ns"]
    g = df.groupby("op_id").agg(t_start_ns=("t_start_ns", "min"), t_end_ns=("t_end_ns", "max"),
                                rank_time_ns=("rank_time_ns", "mean")).reset_index()
    meta = pd.DataFrame([{"op_id": k, "layer": "", "collective": collectives.DEFAULT_COLLECTIVE,
                          "algorithm": collectives.DEFAULT_ALGORITHM, "group": "all",
                          "group_size": n_ranks, "n_groups": 1, **v} for k, v in op_meta.items()])
    out = meta.merge(g, on="op_id")
    out["busbw_factor"] = [collectives.busbw_factor(c, a, int(n)) for c, a, n in
                           zip(out["collective"], out["algorithm"], out["group_size"])]
    factor = out["busbw_factor"]
    out["time_us"] = (out["t_end_ns"] - out["t_start_ns"]) / 1e3
    out["time_rank_avg_us"] = out["rank_time_ns"] / 1e3
    out["algbw_bps"] = out["size_bytes"] * 8 / (out["time_us"] / 1e6)
    out["busbw_bps"] = out["algbw_bps"] * factor
    out["busbw_rank_avg_bps"] = out["size_bytes"] * 8 / (out["time_rank_avg_us"] / 1e6) * factor
    jobs_run = "job" in out and out["job"].fillna("").astype(bool).any()
    cols = OPS_COLUMNS + (["job"] if jobs_run else [])  # runs of a jobs list: each op's job
    if "in_place" in out:  # nccl-tests' in-place half ran (workload.in_place): which ops are its
        out["in_place"] = out["in_place"].fillna(False).astype(bool)
        cols.append("in_place")
    return out[cols].sort_values("op_id").reset_index(drop=True)


def size_table(ops: pd.DataFrame, n_ranks: int, goodput_bps: float) -> pd.DataFrame:
    """nccl-tests-style table per collective, algorithm, size and group size over the timed operations.

    Columns :data:`SIZES_COLUMNS`; ops of one size over groups of different
    sizes (``group_size``, default ``n_ranks``) or by different algorithms are
    separate rows, each with its algorithm's busbw factor for g ranks
    (``busbw_factor``).

    ``time_us`` and ``time_rank_avg_us`` are means over the operations (as
    nccl-tests averages its iterations); algbw/busbw come from those means;
    ``busbw_ratio`` = busbw / ``goodput_bps``; ``count`` = operations (the
    percentiles' sample count); p50/p99/p99.9 as in the module docstring.
    """
    timed = ops[~ops["warmup"].astype(bool)] if len(ops) else ops
    defaults = {"group_size": n_ranks, "collective": collectives.DEFAULT_COLLECTIVE,
                "algorithm": collectives.DEFAULT_ALGORITHM}
    timed = timed.assign(**{k: v for k, v in defaults.items() if k not in timed.columns})
    rows = []
    for (collective, algorithm, size, group_size), g in timed.groupby(["collective", "algorithm", "size_bytes",
                                                                        "group_size"]):
        factor = collectives.busbw_factor(collective, algorithm, int(group_size))
        t = g["time_us"].to_numpy(dtype=float)
        mean_us, rank_avg_us = float(t.mean()), float(g["time_rank_avg_us"].mean())
        algbw = size * 8 / (mean_us / 1e6)
        row = {"size_bytes": int(size), "group_size": int(group_size), "time_us": mean_us, "algbw_bps": algbw,
               "busbw_bps": algbw * factor,
               "busbw_ratio": algbw * factor / goodput_bps, "time_rank_avg_us": rank_avg_us,
               "busbw_rank_avg_bps": size * 8 / (rank_avg_us / 1e6) * factor, "count": len(t),
               "collective": collective, "algorithm": algorithm, "busbw_factor": factor}
        for q, col, need in PERCENTILES:
            row[col] = percentile_us(t, q, need)
        rows.append(row)
    return pd.DataFrame(rows, columns=SIZES_COLUMNS)


def size_rows_json(sizes: pd.DataFrame) -> list[dict]:
    """``sizes`` as summary.json rows: same keys as sizes.csv, ints for size_bytes/count, null for NaN."""
    out = []
    for row in sizes.to_dict("records"):
        out.append({k: (int(v) if k in ("size_bytes", "group_size", "count") else
                        v if isinstance(v, str) else None if math.isnan(v) else float(v))
                    for k, v in row.items()})
    return out


def _human_size(n: int) -> str:
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def _pct_cell(v: float, need: int) -> str:
    return f"n<{need}" if math.isnan(v) else f"{v:.0f}"


def job_size_table(ops: pd.DataFrame, n_ranks: int, goodput_bps: float) -> pd.DataFrame:
    """:func:`size_table` of each job of a jobs run's ``ops`` (:func:`ops_table` with its ``job`` column), jobs
    in the order of their first op: columns ``job`` then :data:`SIZES_COLUMNS` (the printed table of a jobs
    run; sizes.csv keeps one row per size over all jobs, jobs.csv one per job and size)."""
    first = ops.sort_values("op_id").drop_duplicates("job")["job"] if len(ops) else []
    frames = [size_table(ops[ops["job"] == job], n_ranks, goodput_bps).assign(job=job) for job in first]
    if not frames:
        return size_table(ops, n_ranks, goodput_bps).assign(job="")[["job", *SIZES_COLUMNS]]
    return pd.concat(frames, ignore_index=True)[["job", *SIZES_COLUMNS]]


def format_size_table(sizes: pd.DataFrame) -> str:
    """The table as nccl-tests prints it, in Mbit/s and microseconds.

    ``ranks`` is the group size of each ring (all hosts unless a SimAI entry
    is group-scoped); ``time`` is the span (first start to last end), ``avg`` the per-rank
    average time (nccl-tests' own); ``n`` is the sample count of the
    percentiles that follow it; a percentile without enough samples prints
    ``n<100`` / ``n<1000``. With a ``job`` column (:func:`job_size_table`) each row starts with its job,
    the column as wide as the longest name.
    """
    job_w = max([3, *(len(str(j)) for j in sizes["job"])]) if "job" in sizes.columns else 0
    head = ((f"{'job':<{job_w}} " if job_w else "")
            + f"{'size':>10} {'ranks':>5} {'time(us)':>10} {'algbw(Mb/s)':>11} {'busbw(Mb/s)':>11} {'busbw/link':>10} "
            f"{'avg(us)':>10} {'avg busbw':>10} {'n':>5} {'p50(us)':>10} {'p99(us)':>10} {'p99.9(us)':>10}")
    lines = [head]
    for r in sizes.itertuples():
        pcts = " ".join(f"{_pct_cell(getattr(r, col), need):>10}" for _, col, need in PERCENTILES)
        lines.append((f"{r.job:<{job_w}} " if job_w else "")
                     + f"{_human_size(r.size_bytes):>10} {r.group_size:>5} {r.time_us:>10.0f} "
                     f"{r.algbw_bps / 1e6:>11.3f} {r.busbw_bps / 1e6:>11.3f} {r.busbw_ratio:>10.3f} {r.time_rank_avg_us:>10.0f} "
                     f"{r.busbw_rank_avg_bps / 1e6:>10.3f} {r.count:>5} {pcts}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# The run directory
# ---------------------------------------------------------------------------
def write_tables(run, n: int, goodput_bps: float, rank_rows: list, op_meta: dict[int, dict],
                 stats: list, ports: pd.DataFrame | None, cpu: pd.DataFrame | None):
    """Write rank_ops, ops, sizes (always), qps and msgs (when agent ``stats`` are in; with them qp_rates,
    cnp_events and pfc_rx when they have rows), ports and cpu (when sampled: not None) into ``run``
    (testbed.results.rundir.RunDir); return (ops, sizes, qps, msgs, ports, cpu) as DataFrames. ``stats``:
    each agent's traffic.protocol.Stats (``qp_rows()``, ``msg_rows()``, ``rate_rows()``, ``cnp_rows()``,
    ``pfc_rows()``).

    ``msgs.fct_us`` = t_acked_ns - t_post_ns in us, NaN for a message never acknowledged.
    """
    ops = ops_table(rank_rows, op_meta, n)
    sizes = size_table(ops, n, goodput_bps)
    run.write_table("rank_ops", pd.DataFrame(rank_rows).drop(columns=["event"], errors="ignore"))
    run.write_table("ops", ops)
    run.write_table("sizes", sizes)
    qps = pd.DataFrame([q for s in stats for q in s.qp_rows()]).convert_dtypes()
    msgs = pd.DataFrame([m for s in stats for m in s.msg_rows()])
    if not msgs.empty:
        msgs["fct_us"] = ((msgs["t_acked_ns"] - msgs["t_post_ns"]) / 1e3).where(msgs["t_acked_ns"] > 0)
    if stats:
        run.write_table("qps", qps)
        run.write_table("msgs", msgs)
        rates = [r for s in stats for r in s.rate_rows()]
        if rates:  # congestion controls that change a QP's rate (DCQCN): every change
            run.write_table("qp_rates", pd.DataFrame(rates))
        cnps = [r for s in stats for r in s.cnp_rows()]
        if cnps:  # DCQCN: every CNP's send at its notification point and arrival at its reaction point
            run.write_table("cnp_events", pd.DataFrame(cnps))
        pfc_rx = [r for s in stats for r in s.pfc_rows()]
        if pfc_rx:  # PFC frames the hosts' NICs received (traffic.transport.pfc_rx)
            run.write_table("pfc_rx", pd.DataFrame(pfc_rx))
    for name, frame in (("ports", ports), ("cpu", cpu)):
        if frame is not None:
            run.write_table(name, frame)
    return (ops, sizes, qps, msgs, ports if ports is not None else pd.DataFrame(),
            cpu if cpu is not None else pd.DataFrame())


def mark_incomplete(run_dir: Path, reason: str) -> None:
    """Write ``run_dir/INCOMPLETE`` holding ``reason`` (one line)."""
    write_text(Path(run_dir) / INCOMPLETE_FILE, reason.rstrip("\n") + "\n")


def mark_complete(run_dir: Path) -> None:
    """Remove ``run_dir/INCOMPLETE`` (no error if absent)."""
    (Path(run_dir) / INCOMPLETE_FILE).unlink(missing_ok=True)
