"""The size table as nccl-tests prints it (``testbed nccl``, or ``output.table: nccl`` in a scenario).

nccl-tests (src/common.cu) prints per size: size (B), count (elements), type,
redop, root, then time (us), algbw and busbw (GB/s) and ``#wrong`` (the data
check). Here: the same first columns (count = size / 4, type ``float``;
redop ``sum`` for the reducing collectives, ``none`` otherwise; root 0 for
broadcast, -1 otherwise, as nccl-tests prints), then

- ``time(us)``: nccl-tests' own time, each rank's time averaged over the
  ranks that run the op (``time_rank_avg_us``: the n ranks of the header, not
  the fabric's idle hosts), and algbw/busbw from it (busbw factor for those n),
  in Mbit/s (the emulated link's units);
- ``busbw(GB/s eq.)``: that busbw times the run's scale factor
  (reference_link_bps / host_link_bps), in GB/s as nccl-tests prints it:
  what the figure stands for on the real fabric;
- ``#wrong``: ``N/A``, as nccl-tests prints with ``-c 0``: the transport
  moves payload bytes, not reduced values, so there is no data to check
  (every byte's delivery is checked instead: the transport line);
- ``span(us)`` and ``busbw/link``: the testbed's own figures (first rank's
  start to last rank's end; busbw from the span / (link x payload efficiency)).

The header states the collective's size convention and busbw factor
(nccl-tests doc/PERFORMANCE.md), and the last line the average bus bandwidth
over sizes, as nccl-tests' ``# Avg bus bandwidth``.
"""
from __future__ import annotations

import pandas as pd

from traffic import collectives

REDUCING = {"allreduce", "reducescatter"}
ROOTED = {"broadcast"}
#: bytes per element of nccl-tests' default type (float)
ELEMENT_BYTES = 4


def header_lines(sizes: pd.DataFrame) -> list[str]:
    """One ``#`` line per (collective, algorithm) of ``sizes``: title, ranks, size convention, busbw factor."""
    out = []
    for (c, a), g in sizes.groupby(["collective", "algorithm"], sort=False):
        alg = collectives.get(c, a)
        ranks = ", ".join(str(n) for n in sorted(set(g["group_size"])))
        out.append(f"# {alg.title}, {ranks} ranks: {alg.collective.size_convention}; "
                   f"busbw = algbw x {alg.busbw_factor_text}")
    return out


def format_nccl_table(sizes: pd.DataFrame, scale_factor: float) -> str:
    """``sizes`` (testbed.results.tables.size_table rows) as nccl-tests' table (module docstring)."""
    head = (f"#{'size':>11} {'count':>12} {'type':>6} {'redop':>6} {'root':>5} {'time':>10} {'algbw':>10} "
            f"{'busbw':>10} {'busbw':>10} {'#wrong':>6} {'span':>10} {'busbw/':>7}\n"
            f"#{'(B)':>11} {'(elements)':>12} {'':>6} {'':>6} {'':>5} {'(us)':>10} {'(Mb/s)':>10} "
            f"{'(Mb/s)':>10} {'(GB/s eq)':>10} {'':>6} {'(us)':>10} {'link':>7}")
    lines = header_lines(sizes) + [head]
    for r in sizes.itertuples():
        algbw = r.size_bytes * 8 / (r.time_rank_avg_us / 1e6)
        busbw = r.busbw_rank_avg_bps
        lines.append(f"{r.size_bytes:>12} {r.size_bytes // ELEMENT_BYTES:>12} {'float':>6} "
                     f"{'sum' if r.collective in REDUCING else 'none':>6} {0 if r.collective in ROOTED else -1:>5} "
                     f"{r.time_rank_avg_us:>10.0f} {algbw / 1e6:>10.3f} {busbw / 1e6:>10.3f} "
                     f"{busbw * scale_factor / 8e9:>10.2f} {'N/A':>6} {r.time_us:>10.0f} {r.busbw_ratio:>7.3f}")
    if len(sizes):
        avg = float(sizes["busbw_rank_avg_bps"].mean())
        lines.append(f"# Avg bus bandwidth    : {avg / 1e6:.3f} Mbit/s ({avg * scale_factor / 8e9:.2f} GB/s "
                     f"equivalent at scale factor {scale_factor:g})")
    return "\n".join(lines)
