"""PFC actuator: pause and resume the lossless class of one egress interface (netlink from the controller).

docs/architecture.md "Pause without loss": the lossless class of
:mod:`dataplane.queues.htb_classes` is an HTB class with a tbf leaf.

- **pause**: the tbf leaf's rate becomes 1 byte/s (``rate 8bit``) with a
  bucket of one full frame: nothing of the class leaves, nothing is dropped
  (the leaf keeps its ``limit``), and a sender behind a full NIC queue blocks
  on its socket (backpressure). A tbf change refills the bucket
  (net/sched/sch_tbf.c ``tbf_change``), so at most one frame leaves after the
  pause took effect (the headroom counts it: controllers.congestion.pfc).
- **resume**: rate and bucket back to the installed ones, then a *kick frame*
  on the interface: a 60-byte frame of the local experimental ethertype 0x88b5
  from an AF_PACKET socket. Its enqueue runs the qdisc, which would otherwise
  sleep on the watchdog it armed at 1 byte/s; the held packets leave at once.
  The next switch drops the kick on table miss (counted: :attr:`ClassGate.kicks`).

The bucket goes in ``TCA_TBF_BURST`` (bytes): given so, the kernel takes it as
the largest packet exactly. Without it (as ``tc`` and pyroute2 send it) the
bucket is a time, capped at 2^32 ns, and at 8 bit/s the largest packet becomes
4 bytes: measured, every packet of a paused spine port was dropped.

Each change is one prebuilt ``RTM_NEWQDISC`` message on a raw NETLINK_ROUTE
socket of the interface's namespace, waiting for the kernel's ack
(:mod:`dataplane.rtnetlink`): pyroute2's ``tc()`` took about 1 ms per change
here (p99 3.7 ms on the loaded machine), above the 2 ms target.
"""
from __future__ import annotations

import socket
import struct
import time
from typing import Optional

from dataplane.queues import htb_classes
from dataplane.queues.htb_bfifo import burst_bytes_for
from dataplane.rtnetlink import RTM_NEWQDISC, Netlink, nlattr, ratespec, tc_change_msg

ETH_P_LOCAL_EXP = 0x88B5
#: while paused: 1 byte/s (8 bit/s)
PAUSED_RATE_BYTES_S = 1
# include/uapi/linux/pkt_sched.h
_TCA_TBF_PARMS, _TCA_TBF_RATE64, _TCA_TBF_BURST = 1, 4, 6


def kick_frame(src_mac: bytes) -> bytes:
    """A 60-byte kick frame: broadcast destination, ``src_mac``, ethertype 0x88b5, zero padding."""
    return b"\xff" * 6 + src_mac + struct.pack("!H", ETH_P_LOCAL_EXP) + bytes(46)


def tbf_change_msg(ifindex: int, handle: int, parent: int, rate_bytes_s: int, burst_bytes: int,
                   limit_bytes: int) -> bytes:
    """``RTM_NEWQDISC`` (change, ack requested) setting tbf ``handle``'s rate, bucket and limit; the
    sequence number (bytes 8-11) is 0, to be filled in per send."""
    buffer_ticks = min(0xFFFFFFFF, (burst_bytes * 10**9 // max(1, rate_bytes_s)) >> 6)
    qopt = ratespec(rate_bytes_s) + bytes(12) + struct.pack("=III", limit_bytes, buffer_ticks, 0)  # struct tc_tbf_qopt
    opts = nlattr(_TCA_TBF_PARMS, qopt) + nlattr(_TCA_TBF_BURST, struct.pack("=I", burst_bytes))
    if rate_bytes_s > 0xFFFFFFFF:
        opts += nlattr(_TCA_TBF_RATE64, struct.pack("=Q", rate_bytes_s))
    return tc_change_msg(RTM_NEWQDISC, ifindex, handle, parent, b"tbf", opts)


class ClassGate:
    """Pause/resume of one class's tbf leaf on one interface.

    Args:
        ipr: a pyroute2 IPRoute of the interface's namespace (index and MAC lookups at construction).
        nl: a :class:`~dataplane.rtnetlink.Netlink` of the same namespace; kick_sock: an AF_PACKET raw socket there.
        ifname: the egress interface.
        class_index: the class (htb_classes numbering; the lossless class is 1).
        rate_bps, mtu_bytes, limit_bytes: the leaf as installed (link rate, IP MTU, class buffer).

    Raises OSError (netlink) from :meth:`pause` / :meth:`resume` when the kernel refuses the change.
    """

    def __init__(self, ipr, nl: Netlink, kick_sock, ifname: str, class_index: int, rate_bps: float,
                 mtu_bytes: int, limit_bytes: int):
        self.ifname = ifname
        self._nl, self._sock = nl, kick_sock
        index = ipr.link_lookup(ifname=ifname)[0]
        mac = ipr.get_links(index)[0].get_attr("IFLA_ADDRESS")
        self._kick = kick_frame(bytes.fromhex(mac.replace(":", "")))
        where = (index, htb_classes.leaf_handle(class_index), htb_classes.class_handle(class_index))
        self._held = tbf_change_msg(*where, PAUSED_RATE_BYTES_S, mtu_bytes + 14, int(limit_bytes))
        self._open = tbf_change_msg(*where, max(1, round(rate_bps / 8)), burst_bytes_for(rate_bps, mtu_bytes),
                                    int(limit_bytes))
        self.paused = False
        self.kicks = 0

    def pause(self) -> int:
        """Hold the class (module doc); return ns from the call to the netlink ack."""
        t0 = time.monotonic_ns()
        self._nl.request(self._held)
        self.paused = True
        return time.monotonic_ns() - t0

    def resume(self) -> int:
        """Rate and bucket back, then the kick frame; return ns from the call to the kick sent."""
        t0 = time.monotonic_ns()
        self._nl.request(self._open)
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
