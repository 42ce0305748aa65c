"""Measure the ECN marking curve on a real fabric port (issue 7, item 2).

Two hosts send into a third through one leaf, each at its full host link
rate, so the leaf's port toward the receiver is overloaded 2:1 and its
lossless-class queue stays full. Its tbf ``limit`` (the class buffer) is set
to each target backlog in turn: the backlog is then held just below that
limit while the marker (:class:`EcnLoop`, a marking loop in this process) marks.

Each sender sends 1000-byte UDP datagrams from a blocking socket (paced by its
own NIC's HTB), in a repeating pattern of eight: five ECT(0) in the lossless
class (TOS 0x6a, DSCP 26), two Not-ECT in the lossless class (TOS 0x68) and one
ECT(0) in the lossy class (TOS 0x02), each kind to its own UDP port. The
receiver reads each datagram's TOS (``IP_RECVTOS``) and counts CE per kind,
after a warm-up that lets the queue fill. Counts at the receiver are of
delivered packets: a packet marked and then tail-dropped is not seen, which
leaves the delivered fraction unbiased (marking is decided before the queue).

Host side: ``python -m benchmarks.instruments.ecn_curve send DST SECONDS`` and
``... recv SECONDS WARMUP_S`` (prints one JSON line).
"""
from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dataplane.ecn_marker import NftEcnMarker

#: the repository root: host-side runs (``python -m benchmarks.instruments.ecn_curve``) start there
ROOT = Path(__file__).resolve().parents[2]

#: (kind, TOS, UDP port, share of the pattern of eight)
KINDS = (("ect", 0x6A, 47_910, 5), ("not_ect", 0x68, 47_911, 2), ("lossy_ect", 0x02, 47_912, 1))
PAYLOAD_BYTES = 1000
FRAME_BYTES = PAYLOAD_BYTES + 8 + 20 + 14
IP_RECVTOS = 13
SNDBUF_BYTES = 16_384


class EcnLoop:
    """A marking loop in THIS process: a 1 ms sampler of the marked class's leaf on every switch port,
    feeding :class:`dataplane.ecn_marker.NftEcnMarker` (context manager), for this measurement,
    which reads its samples while it runs. A run's loop is the controller's (controllers/congestion/loop.py).
    :meth:`for_run` builds it from a scenario, or returns None when ``congestion.ecn`` is absent."""

    #: period of the marking loop's sampler, s (docs/architecture.md: ~10 % of a core for 24 ports)
    PERIOD_S = 0.001

    def __init__(self, marker: NftEcnMarker, sampler):
        self.marker, self.sampler = marker, sampler

    @classmethod
    def for_run(cls, spec, run_id: str, ports: list[str], backend) -> "EcnLoop | None":
        """``spec``: the ScenarioSpec; ``ports``: switch ports; ``backend``: the fabric's queue backend."""
        from dataplane.ecn_policy import MarkingPolicy
        from dataplane.ecn_marker import NftEcnMarker
        from dataplane.qdisc_sampler import QdiscSampler
        from testbed.spec.congestion import CLASS_NAMES, DSCP_LOSSLESS

        ecn = spec.congestion.ecn
        if ecn is None:
            return None
        lossless = spec.congestion.traffic_classes(spec.fabric.buffer_bytes, spec.fabric.mtu_bytes + 14)[1]
        policy = MarkingPolicy(lossless.marking, ports, spec.congestion.ecn_probability_step)
        marker = NftEcnMarker(run_id, policy, (DSCP_LOSSLESS,))
        sampler = QdiscSampler(ports, cls.PERIOD_S, parent=backend.class_parent(CLASS_NAMES.index("lossless")),
                               on_sample=marker.on_sample)
        return cls(marker, sampler)

    @property
    def curve(self):
        """The RED curve the marker follows (dataplane.ecn_policy.RedCurve)."""
        return self.marker.policy.curve

    @property
    def step(self) -> float:
        """The marker's probability step (its probabilities are quantized to it)."""
        return self.marker.policy.step

    def __enter__(self) -> "EcnLoop":
        self.marker.start()
        try:
            self.sampler.start()
        except BaseException:
            self.marker.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.sampler.stop()
        finally:
            self.marker.stop()


def send(dst: str, seconds: float) -> None:
    """Send the pattern of eight to ``dst`` for ``seconds`` (blocking sockets: the NIC paces)."""
    socks = {}
    for kind, tos, port, _ in KINDS:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF_BYTES)
        socks[kind] = (s, port)
    pattern = [k for kind, _, _, n in KINDS for k in [kind] * n]
    payload, end, i = bytes(PAYLOAD_BYTES), time.monotonic() + seconds, 0
    while time.monotonic() < end:
        s, port = socks[pattern[i % 8]]
        s.sendto(payload, (dst, port))
        i += 1


def recv(seconds: float, warmup_s: float) -> dict:
    """Count datagrams per kind and ECN codepoint that arrive between ``warmup_s`` and ``seconds``."""
    socks = {}
    for kind, _, port, _ in KINDS:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        s.bind(("0.0.0.0", port))
        s.setblocking(False)
        socks[s] = kind
    print("ready", flush=True)  # bound: the senders may start
    counts = {kind: [0, 0, 0, 0] for kind, *_ in KINDS}  # by ECN codepoint: not-ECT, ECT(1), ECT(0), CE
    import select
    t0 = time.monotonic()
    while (now := time.monotonic()) < t0 + seconds:
        ready, _, _ = select.select(list(socks), [], [], 0.05)
        for s in ready:
            while True:
                try:
                    _, anc, _, _ = s.recvmsg(2048, 64)
                except BlockingIOError:
                    break
                if now - t0 < warmup_s:
                    continue
                tos = next((c[2][0] for c in anc if c[0] == socket.IPPROTO_IP and c[1] == IP_TOS_CMSG), None)
                if tos is not None:
                    counts[socks[s]][tos & 3] += 1
    return counts


IP_TOS_CMSG = 1  # IP_TOS: the cmsg type IP_RECVTOS delivers


def ce_fraction(counts: dict, kind: str = "ect") -> float:
    """CE / all datagrams of ``kind`` (NaN when none)."""
    c = counts[kind]
    return c[3] / sum(c) if sum(c) else float("nan")


def set_class_limit(port: str, limit_bytes: int, rate_bps: float, mtu_bytes: int, class_index: int = 1) -> None:
    """Set the tbf ``limit`` of class ``class_index`` on switch port ``port`` (root namespace)."""
    from pyroute2 import IPRoute

    from dataplane.queues import htb_classes
    from dataplane.queues.htb_bfifo import burst_bytes_for

    with IPRoute() as ipr:
        index = ipr.link_lookup(ifname=port)[0]
        ipr.tc("change", "tbf", index=index, handle=htb_classes.leaf_handle(class_index),
               parent=htb_classes.class_handle(class_index), rate=max(1, round(rate_bps / 8)),
               burst=burst_bytes_for(rate_bps, mtu_bytes), limit=int(limit_bytes), mtu=mtu_bytes + 14)


def measure_point(fab, loop, senders, receiver, port: str, limit_bytes: int, seconds: float,
                  warmup_s: float = 0.7) -> dict:
    """Hold ``port``'s lossless backlog near ``limit_bytes`` for ``warmup_s + seconds``; return the figures.

    ``fab``: the running Fabric; ``loop``: its running EcnLoop; ``senders``/``receiver``: host ranks.
    Returns a dict: limit_bytes, backlog_mean_bytes (sampled, after warm-up), red_p (the RED formula at
    that mean), expected_p (the policy's quantized probability averaged over the samples), ce_fraction
    of ECT, not_ect_ce and lossy_ect_ce (CE counts of the kinds that must never be marked), counts.
    """
    link = fab.layout.links_of(fab.layout.hosts[receiver].name)[0]
    rate_bps, mtu = link.rate_bps, fab.spec.fabric.mtu_bytes
    set_class_limit(port, limit_bytes, rate_bps, mtu)
    py = sys.executable
    rx = fab.host(receiver).popen([py, "-m", "benchmarks.instruments.ecn_curve", "recv", str(warmup_s + seconds),
                                   str(warmup_s)], stdout=-1, stderr=-1, text=True, cwd=ROOT)
    rx.stdout.readline()  # "ready": bound (an empty line: it failed, reported below)
    dst = fab.layout.hosts[receiver].ip
    tx = [fab.host(r).popen([py, "-m", "benchmarks.instruments.ecn_curve", "send", dst, str(warmup_s + seconds)],
                            stdout=-1, stderr=-1, text=True, cwd=ROOT) for r in senders]
    t_warm_ns = time.time_ns() + int(warmup_s * 1e9)
    out, err = rx.communicate(timeout=warmup_s + seconds + 20)
    for p in tx:
        p.communicate(timeout=20)
    t_end_ns = time.time_ns()
    if rx.returncode != 0:
        raise RuntimeError(f"receiver failed: {err.strip()[-400:]}")
    counts = json.loads(out.strip().splitlines()[-1])
    import numpy as np

    frame = loop.sampler.to_frame()
    q = frame[(frame["port"] == port) & (frame["time_ns"] >= t_warm_ns) & (frame["time_ns"] <= t_end_ns)]
    backlog = q["backlog_bytes"].to_numpy(dtype=float)
    curve, step = loop.curve, loop.step
    from dataplane.ecn_policy import quantize
    mean = float(backlog.mean()) if len(backlog) else float("nan")
    return {"limit_bytes": int(limit_bytes), "backlog_mean_bytes": round(mean, 1),
            "backlog_p5_bytes": float(np.percentile(backlog, 5)) if len(backlog) else None,
            "red_p": round(curve.probability(mean), 4),
            "expected_p": round(float(np.mean([quantize(curve.probability(b), step) for b in backlog])), 4)
            if len(backlog) else None,
            "ce_fraction": round(ce_fraction(counts), 4), "not_ect_ce": counts["not_ect"][3],
            "lossy_ect_ce": counts["lossy_ect"][3], "counts": counts, "samples": int(len(backlog))}


def fabric_spec(spec):
    """``spec`` without ``congestion.ecn``, to build the fabric with: the measurement runs its own marking loop
    here (EcnLoop, whose samples it reads), so the controller's loop must not mark too."""
    return spec.model_copy(update={"congestion": spec.congestion.model_copy(update={"ecn": None})})


def congested_port(fab, receiver: int) -> str:
    """The switch port that sends to host ``receiver`` (the leaf end of its link)."""
    host = fab.layout.hosts[receiver]
    link = fab.layout.links_of(host.name)[0]
    return link.b.intf if link.a.node == host.name else link.a.intf


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], float(sys.argv[3]))
    elif sys.argv[1] == "recv":
        print(json.dumps(recv(float(sys.argv[2]), float(sys.argv[3]))), flush=True)
    else:
        sys.exit(f"usage: {sys.argv[0]} send DST SECONDS | recv SECONDS WARMUP_S")
