"""perftest's figures: its printed report parsed, perftest.csv, summary.json's ``perftest`` block, printed lines.

perftest (linux-rdma/perftest, Debian's 4.5) prints one table row after a header line that starts with
``#bytes``; the columns are the test kind's:

- latency tests (``ib_*_lat``): ``#bytes #iterations t_min[usec] t_max[usec] t_typical[usec]
  t_avg[usec] t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]`` (t_typical is the median);
- bandwidth tests (``ib_*_bw``): ``#bytes #iterations BW peak[MB/sec] BW average[MB/sec]
  MsgRate[Mpps]``, where perftest's MB is 2^20 bytes ("MiB=2^20 byte" in its help).

:func:`parse_report` reads the client's output (the text report is in every perftest version). 4.5's
``--out_json`` is not used: the file it wrote in the guest was not JSON (keys without quotes, trailing
commas: ``results: {MsgSize: 4096, ... BW_average: 4.94, ...},``). The header's ``Mtu : 1024[B]`` line is the
path MTU the QP used.
"""
from __future__ import annotations

import math
import re
from typing import Optional

import pandas as pd

#: bytes in perftest's "MB" (its help: MiB = 2^20 bytes)
PERFTEST_MB_BYTES = 2 ** 20
#: latency report columns (perftest's header names) -> ours, in microseconds
LAT_FIELDS = {"t_min[usec]": "t_min_us", "t_max[usec]": "t_max_us", "t_typical[usec]": "t_typical_us",
              "t_avg[usec]": "t_avg_us", "t_stdev[usec]": "t_stdev_us", "99% percentile[usec]": "t_p99_us",
              "99.9% percentile[usec]": "t_p999_us"}
#: latency report columns a perftest naming ``-C``'s unit would print -> ours (4.5 keeps the ``[usec]`` header
#: and prints cycles under it)
LAT_CYCLES_FIELDS = {k.replace("[usec]", "[cycles]"): v for k, v in LAT_FIELDS.items()}
#: bandwidth report columns -> ours (MiB/s, million messages/s)
BW_FIELDS = {"BW peak[MB/sec]": "bw_peak_mib_s", "BW average[MB/sec]": "bw_avg_mib_s", "MsgRate[Mpps]": "msg_rate_mpps"}

COLUMNS = ("name", "test", "src", "dst", "size_bytes", "iterations", "status", "start_ns", "end_ns", "gid_index",
           "mtu_bytes", *LAT_FIELDS.values(), *BW_FIELDS.values(), "bw_avg_bps", "roce_pkts_min",
           "switch_tx_pkts_to_dst", "switch_tx_pkts_to_src", "error")
INT_COLUMNS = ("size_bytes", "iterations", "start_ns", "end_ns", "gid_index", "mtu_bytes", "roce_pkts_min",
               "switch_tx_pkts_to_dst", "switch_tx_pkts_to_src")

_HEADER_RE = re.compile(r"^\s*#bytes\s")
#: perftest's lines that say why it failed ("Completion with error at client", "Couldn't read remote address")
_FAILURE_RE = re.compile(r"error|fail|couldn't|unable", re.IGNORECASE)
_MTU_RE = re.compile(r"^\s*Mtu\s*:\s*(\d+)\s*\[B\]", re.MULTILINE)
#: a header column: a name with an optional [unit], or the two-word "99% percentile[usec]"
_COLUMN_RE = re.compile(r"#?[0-9.]+% percentile\[[^\]]*\]|#?[A-Za-z_]+(?: [A-Za-z]+)?\[[^\]]*\]|#?[A-Za-z_]+")


class PerftestOutputError(ValueError):
    """perftest's output holds no report row (it failed or was stopped before it reported)."""


def cpu_mhz(cpuinfo: str | None = None) -> Optional[float]:
    """The first ``cpu MHz`` of ``/proc/cpuinfo`` (or of the text ``cpuinfo``): the TSC cycles per us that
    perftest itself uses when its own sample agrees with it (perftest's get_cpu_mhz); None when absent."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return None
    m = re.search(r"^cpu MHz\s*:\s*([0-9.]+)", cpuinfo, re.MULTILINE)
    return float(m.group(1)) if m and float(m.group(1)) > 0 else None


def parse_report(text: str, cycles_per_us: Optional[float] = None) -> dict:
    """The figures of one perftest report (its stdout ``text``): ``mtu_bytes`` and, by the header's
    columns, the latency fields (:data:`LAT_FIELDS`, us) or the bandwidth fields (:data:`BW_FIELDS`) plus
    ``size_bytes`` and ``iterations`` as perftest printed them. ``cycles_per_us``: the report is a latency
    test's run with ``-C`` (TSC cycles; perftest 4.5 still heads them ``[usec]``, a later one may say
    ``[cycles]``): each latency divided by it (:func:`cpu_mhz`). Raises PerftestOutputError when there is
    no header line followed by a row of numbers (the error quotes perftest's last lines), or for a
    ``[cycles]`` report without ``cycles_per_us``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not _HEADER_RE.match(line):
            continue
        columns = _COLUMN_RE.findall(line.strip())
        for row in lines[i + 1:]:
            values = row.split()
            if not values or row.lstrip().startswith("-"):
                continue
            try:
                numbers = [float(v) for v in values]
            except ValueError:
                break
            if len(numbers) != len(columns):
                break
            got = dict(zip(columns, numbers))
            out = {"size_bytes": int(got["#bytes"]), "iterations": int(got["#iterations"])}
            latency = {**LAT_FIELDS, **LAT_CYCLES_FIELDS}
            if any(c in latency for c in columns) and (cycles_per_us or any(c in LAT_CYCLES_FIELDS for c in columns)):
                if not cycles_per_us:
                    raise PerftestOutputError("perftest reported latencies in cycles (-C) and this machine's "
                                              "cycles per us are unknown (no cpu MHz in /proc/cpuinfo)")
                out.update({ours: got[theirs] / cycles_per_us for theirs, ours in latency.items() if theirs in got})
            else:
                fields = LAT_FIELDS if any(c in LAT_FIELDS for c in columns) else BW_FIELDS
                out.update({ours: got[theirs] for theirs, ours in fields.items() if theirs in got})
            m = _MTU_RE.search(text)
            out["mtu_bytes"] = int(m.group(1)) if m else None
            return out
        break
    said = [ln.strip() for ln in lines if _FAILURE_RE.search(ln)][:3] or [ln.strip() for ln in lines[-4:] if ln.strip()]
    raise PerftestOutputError(f"no perftest report in its output (last lines: {' | '.join(said) or 'none'})")


def roce_pkts_min(test: str, size_bytes: int, iterations: int, mtu_bytes: Optional[int]) -> int:
    """RoCE packets a test's messages need at the least, acknowledgements left out: ``iterations`` messages
    of ``ceil(size / path MTU)`` packets each way of a ping-pong (``*_send_lat``, ``*_write_lat``: each side
    sends every message), one way for a bandwidth test, requests plus response packets for a read
    (``ib_read_*``: one request, the data back). The path MTU is 4096 (the largest) when unknown, which
    only lowers the bound."""
    per_msg = max(1, math.ceil(size_bytes / (mtu_bytes or 4096)))
    if test.startswith("ib_read"):
        return iterations * (1 + per_msg)
    return iterations * per_msg * (2 if test.endswith("_lat") else 1)


def bw_bps(bw_mib_s: Optional[float]) -> Optional[float]:
    """perftest's MB/sec (MiB/s) in bit/s of message payload."""
    return None if bw_mib_s is None else bw_mib_s * PERFTEST_MB_BYTES * 8


def frame(rows: list[dict]) -> pd.DataFrame:
    """perftest.csv from the runs' rows, in :data:`COLUMNS` order (integers nullable: empty for a failed run)."""
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    for c in INT_COLUMNS:
        out[c] = pd.array([None if v is None or pd.isna(v) else int(v) for v in out[c]], dtype="Int64")
    return out


def perftest_block(rows: list[dict], backend: str) -> dict:
    """summary.json's ``perftest``: every run's row and how the devices were made (``backend``)."""
    clean = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]
    return {"runs": clean, "rxe_backend": backend, "failed": sum(r["status"] != "done" for r in rows)}


def perftest_lines(block: dict) -> list[str]:
    """The printed lines: one per run (latency typical/p99, or bandwidth; the switch's packet counts)."""
    lines = [f"perftest (Soft-RoCE, {block['rxe_backend']}): {len(block['runs'])} run(s)"]
    for r in block["runs"]:
        head = f"  {r['name']:<16} {r['test']:<12} {r['src']}->{r['dst']} {r['size_bytes']} B x {r['iterations']}"
        if r["status"] != "done":
            lines.append(f"{head}  [{r['status']}: {r['error']}]")
        elif r["t_typical_us"] is not None:
            lines.append(f"{head}  typical {r['t_typical_us']:.2f} us, p99 {r['t_p99_us']:.2f} us, "
                         f"avg {r['t_avg_us']:.2f} us; switch sent {r['switch_tx_pkts_to_dst']} + "
                         f"{r['switch_tx_pkts_to_src']} packets (at least {r['roce_pkts_min']} RoCE)")
        else:
            lines.append(f"{head}  {r['bw_avg_mib_s']:.3f} MiB/s average ({r['bw_avg_bps'] / 1e6:.3f} Mbit/s), "
                         f"peak {r['bw_peak_mib_s']:.3f} MiB/s; switch sent {r['switch_tx_pkts_to_dst']} + "
                         f"{r['switch_tx_pkts_to_src']} packets (at least {r['roce_pkts_min']} RoCE)")
    return lines
