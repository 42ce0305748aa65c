"""Match the nodes of every rank's trace into fabric operations and order them by their dependencies.

Matching (how the ranks of a job meet in NCCL, and how ASTRA-sim pairs them):

- collectives: the k-th collective of process group P on every member rank is one operation.
  "k-th" is in the rank's own dependency order (a topological order of its file's nodes,
  ties in file order: the file order whenever the file lists dependencies first). Members of
  P: the ``comm_groups`` mapping when given (ASTRA-sim's ``--comm-group-configuration``
  JSON: ``{"P": [ranks]}``), else the ranks whose trace has collectives on P (as Chakra's
  ``pg_extractor`` finds them). Every member must have the same number of collectives on P
  and the k-th ones must agree on comm_type and comm_size. Positions: the members in rank
  order (a BROADCAST's root is the first).
- point to point: the k-th send from rank s to rank d with tag t matches the k-th recv on d
  from s with tag t (MPI's non-overtaking rule); both must have the same comm_size.

The replay graph: one :class:`Unit` per compute node and per fabric operation (a process
group of one rank moves no data: its collectives are units that take no time, with a note).
Unit B depends on unit A when a node of B names a node of A in its deps. A cycle (inside one
file, or across ranks through matched operations: a deadlock the traced program could not
have had) is refused naming the nodes on it. :attr:`ReplayGraph.units` is a topological
order (ties: the earliest file position), the order a one-at-a-time replay runs them in.

Errors: :class:`~traffic.workloads.chakra.trace.ChakraFormatError` naming file, node id and
reason.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

import networkx as nx

from traffic.workloads.chakra.trace import ChakraFormatError, RankTrace, TraceNode


@dataclass(frozen=True)
class Unit:
    """One thing the replay runs: ``kind`` ``comp`` (one compute node), ``coll`` (a collective over
    ``ranks``), ``p2p`` (a send and its recv: ranks = (src, dst)) or ``local`` (a one-rank group's
    collective: no data moves). ``nodes``: the matched nodes, aligned with ``ranks`` (the algorithm's
    positions). ``label``: what it is, for messages and tables."""

    index: int
    kind: str
    ranks: tuple[int, ...]
    nodes: tuple[TraceNode, ...]
    label: str

    @property
    def on_fabric(self) -> bool:
        return self.kind in ("coll", "p2p")

    @property
    def collective(self) -> str:
        """traffic.collectives name: the nodes' collective; a send/recv runs as a 2-rank broadcast from the
        sender (position 0 sends size_bytes to position 1, busbw factor 1 as nccl-tests' sendrecv)."""
        return "broadcast" if self.kind == "p2p" else self.nodes[0].collective

    @property
    def size_bytes(self) -> int:
        return self.nodes[0].size_bytes


@dataclass(frozen=True)
class ReplayGraph:
    """The units in run order, each unit's predecessors (unit indices), the process groups (name -> member
    ranks) and notes to print."""

    units: tuple[Unit, ...]
    preds: dict
    groups: dict
    notes: tuple[str, ...]

    @property
    def fabric_units(self) -> list[Unit]:
        return [u for u in self.units if u.on_fabric]


def _local_order(t: RankTrace) -> list[TraceNode]:
    """The nodes of one file in dependency order (ties: file order); ChakraFormatError on a cycle."""
    pos = {n.node_id: i for i, n in enumerate(t.nodes)}
    g = nx.DiGraph()
    g.add_nodes_from(pos)
    g.add_edges_from((d, n.node_id) for n in t.nodes for d in n.deps)
    by_id = {n.node_id: n for n in t.nodes}
    try:
        order = list(nx.lexicographical_topological_sort(g, key=pos.__getitem__))
    except nx.NetworkXUnfeasible:
        cycle = [a for a, _ in nx.find_cycle(g)]
        raise ChakraFormatError(f"{by_id[cycle[0]].where}: dependency cycle inside the file: "
                                + " -> ".join(f"node {c}" for c in cycle + cycle[:1])) from None
    return [by_id[i] for i in order]


def _pg(name: str) -> str:
    return f"process group {name!r}" if name else "the process group with no pg_name"


def _match_collectives(orders: dict, traces: list[RankTrace], comm_groups: Optional[dict], notes: list):
    """(process group -> members, list of (ranks, nodes, label) per matched collective)."""
    by_pg: dict[str, dict[int, list[TraceNode]]] = defaultdict(lambda: defaultdict(list))
    for r, nodes in orders.items():
        for n in nodes:
            if n.kind == "coll":
                by_pg[n.pg_name][r].append(n)
    groups, out = {}, []
    n_ranks = len(traces)
    for pg in sorted(by_pg):
        per_rank = by_pg[pg]
        if comm_groups is not None:
            if pg not in comm_groups:
                first = min(per_rank)
                raise ChakraFormatError(f"{per_rank[first][0].where}: {_pg(pg)} is not in comm_groups "
                                        f"(it names {', '.join(map(repr, sorted(comm_groups))) or 'none'})")
            members = tuple(sorted(comm_groups[pg]))
            for r in per_rank:
                if r not in members:
                    raise ChakraFormatError(f"{per_rank[r][0].where}: rank {r} runs a collective on {_pg(pg)}, "
                                            f"whose members are {list(members)} (comm_groups)")
        else:
            members = tuple(sorted(per_rank))
        bad = [r for r in members if not 0 <= r < n_ranks]
        if bad:
            raise ChakraFormatError(f"comm_groups: {_pg(pg)} names rank {bad[0]}, but the trace has ranks "
                                    f"0..{n_ranks - 1}")
        groups[pg] = members
        counts = {r: len(per_rank.get(r, [])) for r in members}
        most = max(counts, key=lambda r: (counts[r], -r))
        for r in members:
            if counts[r] != counts[most]:
                k = counts[r]
                extra = per_rank[most][k]
                raise ChakraFormatError(
                    f"{extra.where}: collective #{k + 1} of {_pg(pg)} on rank {most} has no partner on rank {r} "
                    f"({traces[r].path} has {counts[r]} collectives on that group, rank {most} has "
                    f"{counts[most]}): the ranks of a group must run the same collectives")
        if len(members) == 1:
            notes.append(f"{_pg(pg)} has one rank ({members[0]}): its {counts[members[0]]} collectives move no "
                         "data and take no time")
        for k in range(counts[most]):
            nodes = tuple(per_rank[r][k] for r in members)
            ref = nodes[0]
            for n in nodes[1:]:
                if (n.comm_type, n.size_bytes) != (ref.comm_type, ref.size_bytes):
                    raise ChakraFormatError(
                        f"{n.where}: collective #{k + 1} of {_pg(pg)} is {n.comm_type} of {n.size_bytes} B, but on "
                        f"rank {ref.rank} ({ref.where}) it is {ref.comm_type} of {ref.size_bytes} B")
            out.append((members, nodes, f"{ref.comm_type} #{k + 1} of {_pg(pg)}"))
    return groups, out


def _match_p2p(orders: dict, traces: list[RankTrace]):
    """A list of ((src, dst), (send, recv), label) per matched send/recv pair."""
    sends: dict[tuple, list[TraceNode]] = defaultdict(list)
    recvs: dict[tuple, list[TraceNode]] = defaultdict(list)
    n_ranks = len(traces)
    for r, nodes in orders.items():
        for n in nodes:
            if n.kind in ("send", "recv"):
                peer = n.dst if n.kind == "send" else n.src
                if not 0 <= peer < n_ranks:
                    raise ChakraFormatError(f"{n.where}: {n.kind} {'to' if n.kind == 'send' else 'from'} rank "
                                            f"{peer}, but the trace has ranks 0..{n_ranks - 1}")
                (sends if n.kind == "send" else recvs)[(n.src, n.dst, n.tag)].append(n)
    out = []
    for key in sorted(set(sends) | set(recvs)):
        s, r = sends.get(key, []), recvs.get(key, [])
        src, dst, tag = key
        if len(s) != len(r):
            more, kind, other = (s, "send", dst) if len(s) > len(r) else (r, "recv", src)
            lone = more[min(len(s), len(r))]
            raise ChakraFormatError(
                f"{lone.where}: {kind} #{min(len(s), len(r)) + 1} from rank {src} to rank {dst} with tag {tag} has "
                f"no matching {'recv' if kind == 'send' else 'send'} in {traces[other].path} ({len(s)} sends, "
                f"{len(r)} recvs with that source, destination and tag)")
        for k, (a, b) in enumerate(zip(s, r)):
            if a.size_bytes != b.size_bytes:
                raise ChakraFormatError(f"{b.where}: recv of {b.size_bytes} B, but its send ({a.where}) sends "
                                        f"{a.size_bytes} B")
            out.append(((src, dst), (a, b), f"SEND/RECV #{k + 1} {src}->{dst} tag {tag}"))
    return out


def replay_graph(traces: list[RankTrace], comm_groups: Optional[dict] = None) -> ReplayGraph:
    """Match ``traces`` (rank order, trace.read_traces) into units and order them (module docstring).

    ``comm_groups``: process group name -> member ranks, or None to infer them. Raises ChakraFormatError
    naming file, node id and reason (unmatched or mismatched operations, a dependency cycle)."""
    orders = {t.rank: _local_order(t) for t in traces}
    notes: list[str] = []
    groups, colls = _match_collectives(orders, traces, comm_groups, notes)
    p2ps = _match_p2p(orders, traces)
    position = {(t.rank, n.node_id): i for t in traces for i, n in enumerate(orders[t.rank])}
    raw = [("comp", (n.rank,), (n,), f"COMP {n.name or n.node_id}") for t in traces for n in t.nodes
           if n.kind == "comp"]
    raw += [("coll" if len(m) > 1 else "local", m, nodes, label) for m, nodes, label in colls]
    raw += [("p2p", m, nodes, label) for m, nodes, label in p2ps]
    unit_of = {(n.rank, n.node_id): i for i, (_, _, nodes, _) in enumerate(raw) for n in nodes}
    g = nx.DiGraph()
    g.add_nodes_from(range(len(raw)))
    for i, (_, _, nodes, _) in enumerate(raw):
        for n in nodes:
            g.add_edges_from((unit_of[(n.rank, d)], i) for d in n.deps)
    try:
        order = list(nx.lexicographical_topological_sort(
            g, key=lambda i: (min(position[(n.rank, n.node_id)] for n in raw[i][2]), raw[i][1])))
    except nx.NetworkXUnfeasible:
        cycle = [a for a, _ in nx.find_cycle(g)]
        first = raw[cycle[0]][2][0]
        steps = " -> ".join(f"{raw[c][3]} ({', '.join(f'rank {n.rank} node {n.node_id}' for n in raw[c][2])})"
                            for c in cycle + cycle[:1])
        raise ChakraFormatError(f"{first.where}: dependency cycle across ranks (the matched operations would "
                                f"deadlock): {steps}") from None
    new = {old: k for k, old in enumerate(order)}
    units = tuple(Unit(index=new[i], kind=raw[i][0], ranks=tuple(raw[i][1]), nodes=tuple(raw[i][2]),
                       label=raw[i][3]) for i in order)
    preds = {new[i]: frozenset(new[p] for p in g.predecessors(i)) for i in order}
    return ReplayGraph(units=units, preds=preds, groups=groups, notes=tuple(notes))
