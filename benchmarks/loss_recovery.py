"""Go-back-N against selective repeat (``transport.loss_recovery``, issue 16 item 3), and what each costs the CPU.

``run`` (root, under the fabric lock): real ``testbed run`` of each case with each recovery, then per case
and recovery: posted bytes, resent payload bytes and resent/posted, moved/posted (1 + resent share),
busbw/link of the largest size and over the whole run (posted bytes / ops span against the
ideal), timeouts, NAKs, the run's duration (first op's start to last op's end, and the whole command)
against its estimate, order errors. Cases:

- ``5m8k``: scenarios/quickstart.yaml with ``fabric_link_bps: 5M`` and ``buffer_bytes: 8KB`` (a ring
  all-reduce whose cross-leaf QPs send at 10 Mbit/s into 5 Mbit/s uplinks behind an 8 KB buffer);
- ``a2a``: an all-to-all (``collective: alltoall``, ``algorithm: direct``: every rank sends to every
  other at once, as NCCL does) over the quickstart's fabric (8 hosts, 4 leaves, 2 spines), 10 Mbit/s
  links, a 16 KB buffer: fan-in drops at the receivers' ports (7 senders each) and where ECMP puts
  several flows on one uplink.

``--quick`` runs the 5m8k case with three sizes (256 KiB to 1 MiB) and fewer iterations.

``cpu`` (no root, no fabric): CPU time per data packet of a QP pair over loopback (both ends' threads
in this process: the requester, both receive threads, the responder), no loss and 2% loss, for each
recovery; run it on two trees to compare before and after a change.

Usage::

    flock /tmp/fabric.lock .venv/bin/python benchmarks/loss_recovery.py run [--cases 5m8k,a2a] [--results DIR] [--quick]
    .venv/bin/python benchmarks/loss_recovery.py run --from DIR      # print the figures of finished runs
    flock /tmp/fabric.lock .venv/bin/python benchmarks/loss_recovery.py cpu [--packets 20000]
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this tree's testbed and traffic, whatever the venv has installed
RECOVERIES = ("go_back_n", "selective_repeat")


def _quickstart() -> dict:
    import yaml
    return yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())


def case_5m8k(quick: bool = False) -> dict:
    s = _quickstart()
    s["name"] = "lossy-5m-8kb"
    s["fabric"].update(fabric_link_bps="5M", buffer_bytes="8KB")
    if quick:
        s["workload"].update(sizes={"min_bytes": "256KiB", "max_bytes": "1MiB", "factor": 2}, iterations=2,
                             warmup_iterations=0)
    return s


def case_a2a(quick: bool = False) -> dict:
    return {
        "name": "lossy-alltoall", "seed": 1, "reference_link_bps": "400G",
        "fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 2, "host_link_bps": "10M",
                   "fabric_link_bps": "10M", "buffer_bytes": "16KB", "mtu_bytes": 4200},
        "transport": {"payload_bytes": 4096, "window_pkts": 16, "ack_every_pkts": 4},
        "workload": {"collective": "alltoall", "algorithm": "direct",
                     "sizes": {"min_bytes": "256KiB", "max_bytes": "1MiB" if quick else "4MiB", "factor": 2},
                     "iterations": 2 if quick else 3, "warmup_iterations": 0 if quick else 1},
    }


CASES = {"5m8k": case_5m8k, "a2a": case_a2a}


def scenario(case: str, recovery: str, quick: bool) -> dict:
    s = CASES[case](quick)
    s["transport"] = {**s["transport"], "loss_recovery": recovery}
    s["name"] = f"{s['name']}-{recovery.replace('_', '-')}"
    return s


def run_one(case: str, recovery: str, results: Path, quick: bool) -> Path:
    """``testbed run`` of the case with ``recovery``; returns its run directory."""
    import yaml
    out = results / f"{case}-{recovery}"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(case, recovery, quick), sort_keys=False))
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--results", str(out)],
                   cwd=ROOT, check=False, timeout=3600)
    (out / "command_s.txt").write_text(f"{time.monotonic() - t0:.1f}\n")
    return run_dir_of(out)


def run_dir_of(out: Path) -> Path:
    dirs = sorted(p.parent for p in out.glob("*/summary.json"))
    if not dirs:
        raise SystemExit(f"no finished run in {out}")
    return dirs[-1]


def figures(run_dir: Path) -> dict:
    """The comparison figures of one finished run (see the module docstring)."""
    from testbed.results.rundir import RunDir

    run = RunDir.open(run_dir)
    s, m = run.summary, run.manifest
    t = s["transport"]
    ops = run.ops
    span_s = (ops["t_end_ns"].max() - ops["t_start_ns"].min()) / 1e9
    sizes = s["sizes"]
    qps = run.qps
    req = qps[qps["role"] == "requester"]
    lossy = req[req["retx_pkts"] > 0]
    cmd = run_dir.parent / "command_s.txt"
    est = m["estimated_duration_s"]
    from testbed.spec.estimate import setup_s
    from testbed.spec.scenario import parse_scenario
    setup = setup_s(parse_scenario(m["scenario"]).fabric)
    return {
        "recovery": t.get("loss_recovery", m["transport"]["loss_recovery"]),
        "posted_bytes": t["posted_bytes"], "resent_bytes": t.get("retx_bytes"),
        "resent_share": t.get("resent_share"),
        "moved_ratio": 1 + t["resent_share"] if t.get("resent_share") is not None else None,
        "retx_pkts": t["retx_pkts"], "timeouts": t["timeouts"], "naks": t["naks"],
        "lossy_qps": len(lossy), "timeouts_per_lossy_qp": float(lossy["timeouts"].mean()) if len(lossy) else 0.0,
        "naks_per_lossy_qp": float(lossy["naks_rx"].mean()) if len(lossy) else 0.0,
        "order_errors": t["order_errors"], "delivered_once": t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"],
        "busbw_link_largest": sizes[-1].get("busbw_ratio") if sizes else None,
        "busbw_link_sizes": [x.get("busbw_ratio") for x in sizes],
        "ops_span_s": span_s, "estimate_s": est, "estimate_ops_s": est - setup,
        "span_vs_estimate": span_s / (est - setup),
        "command_s": float(cmd.read_text()) if cmd.exists() else None,
        "estimate_note": m.get("estimate_loss_note"),
        "faithful": s.get("faithful"), "switch_drops_pkts": t["switch_drops_pkts"],
        "run_dir": str(run_dir),
    }


def print_case(case: str, rows: list[dict]) -> None:
    print(f"case {case}:")
    for f in rows:
        cmd = f"{f['command_s']:.0f} s" if f["command_s"] else "n/a"
        print(f"  {f['recovery']:>16}: posted {f['posted_bytes']:,} B, resent {f['resent_bytes']:,} B "
              f"({f['resent_share']:.3f} of posted; moved {f['moved_ratio']:.3f}x), {f['retx_pkts']:,} packets resent, "
              f"{f['timeouts']:,} timeouts, {f['naks']:,} NAKs ({f['lossy_qps']} QPs resent: "
              f"{f['timeouts_per_lossy_qp']:.0f} timeouts, {f['naks_per_lossy_qp']:.0f} NAKs each)")
        print(f"  {'':>16}  busbw/link largest size {f['busbw_link_largest']:.3f} (per size "
              f"{', '.join(f'{x:.3f}' for x in f['busbw_link_sizes'])}); ops {f['ops_span_s']:.1f} s against "
              f"{f['estimate_ops_s']:.1f} s estimated ({f['span_vs_estimate']:.2f}x), command {cmd} against "
              f"{f['estimate_s']:.0f} s; order errors {f['order_errors']}, every byte once: {f['delivered_once']}; "
              f"faithful {f['faithful']} (switch drops {f['switch_drops_pkts']:,})")
    if rows and rows[0].get("estimate_note"):
        print(f"  estimate note: {rows[0]['estimate_note']}")


def cmd_run(a) -> int:
    results = a.from_dir or a.results or Path(tempfile.mkdtemp(prefix="loss_recovery."))
    cases = [c for c in a.cases.split(",") if c]
    for case in cases:
        rows = []
        for rec in a.recoveries.split(","):
            out = results / f"{case}-{rec}"
            run_dir = run_dir_of(out) if a.from_dir else run_one(case, rec, results, a.quick)
            rows.append(figures(run_dir))
        print_case(case, rows)
        (results / f"{case}.json").write_text(json.dumps(rows, indent=1))
    print(f"results: {results}")
    return 0


# -- CPU per packet over loopback ------------------------------------------------------------------

class _Dropper:
    """Socket proxy dropping a seeded fraction of data packets (first sends and resends alike)."""

    def __init__(self, sock, p: float, seed: int):
        self._s, self._p, self._rng = sock, p, random.Random(seed)

    def sendto(self, data, addr):
        if self._p and self._rng.random() < self._p:
            return len(data)
        return self._s.sendto(data, addr)

    def __getattr__(self, k):
        return getattr(self._s, k)


def cpu_per_packet_us(recovery: str, p_drop: float, packets: int, payload: int = 4096) -> tuple[float, dict]:
    """CPU microseconds per data packet sent (process time: both ends in this process) moving
    ``packets`` packets in 64-packet messages over loopback, and the requester's counters."""
    import dataclasses

    from traffic.transport import Endpoint, TransportParams
    from traffic.transport.selective import qp_classes

    fields = {f.name for f in dataclasses.fields(TransportParams)}
    kw = dict(payload_bytes=payload, window_pkts=16, ack_every_pkts=4, rto_us=20_000, loss_recovery=recovery,
              reorder_window_us=0)
    if "rto_low_us" in fields:
        kw.update(rto_low_us=10_000, rto_low_pkts=4)
    params = TransportParams(**kw)
    req_cls, resp_cls = qp_classes(recovery)
    a, b = "127.79.0.1", "127.79.0.2"
    ep_a, ep_b = Endpoint(a), Endpoint(b)
    req = req_cls(0x10001, 0x20000, a, b, 53000, params)
    resp = resp_cls(0x20000, 0x10001, b, a, 53001, params)
    req.sock = _Dropper(req.sock, p_drop, 5)
    ep_a.requesters[req.qpn], ep_b.responders[resp.qpn] = req, resp
    ep_a.start()
    ep_b.start()
    try:
        msg = 64 * payload
        n = max(1, packets // 64)
        t0 = time.process_time()
        seqs = [req.post_send(msg) for _ in range(n)]
        if not req.wait_acked(seqs[-1], timeout_s=600):
            raise RuntimeError("transfer did not finish")
        cpu = time.process_time() - t0
        c = req.counters
        return cpu / c.tx_pkts * 1e6, {"tx_pkts": c.tx_pkts, "retx_pkts": c.retx_pkts, "timeouts": c.timeouts,
                                       "naks_rx": c.naks_rx, "dup_pkts": resp.counters.dup_pkts}
    finally:
        ep_a.stop()
        ep_b.stop()


def cmd_cpu(a) -> int:
    for rec in RECOVERIES:
        for p in (0.0, 0.02):
            best = None
            for _ in range(a.repeat):
                us, c = cpu_per_packet_us(rec, p, a.packets)
                best = (us, c) if best is None or us < best[0] else best
            print(f"{rec:>16}, loss {p:.0%}: {best[0]:.1f} us CPU per data packet sent (best of {a.repeat}; {best[1]})")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="fabric runs (root, under the fabric lock)")
    r.add_argument("--cases", default="5m8k,a2a", help=f"comma-separated, of {', '.join(CASES)}")
    r.add_argument("--results", type=Path, default=None, help="where the runs go (default: a temporary directory)")
    r.add_argument("--from", dest="from_dir", type=Path, default=None, help="read finished runs from here")
    r.add_argument("--quick", action="store_true", help="fewer sizes and iterations")
    r.add_argument("--recoveries", default=",".join(RECOVERIES), help="comma-separated, of " + ", ".join(RECOVERIES))
    c = sub.add_parser("cpu", help="CPU per packet over loopback (no root)")
    c.add_argument("--packets", type=int, default=20_000)
    c.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    return cmd_run(a) if a.command == "run" else cmd_cpu(a)


if __name__ == "__main__":
    sys.exit(main())
