"""Run a Chakra replay's graph: every unit as soon as the units it depends on have ended.

Model (ASTRA-sim's: a node is issued when all its dependencies are resolved):

- a unit (testbed.workloads.chakra.plan, traffic.workloads.chakra.graph) becomes ready when every unit it
  depends on has ended on every rank; ready units are issued in replay order (the graph's
  topological order), nothing is reordered beyond what the dependencies allow;
- compute: one lane per rank, first in first out (a GPU runs one compute kernel at a time):
  the unit waits its emulated duration (``time.sleep``); a rank's CPU-side nodes (``is_cpu_op``,
  as Chakra's PyTorch converter marks the host's operators) on a second lane (:func:`compute_lane`);
- communication: a ready operation is submitted to the agents on its stream (testbed.workloads.chakra.plan:
  one per process group with ``streams: on``), in replay order; operations on different streams
  run concurrently, those of one stream in submission order on each agent (NCCL runs each
  communicator's kernels in order on its CUDA stream). With ``streams: off`` one fabric lane runs
  them one at a time. A rank's compute lane keeps going meanwhile when its dependencies allow
  (compute overlapping communication, as a GPU overlaps kernels with NCCL's);
- a one-rank group's collective ends when it is issued (it moves no data).

Times (Unix ns, traffic.clock.unix_ns): a compute node's start and end around its wait; a
communication node's start and end are its rank's own record of the operation (the agent's
OpDone), so a node starts after every node it depends on ended on the same clock.
Per fabric operation: algbw = size x 8 / span (first rank's start to last rank's end), busbw =
algbw x the algorithm's factor (nccl-tests), as testbed.results.tables' ops table.

Exposed communication and overlap (:func:`overlap_figures`), as the SimAI replay's (testbed.workloads.replay.run,
testbed.workloads.replay.program): T the makespan; W the compute-only makespan (:func:`compute_only_s`: the same
graph in virtual time with every fabric operation taking no time, compute on its rank's lane, first in
first out); per process group (send/recv pairs: ``p2p``) its communication time C_g (its operations' spans
added up) and busy time (their union), C = sum_g C_g; exposed communication E = min(T - W, C) and its share
E / T, overhead max(0, T - W - C) (neither compute nor communication: issuing to the agents and their
round trip, outside the spans; testbed.workloads.replay.run.exposed_split, after ASTRA-sim's Workload::report); the
communication hidden under compute and other groups' communication C - E >= 0 (testbed.workloads.replay.run.hidden_comm:
what a serialized replay, W + C, would add).
"""
from __future__ import annotations

import heapq
import math
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable, Optional

import pandas as pd

from testbed.process import signals
from testbed.emulation.agents import taking_part
from testbed.process.lifecycle import raise_if_interrupted
from testbed.workloads.replay.run import exposed_split, hidden_comm, union_s
from traffic import collectives
from traffic.clock import unix_ns
from traffic.workloads.chakra.schema import NODE_TYPES

_TYPE_OF_KIND = {"comp": "COMP_NODE", "coll": "COMM_COLL_NODE", "local": "COMM_COLL_NODE", "send": "COMM_SEND_NODE",
                 "recv": "COMM_RECV_NODE"}
assert set(_TYPE_OF_KIND.values()) <= set(NODE_TYPES)


#: most threads waiting for fabric operations at once (more ready operations are still submitted at once;
#: their waits queue)
MAX_FABRIC_WAITERS = 64


def compute_lane(unit) -> tuple[int, bool]:
    """The lane compute unit ``unit`` runs on: (rank, on the CPU). A rank has one lane for its GPU compute
    and one for its CPU-side nodes (``is_cpu_op``), each running one node at a time, as ASTRA-sim's
    HardwareResource (astra-sim/workload/HardwareResource.cc: one CPU op and one GPU compute op in flight)."""
    return unit.ranks[0], unit.nodes[0].cpu


def successors(graph) -> dict[int, list[int]]:
    """unit index -> the indices of the units that depend on it (``graph.preds`` turned around)."""
    succs: dict[int, list[int]] = {u.index: [] for u in graph.units}
    for u in graph.units:
        for q in graph.preds[u.index]:
            succs[q].append(u.index)
    return succs


def run_graph(graph, compute: Callable, fabric: Callable, issue: Optional[Callable] = None) -> dict:
    """Run every unit of ``graph`` (traffic.workloads.chakra.graph.ReplayGraph) in dependency order.

    ``compute(unit)`` and ``fabric(unit, token)`` run one unit and return {rank: (t_start_ns, t_end_ns)};
    compute units run on their rank's lane. Fabric units: with ``issue`` None, one at a time on one
    fabric lane (``token`` None); else ``issue(unit)`` starts the unit from this thread as soon as it is
    ready (in replay order) and returns the token that ``fabric(unit, token)``, on a thread of its own,
    waits for (module docstring). Returns unit index -> the times. Raises what a unit raises (the other
    lanes are shut down, queued units cancelled).
    """
    units = graph.units
    waiting = {u.index: set(graph.preds[u.index]) for u in units}
    succs = successors(graph)
    lanes = {k: ThreadPoolExecutor(1, thread_name_prefix=f"{'cpu' if k[1] else 'compute'}-{k[0]}")
             for k in sorted({compute_lane(u) for u in units if u.kind == "comp"})}
    n_fabric = sum(u.on_fabric for u in units)
    lanes["fabric"] = ThreadPoolExecutor(1 if issue is None else max(1, min(n_fabric, MAX_FABRIC_WAITERS)),
                                         thread_name_prefix="fabric-lane")
    done: dict[int, dict] = {}
    running: dict[Future, int] = {}
    ready = sorted(i for i, w in waiting.items() if not w)

    def finish(i: int, times: dict) -> None:
        done[i] = times
        for s in succs[i]:
            waiting[s].discard(i)
            if not waiting[s]:
                ready.append(s)
        ready.sort()

    try:
        while ready or running:
            while ready:
                u = units[ready.pop(0)]
                if u.kind == "local":
                    t = unix_ns()
                    finish(u.index, {r: (t, t) for r in u.ranks})
                elif u.kind == "comp":
                    running[lanes[compute_lane(u)].submit(compute, u)] = u.index
                else:
                    token = issue(u) if issue is not None else None
                    running[lanes["fabric"].submit(fabric, u, token)] = u.index
            if not running:
                break
            finished, _ = wait(list(running), timeout=0.2, return_when=FIRST_COMPLETED)
            raise_if_interrupted()
            for f in sorted(finished, key=running.get):
                finish(running.pop(f), f.result())
    finally:
        for lane in lanes.values():
            lane.shutdown(wait=False, cancel_futures=True)
    if len(done) != len(units):  # cannot happen for a graph from replay_graph (acyclic)
        raise RuntimeError(f"{len(units) - len(done)} units never became ready: the graph has a cycle")
    return done


def compute_only_s(graph, compute_s: Callable) -> float:
    """W: the makespan of ``graph`` (traffic.workloads.chakra.graph.ReplayGraph) in virtual time, s, with
    compute unit u taking ``compute_s(u)`` on its rank's lane (one at a time, in the order they became ready,
    ties in replay order, as :func:`run_graph`; :func:`compute_lane`) and every other unit no time."""
    units = graph.units
    waiting = {u.index: len(graph.preds[u.index]) for u in units}
    succs = successors(graph)
    ready_at = {u.index: 0.0 for u in units}
    heap = [(0.0, i) for i, w in waiting.items() if not w]
    heapq.heapify(heap)
    lane_free: dict[tuple, float] = {}
    end = 0.0
    while heap:
        t, i = heapq.heappop(heap)
        u = units[i]
        if u.kind == "comp":
            lane = compute_lane(u)
            t = lane_free[lane] = max(t, lane_free.get(lane, 0.0)) + compute_s(u)
        end = max(end, t)
        for s in succs[i]:
            ready_at[s] = max(ready_at[s], t)
            waiting[s] -= 1
            if not waiting[s]:
                heapq.heappush(heap, (ready_at[s], s))
    return end


def overlap_figures(makespan_s: float, compute_only: float, ops: list) -> dict:
    """summary.json ``chakra``'s exposed communication and overlap (module docstring), s: ``ops``: one
    dict per fabric operation with ``group`` (its process group, ``p2p`` for send/recv), ``t_start_s`` and
    ``t_end_s`` (its span: first rank's start to last rank's end). Keys: compute_only_s, exposed_comm_s,
    overhead_s, exposed_share, comm_s, comm_busy_s, groups, saving (testbed.workloads.replay.run.hidden_comm)."""
    groups: dict = {}
    for o in ops:
        g = groups.setdefault(o["group"], {"comm_s": 0.0, "ops": 0, "intervals": []})
        g["comm_s"] += o["t_end_s"] - o["t_start_s"]
        g["ops"] += 1
        g["intervals"].append((o["t_start_s"], o["t_end_s"]))
    for g in groups.values():
        g["busy_s"] = union_s(g.pop("intervals"))
    comm_s = sum(g["comm_s"] for g in groups.values())
    split = exposed_split(makespan_s, compute_only, comm_s)
    exposed = split["exposed_comm_s"]
    return {"compute_only_s": compute_only, "exposed_comm_s": exposed, "overhead_s": split["overhead_s"],
            "exposed_share": exposed / makespan_s if makespan_s > 0 else 0.0, "comm_s": comm_s,
            "comm_busy_s": union_s([(o["t_start_s"], o["t_end_s"]) for o in ops]), "groups": groups,
            "saving": hidden_comm(comm_s, exposed)}


class ChakraRun:
    """One replay on the agents: ``ctx``/``agents``/``rec``/``progress`` as in testbed.pipeline.runner; ``plan``: the
    testbed.workloads.chakra.plan.ChakraPlan of ``ctx.ops_plan``."""

    def __init__(self, ctx, agents, rec, progress, plan):
        self.ctx, self.agents, self.rec, self.progress, self.plan = ctx, agents, rec, progress, plan
        self._lock = threading.Lock()
        self.op_figures: dict[int, dict] = {}   # unit index -> span and bandwidths

    def compute(self, unit) -> dict:
        seconds = self.plan.compute_s(unit)
        t0 = unix_ns()
        if seconds > 0:
            time.sleep(seconds)
        return {unit.ranks[0]: (t0, unix_ns())}

    def _timeout_s(self, op) -> float:
        """10 x the op's expected time + 20 s, plus every fabric op's expected time (an op may wait behind
        the others of its stream: its clock runs from its submission)."""
        expect_s = op.busbw_factor * op.size_bytes * 8 / self.ctx.goodput_bps
        return 10 * expect_s + 20 + self._all_ops_s

    @property
    def _all_ops_s(self) -> float:
        return sum(o.busbw_factor * o.size_bytes * 8 for o in self.ctx.ops_plan) / self.ctx.goodput_bps

    def issue(self, unit):
        """Submit ``unit``'s op on its stream (testbed.emulation.agents.AgentGroup.submit); the future."""
        k = self.plan.op_of[unit.index]
        op = self.ctx.ops_plan[k]
        return self.agents.submit(k, op.size_bytes, op.groups, self._timeout_s(op), collective=op.collective,
                                  algorithm=op.algorithm, stream=op.stream)

    def fabric(self, unit, future=None) -> dict:
        """Run ``unit``'s op (or wait for it when :meth:`issue` submitted it: ``future``); record its rows."""
        k = self.plan.op_of[unit.index]
        op = self.ctx.ops_plan[k]
        if future is None:
            recs = self.agents.run_op(k, op.size_bytes, op.groups, timeout_s=self._timeout_s(op),
                                      collective=op.collective, algorithm=op.algorithm, stream=op.stream)
        else:
            recs = taking_part(self.agents.wait(future, k, self._timeout_s(op) + 10), op.groups)
        span_ns = max(r.t_end_ns for r in recs) - min(r.t_start_ns for r in recs)
        algbw = op.size_bytes * 8 / max(span_ns / 1e9, 1e-9)
        with self._lock:
            self.rec.rank_rows.extend(recs)
            self.rec.op_meta[k] = op.meta()
            self.op_figures[unit.index] = {"op_id": k, "time_us": span_ns / 1e3, "algbw_bps": algbw,
                                           "busbw_bps": algbw * op.busbw_factor,
                                           "t_start_ns": min(r.t_start_ns for r in recs)}
            self.progress.op(len(self.op_figures), op.size_bytes, algbw * op.busbw_factor,
                             len(self.op_figures) == len(self.ctx.ops_plan))
        return {r.rank: (r.t_start_ns, r.t_end_ns) for r in recs}


def node_table(plan, times: dict, op_figures: dict) -> pd.DataFrame:
    """chakra_nodes.csv (testbed.results.schema): one row per node, in replay order then rank order."""
    rows = []
    for u in plan.graph.units:
        fig = op_figures.get(u.index, {})
        for n in u.nodes:
            t0, t1 = times[u.index][n.rank]
            rows.append({"rank": n.rank, "node_id": n.node_id, "name": n.name,
                         "type": _TYPE_OF_KIND[n.kind], "comm_type": n.comm_type,
                         "pg_name": n.pg_name if n.kind in ("coll", "local") else "",
                         "deps": " ".join(map(str, n.deps)), "unit": u.index, "op_id": fig.get("op_id", -1),
                         "size_bytes": plan.sizes.get(u.index, 0), "duration_us": float(n.duration_us),
                         "t_start_ns": t0, "t_end_ns": t1, "algbw_bps": fig.get("algbw_bps", math.nan),
                         "busbw_bps": fig.get("busbw_bps", math.nan)})
    return pd.DataFrame(rows)


def dependency_violations(nodes: pd.DataFrame) -> list[str]:
    """Nodes of chakra_nodes.csv that started before a node they depend on ended: ``rank R node N started
    at T before node D ended at T'`` each (empty when the replay kept every dependency)."""
    end = {(int(r.rank), int(r.node_id)): int(r.t_end_ns) for r in nodes.itertuples()}
    out = []
    for r in nodes.itertuples():
        for d in str(r.deps).split():
            t_dep = end[(int(r.rank), int(d))]
            if int(r.t_start_ns) < t_dep:
                out.append(f"rank {r.rank} node {r.node_id} started at {r.t_start_ns} before node {d} ended at "
                           f"{t_dep}")
    return out


def run_chakra(ctx, agents, rec, progress, plan) -> tuple[dict, pd.DataFrame]:
    """Replay ``plan`` (testbed.workloads.chakra.plan.ChakraPlan) on ``agents``; return summary.json's ``chakra`` block
    and the chakra_nodes table. Signals are held back once the last unit ended (as testbed.pipeline.runner does).
    Raises what the agents raise (a collective's timeout or error)."""
    run = ChakraRun(ctx, agents, rec, progress, plan)
    t0 = time.monotonic()
    t0_ns = unix_ns()
    times = run_graph(plan.graph, run.compute, run.fabric, run.issue if plan.streams_on else None)
    makespan_s = time.monotonic() - t0
    signals.defer()
    rec.phase = "the final measurements"
    nodes = node_table(plan, times, run.op_figures)
    violations = dependency_violations(nodes)
    ops, spans = [], []
    for u in plan.graph.fabric_units:
        fig, op = run.op_figures[u.index], ctx.ops_plan[plan.op_of[u.index]]
        t_start_s = (fig["t_start_ns"] - t0_ns) / 1e9
        spans.append({"group": "p2p" if u.kind == "p2p" else u.nodes[0].pg_name, "t_start_s": t_start_s,
                      "t_end_s": t_start_s + fig["time_us"] / 1e6})
        ops.append({"op_id": fig["op_id"], "unit": u.index, "label": u.label, "stream": op.stream,
                    "collective": op.collective, "comm_size_bytes": plan.sizes[u.index],
                    "algorithm": op.algorithm, "ranks": list(u.ranks), "size_bytes": op.size_bytes,
                    "time_us": fig["time_us"], "algbw_bps": fig["algbw_bps"], "busbw_bps": fig["busbw_bps"],
                    "busbw_factor": collectives.busbw_factor(op.collective, op.algorithm, len(u.ranks))})
    block = {"path": plan.path, "ranks": plan.n_ranks, "nodes": int(len(nodes)), "units": len(plan.graph.units),
             "fabric_ops": len(ops), "process_groups": {k: list(v) for k, v in plan.graph.groups.items()},
             "compute_scale": plan.compute_scale, "size_scale": plan.size_scale,
             "streams": "on" if plan.streams_on else "off",
             "compute_s_per_rank": plan.compute_s_per_rank, "makespan_s": makespan_s,
             "comm_size_means": plan.comm_size_means,
             "skipped_nodes": sum(plan.skipped.values()), "skipped_kinds": dict(plan.skipped),
             **overlap_figures(makespan_s, compute_only_s(plan.graph, plan.compute_s), spans),
             "dependency_violations": len(violations), "violations": violations[:10], "ops": ops}
    return block, nodes
