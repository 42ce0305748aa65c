"""The marking probability against the queue, per queue range, beside the RED line: kernel RED and the nft marker.

One leaf, three hosts, every link at ``--rate`` (default 1 Mbit/s, what a software-emulated guest
holds): h1 and h2 send ECT(0) datagrams of the lossless class into h3 while a queue holder switches
their pace between 1.3 and 0.7 x the port's rate, so the port's lossless backlog sweeps between
``--low`` and ``--high`` bytes; each datagram is binned by the backlog it found (sampled, interpolated
at its send time) and each bin's CE fraction is set beside the RED line p = Pmax (q - Kmin) / (Kmax -
Kmin). Method: benchmarks.instruments.red_curve.

The marker is the machine's (``--marker auto``): kernel RED (sch_red) where the kernel has it (a
scripts/vm guest: ``sudo scripts/vm -- .venv/bin/python benchmarks/red_curve.py --json /tmp/x/guest.json``),
else the nftables marker. ``--beside FILE`` prints a curve measured elsewhere (this script's ``--json``,
or the guest tier's ``red-curve.json``) next to this one.

Prints per queue range: packets, measured p, the RED line p, the error in percentage points; then
PASS/FAIL: every bin with at least ``--min-packets`` datagrams within 5 points of the line.

Run under the fabric lock, as root:
``flock /tmp/fabric.lock .venv/bin/python benchmarks/red_curve.py [--seconds 60] [--beside guest.json]``
``.venv/bin/python benchmarks/red_curve.py --show host.json --beside guest.json`` (no fabric)
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this tree's packages and benchmarks.instruments, whatever the venv has installed

from benchmarks.instruments.red_curve import format_bins, run_curve, scenario  # noqa: E402

KMIN_BYTES, KMAX_BYTES, PMAX = 10_000, 50_000, 0.2
TOLERANCE_PP = 5.0
MIN_PACKETS = 200


def within_band(res: dict, min_packets: int = MIN_PACKETS, tolerance_pp: float = TOLERANCE_PP) -> bool:
    """Every bin with at least ``min_packets`` datagrams within ``tolerance_pp`` points of the line."""
    return all(abs(b["measured_p"] - b["line_p"]) * 100 <= tolerance_pp for b in res["bins"]
               if b["packets"] >= min_packets)


def describe(res: dict) -> str:
    sent = res.get("sent")
    return (f"{res['marker']} marker on {res['datapath']} datapath, port {res['port']} at {res['rate_bps'] / 1e6:g} "
            f"Mbit/s; Kmin {res['kmin_bytes']} B, Kmax {res['kmax_bytes']} B, Pmax {res['pmax']}; backlog swept "
            f"{res['low_bytes']}-{res['high_bytes']} B ({res['flips']} switches), max {res['backlog_max_bytes']} B; "
            f"{res['received']} datagrams received ({sent} sent), {res['ce']} CE; class drops "
            f"{res['drops_pkts']}; {res['samples']} samples every {res['period_s'] * 1e3:g} ms "
            f"({res['missed_ticks']} missed); {res['seconds']:g} s measured")


def side_by_side(a: dict, b: dict) -> list[str]:
    """Two curves' bins on one table (they must have the same queue ranges)."""
    head = (f"{'queue_kB':>13} | {a['marker'] + ' n':>9} {'p':>6} {'line':>6} {'err':>5} | "
            f"{b['marker'] + ' n':>9} {'p':>6} {'line':>6} {'err':>5}")
    lines = [head]
    for x, y in zip(a["bins"], b["bins"]):
        hi = "inf" if math.isinf(x["hi_bytes"]) else f"{x['hi_bytes'] / 1e3:.1f}"
        cells = []
        for r in (x, y):
            err = 100 * (r["measured_p"] - r["line_p"]) if r["packets"] else float("nan")
            cells.append(f"{r['packets']:>9} {r['measured_p']:>6.3f} {r['line_p']:>6.3f} {err:>+5.1f}")
        lines.append(f"{x['lo_bytes'] / 1e3:>6.1f}-{hi:<6} | {cells[0]} | {cells[1]}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--marker", choices=("auto", "red", "nftables"), default="auto",
                    help="who marks (auto: red where the kernel has sch_red, else nftables)")
    ap.add_argument("--rate", default="1M", help="every link's rate (default 1M)")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured seconds (after the warm-up)")
    ap.add_argument("--warmup", type=float, default=5.0, help="warm-up seconds (senders starting)")
    ap.add_argument("--low", type=int, default=4_000, help="the holder's low backlog, bytes")
    ap.add_argument("--high", type=int, default=58_000, help="the holder's high backlog, bytes")
    ap.add_argument("--bins", type=int, default=4, help="equal queue ranges between Kmin and Kmax")
    ap.add_argument("--period-ms", type=float, default=None,
                    help="RED's backlog sampling period (default 1 ms; the nft marker's loop is 1 ms)")
    ap.add_argument("--min-packets", type=int, default=MIN_PACKETS, help="judge only bins with this many")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--show", help="print this curve (a --json file) instead of measuring")
    ap.add_argument("--beside", help="a curve measured elsewhere (--json file), printed beside this one")
    args = ap.parse_args()

    if args.show:
        res = json.loads(Path(args.show).read_text())
    else:
        from testbed.host.capabilities import probe
        from testbed.pipeline.runner import with_ecn_marker
        from topology.naming import new_run_id

        caps = probe(new_run_id())
        spec = with_ecn_marker(scenario(args.marker, args.rate, KMIN_BYTES, KMAX_BYTES, PMAX), caps.ecn_marker)
        with tempfile.TemporaryDirectory() as tmp:
            res = run_curve(spec, Path(tmp), caps.datapath, (args.period_ms or 1.0) / 1e3, seconds=args.seconds,
                            warmup_s=args.warmup, low_bytes=args.low, high_bytes=args.high, bins=args.bins)
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=1))
    print(describe(res))
    print("\n".join(format_bins(res["bins"])))
    ok = within_band(res, args.min_packets)
    if args.beside:
        other = json.loads(Path(args.beside).read_text())
        print(f"beside: {describe(other)}")
        print("\n".join(side_by_side(res, other)))
        ok &= within_band(other, args.min_packets)
    print("PASS" if ok else "FAIL", f"(every bin of >= {args.min_packets} datagrams within {TOLERANCE_PP} points "
          f"of the RED line)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
