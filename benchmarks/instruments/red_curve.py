"""Measure the marking probability as a function of the queue: per-packet CE binned by the sampled backlog.

One leaf, three hosts: h1 and h2 send ECT(0) datagrams of the lossless class
(TOS 0x6a, DSCP 26) to h3, each paced by a token bucket in the sender (not by
its NIC, so its own NIC queue stays empty and a datagram reaches the switch
port when it is sent). A queue holder in this process drives both senders
from the samples of the congested port's lossless class (its leaf: a sch_red
qdisc, or the nftables marker's tbf): while the backlog is below ``low_bytes``
they send at ``fast`` x the port's rate together, and once it reaches
``high_bytes`` at ``slow`` x that rate, so the backlog sweeps up and down
between the two (a sawtooth) and passes every queue level from below Kmin to
above Kmax many times at a known, gentle slope.

Each datagram carries its send time (traffic.clock, the sampler's clock). The
receiver records per datagram the send time and whether it arrived CE. The
queue a datagram found on arrival at the port is the sampled backlog
interpolated linearly at its send time (:func:`bin_marks`); datagrams are
binned by it and each bin's CE fraction is the measured marking probability,
set beside the RED line p = Pmax (q - Kmin) / (Kmax - Kmin) averaged over the
bin's datagrams (0 below Kmin, 1 above Kmax). Error of the attribution: the
interpolation between samples (the queue moves by ``|fast - 1| x rate x
period`` between two samples, 0.2 kB at 1 Mbit/s, 5 ms, fast 1.3) and the
time from ``sendto`` to the enqueue at the switch port; a guard of one frame
on each side of Kmax keeps packets whose queue is uncertain by that much out
of the bins beside the line's jump to 1. Counted at the receiver: the holder
keeps the backlog far below the class buffer, so no datagram is tail-dropped
(:func:`measure_curve` reports the port's drops).

Host side: ``python -m benchmarks.instruments.red_curve send DST PORT`` (rate
commands on stdin: one line of bit/s each, the first sets the starting rate;
exits on EOF) and ``... recv PORT SECONDS`` (prints "ready", then one JSON
line {"send_ns": [...], "ce": [...]}).
"""
from __future__ import annotations

import json
import os
import select
import socket
import struct
import sys
import threading
import time
from pathlib import Path

import numpy as np

#: the repository root: host-side runs (``python -m benchmarks.instruments.red_curve``) start there
ROOT = Path(__file__).resolve().parents[2]

TOS_ECT0_LOSSLESS = 0x6A  # DSCP 26 (lossless class), ECN ECT(0)
UDP_PORT = 47_920
PAYLOAD_BYTES = 1000
FRAME_BYTES = PAYLOAD_BYTES + 8 + 20 + 14  # skb->len at the switch port: Ethernet, IPv4, UDP, payload
IP_RECVTOS = 13
IP_TOS_CMSG = 1
_STAMP = struct.Struct("!Q")
_BACKLOG_COL = 3  # dataplane.qdisc_sampler.COUNTERS: tx_bytes, tx_pkts, drops_pkts, backlog_bytes, backlog_pkts
_DROPS_COL = 2


# -- the two ends (run in the hosts) ----------------------------------------------------------------------
def send(dst: str, port: int, stdin=sys.stdin.buffer) -> int:
    """Send stamped ECT(0) datagrams to ``dst:port`` at the rate (bit/s, of whole frames) given by the last
    line read from ``stdin``; stop at EOF. The first line must arrive before anything is sent. Pacing:
    one datagram every FRAME_BYTES x 8 / rate s on a fixed grid; a sender that falls behind restarts
    the grid (no catch-up burst). Returns the number of datagrams sent."""
    from traffic.clock import unix_ns

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, TOS_ECT0_LOSSLESS)
    fd = stdin.fileno()
    os.set_blocking(fd, False)
    buf, rate_bps, sent = b"", 0.0, 0
    pad = bytes(PAYLOAD_BYTES - _STAMP.size)
    next_s = time.monotonic()
    while True:
        now = time.monotonic()
        wait = max(0.0, next_s - now) if rate_bps > 0 else None
        ready, _, _ = select.select([fd], [], [], wait)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                return sent
            buf += chunk
            *lines, buf = buf.split(b"\n")
            if lines:
                new = float(lines[-1])
                if new != rate_bps:
                    rate_bps = new
                    next_s = max(next_s, time.monotonic()) if rate_bps > 0 else next_s
            continue
        now = time.monotonic()
        if rate_bps <= 0 or now < next_s:
            continue
        s.sendto(_STAMP.pack(unix_ns()) + pad, (dst, port))
        sent += 1
        gap = FRAME_BYTES * 8 / rate_bps
        next_s = next_s + gap if next_s + gap > now else now + gap


def recv(port: int, seconds: float) -> dict:
    """Record each datagram's send stamp and CE bit for ``seconds``; prints "ready" once bound."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.bind(("0.0.0.0", port))
    print("ready", flush=True)
    send_ns, ce = [], []
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        s.settimeout(min(left, 0.2))
        try:
            data, anc, _, _ = s.recvmsg(2048, 64)
        except socket.timeout:
            continue
        tos = next((c[2][0] for c in anc if c[0] == socket.IPPROTO_IP and c[1] == IP_TOS_CMSG), None)
        if tos is None or len(data) < _STAMP.size:
            continue
        send_ns.append(_STAMP.unpack_from(data)[0])
        ce.append(int(tos & 3 == 3))
    return {"send_ns": send_ns, "ce": ce}


# -- the queue holder (runs in the sampler thread) --------------------------------------------------------
class QueueHolder:
    """Switch the senders between ``fast_bps`` and ``slow_bps`` (each sender's rate) so that the backlog of
    column ``column`` of the sampler's rows sweeps between ``low_bytes`` and ``high_bytes`` (hysteresis).
    ``on_sample`` is a QdiscSampler callback; :meth:`attach` gives it the senders' stdin pipes. ``flips``
    counts the switches (2 per sweep up and down)."""

    def __init__(self, column: int, low_bytes: int, high_bytes: int, fast_bps: float, slow_bps: float):
        if not 0 <= low_bytes < high_bytes:
            raise ValueError(f"low_bytes={low_bytes!r}, high_bytes={high_bytes!r}: need 0 <= low < high")
        if not fast_bps > slow_bps >= 0:
            raise ValueError(f"fast_bps={fast_bps!r}, slow_bps={slow_bps!r}: need fast > slow >= 0")
        self.column, self.low, self.high = column, low_bytes, high_bytes
        self.fast_bps, self.slow_bps = fast_bps, slow_bps
        self.fast = True
        self.flips = 0
        self._pipes: list = []
        self._lock = threading.Lock()

    def attach(self, pipes: list) -> None:
        """Start driving ``pipes`` (binary, the senders' stdin), at the fast rate."""
        with self._lock:
            self._pipes = list(pipes)
            self.fast = True
            self._tell(self.fast_bps)

    def detach(self) -> None:
        """Stop driving the senders (their pipes are the caller's to close)."""
        with self._lock:
            self._pipes = []

    def _tell(self, rate_bps: float) -> None:
        for p in self._pipes:
            try:
                p.write(f"{rate_bps:.0f}\n".encode())
                p.flush()
            except (BrokenPipeError, ValueError):
                pass

    def on_sample(self, _time_ns: int, counters: np.ndarray) -> None:
        backlog = int(counters[self.column, _BACKLOG_COL])
        if backlog < 0:
            return
        with self._lock:
            if not self._pipes:
                return
            if self.fast and backlog >= self.high:
                self.fast = False
            elif not self.fast and backlog <= self.low:
                self.fast = True
            else:
                return
            self.flips += 1
            self._tell(self.fast_bps if self.fast else self.slow_bps)


def chain(*callbacks):
    """One QdiscSampler ``on_sample`` that calls each of ``callbacks`` (None entries skipped) in order."""
    cbs = [c for c in callbacks if c is not None]

    def on_sample(t_ns, counters):
        for c in cbs:
            c(t_ns, counters)
    return on_sample


# -- the analysis (pure) ----------------------------------------------------------------------------------
def bin_edges(curve, bins: int, guard_bytes: int, top_bytes: float) -> list[tuple[float, float]]:
    """Queue ranges [lo, hi) in bytes: one below Kmin, ``bins`` equal ones over [Kmin, Kmax - guard), one
    over [Kmax + guard, ``top_bytes``). ValueError for bins < 1, a guard not under the bin width, or
    top_bytes not above Kmax + guard."""
    if bins < 1:
        raise ValueError(f"bins={bins!r} must be >= 1")
    kmin, kmax = curve.kmin_bytes, curve.kmax_bytes
    if not 0 <= guard_bytes < (kmax - kmin) / bins:
        raise ValueError(f"guard_bytes={guard_bytes!r} must be >= 0 and under the bin width "
                         f"{(kmax - kmin) / bins:.0f} B")
    if not top_bytes > kmax + guard_bytes:
        raise ValueError(f"top_bytes={top_bytes!r} must be above Kmax + guard = {kmax + guard_bytes} B")
    inner = np.linspace(kmin, kmax - guard_bytes, bins + 1)
    return [(0.0, float(kmin))] + [(float(a), float(b)) for a, b in zip(inner[:-1], inner[1:])] + \
        [(float(kmax + guard_bytes), float(top_bytes))]


def bin_marks(send_ns, ce, sample_ns, backlog_bytes, curve, edges, t_from_ns: int = 0) -> list[dict]:
    """Marking probability per queue range.

    ``send_ns``, ``ce``: per datagram (Unix ns, 0/1); ``sample_ns``, ``backlog_bytes``: the port's samples
    (increasing times); ``curve``: the RED curve (``probability(q)``); ``edges``: [lo, hi) queue ranges in
    bytes (:func:`bin_edges`); datagrams sent before ``t_from_ns`` or outside the samples' span are left out.
    Each datagram's queue = the backlog interpolated at its send time. Returns one dict per range:
    ``lo_bytes``, ``hi_bytes``, ``packets``, ``marked``, ``measured_p`` (marked / packets, NaN when none),
    ``line_p`` (the curve averaged over the range's datagrams), ``queue_mean_bytes``.
    ValueError when the arrays' lengths differ or there are fewer than 2 samples."""
    send_ns, ce = np.asarray(send_ns, dtype=np.int64), np.asarray(ce, dtype=np.int64)
    sample_ns, backlog = np.asarray(sample_ns, dtype=np.int64), np.asarray(backlog_bytes, dtype=float)
    if len(send_ns) != len(ce) or len(sample_ns) != len(backlog):
        raise ValueError(f"lengths differ: send_ns {len(send_ns)}, ce {len(ce)}; sample_ns {len(sample_ns)}, "
                         f"backlog_bytes {len(backlog)}")
    if len(sample_ns) < 2:
        raise ValueError(f"{len(sample_ns)} backlog samples: need at least 2 to interpolate")
    keep = (send_ns >= max(t_from_ns, sample_ns[0])) & (send_ns <= sample_ns[-1])
    t0 = sample_ns[0]
    q = np.interp((send_ns[keep] - t0).astype(float), (sample_ns - t0).astype(float), backlog)
    marked = ce[keep]
    line = np.array([curve.probability(x) for x in q]) if len(q) else np.zeros(0)
    rows = []
    for lo, hi in edges:
        m = (q >= lo) & (q < hi)
        n = int(m.sum())
        rows.append({"lo_bytes": lo, "hi_bytes": hi, "packets": n, "marked": int(marked[m].sum()),
                     "measured_p": round(float(marked[m].mean()), 4) if n else float("nan"),
                     "line_p": round(float(line[m].mean()), 4) if n else float("nan"),
                     "queue_mean_bytes": round(float(q[m].mean()), 1) if n else float("nan")})
    return rows


# -- one measurement on a running fabric ------------------------------------------------------------------
def measure_curve(fab, sampler, curve, senders: list[int], receiver: int, port: str, seconds: float,
                  warmup_s: float, low_bytes: int, high_bytes: int, fast: float = 1.3, slow: float = 0.7,
                  bins: int = 4) -> dict:
    """Sweep ``port``'s lossless backlog between ``low_bytes`` and ``high_bytes`` for ``warmup_s + seconds``
    and bin the datagrams sent after the warm-up (:func:`bin_marks`).

    ``fab``: the running Fabric; ``sampler``: a QdiscSampler of the lossless leaves of ``fab.switch_ports``,
    not yet started (its ``on_sample``, e.g. the nftables marker's, is kept and the holder is chained
    after it); ``curve``: the RED curve the port marks with; ``senders``/``receiver``: host ranks;
    ``fast``/``slow``: the senders' total rate as a multiple of the port's rate while the backlog rises /
    falls. Returns: ``bins`` (rows of :func:`bin_marks`), ``sent`` (per sender), ``received``, ``ce``,
    ``flips`` (holder switches), ``drops_pkts`` (the class's drops over the run), ``rate_bps``, the
    settings, ``samples``, ``missed_ticks``. RuntimeError when the receiver fails."""
    link = fab.layout.links_of(fab.layout.hosts[receiver].name)[0]
    rate_bps = link.rate_bps
    column = fab.switch_ports.index(port)
    holder = QueueHolder(column, low_bytes, high_bytes, fast * rate_bps / len(senders),
                         slow * rate_bps / len(senders))
    sampler.on_sample = chain(sampler.on_sample, holder.on_sample)
    py, total_s = sys.executable, warmup_s + seconds
    dst = fab.layout.hosts[receiver].ip
    with sampler:
        rx = fab.host(receiver).popen([py, "-m", "benchmarks.instruments.red_curve", "recv", str(UDP_PORT),
                                       str(total_s + 3)], stdout=-1, stderr=-1, cwd=ROOT)
        rx.stdout.readline()  # "ready" (empty: it failed, reported below)
        tx = []
        try:
            tx = [fab.host(r).popen([py, "-m", "benchmarks.instruments.red_curve", "send", dst, str(UDP_PORT)],
                                    stdin=-1, stdout=-1, stderr=-1, cwd=ROOT) for r in senders]
            from traffic.clock import unix_ns
            t_start_ns = unix_ns()
            holder.attach([p.stdin for p in tx])
            time.sleep(total_s)
            holder.detach()
            for p in tx:  # EOF: the senders stop
                p.stdin.close()
                p.stdin = None
            sent = [int((p.communicate(timeout=30)[0].decode().split() or ["-1"])[-1]) for p in tx]
            out, err = rx.communicate(timeout=total_s + 60)
        except BaseException:  # Ctrl-C, a timeout: end the processes this started before the fabric goes
            holder.detach()
            for p in (rx, *tx):
                if p.poll() is None:
                    p.kill()
                    p.wait()
            raise
    if rx.returncode != 0:
        raise RuntimeError(f"receiver failed: {err.decode().strip()[-400:]}")
    got = json.loads(out.decode().strip().splitlines()[-1])
    frame = sampler.to_frame()
    f = frame[frame["port"] == port]
    t_from = t_start_ns + int(warmup_s * 1e9)
    after = f[f["time_ns"] >= t_from]
    rows = bin_marks(got["send_ns"], got["ce"], f["time_ns"], f["backlog_bytes"], curve,
                     bin_edges(curve, bins, FRAME_BYTES, high_bytes + 50 * FRAME_BYTES), t_from)
    return {"bins": rows, "sent": sent, "received": len(got["ce"]), "ce": int(sum(got["ce"])),
            "flips": holder.flips,
            "drops_pkts": int(after["drops_pkts"].iloc[-1] - after["drops_pkts"].iloc[0]) if len(after) else None,
            "backlog_max_bytes": int(after["backlog_bytes"].max()) if len(after) else None,
            "rate_bps": rate_bps, "fast": fast, "slow": slow, "low_bytes": low_bytes, "high_bytes": high_bytes,
            "seconds": seconds, "warmup_s": warmup_s, "samples": int(len(after)),
            "period_s": sampler.period_s, "missed_ticks": sampler.missed_ticks,
            "kmin_bytes": curve.kmin_bytes, "kmax_bytes": curve.kmax_bytes, "pmax": curve.pmax}


def scenario(marker: str, link_bps: str, kmin_bytes: int, kmax_bytes: int, pmax: float, datapath: str = "auto"):
    """The measurement's scenario: 1 leaf, 3 hosts, ``htb_classes`` with a 100 kB lossless buffer, every link
    at ``link_bps``, ECN on the lossless class with the curve and ``marker`` (red | nftables)."""
    from testbed.spec.scenario import parse_scenario

    return parse_scenario({
        "name": "red_curve",
        "fabric": {"spines": 1, "leaves": 1, "hosts_per_leaf": 3, "queue_backend": "htb_classes",
                   "buffer_bytes": 100_000, "host_link_bps": link_bps, "fabric_link_bps": link_bps,
                   "datapath": datapath},
        "congestion": {"ecn": {"kmin_bytes": kmin_bytes, "kmax_bytes": kmax_bytes, "pmax": pmax, "marker": marker}},
        "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})


def run_curve(spec, run_dir: Path, datapath: str, period_s: float, **measure) -> dict:
    """Build ``spec``'s fabric, measure the curve on the leaf's port toward h3 (h1 + h2 -> h3) with the
    marker ``spec`` names, and tear it down. ``red``: the fabric's sch_red leaves mark, a QdiscSampler
    of the lossless leaves at ``period_s`` feeds the holder; ``nftables``: the fabric is built without
    ECN and this process runs the marker's 1 ms loop (benchmarks.instruments.ecn_curve.EcnLoop, whose
    sampler also feeds the holder). ``measure``: :func:`measure_curve`'s keywords (seconds, warmup_s,
    low_bytes, high_bytes, fast, slow, bins). Returns :func:`measure_curve`'s dict with ``marker``,
    ``port``, ``fabric_up_s`` and, for red, ``red_stats`` (the port's RED counters after the run)."""
    from benchmarks.instruments.ecn_curve import EcnLoop, congested_port, fabric_spec
    from dataplane.qdisc_sampler import QdiscSampler
    from dataplane.queues.sch_red import red_stats
    from testbed.emulation.fabric import Fabric
    from testbed.host.runlock import RunLock
    from testbed.spec.congestion import CLASS_NAMES
    from topology.naming import new_run_id

    ecn = spec.congestion.ecn
    marker = ecn.marker
    if marker not in ("red", "nftables"):
        raise ValueError(f"congestion.ecn.marker={marker!r}: resolve it first (allowed here: red, nftables)")
    curve = spec.congestion.traffic_classes(spec.fabric.buffer_bytes, spec.fabric.mtu_bytes + 14)[1].marking
    rid = new_run_id()
    t0 = time.monotonic()
    built = spec if marker == "red" else fabric_spec(spec)
    with RunLock(rid), Fabric(built, rid, run_dir, datapath) as fab:
        up_s = time.monotonic() - t0
        port = congested_port(fab, 2)
        if marker == "red":
            sampler = QdiscSampler(fab.switch_ports, period_s,
                                   parent=fab.queues.class_parent(CLASS_NAMES.index("lossless")))
            res = measure_curve(fab, sampler, curve, [0, 1], 2, port, **measure)
            res["red_stats"] = red_stats(port)
        else:
            loop = EcnLoop.for_run(spec, rid, fab.switch_ports, fab.queues)
            with loop.marker:
                res = measure_curve(fab, loop.sampler, curve, [0, 1], 2, port, **measure)
            res["nft_counts"] = loop.marker.counts.get(port)
    res.update(marker=marker, port=port, fabric_up_s=round(up_s, 1), datapath=datapath)
    return res


def format_bins(rows: list[dict]) -> list[str]:
    """The table lines of :func:`bin_marks` rows: queue range (kB), packets, measured p, RED line p, error."""
    lines = [f"{'queue_kB':>13} {'packets':>7} {'measured_p':>10} {'line_p':>6} {'err_pp':>6}"]
    for r in rows:
        hi = "inf" if r["hi_bytes"] == float("inf") else f"{r['hi_bytes'] / 1e3:.1f}"
        err = 100 * (r["measured_p"] - r["line_p"]) if r["packets"] else float("nan")
        lines.append(f"{r['lo_bytes'] / 1e3:>6.1f}-{hi:<6} {r['packets']:>7} {r['measured_p']:>10.3f} "
                     f"{r['line_p']:>6.3f} {err:>+6.1f}")
    return lines


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if len(sys.argv) == 4 and sys.argv[1] == "send":
        print(send(sys.argv[2], int(sys.argv[3])), flush=True)
    elif len(sys.argv) == 4 and sys.argv[1] == "recv":
        print(json.dumps(recv(int(sys.argv[2]), float(sys.argv[3]))), flush=True)
    else:
        sys.exit(f"usage: {sys.argv[0]} send DST PORT (rates in bit/s on stdin) | recv PORT SECONDS")
