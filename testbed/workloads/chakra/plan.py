"""The plan of a Chakra replay (``workload.chakra``): the fabric ops the agents run and the graph around them.

The traces are read and checked (traffic.workloads.chakra.trace), their nodes matched across
ranks and ordered by their dependencies (traffic.workloads.chakra.graph). Rank r of the traces
runs on host r (hosts beyond the trace's ranks stay idle). Every matched collective and every
send/recv pair is one PlannedOp, in the graph's topological order:

- a collective runs over its process group's ranks (in rank order) by ``workload.algorithm``
  where registered for it, else the collective's default (:data:`DEFAULT_ALGORITHMS`);
- a send/recv pair runs as a 2-rank broadcast from the sender to the receiver (position 0 sends
  the message to position 1; busbw = algbw, factor 1, as nccl-tests' sendrecv);
- sizes: comm_size x ``size_scale`` (at least 1 byte), then nccl-tests' S of the collective
  (:func:`fabric_size_bytes`: with ``comm_size_means: astra-sim``, the default, S = ranks x comm_size
  for an all-gather, as ASTRA-sim's Ring; comm_size for the others); compute waits: duration_micros x the
  compute scale (``auto`` = dilation x size_scale, as the SimAI replay: testbed.workloads.simai.plan);
- skipped nodes (traffic.workloads.chakra.trace: METADATA, INVALID and CPU-side communication nodes):
  counted, and one warning lists their kinds;
- streams (``streams: on``): the collectives of process group k (in name order) run on stream k, every
  send/recv pair on the stream after the last group's; with ``streams: off`` all on stream 0.

How the graph runs: testbed.workloads.chakra.run. Errors: ScenarioError naming the key, then the file, node
id and reason.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from testbed.workloads.simai import plan as simai_plan
from testbed.workloads.plan import PlannedOp, WorkloadPlan
from testbed.spec.scenario import ScenarioError, ScenarioSpec

#: algorithm of a collective when ``workload.algorithm`` is not registered for it
DEFAULT_ALGORITHMS = {"allreduce": "ring", "allgather": "ring", "reducescatter": "ring", "alltoall": "pairwise",
                      "broadcast": "ring"}
KEY = "workload.chakra"
#: values of workload.chakra.comm_size_means (:func:`fabric_size_bytes`)
COMM_SIZE_MEANINGS = ("astra-sim", "nccl-tests")


@dataclass(frozen=True)
class ChakraPlan:
    """The replay graph (traffic.workloads.chakra.graph.ReplayGraph) with what the run needs: ``op_of``:
    unit index -> op index of the op plan (fabric units), ``sizes``: unit index -> comm_size x size_scale, bytes
    (the op's S may differ: :func:`fabric_size_bytes`),
    ``compute_scale``: traced compute time -> emulated, ``n_ranks``: ranks of the trace, ``streams_on``:
    ``workload.chakra.streams``."""

    path: str
    graph: object
    op_of: dict
    sizes: dict
    compute_scale: float
    size_scale: float
    n_ranks: int
    #: fabric ops on streams, submitted as soon as ready (``streams: on``), else one at a time
    streams_on: bool = False
    #: kind -> nodes skipped (traffic.workloads.chakra.trace.skip_kind), over every rank
    skipped: dict = field(default_factory=dict)
    #: ``workload.chakra.comm_size_means``
    comm_size_means: str = "astra-sim"

    def compute_s(self, unit) -> float:
        """The emulated seconds of compute unit ``unit``."""
        return unit.nodes[0].duration_us * self.compute_scale / 1e6

    @property
    def compute_s_per_rank(self) -> dict:
        """rank -> the seconds of compute waits it runs (GPU and CPU-side nodes added: each lane runs one at a
        time, testbed.workloads.chakra.run.compute_lane)."""
        out = {r: 0.0 for r in range(self.n_ranks)}
        for u in self.graph.units:
            if u.kind == "comp":
                out[u.ranks[0]] += self.compute_s(u)
        return out


def fabric_size_bytes(collective: str, comm_size: int, n_ranks: int, size_scale: float = 1.0,
                      means: str = "astra-sim") -> int:
    """nccl-tests' S (the size traffic.collectives runs, docs/collectives.md) of a Chakra collective of
    ``comm_size`` bytes over ``n_ranks`` ranks, after ``size_scale`` (c = max(1, round(comm_size x
    size_scale)) bytes per rank).

    ``means`` ``astra-sim`` (ASTRA-sim's meaning: comm_size C is the data one rank holds when the
    collective starts; astra-sim/system/astraccl/native_collectives/collective_algorithm/Ring.cc, the
    constructor's msg_size and final_data_size, and AllToAll.cc). Bytes each rank sends, n ranks:

    - allreduce: S = c; 2(n-1)/n x c (Ring.cc: 2(n-1) messages of C/n; reduce-scatter then all-gather);
    - reducescatter: S = c; (n-1)/n x c (n-1 messages of C/n; each rank ends with C/n);
    - allgather: S = n x c; (n-1) x c (n-1 messages of C; each rank ends with n x C);
    - alltoall: S = c; (n-1)/n x c, c/n to each peer (AllToAll.cc, ASTRA-sim's direct all-to-all: n-1
      messages of C/n; its Ring runs the same exchange relayed along the ring);
    - broadcast: S = c, the root's buffer (each rank but the chain's last forwards c; ASTRA-sim moves
      no data for a BROADCAST node: Workload.cc waits its duration);
    - a send/recv pair (``broadcast`` of 2 ranks): S = c, the message.

    ``means`` ``nccl-tests``: comm_size is nccl-tests' S for every collective (S = c).
    Raises ValueError for another ``means``.
    """
    if means not in COMM_SIZE_MEANINGS:
        raise ValueError(f"comm_size_means = {means!r}: allowed {', '.join(COMM_SIZE_MEANINGS)}")
    c = max(1, round(comm_size * size_scale))
    return n_ranks * c if means == "astra-sim" and collective == "allgather" else c


def algorithm_for(collective: str, asked: str) -> str:
    """``asked`` when registered for ``collective``, else its default (:data:`DEFAULT_ALGORITHMS`)."""
    return simai_plan.algorithm_for(collective, asked, DEFAULT_ALGORITHMS)


def compute_scale(spec: ScenarioSpec) -> float:
    """Emulated / traced compute time: ``workload.chakra.compute_scale``; ``auto`` = dilation x size_scale."""
    return simai_plan.compute_scale(spec, spec.workload.chakra)


def read_comm_groups(path: str) -> dict:
    """ASTRA-sim's comm group JSON: ``{"name": [rank, ...]}``. Raises ScenarioError naming the key."""
    key = f"{KEY}.comm_groups"
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise ScenarioError(f"{key}: cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise ScenarioError(f"{key}: {path} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ScenarioError(f"{key}: {path}: the top level must be an object {{process group: [ranks]}}")
    for name, ranks in doc.items():
        if (not isinstance(ranks, list) or not ranks
                or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks)
                or len(set(ranks)) != len(ranks)):
            raise ScenarioError(f"{key}: {path}: group {name!r}: {ranks!r}; allowed a list of distinct ranks >= 0")
    return doc


def chakra_plan(spec: ScenarioSpec) -> WorkloadPlan:
    """The WorkloadPlan of a Chakra replay (module docstring): fabric ops, notes and the ChakraPlan.

    Raises ScenarioError naming the key and the file, node id and reason when the traces cannot run here."""
    from traffic.workloads.chakra.graph import replay_graph
    from traffic.workloads.chakra.trace import ChakraFormatError, read_traces

    c = spec.workload.chakra
    groups = read_comm_groups(c.comm_groups) if c.comm_groups else None
    try:
        traces = read_traces(c.path)
        graph = replay_graph(traces, groups)
    except ChakraFormatError as e:
        raise ScenarioError(f"{KEY}.path: {e}") from None
    except OSError as e:
        raise ScenarioError(f"{KEY}.path: cannot read {e.filename or c.path}: {e.strerror or e}") from None
    n, hosts = len(traces), spec.fabric.n_hosts
    if n > hosts:
        raise ScenarioError(f"{KEY}.path: {c.path} has {n} ranks but the fabric has {hosts} hosts "
                            f"({spec.fabric.describe()}); rank r runs on host r: use a fabric of at least {n} hosts")
    if n < 2:
        raise ScenarioError(f"{KEY}.path: {c.path} has one rank: nothing crosses the fabric")
    ops, op_of, sizes = [], {}, {}
    streams_on = c.streams == "on"
    stream_of = {pg: k for k, pg in enumerate(sorted(graph.groups))}
    p2p_stream = len(stream_of)
    for u in graph.units:
        if not u.on_fabric:
            continue
        size = fabric_size_bytes(u.collective, u.size_bytes, len(u.ranks), c.size_scale,
                                 "nccl-tests" if u.kind == "p2p" else c.comm_size_means)
        alg = "ring" if u.kind == "p2p" else algorithm_for(u.collective, spec.workload.algorithm)
        op_of[u.index], sizes[u.index] = len(ops), max(1, round(u.size_bytes * c.size_scale))
        pg = u.nodes[0].pg_name
        ops.append(PlannedOp(size_bytes=size, iteration=0, warmup=False, layer=u.label, collective=u.collective,
                             group=("p2p" if u.kind == "p2p" else f"pg:{pg}"), groups=(u.ranks,), algorithm=alg,
                             stream=(p2p_stream if u.kind == "p2p" else stream_of[pg]) if streams_on else 0))
    if not ops:
        raise ScenarioError(f"{KEY}.path: {c.path} has no communication node that crosses the fabric")
    scale = compute_scale(spec)
    skipped: dict = {}
    for t in traces:
        for _, kind in t.skipped:
            skipped[kind] = skipped.get(kind, 0) + 1
    plan = ChakraPlan(path=c.path, graph=graph, op_of=op_of, sizes=sizes, compute_scale=scale,
                      size_scale=c.size_scale, n_ranks=n, streams_on=streams_on, skipped=skipped,
                      comm_size_means=c.comm_size_means)
    kinds = {}
    for u in graph.units:
        kinds[u.kind] = kinds.get(u.kind, 0) + 1
    notes = [f"{c.path}: {n} ranks, {sum(len(t.nodes) for t in traces)} nodes: {kinds.get('comp', 0)} compute "
             f"waits (x {scale:g}), {kinds.get('coll', 0)} collectives and {kinds.get('p2p', 0)} send/recv pairs on "
             f"the fabric, in dependency order; process groups: "
             + ", ".join(f"{pg or '(no pg_name)'} {list(m)}" for pg, m in graph.groups.items())
             + ("" if groups is not None else " (inferred from the traces)")
             + (f"; {p2p_stream + 1} streams: one per process group, one for send/recv" if streams_on
                else "; one fabric operation at a time (streams: off)")]
    notes += [f"{c.path}: {m}" for m in graph.notes]
    if plan.skipped:
        notes.append(f"warning: {c.path}: skipped {sum(plan.skipped.values())} nodes a network replay cannot run "
                     f"(kinds: " + "; ".join(f"{k} x {v}" for k, v in plan.skipped.items())
                     + "); the nodes that depended on them wait for what they depended on")
    dropped = sum(t.dropped_ctrl_deps for t in traces)
    if dropped:
        notes.append(f"{c.path}: {dropped} ctrl_deps name nodes the files do not have (Chakra's PyTorch converter "
                     "removes dangling nodes but not their ids): left out")
    return WorkloadPlan(tuple(ops), tuple(notes), plan)


def replay_plan(spec: ScenarioSpec, ops) -> ChakraPlan:
    """The ChakraPlan of ``spec``, checked against the op plan the run was given (``ops``).

    Raises RuntimeError when they differ (the traces changed since the scenario was checked)."""
    plan = chakra_plan(spec)
    if tuple(ops) != plan.ops:
        raise RuntimeError(f"{spec.workload.chakra.path} changed after the scenario was checked: its ops differ "
                           "from the run's plan")
    return plan.replay
