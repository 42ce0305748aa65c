"""nccl-tests' table and JSON (``testbed nccl``, or ``output.table: nccl`` in a scenario).

The layout followed is nccl-tests 2.19.6's (:data:`NCCL_TESTS_VERSION`:
NVIDIA/nccl-tests src/common.h ``NCCL_TESTS_VERSION``, read at tag v2.19.6).
The table is nccl-tests' own (src/util.cu ``writeDeviceReport``,
``writeResultHeader``, ``writeBenchmarkLinePreamble``,
``writeBenchmarkLineBody``, ``writePerIterReport``, ``writeResultFooter``).
Its preamble starts, as nccl-tests 2.x does, with the version line, here
saying what this is: ``# nccl-tests version 2.19.6 nccl-headers=0
nccl-library=0 (testbed emulation: no NCCL library)`` (0: no NCCL, as the
JSON's ``nccl_version``); then ``# Collective test starting: PROGRAM`` and
the options line ``# nThread 1 nGpus 1 minBytes B maxBytes E step: F(factor)
... iters: N ...`` with the ``-b``/``-e``/``-f``/``-i`` given, as nccl-tests
prints them (:func:`preamble_sizes`). Per size

    size (B)  count (elements)  type  redop  root
    | time (us)  algbw (GB/s)  busbw (GB/s)  #wrong [i_min i_max i_p99 (us) i_cv% (%)]   out-of-place
    | time (us)  algbw (GB/s)  busbw (GB/s)  #wrong [i_min i_max i_p99 (us) i_cv% (%)]   in-place

with the same field widths and number formats (``getFloatStr``), so a
script splitting rows on whitespace reads them as it reads nccl-tests'. Every
other line starts with ``#``; the footer keeps nccl-tests' wording
(``# Out of bounds values : 0 OK``, ``# Avg bus bandwidth    : X``, the mean
busbw over every size and both halves, GB/s).

What the columns hold here:

- ``size``, ``count``: the bytes the collective ran (nccl-tests' S, which
  ``testbed nccl`` sizes as nccl-tests does: :func:`nccl_size`) and
  nccl-tests' ``count``, the ``count`` argument of the NCCL call
  (``*GetCollByteCount``'s paramcount): S / element size for all-reduce,
  broadcast, send/recv; S / (n x element size), each rank's share, for
  all-gather, reduce-scatter and all-to-all (:func:`nccl_count`).
- ``type`` (``-d``, default float) and ``redop`` (``-o``, default sum; ``none``
  for the collectives that do not reduce, as nccl-tests prints; send/recv
  prints the op, as src/sendrecv.cu does); ``root`` 0 for broadcast, -1 otherwise.
- ``time``: nccl-tests' time, each rank's own time averaged over the ranks
  and the timed iterations (``-a 1``), in microseconds **of the reference
  system**: the emulated time divided by the run's scale factor
  (reference_link_bps / host_link_bps; the dilation undone). ``algbw`` =
  S / time and ``busbw`` = algbw x the algorithm's factor (nccl-tests
  ``*GetBw``), GB/s (1e9 bytes/s), the same reference system. The emulated
  figures (time, span, Mbit/s, busbw/link) are in ``#`` lines after the table.
- in-place: with ``workload.in_place`` (``testbed nccl`` sets it) every size
  runs its ``-n`` timed iterations twice, out-of-place then in-place, as
  nccl-tests does. Over the network both move the same bytes (in-place only
  changes where the GPU reads and writes), so the in-place half is a second,
  independent measurement of the same traffic. Without in-place ops the
  in-place fields print ``N/A``.
- ``#wrong``: ``N/A``, as nccl-tests prints with ``-c 0``: the transport
  moves payload bytes, not values, so there is no result to compare element
  by element; every byte's exactly-once delivery is checked instead (the
  ``# transport`` line; a mismatch fails the run, exit code 4).
- ``-I 1`` (``output.nccl.per_iter``): per half ``i_min i_max i_p99 i_cv%``
  over the per-iteration times, each the slowest rank's own time of that
  iteration (nccl-tests: the max over process rows); statistics as util.cu
  ``computeIterStats`` (p50 = sorted[n/2], pXX = sorted[min(n-1, ceil(n p/100)-1)],
  population standard deviation).

The JSON (``-J``, :func:`nccl_json`) has the keys and nesting of util.cu's
writer (version 3): version, start_time, args, env, nccl_version, config
(with devices: one per rank, hostname = the rank's host), results (size,
count, type, redop, root, out_of_place {time, alg_bw, bus_bw, nwrong},
out_of_place_per_iter {skipped_iterations, min_us, max_us, avg_us, p50_us,
p95_us, p99_us, stdev_us, cv_pct, times_us, per_process_max_times_us},
in_place, in_place_per_iter, actual_iterations, experiment_name),
out_of_bounds, average_bus_bandwidth, errors, end_time; what
tools/analyze_perf_json.py reads. A ``testbed`` object adds the scale factor
and the emulated link.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from testbed.spec.controller import NCCL_TYPE_BYTES
from traffic import collectives

#: nccl-tests' binary per collective (the "# Collective test starting:" line)
PROGRAMS = {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf", "reducescatter": "reduce_scatter_perf",
            "alltoall": "alltoall_perf", "broadcast": "broadcast_perf", "sendrecv": "sendrecv_perf"}
#: collectives whose redop column is the op (all_reduce.cu, reduce_scatter.cu, sendrecv.cu pass opName)
WITH_OP = {"allreduce", "reducescatter", "sendrecv"}
ROOTED = {"broadcast"}
#: count = each rank's share S / (n x element): *GetCollByteCount's paramcount = (count/nranks) aligned to 16 B
PER_RANK_COUNT = {"allgather", "reducescatter", "alltoall"}
JSON_FILE_VERSION = 3
#: the nccl-tests release whose output layout is followed (src/common.h NCCL_TESTS_VERSION at tag v2.19.6)
NCCL_TESTS_VERSION = "2.19.6"
#: nccl-tests' default -i (src/common.cu ``stepBytes = 1*1024*1024``)
NCCL_TESTS_STEP_BYTES = 1 << 20


def nccl_size(collective: str, nbytes: int, n: int, element_bytes: int) -> int:
    """The bytes nccl-tests runs for a ``-b``/``-e`` step of ``nbytes`` on ``n`` ranks (src/common.cu
    setupArgs, then the size column = max(sendBytes, expectedBytes)): all-gather, reduce-scatter and
    all-to-all take each rank's share (nbytes / element / n) rounded down to a multiple of 16 bytes
    (``base = (count/nranks) & ~(16/eltSize - 1)``) and run n shares; the others nbytes rounded down to
    whole elements. 0 when ``nbytes`` is too small for one aligned share per rank."""
    count = nbytes // element_bytes
    if collective in PER_RANK_COUNT:
        base = (count // n) & ~(16 // element_bytes - 1)
        return base * n * element_bytes
    return count * element_bytes


def nccl_count(collective: str, size_bytes: int, n: int, element_bytes: int) -> int:
    """nccl-tests' ``count`` column for a collective of ``size_bytes`` (S) on ``n`` ranks: the count argument
    of the NCCL call, S / (n x element) for all-gather, reduce-scatter, all-to-all, else S / element
    (floor division when S is not a whole number of them)."""
    return size_bytes // (element_bytes * (n if collective in PER_RANK_COUNT else 1))


def float_cell(value: float, width: int) -> str:
    """``value`` in ``width`` characters as nccl-tests' util.cu ``getFloatStr``: %.2f, else %.1f, else %.0f
    if it fits, else %.1e (width >= 7) or %.0e, cut to ``width``."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        s = fmt % (width, value)
        if len(s) <= width:
            return s
    return (("%*.1e" if width >= 7 else "%*.0e") % (width, value))[:width]


def iter_stats(times_us: list[float], skip: int = 0) -> dict:
    """util.cu ``computeIterStats`` over ``times_us[skip:]``: min, max, avg, p50 (sorted[n/2]), p95, p99
    (sorted[min(n-1, (n p + 99)/100 - 1)]), population stdev, cv_pct = stdev / avg x 100; all us but cv."""
    v = sorted(times_us[skip:])
    n = len(v)
    pct = lambda p: v[min(n - 1, (n * p + 99) // 100 - 1)]  # noqa: E731
    avg = sum(v) / n
    stdev = math.sqrt(sum((x - avg) ** 2 for x in v) / n)
    return {"skipped_iterations": skip, "min_us": v[0], "max_us": v[-1], "avg_us": avg, "p50_us": v[n // 2],
            "p95_us": pct(95), "p99_us": pct(99), "stdev_us": stdev, "cv_pct": stdev / avg * 100 if avg > 0 else 0.0}


@dataclass
class Half:
    """One half (out-of-place or in-place) of a size: nccl-tests' figures on the reference system and the
    emulated ones they come from."""

    time_us: float              # reference us: mean over ops of the per-rank mean time, / scale factor
    algbw_gbs: float            # size / time, 1e9 B/s
    busbw_gbs: float            # algbw x factor
    iters: int                  # timed iterations
    times_us: list = field(default_factory=list)        # per iteration: the slowest rank's own time, reference us
    rank_times_us: list = field(default_factory=list)   # [rank][iteration], reference us
    emulated_time_us: float = 0.0   # the same time, emulated us
    span_us: float = 0.0            # mean first-start-to-last-end, emulated us
    busbw_bps: float = 0.0          # emulated busbw from time, bit/s
    span_busbw_bps: float = 0.0     # emulated busbw from the span, bit/s


@dataclass
class Row:
    """One size of one collective: the preamble columns and both halves (``in_place`` None: not run)."""

    collective: str
    algorithm: str
    group_size: int
    size_bytes: int
    count: int
    type: str
    redop: str
    root: int
    out_of_place: Half
    in_place: Half | None


def _half(ops: pd.DataFrame, rank_ops: pd.DataFrame | None, scale: float) -> Half:
    factor = float(ops["busbw_factor"].iloc[0])
    size = int(ops["size_bytes"].iloc[0])
    emul_us = float(ops["time_rank_avg_us"].mean())
    ref_us = emul_us / scale
    algbw = size / (ref_us / 1e6) / 1e9
    span_us = float(ops["time_us"].mean())
    half = Half(time_us=ref_us, algbw_gbs=algbw, busbw_gbs=algbw * factor, iters=len(ops), emulated_time_us=emul_us,
                span_us=span_us, busbw_bps=size * 8 / (emul_us / 1e6) * factor,
                span_busbw_bps=size * 8 / (span_us / 1e6) * factor)
    if rank_ops is not None and len(rank_ops):
        mine = rank_ops[rank_ops["op_id"].isin(ops["op_id"])]
        mine = mine.assign(t_us=(mine["t_end_ns"] - mine["t_start_ns"]) / 1e3 / scale)
        grid = mine.pivot_table(index="rank", columns="op_id", values="t_us", aggfunc="max")
        grid = grid[sorted(grid.columns)]
        half.rank_times_us = [[float(x) for x in grid.loc[r]] for r in sorted(grid.index)]
        half.times_us = [float(x) for x in grid.max(axis=0)]
    return half


def nccl_rows(ops: pd.DataFrame, rank_ops: pd.DataFrame | None, scale_factor: float, datatype: str = "float",
              op: str = "sum") -> list[Row]:
    """nccl-tests' rows from a run's ``ops`` (testbed.results.tables.ops_table: timed ops, with an
    ``in_place`` column when the in-place half ran) and ``rank_ops`` (rank_ops.csv: op_id, rank,
    t_start_ns, t_end_ns; None: no per-iteration times). One row per collective, algorithm, group size
    and size in run order; ``scale_factor``: reference_link_bps / host_link_bps (times divided by it)."""
    if ops is None or not len(ops):
        return []
    timed = ops[~ops["warmup"].astype(bool)]
    if rank_ops is not None and len(rank_ops) and "group_size" in rank_ops:
        rank_ops = rank_ops[rank_ops["group_size"].fillna(1).astype(int) != 0]
    in_place = timed["in_place"].astype(bool) if "in_place" in timed else pd.Series(False, index=timed.index)
    elt = NCCL_TYPE_BYTES[datatype]
    rows = []
    keys = ["collective", "algorithm", "group_size", "size_bytes"]
    for (c, a, n, size), g in timed.assign(_ip=in_place).groupby(keys, sort=False):
        oop, ip = g[~g["_ip"]], g[g["_ip"]]
        if not len(oop):
            continue
        rows.append(Row(c, a, int(n), int(size), nccl_count(c, int(size), int(n), elt), datatype,
                        op if c in WITH_OP else "none", 0 if c in ROOTED else -1,
                        _half(oop, rank_ops, scale_factor), _half(ip, rank_ops, scale_factor) if len(ip) else None))
    return rows


def run_rows(ctx) -> list[Row]:
    """:func:`nccl_rows` of the run in ``ctx.run_dir`` (testbed.pipeline.context.RunContext), from the ops and
    rank_ops tables it wrote, with the scenario's ``output.nccl`` type and op."""
    from testbed.results.rundir import RunDir

    run, o = RunDir(ctx.run_dir), ctx.spec.output.nccl
    return nccl_rows(run.table("ops"), run.table("rank_ops"), ctx.spec.scale_factor, o.datatype, o.op)


def write_run_json(ctx, argv=None) -> Path:
    """Write nccl-tests' JSON of the run in ``ctx`` to its ``output.nccl.json_path`` (:func:`write_nccl_json`:
    an existing file is never replaced); returns the path written."""
    from testbed.results.rundir import RunDir

    spec, o = ctx.spec, ctx.spec.output.nccl
    w = spec.workload
    doc = nccl_json(run_rows(ctx), scale_factor=spec.scale_factor, host_link_bps=spec.fabric.host_link_bps,
                    argv=o.argv if argv is None else argv, hosts=RunDir(ctx.run_dir).host_names,
                    warmup_iters=w.warmup_iterations if w is not None else 0, per_iter=o.per_iter,
                    per_iter_skip=o.per_iter_skip, start_time=_start_time(getattr(ctx, "started_utc", "")),
                    run_dir=str(ctx.run_dir), given=o)
    return write_nccl_json(o.json_path, doc)


def avg_bus_bandwidth(rows: list[Row]) -> float:
    """nccl-tests' ``# Avg bus bandwidth``: the mean busbw (GB/s) over every size and both halves that ran
    (common.cu: ``bw[0] += busBw`` per BenchTime, then ``/= bw_count``); NaN without rows."""
    bw = [h.busbw_gbs for r in rows for h in (r.out_of_place, r.in_place) if h is not None]
    return sum(bw) / len(bw) if bw else math.nan


def _body(h: Half | None, per_iter: bool, skip: int) -> str:
    if h is None:
        out = "  %7s  %6s  %6s  %6s" % ("N/A", "N/A", "N/A", "N/A")
        return out + ("  %7s  %7s  %7s  %7s" % ("N/A", "N/A", "N/A", "N/A") if per_iter else "")
    out = "  %7s  %6s  %6s    N/A" % (float_cell(h.time_us, 7), float_cell(h.algbw_gbs, 6), float_cell(h.busbw_gbs, 6))
    if per_iter:
        if h.times_us:
            s = iter_stats(h.times_us, min(skip, len(h.times_us) - 1))
            out += "  %7s  %7s  %7s  %7s" % (float_cell(s["min_us"], 7), float_cell(s["max_us"], 7),
                                             float_cell(s["p99_us"], 7), float_cell(s["cv_pct"], 7))
        else:
            out += "  %7s  %7s  %7s  %7s" % ("N/A", "N/A", "N/A", "N/A")
    return out


def row_line(r: Row, per_iter: bool = False, skip: int = 0) -> str:
    """One row as nccl-tests prints it (util.cu writeBenchmarkLinePreamble + two writeBenchmarkLineBody)."""
    pre = "%12d  %12d  %8s  %6s  %6s" % (r.size_bytes, r.count, r.type, r.redop, "%6d" % r.root)
    return pre + _body(r.out_of_place, per_iter, skip) + _body(r.in_place, per_iter, skip)


def header_lines(per_iter: bool = False) -> list[str]:
    """util.cu writeResultHeader's lines (no timestamps, ``time`` not ``cputime``)."""
    pre = "# %10s  %12s  %8s  %6s  %6s"
    if per_iter:
        cols = "  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s" * 2 + " %s"
        return ["#", (pre % ("", "", "", "", "")) + "              out-of-place (+ per-iteration)"
                "                                in-place (+ per-iteration)",
                (pre + cols) % ("size", "count", "type", "redop", "root",
                                *("time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%") * 2, ""),
                (pre + cols) % ("(B)", "(elements)", "", "", "",
                                *("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)") * 2, "")]
    cols = "  %7s  %6s  %6s  %6s" * 2 + " %s"
    return ["#", (pre % ("", "", "", "", "")) + "           out-of-place                       in-place          ",
            (pre + cols) % ("size", "count", "type", "redop", "root", *("time", "algbw", "busbw", "#wrong") * 2, ""),
            (pre + cols) % ("(B)", "(elements)", "", "", "", *("(us)", "(GB/s)", "(GB/s)", "") * 2, "")]


def program_name(rows: list[Row]) -> str:
    """nccl-tests' binary for the rows' collective (``all_reduce_perf``...); the testbed's name otherwise."""
    names = dict.fromkeys(r.collective for r in rows)
    return ", ".join(PROGRAMS.get(c, f"{c} (testbed; no nccl-tests binary)") for c in names) or "none"


def _step(sizes: list[int]) -> tuple[int, str]:
    if len(sizes) > 1 and all(b % a == 0 for a, b in zip(sizes, sizes[1:])) and \
            len({b // a for a, b in zip(sizes, sizes[1:])}) == 1:
        return sizes[1] // sizes[0], "factor"
    return (sizes[1] - sizes[0] if len(sizes) > 1 else 0), "bytes"


def preamble_sizes(rows: list[Row], given=None) -> tuple[int, int, int, str]:
    """(minBytes, maxBytes, step, "factor" or "bytes") as the ``# nThread`` line and the JSON ``config`` report
    them. ``given``: an object with nccl-tests' options as given, ``min_bytes`` (-b), ``max_bytes`` (-e),
    ``step_factor`` (-f), ``step_bytes`` (-i) (testbed.spec.controller.NcclOutputSpec; each None when not
    given). As nccl-tests (src/util.cu writeDeviceReport: ``(stepFactor > 1) ? stepFactor : stepBytes``,
    "factor" or "bytes"): -b and -e as given, not the sizes they made; the factor when above 1, else the step
    bytes (nccl-tests' default -i of 1 MiB when only -f is given). Without -b/-e the smallest and largest
    size run; without -f and -i the step of the sizes run (their common ratio, else the first difference)."""
    sizes = [r.size_bytes for r in rows]
    lo, hi, factor, step_bytes = (getattr(given, k, None) for k in ("min_bytes", "max_bytes", "step_factor",
                                                                     "step_bytes"))
    lo = min(sizes, default=0) if lo is None else int(lo)
    hi = max(sizes, default=0) if hi is None else int(hi)
    if factor is None and step_bytes is None:
        return (lo, hi, *_step(sizes))
    if factor is not None and factor > 1:
        return lo, hi, int(factor), "factor"
    return lo, hi, NCCL_TESTS_STEP_BYTES if step_bytes is None else int(step_bytes), "bytes"


def version_line() -> str:
    """nccl-tests 2.x's first line (util.cu writeDeviceReport: ``# nccl-tests version V nccl-headers=H
    nccl-library=L``) in its shape, saying what this is: the layout's version, 0 for NCCL's (none here)."""
    return (f"# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers=0 nccl-library=0 "
            "(testbed emulation: no NCCL library)")


def format_nccl_table(rows: list[Row], *, scale_factor: float, host_link_bps: float, goodput_bps: float,
                      hosts: dict[int, str] | None = None, warmup_iters: int = 0, per_iter: bool = False,
                      per_iter_skip: int = 0, given=None, title: str | None = None) -> str:
    """nccl-tests' output for ``rows`` (module docstring): its ``#`` preamble (version line, the caller's
    ``title`` line if any (it must start with ``#``), test line,
    options line with the -b/-e/-f/-i ``given`` (:func:`preamble_sizes`), the per-rank "Using devices"
    lines with the ranks' hosts), the header, one row per size, its footer; then the testbed's own ``#``
    lines: the scale factor and, per size and half, the emulated time, span, busbw (Mbit/s) and
    busbw/link (span busbw / ``goodput_bps``)."""
    n_ranks = max((r.group_size for r in rows), default=0)
    lo, hi, step, kind = preamble_sizes(rows, given)
    iters = rows[0].out_of_place.iters if rows else 0
    prog = program_name(rows)
    out = [version_line(), *([title] if title else []), f"# Collective test starting: {prog}",
           f"# nThread 1 nGpus 1 minBytes {lo} maxBytes {hi} step: {step}({kind}) "
           f"warmup iters: {warmup_iters} iters: {iters} agg iters: 1 validation: 0 graph: 0 unalign: 0"]
    if per_iter:
        out.append("# Per-Iteration Report: each rank's own time per iteration; i_* uses max over ranks"
                   + (f"; summary skips first {per_iter_skip} iterations" if per_iter_skip else "") + " ")
    out += ["#", "# Using devices"]
    hosts = hosts or {}
    out += ["#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s"
            % (r, 0, 0, hosts.get(r, f"h{r + 1}"), 0, 0, 0, 0, "emulated host (testbed)") for r in range(n_ranks)]
    out += header_lines(per_iter)
    out += [row_line(r, per_iter, per_iter_skip) for r in rows]
    avg = avg_bus_bandwidth(rows)
    out += ["# %-20s : %d %s" % ("Out of bounds values", 0, "OK"),
            "# %-20s : %g %s" % ("Avg bus bandwidth", avg, ""), "#", f"# Collective test concluded: {prog}", "#"]
    out += testbed_lines(rows, scale_factor, host_link_bps, goodput_bps)
    return "\n".join(out)


def testbed_lines(rows: list[Row], scale_factor: float, host_link_bps: float, goodput_bps: float) -> list[str]:
    """The testbed's ``#`` lines after nccl-tests' table: what the figures mean, then per size and half the
    emulated figures (time, span, busbw in Mbit/s, busbw/link from the span)."""
    out = [f"# testbed: times and bandwidths above are the reference system's: emulated time / scale factor "
           f"{scale_factor:g} (reference_link_bps / host_link_bps, host link {host_link_bps / 1e6:g} Mbit/s); "
           f"#wrong N/A: no data check (bytes, not values, are moved; every byte's exactly-once delivery is "
           f"checked: the transport line); in-place = a second set of the same iterations (the same traffic)"]
    for (c, a, n), _ in pd.DataFrame([(r.collective, r.algorithm, r.group_size) for r in rows]).groupby(
            [0, 1, 2], sort=False) if rows else ():
        alg = collectives.get(c, a)
        out.append(f"# testbed: {alg.title}, {n} ranks: {alg.collective.size_convention}; "
                   f"busbw = algbw x {alg.busbw_factor_text}")
    out.append("# testbed: emulated %12s  %6s  %12s  %12s  %12s  %10s" % ("size(B)", "half", "time(us)", "span(us)",
                                                                           "busbw(Mb/s)", "busbw/link"))
    for r in rows:
        for name, h in (("oop", r.out_of_place), ("ip", r.in_place)):
            if h is not None:
                out.append("# testbed: emulated %12d  %6s  %12.0f  %12.0f  %12.3f  %10.3f"
                           % (r.size_bytes, name, h.emulated_time_us, h.span_us, h.busbw_bps / 1e6,
                              h.span_busbw_bps / goodput_bps))
    return out


# ---------------------------------------------------------------------------
# JSON (-J)
# ---------------------------------------------------------------------------
def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())


def _start_time(stamp: str) -> str | None:
    """RunContext.started_utc (``YYYYmmddTHHMMSSZ``) in util.cu's TIME_STRING_FORMAT (here UTC); None if absent."""
    from datetime import datetime

    try:
        return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError):
        return None


def _per_iter(h: Half, skip: int) -> dict:
    out = iter_stats(h.times_us, min(skip, len(h.times_us) - 1))
    out["times_us"] = list(h.times_us)
    if len(h.rank_times_us) > 1:  # util.cu writes the process rows when there is more than one process
        out["per_process_max_times_us"] = [list(t) for t in h.rank_times_us]
    return out


def _body_json(h: Half) -> dict:
    return {"time": h.time_us, "alg_bw": h.algbw_gbs, "bus_bw": h.busbw_gbs, "nwrong": None}


def nccl_json(rows: list[Row], *, scale_factor: float, host_link_bps: float, argv=(), hosts=None,
              warmup_iters: int = 0, per_iter: bool = False, per_iter_skip: int = 0, start_time: str | None = None,
              run_dir: str | None = None, given=None) -> dict:
    """nccl-tests' JSON document for ``rows`` (util.cu's keys and nesting, version 3; module docstring).
    ``nwrong`` is null (no data check, as nccl-tests with -c 0); its bools are the strings "true"/"false"
    as util.cu's ``jsonBool`` writes them; ``config``'s sizes and step are the -b/-e/-f/-i ``given``
    (:func:`preamble_sizes`)."""
    lo, hi, step, kind = preamble_sizes(rows, given)
    n_ranks = max((r.group_size for r in rows), default=0)
    hosts = hosts or {}
    tf = lambda b: "true" if b else "false"  # noqa: E731  util.cu jsonBool
    config = {"nthreads": 1, "ngpus": 1, "minimum_bytes": lo, "maximum_bytes": hi,
              ("step_factor" if kind == "factor" else "step_bytes"): step, "warmup_iters": warmup_iters,
              "iterations": rows[0].out_of_place.iters if rows else 0, "aggregated_iterations": 1, "validation": 0,
              "graph": 0, "blocking_collectives": tf(False), "per_iter_timing": tf(per_iter),
              "per_iter_skip": per_iter_skip, "parallel_init": tf(False),
              "devices": [{"rank": r, "group": 0, "pid": 0, "hostname": hosts.get(r, f"h{r + 1}"), "device": 0,
                           "device_hex": "0000:00:00", "device_info": "emulated host (testbed)"}
                          for r in range(n_ranks)]}
    results = []
    for r in rows:
        item = {"size": r.size_bytes, "count": r.count, "type": r.type, "redop": r.redop, "root": "%6d" % r.root,
                "out_of_place": _body_json(r.out_of_place)}
        if per_iter and r.out_of_place.times_us:
            item["out_of_place_per_iter"] = _per_iter(r.out_of_place, per_iter_skip)
        item["in_place"] = _body_json(r.in_place) if r.in_place is not None else None
        if per_iter and r.in_place is not None and r.in_place.times_us:
            item["in_place_per_iter"] = _per_iter(r.in_place, per_iter_skip)
        item.update(actual_iterations=r.out_of_place.iters, experiment_name="")
        results.append(item)
    avg = avg_bus_bandwidth(rows)
    return {"version": JSON_FILE_VERSION, "start_time": start_time or _now(), "args": list(argv), "env": [],
            "nccl_version": 0, "config": config, "results": results,
            "out_of_bounds": {"count": 0, "okay": tf(True)},
            "average_bus_bandwidth": {"bandwidth": "nan" if math.isnan(avg) else avg, "okay": "unchecked"},
            "errors": [], "end_time": _now(),
            "testbed": {"nccl_tests_layout": NCCL_TESTS_VERSION, "nccl_library": None,
                        "scale_factor": scale_factor, "host_link_bps": host_link_bps, "run_dir": run_dir,
                        "times": "reference system: emulated time / scale_factor", "nwrong": "no data check"}}


def write_nccl_json(path: str | os.PathLike, doc: dict) -> Path:
    """Write ``doc`` to ``path`` without replacing a file that exists: as util.cu, the first of PATH,
    PATH.0, PATH.1, ... that does not exist; returns the path written. Raises OSError (the directory
    missing or not writable)."""
    want = Path(path)
    try_path, k = want, 0
    while True:
        try:
            with open(try_path, "x") as f:
                json.dump(doc, f)
                f.write("\n")
            return try_path
        except FileExistsError:
            try_path, k = Path(f"{want}.{k}"), k + 1
