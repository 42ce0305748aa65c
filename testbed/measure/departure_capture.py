"""Departure capture: the times frames leave backlogged switch ports, as the packet timing check
(:mod:`testbed.measure.packet_timing`) needs them.

:class:`DepartureCapture` opens, on a few switch ports the queue sampler sees
backlogged (>= ``BACKLOGGED_PKTS`` packets), an AF_PACKET socket that keeps only outgoing frames
(a classic BPF filter on the packet type) with kernel receive timestamps: the
tap sees a frame when the qdisc hands it to the veth, i.e. its departure.
Each capture is bounded (``window_s`` seconds, ``max_pkts`` frames, at most
``max_ports`` ports at once and ``max_windows`` in all) so its cost stays
small.
"""
from __future__ import annotations

import ctypes
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traffic import clock
from traffic.transport.pfc_rx import PACKET_OUTGOING

ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
_SKF_AD_PKTTYPE = -0x1000 + 4  # SKF_AD_OFF + SKF_AD_PKTTYPE (include/uapi/linux/filter.h)
#: classic BPF: keep outgoing frames whole, drop everything else (``tcpdump -d outbound``); only
#: the first bytes are copied out, and ``MSG_TRUNC`` returns the frame's real length
_BPF_OUTBOUND = [
    (0x20, 0, 0, _SKF_AD_PKTTYPE & 0xFFFFFFFF),  # ld  [pkttype]
    (0x15, 0, 1, PACKET_OUTGOING),               # jeq #4, next, drop
    (0x06, 0, 0, 0x40000),                       # ret #262144
    (0x06, 0, 0, 0),                             # ret #0
]
BACKLOGGED_PKTS = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _outbound_socket(ifname: str) -> socket.socket:
    """AF_PACKET socket on ``ifname`` that receives only frames leaving it, with ns timestamps.

    Opened with protocol 0 (it receives nothing) and given ETH_P_ALL only by the bind: a socket
    opened with ETH_P_ALL takes frames of every interface until bound (seen: a 62-byte RoCE ACK
    leaving the loopback of another process got into a capture of a veth)."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    prog = b"".join(struct.pack("=HBBI", *ins) for ins in _BPF_OUTBOUND)
    buf = ctypes.create_string_buffer(prog)
    fprog = _SockFprog(len(_BPF_OUTBOUND), ctypes.addressof(buf))
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(fprog))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.bind((ifname, ETH_P_ALL))
    s.setblocking(False)
    return s


@dataclass
class _Window:
    port: str
    sock: socket.socket
    t_end: float
    t_ns: list = field(default_factory=list)
    length: list = field(default_factory=list)


class DepartureCapture:
    """Bounded captures of departure times on switch ports that are backlogged.

    Feed it the queue sampler's samples (``QdiscSampler(on_sample=cap.on_sample)``);
    it arms a capture of ``window_s`` seconds (at most ``max_pkts`` frames) on a
    port whose backlog reached ``BACKLOGGED_PKTS``, on at most ``max_ports`` ports
    at once and ``max_windows`` times in all (one window per port at a time).
    Use as a context manager (the reader thread); then :meth:`to_frame`.
    Times are on the run's one clock (:func:`traffic.clock.unix_ns`; kernel
    CLOCK_REALTIME stamps shifted by the offset measured at start), like the sampler's.
    """

    def __init__(self, ports: list[str], max_ports: int = 4, window_s: float = 1.0, max_pkts: int = 3000,
                 max_windows: int = 12):
        self.ports = list(ports)
        self.max_ports, self.window_s, self.max_pkts, self.max_windows = max_ports, window_s, max_pkts, max_windows
        self._lock = threading.Lock()
        self._open: dict[str, _Window] = {}
        self._done: list[_Window] = []
        self.windows = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # kernel stamps are CLOCK_REALTIME: shift them onto the run's one clock (traffic.clock.unix_ns)
        self._offset_ns = time.time_ns() - clock.unix_ns()
        self.cpu_s = 0.0
        self._keeper: socket.socket | None = None

    def on_sample(self, t_ns: int, counters: np.ndarray) -> None:
        """Sampler callback: arm captures on backlogged ports (cheap when nothing to do)."""
        if self._stop.is_set() or self.windows >= self.max_windows or len(self._open) >= self.max_ports:
            return
        busy = np.flatnonzero(counters[:, 4] >= BACKLOGGED_PKTS)
        if busy.size == 0:
            return
        with self._lock:
            if self._stop.is_set():  # stopped while the sampler still runs: open nothing new
                return
            for i in busy:
                port = self.ports[i]
                if port in self._open or self.windows >= self.max_windows or len(self._open) >= self.max_ports:
                    continue
                if sum(w.port == port for w in self._done) >= 2:  # spread windows over ports
                    continue
                try:
                    sock = _outbound_socket(port)
                except OSError:
                    continue
                self._open[port] = _Window(port, sock, time.monotonic() + self.window_s)
                self.windows += 1

    def __enter__(self) -> "DepartureCapture":
        # Kernel timestamps are on only while some socket asks for them (the netstamp static key is
        # switched on by deferred work): until then a frame gets its stamp when it is READ, and a
        # window's first frames looked back to back. A socket holding SO_TIMESTAMPNS for the whole
        # capture keeps the stamps on, from the first frame of every window.
        self._keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self._thread = threading.Thread(target=self._run, name="DepartureCapture", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for w in self._open.values():
                self._close(w)
            self._open.clear()
        self._keeper.close()

    def _close(self, w: _Window) -> None:
        w.sock.close()
        self._done.append(w)

    def _run(self) -> None:
        c0 = time.thread_time()
        anc = socket.CMSG_SPACE(16)
        buf = bytearray(64)
        try:
            while not self._stop.is_set():
                with self._lock:
                    now = time.monotonic()
                    for port in [p for p, w in self._open.items() if now >= w.t_end or len(w.t_ns) >= self.max_pkts]:
                        self._close(self._open.pop(port))
                    socks = {w.sock: w for w in self._open.values()}
                if not socks:
                    self._stop.wait(0.05)
                    continue
                ready, _, _ = select.select(list(socks), [], [], 0.05)
                for s in ready:
                    w = socks[s]
                    while True:
                        try:
                            n, cmsgs, _, _ = s.recvmsg_into([buf], anc, socket.MSG_TRUNC)
                        except OSError:  # BlockingIOError: drained
                            break
                        for level, ctype, cdata in cmsgs:
                            if level == socket.SOL_SOCKET and ctype == SCM_TIMESTAMPNS:
                                sec, nsec = struct.unpack("=qq", cdata[:16])
                                w.t_ns.append(sec * 1_000_000_000 + nsec - self._offset_ns)
                                w.length.append(n)
        finally:
            self.cpu_s += time.thread_time() - c0

    def to_frame(self) -> pd.DataFrame:
        """Departures: DataFrame(port, window, time_ns (traffic.clock.unix_ns scale), frame_bytes);
        ``attrs["capture_cpu_s"]``: CPU seconds the reader thread used."""
        rows = []
        for k, w in enumerate(self._done):
            rows.append(pd.DataFrame({"port": w.port, "window": k, "time_ns": np.asarray(w.t_ns, dtype=np.int64),
                                      "frame_bytes": np.asarray(w.length, dtype=np.int64)}))
        if rows:
            frame = pd.concat(rows, ignore_index=True)
        else:
            frame = pd.DataFrame({"port": pd.Series(dtype=str), "window": pd.Series(dtype="int64"),
                                  "time_ns": pd.Series(dtype="int64"), "frame_bytes": pd.Series(dtype="int64")})
        frame.attrs["capture_cpu_s"] = self.cpu_s
        return frame


def write_departures(capture: "DepartureCapture | None", run_dir) -> "pd.DataFrame | None":
    """The capture's departures, written to ``run_dir/departures.csv``; None without a capture."""
    if capture is None:
        return None
    frame = capture.to_frame()
    frame.to_csv(run_dir / "departures.csv", index=False)
    return frame
