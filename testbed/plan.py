"""The op plan of a run: every collective the hosts will run, in order, as typed records.

A size sweep (``workload.sizes``) gives warmup and timed operations of
``workload.collective`` by ``workload.algorithm`` (default: ring all-reduce)
over all hosts, or hosts 0..``workload.ranks``-1. A SimAI/AICB replay (``workload.simai``) gives the file's
entries whose type (:data:`SIMAI_COLLECTIVES`: ALLREDUCE -> allreduce, ...)
has ``workload.algorithm`` registered (traffic.collectives), each over its own
group scope: a TP-scoped all-reduce with TP 2 on 8 hosts is 4 concurrent
2-rank rings, a DP-scoped one 2 concurrent 4-rank rings (rank layout:
:mod:`traffic.workloads.parallel_groups`; rank r runs on the fabric's host r,
hosts numbered leaf by leaf). Ops run one after another in
SimAI's order, each a barrier (SimAI overlaps non-blocking weight-gradient
collectives with later work and waits compute times: not replayed yet). What
the testbed cannot run becomes a note, never a silent change:

- collectives without that algorithm (with ``ring``: ALLTOALL, whose
  algorithms are ``pairwise`` and ``direct``): skipped, noted;
- entries of size 0: skipped, noted (never run as 1 byte);
- groups of one rank (e.g. TP-scoped with TP 1): skipped, noted (no data moves;
  SimAI builds no such group either).

Refused before anything is built (:class:`~testbed.spec.scenario.ScenarioError`): a
malformed file (naming file, line, column), a header ``all_gpus`` that differs
from the fabric's host count (the testbed runs one rank per host; both numbers
are named), pp > 1, or a file with nothing the testbed can run.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Tuple

from testbed.spec.scenario import ScenarioError, ScenarioSpec
from traffic import collectives

#: notes list at most this many file locations per kind of skipped entry
MAX_NOTE_PLACES = 5
#: SimAI/AICB collective type -> collective name of traffic.collectives (ALLREDUCEALLTOALL: none)
SIMAI_COLLECTIVES = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reducescatter",
                     "ALLTOALL": "alltoall"}


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
    part (equal sizes).
    """

    size_bytes: int
    iteration: int
    warmup: bool
    layer: str
    collective: str = "allreduce"
    group: str = "all"
    groups: Tuple[Tuple[int, ...], ...] = ()
    algorithm: str = collectives.DEFAULT_ALGORITHM

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
        return {"size_bytes": self.size_bytes, "iteration": self.iteration, "warmup": self.warmup,
                "layer": self.layer, "collective": self.collective, "algorithm": self.algorithm,
                "group": self.group, "group_size": self.group_size, "n_groups": self.n_groups}


@dataclass(frozen=True)
class WorkloadPlan:
    """The ops in run order and the notes to print before the run (what was skipped and why)."""

    ops: Tuple[PlannedOp, ...]
    notes: Tuple[str, ...] = field(default=())


def _places(items: list) -> str:
    shown = ", ".join(items[:MAX_NOTE_PLACES])
    return shown + (f", ... ({len(items) - MAX_NOTE_PLACES} more)" if len(items) > MAX_NOTE_PLACES else "")


def _sweep_plan(spec: ScenarioSpec) -> WorkloadPlan:
    w = spec.workload
    world = (tuple(range(w.ranks or spec.fabric.n_hosts)),)
    ops, cut = [], []
    for size in w.sizes.sizes():
        cap = w.max_bytes_per_size          # None: no cap
        iters = w.iterations if cap is None else min(w.iterations, max(1, cap // size))
        if iters < w.iterations:
            cut.append(f"{size} B: {iters}")
        for i in range(w.warmup_iterations + iters):
            ops.append(PlannedOp(size_bytes=size, iteration=i - w.warmup_iterations,
                                 warmup=i < w.warmup_iterations, layer="", collective=w.collective,
                                 algorithm=w.algorithm, groups=world))
    notes = (f"workload.max_bytes_per_size = {w.max_bytes_per_size} B cuts the {w.iterations} iterations of the "
             f"larger sizes to fit (size: iterations run): {_places(cut)}; set it to off to run them all",) if cut else ()
    return WorkloadPlan(tuple(ops), notes)


def _simai_plan(spec: ScenarioSpec) -> WorkloadPlan:
    from traffic.workloads.parallel_groups import rank_groups
    from traffic.workloads.simai import SimaiFormatError, collective_ops, load_simai

    s, f, algorithm = spec.workload.simai, spec.fabric, spec.workload.algorithm
    runs = sorted(t for t, c in SIMAI_COLLECTIVES.items() if (c, algorithm) in collectives.ALGORITHMS)
    key = "workload.simai.path"
    try:
        wl = load_simai(s.path)
        all_ops = collective_ops(wl, collectives=None, size_scale=s.size_scale, time_unit=s.time_unit)
    except SimaiFormatError as e:
        raise ScenarioError(f"{key}: {e}") from None
    except ValueError as e:              # a policy collective_ops cannot order
        raise ScenarioError(f"{key}: {e}") from None
    except OSError as e:
        raise ScenarioError(f"{key}: cannot read {s.path}: {e.strerror or e}") from None
    h, n = wl.header, f.n_hosts
    notes = []
    if h.all_gpus is None:
        all_gpus = n
        notes.append(f"{s.path}: the header gives no all_gpus: one rank per host, {n} ranks")
    elif h.all_gpus != n:
        raise ScenarioError(
            f"{key}: {s.path}:1: all_gpus: {h.all_gpus} but the fabric has {n} hosts "
            f"({f.describe()}); the testbed runs one "
            f"rank per host: use a fabric of {h.all_gpus} hosts or a workload file written for {n} GPUs")
    else:
        all_gpus = h.all_gpus
    layouts: dict = {}
    runnable, skipped = [], {}

    def skip(reason: str, op) -> None:
        skipped.setdefault(reason, []).append(f"line {op.line} {op.layer}:{op.phase}")

    for op in all_ops:
        if op.collective not in runs:
            skip(f"{op.collective} ({op.group}) entries: not supported yet", op)
            continue
        if op.size_bytes == 0:
            skip(f"{op.collective} entries of size 0: nothing to send", op)
            continue
        if op.group not in layouts:
            try:
                layouts[op.group] = rank_groups(op.group, all_gpus, h.tp_size, h.ep_size, h.pp_size)
            except ValueError as e:
                raise ScenarioError(f"{key}: {s.path}:1: {e}") from None
        groups = layouts[op.group]
        if len(groups[0]) < 2:
            skip(f"{op.collective} ({op.group}) entries over groups of 1 rank: no data moves", op)
            continue
        runnable.append((op, groups))
    for reason, places in skipped.items():
        notes.append(f"{s.path}: skipped {len(places)} {reason} ({_places(places)})")
    if not runnable:
        raise ScenarioError(f"{key}: {s.path} has no {'/'.join(runs) or 'runnable'} entry the testbed can run"
                            + "".join(f"; {m}" for m in notes))
    kind = "rings" if algorithm == "ring" else f"{algorithm} groups"
    counts = Counter(f"{op.group}-scoped ({len(g)} concurrent {kind} of {len(g[0])} ranks)"
                     for op, g in runnable)
    types = "/".join(sorted({op.collective for op, _ in runnable}))
    notes.insert(0, f"{s.path}: replaying {len(runnable)} {types} entries x {s.iterations} iterations: "
                 + ", ".join(f"{c} {k}" for k, c in counts.items()))
    ops = tuple(PlannedOp(size_bytes=op.size_bytes, iteration=it, warmup=False,
                          layer=f"{op.layer}:{op.phase}", collective=SIMAI_COLLECTIVES[op.collective],
                          group=op.group, groups=groups, algorithm=algorithm)
                for it in range(s.iterations) for op, groups in runnable)
    return WorkloadPlan(ops, tuple(notes))


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


def plan_workload(spec: ScenarioSpec) -> WorkloadPlan:
    """The op plan of a validated scenario (module docstring); reads the SimAI file if any.

    Raises ScenarioError naming the key (and file line) when the workload
    cannot run on this fabric.
    """
    if spec.workload.pattern is not None:  # flows, not collectives: testbed.patterns runs them
        return WorkloadPlan((), ())
    return _sweep_plan(spec) if spec.workload.sizes is not None else _simai_plan(spec)
