"""A plain paced UDP ring through a testbed fabric, judged by the fidelity verdict's criteria.

The datapath's own ceiling: the same :class:`testbed.emulation.fabric.Fabric` a
``testbed run`` builds (same controller, OVS flows, shaping qdiscs and queues),
but no transport agents, no congestion loops, no queue sampler. Every host ``i``
sends UDP datagrams to host ``i + 1`` (a ring all-reduce's traffic shape) whose
frames have the wire size of a full RoCE data packet of ``payload_bytes``
(:func:`testbed.measure.link_model.data_frame_bytes`: 1082 B at 1024, 4154 B at 4096).

Pacing: each sender is a blocking UDP socket made as the agents make theirs
(:func:`traffic.transport.nic.rdma_socket`: DF, checksum 0, data TOS, a send buffer
of :attr:`traffic.transport.TransportParams.sndbuf_bytes`, well below the host NIC
queue), sending back to back: the host NIC's shaper paces it at the link rate, so
a sender costs one ``send`` syscall per packet and no timers. Each receiver is a
blocking ``recv_into`` loop. Both run in the host's namespace as
``python -m benchmarks.instruments.udp_ring --run-id RID send|recv ...`` (the run
id lets the fabric's cleanup find them), print ``{"event": "ready"}``, read one
line ``WINDOW_START WINDOW_END STOP`` (CLOCK_MONOTONIC seconds, shared by every
namespace) on stdin, run, and print one JSON line of counters.

:func:`run_ring` judges one step with the product's verdict
(:func:`testbed.measure.verdict.evaluate`), fed what applies to plain UDP:

* ``cpu``: :class:`testbed.measure.cpu.CpuIdleMonitor` samples over the window,
  the run's thresholds (:func:`testbed.measure.thresholds.thresholds_for`);
* ``drops``: :class:`testbed.measure.drops.DropSnapshot` before the senders start
  and after the receivers stop (every counter of packets lost outside the
  emulated queues, Open vSwitch's logged send errors included);
* ``hosts``: each sender's frames over the window against its link rate (a
  blocking sender keeps its NIC queue full: a slower feed means the CPU);
* and, added here, ``delivered`` (each receiver's frames over the window
  against the link rate, the verdict's ``min_link_rate_ratio`` band) and
  ``udp_loss`` (sent - received - emulated switch queue drops beyond
  ``max_unexplained_drops``), plus ``ovs_send_buffer``
  (:func:`testbed.measure.send_buffer.judge_send_buffer`).

The transport checks (loss identity, spurious retransmissions, bytes), the
links check (no queue sampler) and packet timing are not judged.
"""
from __future__ import annotations

import argparse
import errno
import json
import math
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the children import this module too: they start without pandas
    from testbed.measure.verdict import FidelityVerdict

#: the checkout whose code the children run (``-m benchmarks.instruments.udp_ring`` from its root)
REPO = str(Path(__file__).resolve().parents[2])

#: UDP destination port of the ring (RoCEv2's, so the fabric treats it as the agents' data)
PORT = 4791
#: UDP source port of host i's sender: SPORT_BASE + i (one entropy value, as one queue pair)
SPORT_BASE = 49152
#: receive buffer of each receiver (a burst never overflows it)
RCVBUF_BYTES = 4 << 20
#: receive timeout: how often an idle receiver looks at the clock
RECV_TIMEOUT_S = 0.1
#: seconds the receivers keep reading after the senders stopped (frames still in the queues)
DRAIN_S = 0.5
#: seconds the parent waits for a child's ready line or final counters beyond the step's own time
CHILD_TIMEOUT_S = 60.0


# -- the two roles, run inside a host namespace ---------------------------------------------------------------

def _read_times() -> tuple[float, float, float]:
    ws, we, stop = (float(x) for x in sys.stdin.readline().split())
    return ws, we, stop


def _send(ip: str, peer: str, sport: int, udp_payload_bytes: int) -> dict:
    """Send back to back until STOP; count the datagrams sent in [WINDOW_START, WINDOW_END)."""
    from traffic.transport import TransportParams
    from traffic.transport.nic import NIC_FULL_WAIT_S, QUEUE_FULL_ERRNOS, rdma_socket
    from traffic.wire import TOS_DATA

    s = rdma_socket(ip, sport, TOS_DATA, TransportParams.sndbuf_bytes)
    s.connect((peer, PORT))
    pkt = bytes(udp_payload_bytes)
    print(json.dumps({"event": "ready"}), flush=True)
    ws, we, stop = _read_times()
    send, mono, cpu = s.send, time.monotonic, time.process_time
    n = refused = 0
    n_ws = n_we = None
    t_ws = t_we = c_ws = c_we = 0.0
    while True:
        try:
            send(pkt)
        except OSError as e:
            if e.errno in QUEUE_FULL_ERRNOS:
                time.sleep(NIC_FULL_WAIT_S)
                continue
            if e.errno == errno.ECONNREFUSED:  # an ICMP error of an earlier datagram (IP_RECVERR): count, go on
                refused += 1
                continue
            raise
        n += 1
        now = mono()
        if n_ws is None:
            if now >= ws:
                n_ws, t_ws, c_ws = n, now, cpu()
        elif n_we is None and now >= we:
            n_we, t_we, c_we = n, now, cpu()
        if now >= stop:
            break
    if n_we is None:
        n_we, t_we, c_we = n, mono(), cpu()
    if n_ws is None:
        n_ws, t_ws, c_ws = n_we, t_we, c_we
    return {"event": "done", "sent_pkts": n, "window_pkts": n_we - n_ws, "window_s": t_we - t_ws,
            "window_cpu_s": c_we - c_ws, "refused": refused}


def _recv(ip: str) -> dict:
    """Receive until STOP; count the datagrams received in [WINDOW_START, WINDOW_END)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
    sec = int(RECV_TIMEOUT_S)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", sec, int((RECV_TIMEOUT_S - sec) * 1e6)))
    s.bind((ip, PORT))
    buf = bytearray(65536)
    print(json.dumps({"event": "ready"}), flush=True)
    ws, we, stop = _read_times()
    recv_into, mono, cpu = s.recv_into, time.monotonic, time.process_time
    n = 0
    n_ws = n_we = None
    t_ws = t_we = c_ws = c_we = 0.0
    while True:
        try:
            recv_into(buf)
        except (BlockingIOError, socket.timeout):
            now = mono()
            if now >= stop:
                break
            continue
        now = mono()
        if n_ws is None:
            if now >= ws:
                n_ws, t_ws, c_ws = n, now, cpu()
        elif n_we is None and now >= we:
            n_we, t_we, c_we = n, now, cpu()
        n += 1
    if n_we is None:
        n_we, t_we, c_we = n, mono(), cpu()
    if n_ws is None:
        n_ws, t_ws, c_ws = n_we, t_we, c_we
    return {"event": "done", "received_pkts": n, "window_pkts": n_we - n_ws, "window_s": t_we - t_ws,
            "window_cpu_s": c_we - c_ws}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="one end of the plain UDP ring (inside a host namespace)")
    ap.add_argument("--run-id", required=True, help="run id (lets the fabric's cleanup find this process)")
    sub = ap.add_subparsers(dest="role", required=True)
    s = sub.add_parser("send")
    s.add_argument("--peer", required=True)
    s.add_argument("--sport", type=int, required=True)
    s.add_argument("--udp-payload-bytes", type=int, required=True)
    r = sub.add_parser("recv")
    for p in (s, r):
        p.add_argument("--ip", required=True)
    args = ap.parse_args(argv)
    out = _send(args.ip, args.peer, args.sport, args.udp_payload_bytes) if args.role == "send" else _recv(args.ip)
    print(json.dumps(out), flush=True)
    return 0


# -- the parent: one judged step on a live fabric --------------------------------------------------------------

@dataclass
class RingStep:
    """One judged step of the plain UDP ring.

    rate_bps: the hosts' link rate (bit/s); frame_bytes: wire bytes of each datagram's frame
    (no FCS); window_s: the judged window (s); fed_bps / delivered_bps: host -> frame bits/s its
    sender put on its NIC / its receiver got in the window; sent_pkts, received_pkts,
    switch_queue_drops_pkts: totals over the whole step; verdict: the
    :class:`testbed.measure.verdict.FidelityVerdict`; figures: where the CPU went in the window, in
    cores (CPU s per s): ``senders_cores`` and ``receivers_cores`` (the ring's processes),
    ``ovs_vswitchd_cores``, ``softirq_cores`` (the whole machine's: veth forwarding and qdiscs)."""

    rate_bps: float
    frame_bytes: int
    window_s: float
    fed_bps: dict[str, float]
    delivered_bps: dict[str, float]
    sent_pkts: int
    received_pkts: int
    switch_queue_drops_pkts: int
    verdict: "FidelityVerdict"
    figures: dict = field(default_factory=dict)

    @property
    def faithful(self) -> bool:
        return bool(self.verdict.faithful)

    @property
    def min_delivered_bps(self) -> float:
        """The slowest receiver's rate in the window (bit/s of frames); 0 with no receiver."""
        return min(self.delivered_bps.values(), default=0.0)

    @property
    def min_core_idle_pct(self) -> float:
        """The least idle core in any CPU sample of the window (%); NaN when not sampled."""
        return float(self.verdict.figures.get("cpu", {}).get("min_single_cpu_idle_pct", math.nan))

    @property
    def violation(self) -> str:
        """The first violation ("" when none); a not-judged step says so."""
        if self.verdict.violations:
            return self.verdict.violations[0]
        return "" if self.faithful else "not judged: " + "; ".join(self.verdict.not_judged)


def udp_payload_bytes(payload_bytes: int) -> int:
    """UDP payload whose frame has the wire size of a full RoCE data packet of ``payload_bytes``
    (BTH + payload + ICRC, :func:`testbed.measure.link_model.data_frame_bytes`)."""
    from traffic.transport.params import L2_L4_BYTES
    from testbed.measure.link_model import data_frame_bytes

    return data_frame_bytes(payload_bytes) - L2_L4_BYTES


def _popen(fab, rank: int, args: list[str]):
    import subprocess

    return fab.host(rank).popen([sys.executable, "-m", "benchmarks.instruments.udp_ring", "--run-id", fab.run_id,
                                 *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=REPO)


def _await_line(proc, what: str, timeout_s: float) -> dict:
    """The next JSON line ``proc`` prints; RuntimeError naming ``what`` when it ends or says nothing in time."""
    import select

    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        err = proc.stderr.read() if proc.poll() is not None else ""
        raise RuntimeError(f"{what}: no answer within {timeout_s:g} s (exit {proc.poll()}): {err.strip()[-400:]}")
    return json.loads(line)


def _stop_all(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except Exception:
            p.kill()


def _cpu_marks() -> tuple[float, float, float]:
    """(CLOCK_MONOTONIC s, ovs-vswitchd's CPU s (user + system; 0 when not found), the machine's softirq s)."""
    import psutil

    from testbed.measure.drops import OVS_VSWITCHD_PIDFILE

    ovs = 0.0
    try:
        t = psutil.Process(int(Path(OVS_VSWITCHD_PIDFILE).read_text().strip())).cpu_times()
        ovs = t.user + t.system
    except (OSError, ValueError, psutil.Error):
        pass
    return time.monotonic(), ovs, getattr(psutil.cpu_times(), "softirq", 0.0)


def run_ring(fab, payload_bytes: int, duration_s: float = 5.0, warmup_s: float = 1.0,
             send_buffer: Optional[dict] = None, cpu_period_s: float = 1.0) -> RingStep:
    """Run the ring once on the live fabric ``fab`` and judge it (module docstring).

    Args:
        fab: a started :class:`testbed.emulation.fabric.Fabric` (every host link at one rate).
        payload_bytes: RoCE payload whose full data frame each datagram's frame matches (bytes).
        duration_s: the judged window (s), after ``warmup_s`` of sending.
        send_buffer: :func:`testbed.measure.send_buffer.check_run_send_buffer`'s figures, judged
            again after the step (None: the ``ovs_send_buffer`` check is left out).
        cpu_period_s: the CPU monitor's sample period (s; the verdict's runs use 1 s).

    Returns: :class:`RingStep`. Raises RuntimeError when a sender or receiver fails or does not answer;
    the children are stopped on every way out (the fabric's cleanup also finds them by run id).
    """
    import pandas as pd

    from testbed.measure import drops as drop_counters
    from testbed.measure.cpu import CpuIdleMonitor
    from testbed.measure.send_buffer import judge_send_buffer
    from testbed.measure.thresholds import thresholds_for
    from testbed.measure.link_model import data_frame_bytes
    from testbed.measure.fidelity_checks import FAILED, PASSED
    from testbed.measure.verdict import evaluate

    hosts = fab.layout.hosts
    n = len(hosts)
    if n < 2:
        raise ValueError("the ring needs at least 2 hosts")
    frame = data_frame_bytes(payload_bytes)
    rate = {h.name: float(fab.spec.fabric.host_link_bps) for h in hosts}
    host_pids = {h.name: fab.net.get(h.name).pid for h in hosts}
    host_ifs = {h.name: fab.host_intfs(h.name) for h in hosts}
    th = thresholds_for(fab.spec)
    procs = []
    try:
        recv = [_popen(fab, r, ["recv", "--ip", hosts[r].ip]) for r in range(n)]
        procs += recv
        for r, p in enumerate(recv):
            _await_line(p, f"receiver on {hosts[r].name}", CHILD_TIMEOUT_S)
        send = [_popen(fab, r, ["send", "--ip", hosts[r].ip, "--peer", hosts[(r + 1) % n].ip,
                                "--sport", str(SPORT_BASE + r), "--udp-payload-bytes",
                                str(udp_payload_bytes(payload_bytes))]) for r in range(n)]
        procs += send
        for r, p in enumerate(send):
            _await_line(p, f"sender on {hosts[r].name}", CHILD_TIMEOUT_S)
        before = drop_counters.DropSnapshot.take(host_pids, fab.switch_ports, host_ifs)
        ws = time.monotonic() + warmup_s
        we = ws + duration_s
        stop = we + 0.1
        for p in recv:
            p.stdin.write(f"{ws!r} {we!r} {stop + DRAIN_S!r}\n")
            p.stdin.flush()
        for p in send:
            p.stdin.write(f"{ws!r} {we!r} {stop!r}\n")
            p.stdin.flush()
        time.sleep(max(0.0, ws - time.monotonic()))
        with CpuIdleMonitor(cpu_period_s) as cpu:
            c0 = _cpu_marks()
            time.sleep(max(0.0, we - time.monotonic()))
            c1 = _cpu_marks()
        wait_s = stop + DRAIN_S - time.monotonic() + CHILD_TIMEOUT_S
        sent = [_await_line(p, f"sender on {hosts[r].name}", wait_s) for r, p in enumerate(send)]
        got = [_await_line(p, f"receiver on {hosts[r].name}", wait_s) for r, p in enumerate(recv)]
        after = drop_counters.DropSnapshot.take(host_pids, fab.switch_ports, host_ifs)
    finally:
        _stop_all(procs)
    span_s = max(1e-9, c1[0] - c0[0])
    figures = {"senders_cores": sum(x["window_cpu_s"] for x in sent) / duration_s,
               "receivers_cores": sum(x["window_cpu_s"] for x in got) / duration_s,
               "ovs_vswitchd_cores": (c1[1] - c0[1]) / span_s, "softirq_cores": (c1[2] - c0[2]) / span_s}
    fed = {hosts[r].name: 8.0 * s["window_pkts"] * frame / s["window_s"] if s["window_s"] > 0 else 0.0
           for r, s in enumerate(sent)}
    delivered = {hosts[r].name: 8.0 * g["window_pkts"] * frame / g["window_s"] if g["window_s"] > 0 else 0.0
                 for r, g in enumerate(got)}
    host_tx = pd.DataFrame({"host": [h.name for h in hosts],
                            "tx_wire_bytes": [float(s["window_pkts"] * frame) for s in sent],
                            "tx_busy_s": [float(s["window_s"]) for s in sent],
                            "link_bps": [rate[h.name] for h in hosts]})
    delta = drop_counters.delta(before, after)
    v = evaluate(cpu.samples(), delta, None, fab.port_rate_bps, host_tx, th)
    # delivered: each receiver's rate in the window, in the verdict's link-rate band
    low = [f"host {h} received {bps / 1e6:.1f} Mbit/s = {bps / rate[h]:.0%} of {rate[h] / 1e6:.1f} Mbit/s "
           f"(minimum {th.min_link_rate_ratio:.0%})" for h, bps in delivered.items()
           if bps < th.min_link_rate_ratio * rate[h]]
    v.add("delivered", FAILED if low else PASSED, "\n".join(low),
          {h: {"delivered_bps": bps, "ratio": bps / rate[h]} for h, bps in delivered.items()})
    # udp_loss: every datagram sent was received or tail-dropped by an emulated switch queue
    sent_pkts = sum(s["sent_pkts"] for s in sent)
    received_pkts = sum(g["received_pkts"] for g in got)
    queue_drops = drop_counters.queue_drops_delta(before, after)
    lost = sent_pkts - received_pkts - queue_drops
    fig = {"sent_pkts": sent_pkts, "received_pkts": received_pkts, "switch_queue_drops_pkts": queue_drops,
           "unexplained_lost_pkts": lost, "refused": sum(s["refused"] for s in sent)}
    bad = abs(lost) > th.max_unexplained_drops
    v.add("udp_loss", FAILED if bad else PASSED,
          f"{lost} datagrams lost that no emulated switch queue dropped (sent {sent_pkts}, received "
          f"{received_pkts}, switch queue drops {queue_drops}; allowed {th.max_unexplained_drops})" if bad else "",
          fig)
    if send_buffer is not None:
        judge_send_buffer(v, send_buffer)
    return RingStep(rate_bps=float(fab.spec.fabric.host_link_bps), frame_bytes=frame, window_s=duration_s,
                    fed_bps=fed, delivered_bps=delivered, sent_pkts=sent_pkts, received_pkts=received_pkts,
                    switch_queue_drops_pkts=queue_drops, verdict=v, figures=figures)


if __name__ == "__main__":
    sys.exit(main())
