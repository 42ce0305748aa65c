"""Link emulation on one interface: HTB rate limit + byte-limited tail-drop FIFO.

Layout built by :func:`shape_egress` on the egress side of ``ifname``::

    root  htb 1:   default 1:1          (aggregates all stats of the port)
      └─ class htb 1:1  rate = ceil = rate_bps, burst = cburst, quantum
           └─ qdisc bfifo 10:  limit = buffer_bytes   (the switch port buffer)

Everything is done over netlink with pyroute2 (no ``tc`` subprocess). The caller
passes an ``IPRoute`` already bound to the namespace holding ``ifname``:
``IPRoute(netns='/proc/<pid>/ns/net')`` for a Mininet host, ``IPRoute()`` for a
switch-side port in the root namespace.

Units and what the kernel counts
--------------------------------
* HTB rates travel as bytes/s (``struct tc_ratespec.rate``, 32 bits) plus
  ``TCA_HTB_RATE64`` / ``TCA_HTB_CEIL64`` (64 bits) when the rate is
  >= 2**32 bytes/s (34.4 Gbit/s); pyroute2 emits/decodes both. This module
  speaks bit/s and converts (``bytes_per_s = round(rate_bps / 8)``).
* HTB, bfifo and the qdisc counters size a packet as ``skb->len``: the Ethernet
  frame without preamble, FCS and inter-frame gap (a full-size frame on a
  1500-byte MTU is 1514 bytes). ``rate_bps`` and ``buffer_bytes`` are therefore
  in those frame bytes; no link-layer overhead is added (overhead 0, mpu 0).
* ``bfifo`` admits a packet while ``backlog + len <= limit`` (net/sched/sch_fifo.c),
  so ``buffer_bytes`` must hold one full frame (``mtu_bytes + 14``) or every
  full-size frame would be dropped even on an empty queue.

Burst choice
------------
HTB's ``burst`` is the token bucket depth: after an idle period up to ``burst``
bytes leave back to back at the speed of the veth (tens of Gbit/s), i.e. they
arrive at the next hop as one clump. Mininet's TCLink uses 15 kB, which at
10 Mbit/s is 12 ms worth of data released in microseconds: ten 1500-byte
frames bunched together, which distorts the queue seen downstream and any
ECN/PFC threshold of a few packets. The bucket must still be deep enough that
a late HTB watchdog timer (scheduling jitter on a busy 2-core machine is
~1 ms) does not lose tokens, or the link delivers less than its rate. Hence::

    burst_bytes = max(BURST_MTUS * frame_bytes, rate_bps / 8 * BURST_MIN_S)

with ``BURST_MTUS = 3`` (3.6 ms of slack at 10 Mbit/s, 1.2 ms at 30 Mbit/s)
and ``BURST_MIN_S = 1 ms`` (the ``rate / HZ`` floor that iproute2's ``tc``
uses, HZ = 1000) so high rates still tolerate 1 ms of timer lateness.
``cburst`` is the same since ceil = rate.

Quantum
-------
With no explicit quantum HTB derives ``rate / r2q`` (r2q = 10) and warns
``quantum of class 10001 is big/small. Consider r2q change.`` when the result
is outside [1000, 200000] bytes, i.e. below 80 kbit/s or above 16 Mbit/s
(net/sched/sch_htb.c). Older kernels print it to dmesg; recent ones (6.18 here)
return it as an extended-ACK warning on the netlink reply instead (``tc``
shows ``Warning: sch_htb: quantum of class 10001 is big``), which pyroute2 0.9
does not decode. We always pass ``quantum = frame_bytes`` (one full frame per
DRR round, which is what a single class needs), so the kernel never computes
or warns. Open the ``IPRoute`` with ``ext_ack=True`` and :func:`shape_egress`
logs any kernel warning it receives (see :func:`extack_messages`).
"""
from __future__ import annotations

import errno
import logging
import numbers
import struct
from dataclasses import dataclass

from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins
from pyroute2.netlink.rtnl.tcmsg import sched_pfifo as _sched_pfifo

# pyroute2 0.9 ships a 'pfifo' plugin but none for 'bfifo'; both use the same
# options struct (struct tc_fifo_qopt { __u32 limit; }, include/uapi/linux/
# pkt_sched.h). Without a plugin pyroute2 forces parent=root and does not encode
# the limit, so register the pfifo plugin under 'bfifo' unless a future
# pyroute2 provides its own.
_tc_plugins.setdefault("bfifo", _sched_pfifo)

log = logging.getLogger(__name__)

ETH_HLEN_BYTES = 14
BURST_MTUS = 3
BURST_MIN_S = 0.001
ROOT_HANDLE = 0x10000  # 1:
CLASS_HANDLE = 0x10001  # 1:1
FIFO_HANDLE = 0x100000  # 10:
TC_H_ROOT = 0xFFFFFFFF
_SELF_CHECK_TOLERANCE = 0.01


@dataclass(frozen=True)
class ShapedLink:
    """The kernel's view of one shaped interface (see :func:`read_back`).

    rate_bps, ceil_bps: HTB class 1:1 rate and ceil in bit/s (frame bytes x 8).
    buffer_bytes: bfifo 10: limit in frame bytes.
    quantum_bytes: HTB class 1:1 DRR quantum in bytes.
    burst_bytes: HTB class 1:1 token bucket depth in bytes, converted back from
        the kernel's ticks (rounded; within a few bytes of what was set).
    """

    rate_bps: int
    ceil_bps: int
    buffer_bytes: int
    quantum_bytes: int
    burst_bytes: int


def frame_bytes(mtu_bytes: int) -> int:
    """Bytes the qdiscs count for a full-size frame: ``mtu_bytes + 14``."""
    return mtu_bytes + ETH_HLEN_BYTES


def burst_bytes_for(rate_bps: float, mtu_bytes: int = 1500) -> int:
    """HTB burst in bytes: ``max(3 frames, 1 ms at rate_bps)`` (see module doc)."""
    return int(max(BURST_MTUS * frame_bytes(mtu_bytes), rate_bps / 8 * BURST_MIN_S))


def _validate(rate_bps, buffer_bytes, mtu_bytes) -> None:
    if not isinstance(mtu_bytes, numbers.Integral) or not 68 <= mtu_bytes <= 65535:
        raise ValueError(f"mtu_bytes={mtu_bytes!r} must be an integer in [68, 65535]")
    if not rate_bps > 0:
        raise ValueError(f"rate_bps={rate_bps!r} must be > 0")
    if rate_bps / 8 >= 1 << 64:
        raise ValueError(f"rate_bps={rate_bps!r} exceeds the kernel's 64-bit bytes/s")
    if not isinstance(buffer_bytes, numbers.Integral) or buffer_bytes < frame_bytes(mtu_bytes):
        raise ValueError(
            f"buffer_bytes={buffer_bytes!r} must be an integer >= one full frame "
            f"(mtu_bytes + 14 = {frame_bytes(mtu_bytes)}); bfifo would drop every "
            f"full-size frame otherwise"
        )


def _ifindex(ipr, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise ValueError(f"interface {ifname!r} not found in this IPRoute's namespace")
    return found[0]


def shape_egress(ipr, ifname: str, rate_bps: float, buffer_bytes: int, mtu_bytes: int = 1500) -> ShapedLink:
    """Replace the egress qdisc tree of ``ifname`` with HTB 1:/1:1 + bfifo 10:.

    Args:
        ipr: pyroute2 ``IPRoute`` bound to the namespace that holds ``ifname``.
        ifname: interface name in that namespace.
        rate_bps: emulated line rate in bit/s (frame bytes x 8); rate = ceil.
        buffer_bytes: emulated port buffer in frame bytes (bfifo limit, tail drop).
        mtu_bytes: L3 MTU; sets the HTB rate-table cell size, quantum and burst.

    Returns:
        The :class:`ShapedLink` read back from the kernel after configuring.
        Kernel extended-ACK warnings (only with ``IPRoute(ext_ack=True)``) are
        logged at WARNING level on this module's logger.

    Raises:
        ValueError: rate_bps <= 0, buffer_bytes < one frame, bad mtu_bytes, or
            ``ifname`` not present in ``ipr``'s namespace.
        pyroute2.NetlinkError: the kernel refused a request.
    """
    _validate(rate_bps, buffer_bytes, mtu_bytes)
    mtu_bytes, buffer_bytes = int(mtu_bytes), int(buffer_bytes)
    index = _ifindex(ipr, ifname)
    rate_Bps = max(1, round(rate_bps / 8))
    burst = burst_bytes_for(rate_bps, mtu_bytes)
    quantum = frame_bytes(mtu_bytes)
    try:  # start from a clean tree; a fresh veth has no root qdisc to delete
        ipr.tc("del", index=index, parent=TC_H_ROOT, handle=0)
    except NetlinkError as e:
        if e.code not in (errno.ENOENT, errno.EINVAL):
            raise
    _tc(ipr, ifname, "add", "htb", index=index, handle=ROOT_HANDLE, parent=TC_H_ROOT, default=CLASS_HANDLE & 0xFFFF)
    _tc(
        ipr,
        ifname,
        "add-class",
        "htb",
        index=index,
        handle=CLASS_HANDLE,
        parent=ROOT_HANDLE,
        rate=rate_Bps,  # pyroute2 takes a bare int as bytes/s
        ceil=rate_Bps,
        burst=burst,
        cburst=burst,
        quantum=quantum,
        mtu=mtu_bytes,
    )
    _tc(ipr, ifname, "add", "bfifo", index=index, handle=FIFO_HANDLE, parent=CLASS_HANDLE, limit=buffer_bytes)
    return read_back(ipr, ifname)


_NLMSG_ERROR = 2
_NLM_F_CAPPED = 0x100
_NLM_F_ACK_TLVS = 0x200
_NLMSGERR_ATTR_MSG = 1


def extack_messages(responses) -> list[str]:
    """Texts of the kernel's extended-ACK messages (warnings) in pyroute2 replies.

    ``responses``: what an ``IPRoute(ext_ack=True)`` request returned (a list of
    messages). The TLVs are read from the raw reply (struct nlmsgerr followed by
    the request header when NLM_F_CAPPED, then NLMSGERR_ATTR_MSG; see
    include/uapi/linux/netlink.h) because pyroute2 0.9 misplaces them.
    Returns [] for sockets without ext_ack.
    """
    texts = []
    for msg in responses or ():
        hdr = msg.get("header", {}) if hasattr(msg, "get") else {}
        if hdr.get("type") != _NLMSG_ERROR or not hdr.get("flags", 0) & _NLM_F_ACK_TLVS:
            continue
        raw = bytes(msg.data[msg.offset:msg.offset + hdr["length"]])
        if hdr["flags"] & _NLM_F_CAPPED:
            off = 16 + 4 + 16
        else:
            off = 16 + 4 + struct.unpack_from("=I", raw, 20)[0]
        while off + 4 <= len(raw):
            alen, atype = struct.unpack_from("=HH", raw, off)
            if alen < 4:
                break
            if atype & 0x3FFF == _NLMSGERR_ATTR_MSG:
                texts.append(raw[off + 4:off + alen].split(b"\0", 1)[0].decode(errors="replace"))
            off += (alen + 3) & ~3
    return texts


def _tc(ipr, ifname: str, *args, **kwargs) -> None:
    for text in extack_messages(ipr.tc(*args, **kwargs)):
        log.warning("%s: kernel warning on tc %s: %s", ifname, args[0], text)


def _ticks_to_bytes(ticks: int, rate_Bps: int) -> int:
    from pyroute2.netlink.rtnl.tcmsg.common import tick_in_usec

    return round(ticks / tick_in_usec * 1e-6 * rate_Bps)


def read_back(ipr, ifname: str) -> ShapedLink:
    """Read the shaping of ``ifname`` from the kernel (class 1:1 and qdisc 10:).

    Returns: :class:`ShapedLink`; rates combine the 32-bit ``tc_ratespec.rate``
    with ``TCA_HTB_RATE64``/``TCA_HTB_CEIL64`` when present, times 8.

    Raises:
        ValueError: ``ifname`` is missing, or has no HTB class 1:1 or no bfifo
            10: (i.e. it was not shaped by :func:`shape_egress`).
    """
    index = _ifindex(ipr, ifname)
    cls = next(
        (m for m in ipr.get_classes(index=index)
         if m["handle"] == CLASS_HANDLE and m.get_attr("TCA_KIND") == "htb"),
        None,
    )
    if cls is None:
        raise ValueError(f"{ifname}: no HTB class 1:1 (not shaped by shape_egress?)")
    fifo = next(
        (m for m in ipr.get_qdiscs(index=index)
         if m["handle"] == FIFO_HANDLE and m.get_attr("TCA_KIND") == "bfifo"),
        None,
    )
    if fifo is None:
        raise ValueError(f"{ifname}: no bfifo qdisc 10: (not shaped by shape_egress?)")
    opts = cls.get_attr("TCA_OPTIONS")
    parms = opts.get_attr("TCA_HTB_PARMS")
    rate_Bps = opts.get_attr("TCA_HTB_RATE64") or parms["rate"]
    ceil_Bps = opts.get_attr("TCA_HTB_CEIL64") or parms["ceil"]
    return ShapedLink(
        rate_bps=rate_Bps * 8,
        ceil_bps=ceil_Bps * 8,
        buffer_bytes=fifo.get_attr("TCA_OPTIONS")["limit"],
        quantum_bytes=parms["quantum"],
        burst_bytes=_ticks_to_bytes(parms["buffer"], rate_Bps),
    )


def self_check(configured: dict[str, float], readback: dict[str, ShapedLink]) -> list[str]:
    """Compare configured rates with the kernel's, one sentence per violation.

    Args:
        configured: ifname -> configured rate in bit/s.
        readback: ifname -> :class:`ShapedLink` from :func:`read_back`.

    Returns: violations (empty when every rate and ceil is within 1 %), e.g.
        ``"tb12abl1-eth3: configured 10000000 bit/s, kernel rate 9000000 bit/s (-10.00%)"``.
    """
    problems: list[str] = []
    for ifname, want_bps in configured.items():
        got = readback.get(ifname)
        if got is None:
            problems.append(f"{ifname}: configured {want_bps:.0f} bit/s, no read-back")
            continue
        for what, got_bps in (("rate", got.rate_bps), ("ceil", got.ceil_bps)):
            err = (got_bps - want_bps) / want_bps
            if abs(err) > _SELF_CHECK_TOLERANCE:
                problems.append(
                    f"{ifname}: configured {want_bps:.0f} bit/s, kernel {what} "
                    f"{got_bps:.0f} bit/s ({err:+.2%})"
                )
    return problems
