"""The op plan of a run: every collective the hosts will run, in order, as typed records.

A size sweep (``workload.sizes``) gives warmup and timed operations of
``workload.collective`` by ``workload.algorithm`` (default: ring all-reduce)
over all hosts, or hosts 0..``workload.ranks``-1. A SimAI/AICB replay
(``workload.simai``) gives the fabric collectives of the file in SimAI's order, each over its group scope placed on hosts, and a timeline of
compute waits, scale-up collectives and overlap: :mod:`testbed.workloads.simai.plan`.

Which plan a scenario gets is its workload mode's (testbed.workloads.plan_workload).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

from testbed.spec import estimate
from testbed.spec.scenario import ScenarioSpec
from traffic import collectives

#: notes list at most this many file locations (or sizes) per kind
MAX_NOTE_PLACES = 5


@dataclass(frozen=True)
class PlannedOp:
    """One collective of the plan.

    size_bytes: the collective's size (nccl-tests' S, see
    traffic.collectives.COLLECTIVES); iteration: 0-based (negative for
    warmup of a size sweep); warmup: not timed; layer: ``layer:phase`` of the
    SimAI row, '' for a sweep; collective and algorithm: a key of
    traffic.collectives.ALGORITHMS; group: scope name, 'all' (every host) or a
    SimAI scope (TP, DP, EP, DP_EP); groups: the concurrent rank groups, each
    in the algorithm's position order, together covering the ranks that take
    part (equal sizes); stream: the communicator whose queue pairs carry it (ops of one stream run
    in order, ops of different streams concurrently: testbed.emulation.agents); job: the job it
    belongs to ('' for a single-workload run).
    """

    size_bytes: int
    iteration: int
    warmup: bool
    layer: str
    collective: str = "allreduce"
    group: str = "all"
    groups: Tuple[Tuple[int, ...], ...] = ()
    algorithm: str = collectives.DEFAULT_ALGORITHM
    stream: int = 0
    job: str = ""
    #: a timed op of nccl-tests' in-place half (``workload.in_place``; the same traffic as out-of-place)
    in_place: bool = False

    @property
    def group_size(self) -> int:
        """Ranks in each group (the n of the busbw factor)."""
        return len(self.groups[0])

    @property
    def busbw_factor(self) -> float:
        """busbw / algbw of this op's algorithm on its group size (nccl-tests)."""
        return collectives.busbw_factor(self.collective, self.algorithm, self.group_size)

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    def meta(self) -> dict:
        """Flat columns for the ops table: every field but groups, plus group_size and n_groups."""
        meta = {"size_bytes": self.size_bytes, "iteration": self.iteration, "warmup": self.warmup,
                "layer": self.layer, "collective": self.collective, "algorithm": self.algorithm,
                "group": self.group, "group_size": self.group_size, "n_groups": self.n_groups}
        if self.stream or self.job:  # columns of runs with concurrent streams only: older tables keep their shape
            meta.update(stream=self.stream, job=self.job)
        if self.in_place:  # nccl-tests' in-place half (workload.in_place) only: older tables keep their shape
            meta["in_place"] = True
        return meta


@dataclass(frozen=True)
class WorkloadPlan:
    """The ops in run order and the notes to print before the run (what was skipped and why)."""

    ops: Tuple[PlannedOp, ...]
    notes: Tuple[str, ...] = field(default=())
    #: a SimAI replay's timeline (testbed.workloads.simai.plan.ReplayPlan), None for a size sweep
    replay: Optional[object] = None


def list_places(items: list) -> str:
    """``items`` (str) joined with commas for a plan note, the first MAX_NOTE_PLACES and a count of the rest."""
    shown = ", ".join(items[:MAX_NOTE_PLACES])
    return shown + (f", ... ({len(items) - MAX_NOTE_PLACES} more)" if len(items) > MAX_NOTE_PLACES else "")


def sweep_plan(spec: ScenarioSpec) -> WorkloadPlan:
    """The op plan of a size sweep (``workload.sizes``): warm-up and timed ops of each size, with a note
    when ``workload.max_bytes_per_size`` cuts the iterations of the larger sizes."""
    w = spec.workload
    ops, cut = sweep_ops(w, tuple(range(w.ranks or spec.fabric.n_hosts)))
    notes = (f"workload.max_bytes_per_size = {w.max_bytes_per_size} B cuts the {w.iterations} iterations of the "
             f"larger sizes to fit (size: iterations run): {list_places(cut)}; set it to off to run them all",) if cut else ()
    return WorkloadPlan(tuple(ops), notes)


def sweep_ops(w, ranks: Tuple[int, ...], warmup: bool = True) -> tuple[list[PlannedOp], list[str]]:
    """The ops of one pass of the size sweep ``w`` (testbed.spec.workload.WorkloadSpec) over ``ranks`` (one
    group in position order), warm-ups first unless ``warmup`` is False; and the ``size: iterations``
    items that ``w.max_bytes_per_size`` cut."""
    world = (tuple(ranks),)
    ops, cut = [], []
    n_warm = w.warmup_iterations if warmup else 0
    for size in w.sizes.sizes():
        cap = w.max_bytes_per_size          # None: no cap
        iters = w.iterations if cap is None else min(w.iterations, max(1, cap // size))
        if iters < w.iterations:
            cut.append(f"{size} B: {iters}")
        for i in range(n_warm + iters):
            ops.append(PlannedOp(size_bytes=size, iteration=i - n_warm,
                                 warmup=i < n_warm, layer="", collective=w.collective,
                                 algorithm=w.algorithm, groups=world))
        for i in range(iters if getattr(w, "in_place", False) else 0):  # nccl-tests' in-place half, after
            ops.append(PlannedOp(size_bytes=size, iteration=i, warmup=False, layer="", collective=w.collective,
                                 algorithm=w.algorithm, groups=world, in_place=True))
    return ops, cut


def plan_peers(ops) -> dict[int, list[int]]:
    """rank -> the ranks it needs queue pairs with: the peers its algorithm names in every group of ``ops``.

    ``ops``: PlannedOp records (collective, algorithm, groups). Raises
    traffic.collectives.UnknownAlgorithm for an unregistered algorithm.
    """
    peers: dict[int, set] = {}
    for collective, algorithm, groups in {(op.collective, op.algorithm, op.groups) for op in ops}:
        alg = collectives.get(collective, algorithm)
        for g in groups:
            for pos, r in enumerate(g):
                peers.setdefault(r, set()).update(g[p] for p in alg.peers(pos, len(g)))
    return {r: sorted(p) for r, p in peers.items()}


def plan_streams(ops) -> int:
    """The streams (communicators) the agents need for ``ops``: 1 + the highest ``stream`` (1 for none)."""
    return 1 + max((op.stream for op in ops), default=0)


def plan_algorithms(ops) -> list[dict]:
    """The algorithms a plan runs, for the manifest: collective, algorithm, busbw factor formula and
    the collective's size convention (nccl-tests), in first-use order."""
    out: dict[tuple, dict] = {}
    for op in ops:
        if (op.collective, op.algorithm) not in out:
            alg = collectives.get(op.collective, op.algorithm)
            out[(op.collective, op.algorithm)] = {
                "collective": op.collective, "algorithm": op.algorithm, "title": alg.title,
                "busbw_factor": alg.busbw_factor_text, "size_convention": alg.collective.size_convention}
    return list(out.values())


def pass_estimate_s(spec, ops) -> float:
    """Seconds one pass of ``ops`` takes on an idle fabric (testbed.spec.estimate.estimate_run_s, no set-up): one pass of a job."""
    f = spec.fabric
    return estimate.estimate_run_s(ops, f.n_hosts, f.host_link_bps, f.fabric_link_bps, f.ranks_per_switch,
                                   spec.transport.payload_bytes, 0.0)
