"""Queue backend ``htb_bfifo``: HTB rate limit + byte-limited tail-drop FIFO on one interface.

Layout built by :func:`shape_egress` (:class:`HtbBfifo`) on the egress side of ``ifname``::

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
logs any kernel warning it receives (see :func:`dataplane.queues.tc.extack_messages`).
"""
from __future__ import annotations

from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins
from pyroute2.netlink.rtnl.tcmsg import sched_pfifo as _sched_pfifo

from dataplane.queues import tc
from dataplane.queues.base import QueueBackend, QueueConfig, ShapedLink, TcRequest, frame_bytes

# pyroute2 0.9 ships a 'pfifo' plugin but none for 'bfifo'; both use the same
# options struct (struct tc_fifo_qopt { __u32 limit; }, include/uapi/linux/
# pkt_sched.h). Without a plugin pyroute2 forces parent=root and does not encode
# the limit, so register the pfifo plugin under 'bfifo' unless a future
# pyroute2 provides its own.
_tc_plugins.setdefault("bfifo", _sched_pfifo)

BURST_MTUS = 3
BURST_MIN_S = 0.001
ROOT_HANDLE = 0x10000  # 1:
CLASS_HANDLE = 0x10001  # 1:1
FIFO_HANDLE = 0x100000  # 10:


def burst_bytes_for(rate_bps: float, mtu_bytes: int = 1500) -> int:
    """HTB burst in bytes: ``max(3 frames, 1 ms at rate_bps)`` (see module doc)."""
    return int(max(BURST_MTUS * frame_bytes(mtu_bytes), rate_bps / 8 * BURST_MIN_S))


def find_tc_object(msgs, handle: int, kind: str, missing: str):
    """The tc message of ``handle`` and ``kind`` among ``msgs``; ValueError ``missing`` when there is none."""
    found = next((m for m in msgs if m["handle"] == handle and m.get_attr("TCA_KIND") == kind), None)
    if found is None:
        raise ValueError(f"{missing} (not shaped by shape_egress?)")
    return found


class HtbBfifo(QueueBackend):
    """HTB root 1: with one class 1:1 (rate = ceil) and a bfifo 10: leaf; the sampler reads the root."""

    name = "htb_bfifo"

    def plan(self, ifindex: int, cfg: QueueConfig) -> list[TcRequest]:
        """The three requests after the root is cleared: htb 1:, class 1:1, bfifo 10: (see module doc)."""
        mtu_bytes, buffer_bytes = int(cfg.mtu_bytes), int(cfg.classes[0].buffer_bytes)
        rate_Bps = max(1, round(cfg.rate_bps / 8))
        burst = burst_bytes_for(cfg.rate_bps, mtu_bytes)
        return [
            ("add", "htb", {"index": ifindex, "handle": ROOT_HANDLE, "parent": tc.TC_H_ROOT,
                            "default": CLASS_HANDLE & 0xFFFF}),
            ("add-class", "htb", {"index": ifindex, "handle": CLASS_HANDLE, "parent": ROOT_HANDLE,
                                  "rate": rate_Bps,  # pyroute2 takes a bare int as bytes/s
                                  "ceil": rate_Bps, "burst": burst, "cburst": burst,
                                  "quantum": frame_bytes(mtu_bytes), "mtu": mtu_bytes}),
            ("add", "bfifo", {"index": ifindex, "handle": FIFO_HANDLE, "parent": CLASS_HANDLE,
                              "limit": buffer_bytes}),
        ]

    def read_back(self, ipr, ifname: str) -> ShapedLink:
        """Read the shaping of ``ifname`` from the kernel (class 1:1 and qdisc 10:).

        Returns: :class:`ShapedLink`; rates combine the 32-bit ``tc_ratespec.rate``
        with ``TCA_HTB_RATE64``/``TCA_HTB_CEIL64`` when present, times 8.

        Raises:
            ValueError: ``ifname`` is missing, or has no HTB class 1:1 or no bfifo
                10: (i.e. it was not shaped by :func:`shape_egress`).
        """
        index = tc.ifindex(ipr, ifname)
        cls = find_tc_object(ipr.get_classes(index=index), CLASS_HANDLE, "htb", f"{ifname}: no HTB class 1:1")
        fifo = find_tc_object(ipr.get_qdiscs(index=index), FIFO_HANDLE, "bfifo", f"{ifname}: no bfifo qdisc 10:")
        opts = cls.get_attr("TCA_OPTIONS")
        parms = opts.get_attr("TCA_HTB_PARMS")
        rate_Bps = opts.get_attr("TCA_HTB_RATE64") or parms["rate"]
        ceil_Bps = opts.get_attr("TCA_HTB_CEIL64") or parms["ceil"]
        return ShapedLink(
            rate_bps=rate_Bps * 8,
            ceil_bps=ceil_Bps * 8,
            buffer_bytes=fifo.get_attr("TCA_OPTIONS")["limit"],
            quantum_bytes=parms["quantum"],
            burst_bytes=tc.ticks_to_bytes(parms["buffer"], rate_Bps),
        )


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
        logged at WARNING level (logger ``dataplane.queues.tc``).

    Raises:
        ValueError: rate_bps <= 0, buffer_bytes < one frame, bad mtu_bytes, or
            ``ifname`` not present in ``ipr``'s namespace.
        pyroute2.NetlinkError: the kernel refused a request.
    """
    return HtbBfifo().install(ipr, ifname, QueueConfig.single(rate_bps, buffer_bytes, mtu_bytes))


def read_back(ipr, ifname: str) -> ShapedLink:
    """:meth:`HtbBfifo.read_back`."""
    return HtbBfifo().read_back(ipr, ifname)
