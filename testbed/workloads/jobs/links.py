"""The links each job's traffic crosses and each job's fair share of them (a model, stated here).

Flows: an op's directed (sender, receiver) host pairs with the bytes its algorithm sends between them
(traffic.collectives: the sum of every step's sends). Paths: the shortest paths of the layout, split
evenly at each hop over the next hops on a shortest path, which is what hashing or spraying over equal
paths does on average (per-packet spraying does it for every flow; per-flow ECMP only on average over
flows, so one run's collisions can be worse or better). Directed link ``u>v``: the port from node u to v.

Fair share (progressive filling, Bertsekas & Gallager, Data Networks, 6.5.2): every job j sends at rate
r_j on its busiest flow and each other flow f of the job at r_j x bytes_f / bytes_max; link l carries
sum_j r_j x a_jl with a_jl = sum_f (bytes_f / bytes_max) x share_f(l). All r_j rise together until a
link is full (sum_j r_j a_jl = capacity_l); the jobs on it keep that rate; the others rise on. For a
ring all-reduce each rank's flow carries busbw (2(n-1)/n x S per rank in time t), so r_j / host link
rate is the job's busbw ratio (busbw / link rate) the fair share allows; its solo value is the same
model with the job alone.
"""
from __future__ import annotations

from collections import defaultdict

import networkx as nx

from traffic import collectives


def op_flows(op, host_of: dict[int, str]) -> dict[tuple[str, str], int]:
    """(sender host, receiver host) -> bytes of one op (testbed.workloads.plan.PlannedOp): every group's schedule."""
    alg = collectives.get(op.collective, op.algorithm)
    out: dict[tuple[str, str], int] = defaultdict(int)
    for g in op.groups:
        n = len(g)
        for pos, r in enumerate(g):
            for step in alg.schedule(pos, n, op.size_bytes):
                for t in step.sends:
                    out[(host_of[r], host_of[g[t.peer]])] += t.nbytes
    return dict(out)


def _graph(layout) -> nx.Graph:
    g = nx.Graph()
    for link in layout.links:
        g.add_edge(link.a.node, link.b.node, rate_bps=float(link.rate_bps))
    return g


def path_shares(g: nx.Graph, src: str, dst: str) -> dict[tuple[str, str], float]:
    """Directed link -> share of a src -> dst flow on it, split evenly at each hop over the next hops on a
    shortest path (shares out of every node sum to what entered it; 1.0 leaves src)."""
    dist = nx.single_source_shortest_path_length(g, dst)
    out: dict[tuple[str, str], float] = defaultdict(float)
    frontier = {src: 1.0}
    while frontier:
        nxt: dict[str, float] = defaultdict(float)
        for u, s in frontier.items():
            if u == dst:
                continue
            hops = [v for v in g.neighbors(u) if dist.get(v, 1 << 30) == dist[u] - 1]
            for v in hops:
                out[(u, v)] += s / len(hops)
                nxt[v] += s / len(hops)
        frontier = dict(nxt)
    return dict(out)


def job_loads(layout, jobs, ops, pattern_flows: dict | None = None) -> dict[str, dict[tuple[str, str], float]]:
    """Job name -> directed link -> a_jl (module docstring): the job's flows' shares on the link, each flow
    weighted by its bytes over the job's busiest flow's bytes. ``jobs``: testbed.workloads.jobs.plan.PlacedJob;
    ``ops``: the plan (PlannedOp with ``job``); ``pattern_flows``: a pattern job's name -> (sender host,
    receiver host) -> bytes of its flows (testbed.workloads.pattern.job.host_pair_bytes): it runs no op."""
    g = _graph(layout)
    host_of = {h.rank: h.name for h in layout.hosts}
    out = {}
    for j in jobs:
        flows: dict[tuple[str, str], int] = defaultdict(int, (pattern_flows or {}).get(j.name, {}))
        for op in ops:
            if op.job == j.name and not op.warmup:
                for k, v in op_flows(op, host_of).items():
                    flows[k] += v
        top = max(flows.values(), default=0)
        loads: dict[tuple[str, str], float] = defaultdict(float)
        for (s, d), b in flows.items():
            for link, share in path_shares(g, s, d).items():
                loads[link] += b / top * share
        out[j.name] = dict(loads)
    return out


def capacities(layout) -> dict[tuple[str, str], float]:
    """Directed link -> its rate, bit/s (both directions of every link)."""
    out = {}
    for link in layout.links:
        out[(link.a.node, link.b.node)] = out[(link.b.node, link.a.node)] = float(link.rate_bps)
    return out


def fair_rates(loads: dict[str, dict[tuple[str, str], float]], capacity: dict[tuple[str, str], float]
               ) -> dict[str, float]:
    """Job -> r_j, bit/s, by progressive filling (module docstring). A job on no link gets inf."""
    rate = {j: 0.0 for j in loads}
    active = {j for j in loads if loads[j]}
    level = 0.0
    while active:
        best, full = float("inf"), None
        for link, cap in capacity.items():
            a_act = sum(loads[j].get(link, 0.0) for j in active)
            if a_act <= 1e-12:
                continue
            used = sum(rate[j] * loads[j].get(link, 0.0) for j in loads if j not in active)
            t = (cap - used) / a_act
            if t < best:
                best, full = t, link
        if full is None:
            break
        level = max(level, best)
        frozen = {j for j in active if loads[j].get(full, 0.0) > 1e-12}
        for j in frozen:
            rate[j] = level
        active -= frozen
        for j in active:
            rate[j] = level
    for j in loads:
        if not loads[j]:
            rate[j] = float("inf")
    return rate


def shared_links(loads: dict[str, dict[tuple[str, str], float]]) -> dict[tuple[str, str], list[str]]:
    """Directed link -> the jobs whose traffic may cross it, for links two or more jobs may cross."""
    users: dict[tuple[str, str], list[str]] = defaultdict(list)
    for j, ls in loads.items():
        for link, a in ls.items():
            if a > 1e-12:
                users[link].append(j)
    return {k: v for k, v in sorted(users.items()) if len(v) > 1}


def link_name(link: tuple[str, str]) -> str:
    """``u>v``."""
    return f"{link[0]}>{link[1]}"
