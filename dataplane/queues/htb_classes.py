"""Queue backend ``htb_classes``: priority classes under one HTB shaper, a tbf leaf per class, DSCP filters.

Layout on the egress side of one interface, for classes ``c0, c1, ...`` of a
:class:`~dataplane.queues.base.QueueConfig` (the scenario's three:
control DSCP 48, lossless DSCP 26, lossy the rest; :mod:`testbed.spec.congestion`)::

    root  htb 1:   default 1:<last class>          (its counters aggregate every class)
      └─ class htb 1:1   rate = ceil = rate_bps
           ├─ class htb 1:10  prio 0  rate = rate_bps/100  ceil = rate_bps  ─ tbf 10: limit = buffer of c0
           ├─ class htb 1:20  prio 1  ...                                   ─ tbf 20: limit = buffer of c1
           └─ class htb 1:30  prio 2  ...                                   ─ tbf 30: limit = buffer of c2
    filters on 1: (protocol ip, u32): IP TOS & 0xfc == DSCP << 2  ->  the class taking that DSCP

Priority: HTB serves classes below their ``rate`` first, then lends the
parent's spare rate by ``prio`` (lowest first; net/sched/sch_htb.c). Each
class is guaranteed only :data:`GUARANTEED_SHARE` of the link, so under load
the order is strict priority, save 1 % per class against starvation (the
kernel here has no ``prio``/``ets`` qdisc: docs/architecture.md "Facts about the machines").

Leaves are tbf, not bfifo: the PFC actuator pauses a class by setting its
tbf rate to 8 bit/s (docs/architecture.md, "Pause without loss"). The tbf rate is the link rate, so it never
binds while HTB shapes; its ``limit`` is the class buffer (tail drop beyond)
and its burst :func:`~dataplane.queues.htb_bfifo.burst_bytes_for`.

The telemetry sampler reads the root (all classes together, as with
``htb_bfifo``); a class alone is read at the qdisc whose parent is
:meth:`HtbClasses.class_parent` (the ECN marker reads the lossless class so).
ECN marking: by default the nftables egress marker (:mod:`dataplane.ecn_marker`) marks ECT packets of
the marked class, with the probability the 1 ms loop sets from that class's backlog; where the kernel
has ``sch_red`` and the class's ``marker`` is ``red`` (``congestion.ecn.marker``), the marked class's
leaf is a RED qdisc with ECN instead of its tbf (:mod:`dataplane.queues.sch_red`), which marks at
enqueue from the class backlog; it has no rate to pause, so PFC keeps the nftables marker.
"""
from __future__ import annotations

from dataplane.queues import sch_red, tc
from dataplane.queues.base import QueueBackend, QueueConfig, ShapedLink, TcRequest, frame_bytes
from dataplane.queues.htb_bfifo import CLASS_HANDLE, ROOT_HANDLE, burst_bytes_for, find_tc_object

#: share of the link each class is guaranteed before priority lending (see module doc)
GUARANTEED_SHARE = 0.01
ETH_P_IP = 0x0800
#: u32 key on the first word of the IP header: TOS byte is bits 16-23; DSCP its top six bits
_DSCP_MASK = 0x00FC0000


def class_handle(i: int) -> int:
    """HTB class of class ``i`` (0-based): 1:10, 1:20, ... (hex minor ids)."""
    return ROOT_HANDLE | ((i + 1) << 4)


def leaf_handle(i: int) -> int:
    """tbf leaf qdisc of class ``i``: 10:, 20:, ..."""
    return ((i + 1) << 4) << 16


def dscp_key(dscp: int) -> str:
    """pyroute2 u32 key matching ``dscp`` in the IP TOS byte: ``value/mask+offset`` on IP word 0."""
    if not 0 <= dscp < 64:
        raise ValueError(f"dscp={dscp!r} must be in [0, 63]")
    return f"0x{dscp << 18:08x}/0x{_DSCP_MASK:08x}+0"


class HtbClasses(QueueBackend):
    """HTB 1:/1:1 with one child class and tbf leaf per traffic class, u32 DSCP filters (module doc)."""

    name = "htb_classes"
    max_classes = 8
    #: marking is the nftables egress marker's (dataplane.ecn_marker), driven by class backlog
    marks_ecn = True

    def check(self, cfg: QueueConfig) -> None:
        """Also: exactly one class takes the DSCPs nobody else takes (the default, empty ``dscp``)."""
        super().check(cfg)
        defaults = [i for i, c in enumerate(cfg.classes) if not c.dscp]
        if len(defaults) != 1:
            raise ValueError(f"queue backend {self.name!r} needs exactly one class without dscp (the default "
                             f"class), got {len(defaults)}")
        seen: dict[int, int] = {}
        for i, c in enumerate(cfg.classes):
            for d in c.dscp:
                dscp_key(d)
                if d in seen:
                    raise ValueError(f"dscp {d} is in classes {seen[d]} and {i}")
                seen[d] = i

    def class_parent(self, i: int) -> int:
        """Parent handle of class ``i``'s leaf: sample there to read that class alone."""
        return class_handle(i)

    def plan(self, ifindex: int, cfg: QueueConfig) -> list[TcRequest]:
        """htb 1:, class 1:1, per class an HTB class and tbf leaf, then one u32 filter per DSCP."""
        mtu = int(cfg.mtu_bytes)
        rate_Bps = max(1, round(cfg.rate_bps / 8))
        leaf_Bps = max(1, round(cfg.leaf_rate_bps / 8))  # only the shaper 1:1 binds (clock wander)
        share_Bps = max(1, round(rate_Bps * GUARANTEED_SHARE))
        burst = burst_bytes_for(cfg.rate_bps, mtu)
        default_i = next(i for i, c in enumerate(cfg.classes) if not c.dscp)
        reqs: list[TcRequest] = [
            ("add", "htb", {"index": ifindex, "handle": ROOT_HANDLE, "parent": tc.TC_H_ROOT,
                            "default": class_handle(default_i) & 0xFFFF}),
            ("add-class", "htb", {"index": ifindex, "handle": CLASS_HANDLE, "parent": ROOT_HANDLE,
                                  "rate": rate_Bps, "ceil": rate_Bps, "burst": burst, "cburst": burst,
                                  "quantum": frame_bytes(mtu), "mtu": mtu}),
        ]
        for i, c in enumerate(cfg.classes):
            reqs.append(("add-class", "htb", {
                "index": ifindex, "handle": class_handle(i), "parent": CLASS_HANDLE, "prio": int(c.priority),
                "rate": share_Bps, "ceil": leaf_Bps, "burst": burst, "cburst": burst,
                "quantum": frame_bytes(mtu), "mtu": mtu}))
            if c.marking is not None and c.marker == "red":
                m = c.marking
                reqs.append(sch_red.red_request(ifindex, leaf_handle(i), class_handle(i), c.buffer_bytes,
                                                m.kmin_bytes, m.kmax_bytes, m.pmax))
                continue
            reqs.append(("add", "tbf", {"index": ifindex, "handle": leaf_handle(i), "parent": class_handle(i),
                                        "rate": leaf_Bps, "burst": burst, "limit": int(c.buffer_bytes),
                                        "mtu": frame_bytes(mtu)}))
        for i, c in enumerate(cfg.classes):
            for d in c.dscp:
                reqs.append(("add-filter", "u32", {"index": ifindex, "parent": ROOT_HANDLE, "prio": 1,
                                                   "protocol": ETH_P_IP, "target": class_handle(i),
                                                   "keys": [dscp_key(d)]}))
        return reqs

    def read_back(self, ipr, ifname: str) -> ShapedLink:
        """The shaper (class 1:1) and the summed tbf limits of ``ifname``; ValueError when not this layout."""
        index = tc.ifindex(ipr, ifname)
        classes = ipr.get_classes(index=index)
        cls = find_tc_object(classes, CLASS_HANDLE, "htb", f"{ifname}: no HTB class 1:1")
        qdiscs = ipr.get_qdiscs(index=index)
        leaves = [q for q in qdiscs if q.get_attr("TCA_KIND") == "tbf"]
        if not leaves:
            raise ValueError(f"{ifname}: no tbf leaf (not shaped by htb_classes?)")
        red = [q.get_attr("TCA_OPTIONS").get_attr("TCA_RED_PARMS")["limit"] for q in qdiscs
               if q.get_attr("TCA_KIND") == "red"]
        opts = cls.get_attr("TCA_OPTIONS")
        parms = opts.get_attr("TCA_HTB_PARMS")
        rate_Bps = opts.get_attr("TCA_HTB_RATE64") or parms["rate"]
        ceil_Bps = opts.get_attr("TCA_HTB_CEIL64") or parms["ceil"]
        return ShapedLink(
            rate_bps=rate_Bps * 8, ceil_bps=ceil_Bps * 8,
            buffer_bytes=sum(q.get_attr("TCA_OPTIONS").get_attr("TCA_TBF_PARMS")["limit"] for q in leaves) + sum(red),
            quantum_bytes=parms["quantum"],
            burst_bytes=tc.ticks_to_bytes(parms["buffer"], rate_Bps),
        )
