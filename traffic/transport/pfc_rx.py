"""The host NIC's PFC receive side, as an RNIC obeys IEEE 802.1Qbb: pause a priority for the quanta time.

:class:`PfcReceiver` reads MAC control frames (ethertype 0x8808, format :mod:`traffic.wire.pfc`) on
the host's interfaces with an AF_PACKET socket and feeds them to :class:`PauseState`. A frame that
enables priority p with q quanta (re)loads p's pause timer with ``q x 512 / link_bps`` seconds
(802.1Qbb 36.1.3.3: a new frame replaces the running timer, also with a shorter time; q = 0 resumes
at once). ``link_bps`` is the host link's emulated rate (``transport.line_rate_bps``, the run's
``fabric.host_link_bps``): the quanta are bit times of the emulated link, so the wall-clock pause is
quanta x 512 / host_link_bps (at 10 Mbit/s, 65535 quanta are 3.36 s).

Requester QPs (:class:`traffic.transport.qp.RequesterQP`) send only lossless-class data (DSCP 26,
:data:`~traffic.wire.pfc.LOSSLESS_PRIORITY` 3) and ask :meth:`PauseState.paused_until_ns` before each
packet; ACKs and CNPs ride the control class and are never paused. What the QP had already handed
to the kernel (its socket buffer, at most ``sndbuf_bytes``, in the host's egress queue) still
leaves after a pause arrives: the host's reaction time, which headroom must cover.
"""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

from traffic.clock import from_monotonic_ns
from traffic.wire.pfc import ETH_P_MAC_CONTROL, LOSSLESS_PRIORITY, PRIORITIES, parse_pfc, quanta_s

PACKET_OUTGOING = 4  # <linux/if_packet.h>: a frame this host sent


@dataclass(frozen=True)
class PfcFrameRecord:
    """One PFC frame a host received: when (Unix ns), its class-enable vector and the lossless
    priority's quanta (0 when that priority is not enabled or is resumed)."""

    time_ns: int
    class_enable_vector: int
    lossless_quanta: int


class PauseState:
    """Per-priority pause timers of one NIC from received PFC frames (pure; times in monotonic ns).

    ``link_bps``: the link's rate the quanta count bit times of (> 0, else ValueError).
    Counts ``pause_frames`` (frames with quanta > 0 for the lossless priority), ``resume_frames``
    (frames enabling it with quanta 0), ``other_frames`` (frames not touching it) and the time the
    lossless priority was paused (:meth:`paused_ns`: the union of its paused intervals).
    """

    def __init__(self, link_bps: float):
        if not link_bps > 0:
            raise ValueError(f"link_bps={link_bps!r}: must be > 0")
        self.link_bps = float(link_bps)
        self._until = [0] * PRIORITIES
        self._start = [0] * PRIORITIES
        self._closed_ns = [0] * PRIORITIES
        self.pause_frames = self.resume_frames = self.other_frames = 0

    def on_frame(self, now_ns: int, class_enable_vector: int, quanta) -> None:
        """Apply one PFC frame received at ``now_ns``: each enabled priority's timer is reloaded."""
        for p in range(PRIORITIES):
            if not class_enable_vector >> p & 1:
                continue
            until = now_ns + round(quanta_s(quanta[p], self.link_bps) * 1e9)
            if self._until[p] <= now_ns:  # not paused: the last interval is over, a new one may start
                self._closed_ns[p] += self._until[p] - self._start[p]
                self._start[p] = now_ns
            self._until[p] = until
        if class_enable_vector >> LOSSLESS_PRIORITY & 1:
            if quanta[LOSSLESS_PRIORITY]:
                self.pause_frames += 1
            else:
                self.resume_frames += 1
        else:
            self.other_frames += 1

    def paused_until_ns(self, now_ns: int, priority: int = LOSSLESS_PRIORITY) -> int:
        """End of ``priority``'s pause (monotonic ns) if it is paused at ``now_ns``, else 0."""
        until = self._until[priority]
        return until if until > now_ns else 0

    def paused_ns(self, now_ns: int, priority: int = LOSSLESS_PRIORITY) -> int:
        """Total time ``priority`` was paused up to ``now_ns``."""
        return self._closed_ns[priority] + max(0, min(self._until[priority], now_ns) - self._start[priority])


class PfcReceiver:
    """Receive PFC frames on every interface of this (host) namespace and keep :attr:`state`.

    ``on_change()`` is called after each frame (the agent wakes its QPs, so a resume takes effect at
    once); :attr:`frames` logs each frame (:class:`PfcFrameRecord`). Needs CAP_NET_RAW (the agents
    run as root): raises OSError otherwise.
    """

    def __init__(self, link_bps: float, on_change=None):
        self.state = PauseState(link_bps)
        self.on_change = on_change
        self.frames: list[PfcFrameRecord] = []
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_MAC_CONTROL))
        self.sock.settimeout(0.2)
        self._stop = False
        self.thread = threading.Thread(target=self._run, name="pfc-rx", daemon=True)

    def start(self) -> "PfcReceiver":
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop = True
        self.thread.join(timeout=2)
        self.sock.close()

    def paused_until_ns(self, now_ns: int) -> int:
        """End of the lossless priority's pause (monotonic ns), 0 when not paused (see PauseState)."""
        return self.state.paused_until_ns(now_ns)

    def counters(self, now_ns: int | None = None) -> dict:
        """pause_frames, resume_frames, other_frames and paused_ns (lossless priority) so far."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        with self.lock:
            s = self.state
            return {"pause_frames": s.pause_frames, "resume_frames": s.resume_frames,
                    "other_frames": s.other_frames, "paused_ns": s.paused_ns(now_ns)}

    def _run(self) -> None:
        while not self._stop:
            try:
                frame, addr = self.sock.recvfrom(128)
            except socket.timeout:
                continue
            except OSError:
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            parsed = parse_pfc(frame)
            if parsed is None:  # another MAC control frame (802.3x PAUSE, ...): not ours to obey
                continue
            now = time.monotonic_ns()
            vector, quanta = parsed
            with self.lock:
                self.state.on_frame(now, vector, quanta)
                lossless = quanta[LOSSLESS_PRIORITY] if vector >> LOSSLESS_PRIORITY & 1 else 0
                self.frames.append(PfcFrameRecord(from_monotonic_ns(now), vector, lossless))
            if self.on_change is not None:
                self.on_change()
