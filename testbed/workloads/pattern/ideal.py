"""The flows of a pattern on an ideal fabric: max-min fair rates and completion times (fluid model).

Ideal fabric (the yardstick for ``ideal_fct_us``, ``slowdown`` and ``throughput_ratio``): every
flow is limited only by its source host's link, its destination host's link and, for a flow between
two switches, the total uplink capacity of the source switch and the total downlink capacity of the
destination switch, as if a perfect load balancer spread every packet over all equal-cost paths
(a fluid "big switch" with per-switch uplink bundles). Rates are max-min fair (progressive filling,
Bertsekas & Gallager, Data Networks, 6.5.2), recomputed whenever a flow starts or ends; a flow of S
bytes at rate R (bit/s on the wire) moves S x 8 / (R x payload efficiency) seconds. This ignores
queueing, ACKs and start-up, so real flows take a little longer even when perfectly balanced.

Queue pairs: a flow split over N QPs (``qps``, traffic.patterns.qp_shares) is N sub-flows, each with
its share of the bytes and the flow's resources; max-min fairness is per QP (the transport's window and
congestion control act per QP, as on an RNIC), so at a shared bottleneck a flow of 4 QPs gets 4/5 of
what it shares with a flow of 1 QP. A flow's rate is the sum of its sub-flows', its completion time
that of its last sub-flow. The yardstick stays a perfect balancer: where ECMP would hash the QPs onto
paths, the model spreads them perfectly, so an ECMP collision shows up as slowdown above 1.
"""
from __future__ import annotations

from topology.model import Layout
from traffic.patterns import qp_shares


def capacities(layout: Layout) -> tuple[dict, dict]:
    """(host -> host link bit/s, switch -> total bit/s of its links to other switches)."""
    hosts = {h.name for h in layout.hosts}
    host_bps = {h.name: next(ln.rate_bps for ln in layout.links_of(h.name)) for h in layout.hosts}
    up_bps: dict[str, float] = {}
    for ln in layout.links:
        if ln.a.node in hosts or ln.b.node in hosts:
            continue
        for end in (ln.a.node, ln.b.node):
            up_bps[end] = up_bps.get(end, 0.0) + ln.rate_bps
    return host_bps, up_bps


def resources(flows, layout: Layout) -> tuple[dict, dict]:
    """(resource -> capacity bit/s, flow -> its resources) of the ideal fabric (module docstring):
    resources ("tx", host), ("rx", host), ("up", switch), ("down", switch)."""
    host_bps, up_bps = capacities(layout)
    cap, uses = {}, {}
    for f in flows:
        s, d = layout.hosts[f.src].name, layout.hosts[f.dst].name
        ss, ds = layout.attachment(s).node, layout.attachment(d).node
        res = [("tx", s), ("rx", d)]
        cap[("tx", s)], cap[("rx", d)] = host_bps[s], host_bps[d]
        if ss != ds:
            res += [("up", ss), ("down", ds)]
            cap[("up", ss)], cap[("down", ds)] = up_bps[ss], up_bps[ds]
        uses[f.flow] = res
    return cap, uses


def max_min_rates(active: list[int], cap: dict, uses: dict) -> dict[int, float]:
    """Max-min fair rate (bit/s) of each flow in ``active``; ``uses[flow]``: its resources, ``cap``: their
    capacities (progressive filling)."""
    residual = dict(cap)
    users: dict = {}
    for f in active:
        for r in uses[f]:
            users.setdefault(r, set()).add(f)
    rate: dict[int, float] = {}
    left = set(active)
    while left:
        share, r = min((residual[r] / len(u & left), r) for r, u in users.items() if u & left)
        for f in users[r] & left:
            rate[f] = share
            for r2 in uses[f]:
                residual[r2] -= share
            left.discard(f)
    return rate


def qps_of(flows) -> dict[int, int]:
    """flow -> its queue pairs (``qps``, 1 for a flow record without one)."""
    return {f.flow: getattr(f, "qps", 1) for f in flows}


def flow_rates(active, qps: dict[int, int], cap: dict, uses: dict) -> dict[int, float]:
    """Max-min fair rate (bit/s) of each flow in ``active``, each flow being ``qps[flow]`` sub-flows on its
    resources ``uses[flow]`` (module docstring): the sum of its sub-flows' rates."""
    sub = [(f, c) for f in active for c in range(qps[f])]
    rate = max_min_rates(sub, cap, {(f, c): uses[f] for f, c in sub})
    return {f: sum(rate[(f, c)] for c in range(qps[f])) for f in active}


def ideal_rates(flows, layout: Layout) -> dict[int, float]:
    """Max-min fair wire rate (bit/s) of every flow (the sum over its queue pairs) when all of them send at
    once."""
    cap, uses = resources(flows, layout)
    return flow_rates([f.flow for f in flows], qps_of(flows), cap, uses)


def ideal_fct_s(flows, layout: Layout, efficiency: float) -> dict[int, float]:
    """flow -> its completion time (s, from its own start) on the ideal fabric (module docstring).

    ``flows``: traffic.patterns.Flow records (src/dst ranks, size_bytes, start_s, qps); ``efficiency``:
    payload / frame bytes of a full packet (traffic.transport.payload_efficiency). Each QP of a flow is a
    sub-flow with its share of the bytes (traffic.patterns.qp_shares); the flow ends with its last."""
    cap, flow_uses = resources(flows, layout)
    uses, left, start = {}, {}, {}  # per sub-flow (flow, QP): resources, wire bits still to move, start
    for f in flows:
        for c, share in enumerate(qp_shares(f.size_bytes, getattr(f, "qps", 1))):
            uses[(f.flow, c)], left[(f.flow, c)], start[(f.flow, c)] = flow_uses[f.flow], share * 8 / efficiency, f.start_s
    sub_done: dict = {}
    t = 0.0
    while len(sub_done) < len(left):
        active = [f for f in left if f not in sub_done and start[f] <= t + 1e-12]
        later = [start[f] for f in left if f not in sub_done and start[f] > t + 1e-12]
        if not active:
            t = min(later)
            continue
        rate = max_min_rates(active, cap, uses)
        dt = min(left[f] / rate[f] for f in active)
        if later:
            dt = min(dt, min(later) - t)
        t += dt
        for f in active:
            left[f] -= rate[f] * dt
            if left[f] <= 1e-6 * (1 + rate[f]):
                sub_done[f] = t - start[f]
    done: dict[int, float] = {}
    for (flow, _), fct in sub_done.items():
        done[flow] = max(done.get(flow, 0.0), fct)
    return {f.flow: done[f.flow] for f in flows}
