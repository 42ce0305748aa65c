"""Send real PFC frames (IEEE 802.1Qbb) from a switch port toward the device it faces.

A switch pauses an upstream HOST with MAC control frames (format: :mod:`traffic.wire.pfc`), sent
from the switch port's own interface: the switch veths of a run live in the root namespace (userspace
OVS), so an AF_PACKET socket bound to the port sends the frame straight onto the link, to the host's
NIC, where the host agent (:mod:`traffic.transport.pfc_rx`) obeys it. The socket sets
PACKET_QDISC_BYPASS: a MAC control frame is made by the MAC, not queued behind data in the port's
egress classes (a pause waiting behind a full lossy queue would come too late). Nothing of it enters
Open vSwitch (its receive socket on the port skips outgoing frames). The bypass still runs the netdev
egress hook, where the run's silent-tail-drop rule (:mod:`testbed.emulation.switch_tail_drop`) would
steal the frame into the qdisc and the send would fail with ENOBUFS (seen: the congestion loop died on
the first pause toward a host); the socket's mark (SO_MARK) is that rule's second-pass mark, so it lets
the frame by.

- :func:`send_pfc`: one frame, e.g. ``send_pfc("tb12abl1-eth1", 0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0])``;
- :class:`PfcSender`: the long-lived sender a pause loop keeps per port: :meth:`PfcSender.pause`
  sends the pause and, while the priority stays paused, refreshes it at half its duration (as
  switches do, so the pause never lapses); :meth:`PfcSender.resume` sends quanta 0.

Needs CAP_NET_RAW (root), like everything that builds a fabric.
"""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field

from dataplane.skb_marks import SECOND_PASS_MARK
from traffic.clock import unix_ns
from traffic.wire.pfc import (LOSSLESS_PRIORITY, MAX_QUANTA, PRIORITIES, class_vector, pfc_frame, parse_pfc,  # noqa: F401
                              quanta_s)

SOL_PACKET = 263           # <linux/socket.h>
PACKET_QDISC_BYPASS = 20   # <linux/if_packet.h>


def _port_socket(ifname: str, netns: str | None = None) -> tuple[socket.socket, bytes]:
    """An AF_PACKET socket sending on ``ifname`` past its qdisc, and the interface's MAC address.

    ``netns``: the interface's namespace (a path such as ``/proc/<pid>/ns/net``; None: ours).
    Raises OSError (ENODEV) when there is no such interface in that namespace."""
    if netns is None:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: sends only, receives nothing
    else:
        from pyroute2.netns import create_socket
        s = create_socket(netns, socket.AF_PACKET, socket.SOCK_RAW, 0, flags=0)
    try:
        s.bind((ifname, 0))
        s.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, SECOND_PASS_MARK)  # past the tail-drop rule
        mac = s.getsockname()[4]
    except OSError:
        s.close()
        raise
    return s, bytes(mac)


def send_pfc(ifname: str, class_enable_vector: int, quanta) -> bytes:
    """Send one PFC frame on ``ifname`` (root namespace); return the frame's bytes.

    ``class_enable_vector``: bit i enables priority i; ``quanta``: 8 pause times in quanta (0 = resume).
    Raises ValueError for a bad vector or quanta (before anything is sent), OSError for a missing
    interface or without CAP_NET_RAW."""
    pfc_frame(bytes(6), class_enable_vector, quanta)  # checks the arguments before a socket exists
    s, mac = _port_socket(ifname)
    try:
        frame = pfc_frame(mac, class_enable_vector, quanta)
        s.send(frame)
    finally:
        s.close()
    return frame


@dataclass
class PfcSendCounters:
    """Frames one :class:`PfcSender` sent: pauses (first of a pause), refreshes, resumes; and their log."""

    pause_frames: int = 0
    refresh_frames: int = 0
    resume_frames: int = 0
    #: (unix ns, class-enable vector, 8 quanta) of every frame sent
    log: list = field(default_factory=list)

    @property
    def frames(self) -> int:
        return self.pause_frames + self.refresh_frames + self.resume_frames


class PfcSender:
    """PFC frames from one switch port ``ifname`` toward a device on a link of ``link_bps``.

    ``pause(priority, quanta)`` pauses; while paused the sender re-sends the pause every half of its
    duration (``quanta x 512 / link_bps / 2`` s), so the receiver stays paused until
    ``resume(priority)``, which sends quanta 0. Several paused priorities share each refresh frame.
    Thread-safe; ``close()`` (or leaving the ``with`` block) stops the refresh thread. Raises OSError
    for a missing interface (at construction), ValueError for a bad priority or quanta. ``netns``: the
    namespace of ``ifname`` (e.g. a host NIC's, ``/proc/<pid>/ns/net``, for a storm: testbed.emulation.pfc_storm).
    """

    def __init__(self, ifname: str, link_bps: float, netns: str | None = None):
        if not link_bps > 0:
            raise ValueError(f"link_bps={link_bps!r}: must be > 0")
        self.ifname, self.link_bps = ifname, float(link_bps)
        self.sock, self.mac = _port_socket(ifname, netns)
        self.counters = PfcSendCounters()
        self._quanta = [0] * PRIORITIES          # pause time of each paused priority, 0 = not paused
        self._refresh_at = [0.0] * PRIORITIES    # monotonic s of each paused priority's next refresh
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._refresh_loop, name=f"pfc-{ifname}", daemon=True)
        self._thread.start()

    def __enter__(self) -> "PfcSender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def paused(self, priority: int = LOSSLESS_PRIORITY) -> bool:
        return self._quanta[priority] > 0

    def pause(self, priority: int = LOSSLESS_PRIORITY, quanta: int = MAX_QUANTA) -> None:
        """Send a pause of ``quanta`` for ``priority`` now and keep it refreshed until :meth:`resume`."""
        if not 1 <= quanta <= MAX_QUANTA:
            raise ValueError(f"quanta={quanta!r}: a pause is 1..{MAX_QUANTA} quanta (0 is resume)")
        vector = class_vector([priority])
        with self._cond:
            self._quanta[priority] = quanta
            self._refresh_at[priority] = time.monotonic() + quanta_s(quanta, self.link_bps) / 2
            self._send(vector, self._frame_quanta(vector))
            self.counters.pause_frames += 1
            self._cond.notify_all()

    def resume(self, priority: int = LOSSLESS_PRIORITY) -> None:
        """Send quanta 0 for ``priority`` (the receiver resumes at once) and stop refreshing it."""
        vector = class_vector([priority])
        with self._cond:
            self._quanta[priority] = 0
            self._send(vector, [0] * PRIORITIES)
            self.counters.resume_frames += 1
            self._cond.notify_all()

    def close(self) -> None:
        """Stop refreshing (paused receivers resume when their last pause expires) and close the socket."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=2)
        self.sock.close()

    # -- internals --------------------------------------------------------------------
    def _frame_quanta(self, vector: int) -> list[int]:
        return [self._quanta[p] if vector >> p & 1 else 0 for p in range(PRIORITIES)]

    def _send(self, vector: int, quanta: list[int]) -> None:
        """Under ``_cond``."""
        self.sock.send(pfc_frame(self.mac, vector, quanta))
        self.counters.log.append((unix_ns(), vector, tuple(quanta)))

    def _refresh_loop(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                due = [p for p in range(PRIORITIES) if self._quanta[p] and self._refresh_at[p] <= now]
                if due:
                    vector = class_vector(due)
                    try:
                        self._send(vector, self._frame_quanta(vector))
                    except OSError:  # the port went away (fabric stopping): nothing left to pause
                        return
                    self.counters.refresh_frames += 1
                    for p in due:
                        self._refresh_at[p] = now + quanta_s(self._quanta[p], self.link_bps) / 2
                    continue
                waits = [self._refresh_at[p] - now for p in range(PRIORITIES) if self._quanta[p]]
                self._cond.wait(min(waits) if waits else None)
