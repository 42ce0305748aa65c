"""PFC actuator: pause and resume the lossless class of one egress interface (netlink from the controller).

DESIGN.md "Facts measured for congestion handling": the lossless class of
:mod:`testbed.emulation.queues.htb_classes` is an HTB class with a tbf leaf.

- **pause**: the tbf leaf's bucket shrinks to one full frame and its rate to
  that frame per :data:`PAUSE_REFILL_S` (3.5 kbit/s at MTU 1500): nothing of
  the class leaves, nothing is dropped (the leaf keeps its ``limit``), and a
  sender behind a full NIC queue blocks on its socket (backpressure). Not
  ``rate 8bit`` (DESIGN.md): net/sched/sch_tbf.c ``tbf_change`` caps the bucket
  time at 2^32 ns (4.29 s), and tbf drops at enqueue every packet longer than
  what the bucket holds at that rate (``max_size``: 4 bytes at 8 bit/s, measured:
  every packet of a paused spine port dropped). A change refills the bucket,
  so at most one frame leaves after the pause took effect, and one more per
  :data:`PAUSE_REFILL_S` of a longer pause (the headroom counts one:
  controllers.congestion.pfc).
- **resume**: the rate goes back to the link rate (tbf refills its tokens on a
  change) and a *kick frame* is sent on the interface: a 60-byte frame of the
  local experimental ethertype 0x88b5 (IEEE 802 "local experimental") from an
  AF_PACKET socket. Its enqueue runs the qdisc, which would otherwise sleep on
  the watchdog it armed at 8 bit/s; the held packets leave at once. The next
  switch drops the kick on table miss (counted: :attr:`ClassGate.kicks`).

Both are one ``RTM_NEWQDISC`` change through a long-lived pyroute2 socket
(``IPRoute``, opened in the host's network namespace for a host NIC); the
time from the call to the kernel's ack is returned, in ns.
"""
from __future__ import annotations

import math
import socket
import struct
import time
from typing import Optional

ETH_P_LOCAL_EXP = 0x88B5
#: while paused the bucket (one frame) refills in this long, s: below tbf's 4.29 s cap (module doc)
PAUSE_REFILL_S = 3.5


def kick_frame(src_mac: bytes) -> bytes:
    """A 60-byte kick frame: broadcast destination, ``src_mac``, ethertype 0x88b5, zero padding."""
    return b"\xff" * 6 + src_mac + struct.pack("!H", ETH_P_LOCAL_EXP) + bytes(46)


class ClassGate:
    """Pause/resume of one class's tbf leaf on one interface.

    Args:
        ipr: a pyroute2 IPRoute of the interface's namespace (kept open by the caller).
        kick_sock: an AF_PACKET raw socket of the same namespace.
        ifname: the egress interface.
        class_index: the class (htb_classes numbering; the lossless class is 1).
        rate_bps, mtu_bytes, limit_bytes: the leaf as installed (link rate, IP MTU, class buffer).

    Raises OSError (netlink) from :meth:`pause` / :meth:`resume` when the kernel refuses the change.
    """

    def __init__(self, ipr, kick_sock, ifname: str, class_index: int, rate_bps: float, mtu_bytes: int,
                 limit_bytes: int):
        from testbed.emulation.queues import htb_classes
        from testbed.emulation.queues.htb_bfifo import burst_bytes_for

        self.ifname = ifname
        self._ipr, self._sock = ipr, kick_sock
        self.index = ipr.link_lookup(ifname=ifname)[0]
        mac = ipr.get_links(self.index)[0].get_attr("IFLA_ADDRESS")
        self._kick = kick_frame(bytes.fromhex(mac.replace(":", "")))
        frame = mtu_bytes + 14
        self._args = {"index": self.index, "handle": htb_classes.leaf_handle(class_index),
                      "parent": htb_classes.class_handle(class_index), "limit": int(limit_bytes), "mtu": frame}
        self._open = {"rate": max(1, round(rate_bps / 8)), "burst": burst_bytes_for(rate_bps, mtu_bytes)}
        held = frame + 64  # a full frame must fit after the kernel's rounding of the bucket time
        self._held = {"rate": math.ceil(held / PAUSE_REFILL_S), "burst": held}
        self.paused = False
        self.kicks = 0

    def pause(self) -> int:
        """Hold the class (module doc); return ns from the call to the netlink ack."""
        t0 = time.monotonic_ns()
        self._ipr.tc("change", "tbf", **self._held, **self._args)
        self.paused = True
        return time.monotonic_ns() - t0

    def resume(self) -> int:
        """Rate and bucket back, then the kick frame; return ns from the call to the kick sent."""
        t0 = time.monotonic_ns()
        self._ipr.tc("change", "tbf", **self._open, **self._args)
        self.paused = False
        self._sock.sendto(self._kick, (self.ifname, 0))
        self.kicks += 1
        return time.monotonic_ns() - t0


def kick_socket(netns: Optional[str] = None) -> socket.socket:
    """An AF_PACKET raw socket in ``netns`` (None: this process's namespace; else a path such as
    ``/proc/<pid>/ns/net``)."""
    if netns is None:
        return socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    from pyroute2.netns import create_socket
    return create_socket(netns, socket.AF_PACKET, socket.SOCK_RAW, 0, flags=0)
