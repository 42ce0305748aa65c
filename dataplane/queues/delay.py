"""Propagation delay of a link: a netem stage at the egress root, the queue backend's shaper under it.

Layout on one interface when the fabric has a delay (``fabric.link_delay_us``, or a link's own such as
a dci fabric's ``dci_delay_us``: then every egress has the stage, with the delay of its own link, 0 on a
link without delay, so every port's tree is alike)::

    root  netem d:   delay = the link's delay, limit = NETEM_LIMIT_PKTS   (the wire's flight time)
      └─ (parent d:1) the backend's tree, unchanged: htb 1: / class 1:1 / leaves 10:, 20:, ...

netem holds every frame for ``delay_us`` and then hands it to its child qdisc (net/sched/sch_netem.c,
``netem_dequeue``: a frame whose send time has come is enqueued into the child, the child is then
dequeued); the child is the backend's shaper and port buffer, unchanged. A constant delay in front of
a FIFO shifts every arrival and so every departure by the same time, so the departures equal those
of "queue, serialize, then cross the wire", while the shaper's queue (its backlog, tail drop, ECN and
PFC thresholds) holds only frames that already crossed: the frames in flight are netem's, not the port
buffer's. The telemetry sampler therefore reads the shaper's root (the qdisc whose parent is
:data:`CHILD_PARENT`), not netem. A frame is delayed once per egress, so a path of ``n`` links adds
``n x delay_us`` each way and ``2 x n x delay_us`` to a round trip. The same recipe, netem root with
a tbf child, is in tc-netem(8) ("rate control").

netem's own ``limit`` (frames, default 1000) must never bind: it counts the frames of the last
``delay_us`` arriving at any speed (an incast arrives faster than the link drains), so it is set to
:data:`NETEM_LIMIT_PKTS`; the port buffer below it is the only limit. netem's ``delay`` travels in the
kernel's scheduler ticks (pyroute2 converts microseconds).
"""
from __future__ import annotations

from dataplane.queues import tc

#: handle of the netem stage (``d:``) and the parent its child, the backend's shaper, hangs from (``d:1``)
NETEM_HANDLE = 0xD0000
CHILD_PARENT = NETEM_HANDLE | 1
#: netem's frame limit: high enough never to bind (module doc)
NETEM_LIMIT_PKTS = 1 << 20


def netem_request(ifindex: int, delay_us: int) -> tuple:
    """The tc request adding the netem root of ``delay_us`` on interface ``ifindex`` (pyroute2 ``tc`` arguments)."""
    return ("add", "netem", {"index": ifindex, "handle": NETEM_HANDLE, "parent": tc.TC_H_ROOT,
                             "delay": int(delay_us), "limit": NETEM_LIMIT_PKTS})


def under_delay(reqs: list, ifindex: int, delay_us: int, stage: bool | None = None) -> list:
    """``reqs`` (a backend's plan, rooted at TC_H_ROOT) with the netem root of ``delay_us`` first and the
    plan's root re-parented to :data:`CHILD_PARENT`; ``reqs`` unchanged without the stage. ``stage``:
    whether to add it, default ``delay_us > 0`` (True with 0: a netem stage of 0, for a link without delay
    in a fabric whose other links have one). ValueError for a negative delay."""
    if delay_us < 0:
        raise ValueError(f"delay_us={delay_us!r} must be >= 0")
    if not (delay_us > 0 if stage is None else stage):
        return list(reqs)
    out = [netem_request(ifindex, delay_us)]
    for command, kind, attrs in reqs:
        if attrs.get("parent") == tc.TC_H_ROOT:
            attrs = {**attrs, "parent": CHILD_PARENT}
        out.append((command, kind, attrs))
    return out


def read_delay_us(ipr, index: int) -> int:
    """The delay of the netem root of interface ``index`` in microseconds (0 when there is none)."""
    from pyroute2.netlink.rtnl.tcmsg.common import tick_in_usec

    for q in ipr.get_qdiscs(index=index):
        if q["handle"] == NETEM_HANDLE and q.get_attr("TCA_KIND") == "netem":
            return round(q.get_attr("TCA_OPTIONS")["delay"] / tick_in_usec)
    return 0
