"""PAT against ring for all-gather and reduce-scatter over a size sweep on the quickstart fabric.

One run of the runner (testbed.pipeline.runner.run_scenario) on scenarios/quickstart.yaml (2 spines,
4 leaves, 8 hosts, 10 Mbit/s, path MTU 4096; switch buffers ``--buffer-bytes``, default the
quickstart's own), whose op plan holds, per collective, algorithm and size, ``-w`` warm-up and ``-n``
timed operations over all 8 ranks, so both algorithms run on the same fabric and the same queue pairs
(ring's peers p +/- 1 are among PAT's p +/- 2^d, so ECMP hashes their shared flows alike). Prints per
size each algorithm's time (us, the span: first rank's start to last rank's end, mean over the timed
ops) and busbw/link (busbw / (link x payload efficiency), nccl-tests' busbw = algbw x (n-1)/n), PAT's
time / ring's, and the run's verdict and transport counts.

Expected shape (NCCL's tuning model, src/graph/tuning.cc): PAT takes log2 8 = 3 steps against ring's
7, so it wins where each step's fixed cost dominates (small sizes); both send (n-1)/n S per rank, so
at large sizes PAT's busbw approaches ring's unless its distance-2 and -4 transfers (which all cross
leaves, two per leaf) collide on ECMP uplinks.

Needs root and the fabric to itself::

    flock /tmp/fabric.lock .venv/bin/python benchmarks/pat_vs_ring.py

Usage: ``python benchmarks/pat_vs_ring.py [-b 4K] [-e 4M] [-f 4] [-n 3] [-w 1] [--buffer-bytes 100KB]
[--entropy per_flow|spray]``
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

from testbed.pipeline.runner import run_scenario
from testbed.spec.units import parse_size
from testbed.workloads import load_scenario
from testbed.workloads.plan import PlannedOp

REPO = Path(__file__).resolve().parents[1]
COLLECTIVES, ALGORITHMS = ("allgather", "reducescatter"), ("ring", "pat")


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    """lo, lo x factor, ... up to hi (bytes); raises ValueError when factor < 2 or lo < 1."""
    if factor < 2 or lo < 1:
        raise ValueError(f"need -f >= 2 and -b >= 1, got {factor}, {lo}")
    out = [lo]
    while out[-1] * factor <= hi:
        out.append(out[-1] * factor)
    return out


def plan(size_list: list[int], n_ranks: int, timed: int, warmup: int) -> list[PlannedOp]:
    """Per collective, size and algorithm: ``warmup`` warm-up then ``timed`` timed ops over all ranks."""
    world = (tuple(range(n_ranks)),)
    return [PlannedOp(size_bytes=s, iteration=i - warmup, warmup=i < warmup, layer="", collective=c,
                      algorithm=a, groups=world)
            for c in COLLECTIVES for s in size_list for a in ALGORITHMS for i in range(warmup + timed)]


def quickstart_variant(tmp: Path, buffer_bytes: str | None, entropy: str) -> Path:
    """scenarios/quickstart.yaml named pat-vs-ring, with ``buffer_bytes`` (None: its own) and transport
    ``entropy`` (``spray``: 16 ports per QP, selective repeat, the scenario's default for it), written to
    ``tmp``; returns its path (validated when loaded)."""
    data = yaml.safe_load((REPO / "scenarios" / "quickstart.yaml").read_text())
    data["name"] = "pat-vs-ring"
    if buffer_bytes:
        data["fabric"]["buffer_bytes"] = buffer_bytes
    data["transport"]["entropy"] = entropy
    if entropy != "per_flow":
        data["transport"]["entropy_ports"] = 16
    path = tmp / "pat-vs-ring.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-b", default="4K")
    ap.add_argument("-e", default="4M")
    ap.add_argument("-f", type=int, default=4)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("-w", type=int, default=1)
    ap.add_argument("--buffer-bytes", default=None, help="switch buffers (default: the quickstart's)")
    ap.add_argument("--entropy", default="per_flow", choices=("per_flow", "spray"),
                    help="transport.entropy: per_flow (the quickstart's ECMP per QP) or spray (per packet)")
    args = ap.parse_args(argv)
    size_list = sizes(int(parse_size(args.b)), int(parse_size(args.e)), args.f)
    with tempfile.TemporaryDirectory(prefix="pat-vs-ring-") as tmp:
        scenario = quickstart_variant(Path(tmp), args.buffer_bytes, args.entropy)
        spec = load_scenario(scenario)
        n = spec.fabric.leaves * spec.fabric.hosts_per_leaf
        summary = run_scenario(spec, scenario, Path(tmp), quiet=True, ops_plan=plan(size_list, n, args.n, args.w))
    rows = {(r["collective"], r["algorithm"], r["size_bytes"]): r for r in summary["sizes"]}
    t = summary["transport"]
    print(f"# PAT vs ring on {n} hosts, quickstart fabric, buffers {spec.fabric.buffer_bytes} B, entropy "
          f"{spec.transport.entropy}, "
          f"{args.n} timed + {args.w} warm-up ops per point; faithful {summary['faithful']} "
          f"{summary['violations'] or ''}; posted {t['posted_bytes']} B, delivered {t['delivered_bytes']} B, "
          f"retransmitted {t['retx_pkts']} packets, switch drops {t['switch_drops_pkts']}")
    print(f"{'collective':>13} {'size(B)':>9} {'ring us':>11} {'pat us':>11} {'ring b/l':>9} {'pat b/l':>9} "
          f"{'pat/ring t':>10} {'pat/ring b/l':>12}")
    for c in COLLECTIVES:
        for s in size_list:
            ring, pat = rows[(c, "ring", s)], rows[(c, "pat", s)]
            print(f"{c:>13} {s:>9} {ring['time_us']:>11.0f} {pat['time_us']:>11.0f} {ring['busbw_ratio']:>9.3f} "
                  f"{pat['busbw_ratio']:>9.3f} {pat['time_us'] / ring['time_us']:>10.3f} "
                  f"{pat['busbw_ratio'] / ring['busbw_ratio']:>12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
