"""The plan of a SimAI/AICB replay: the fabric ops the agents run and the timeline around them.

Every collective type of the format maps to a registered collective
(:data:`SIMAI_COLLECTIVES`), run by ``workload.algorithm`` where that algorithm
is registered for it, else by the collective's default
(:data:`DEFAULT_ALGORITHMS`: all-to-all has no ring, so ``pairwise``).
``ALLREDUCEALLTOALL`` runs as an all-reduce, as SimAI runs it (it matches the
type by its first 9 letters). A type the format does not have is refused by
the reader naming file, line and column (traffic.workloads.simai).

Groups: each entry's scope (TP, DP, EP, DP_EP; SimAI's rank layout,
traffic.workloads.parallel_groups) placed on hosts by
traffic.workloads.placement: groups inside one server run in its scale-up
domain, modelled as a timed wait of ``F(n) x S x 8 / (scale_up_ratio x
host_link_bps)`` (F the collective's busbw factor, nccl-tests: the bytes each
GPU moves over its scale-up links at that rate); groups across servers run on
the fabric as concurrent host groups.

Timeline (:class:`ReplayStep`, SimAI's execution order, traffic.workloads.simai):
each step waits its compute (the file's ticks x ns per ``time_unit`` x the
compute scale: ``auto`` = dilation x size_scale, where dilation =
reference_link_bps / host_link_bps, the factor by which scaling sizes by
size_scale and rates by 1/dilation stretches every transfer, so compute and
communication keep their ratio), then issues its collective. Skipped entries
(size 0, groups of one rank) keep their compute. What the testbed cannot run
is a note, never a silent change.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Optional, Tuple

from testbed.plan import PlannedOp, WorkloadPlan, list_places
from testbed.spec.scenario import ScenarioError, ScenarioSpec
from traffic import collectives

#: SimAI/AICB collective type -> collective name of traffic.collectives
SIMAI_COLLECTIVES = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reducescatter",
                     "ALLTOALL": "alltoall", "ALLREDUCEALLTOALL": "allreduce"}
#: algorithm of a collective when ``workload.algorithm`` is not registered for it
DEFAULT_ALGORITHMS = {"allreduce": "ring", "allgather": "ring", "reducescatter": "ring", "alltoall": "pairwise"}


@dataclass(frozen=True)
class ReplayStep:
    """One phase of one row, in execution order, or the iteration's trailing compute.

    line, layer, phase: the file row (1-based line; phase fwd/ig/wg; '' for the
    trailing compute); token: the file's collective type (``ALLTOALL_EP``) or
    'NONE'; collective, algorithm: registered names ('' when nothing runs);
    group: scope; where: ``fabric``, ``scale_up`` or ``none`` (skipped or no
    collective); size_bytes: each rank's scaled size; compute_s: compute to
    wait before issuing; update_s: weight-update wait after it completes;
    blocking: SimAI waits for it (fwd, ig); op_offset: index of its fabric op
    within an iteration (None off the fabric); scale_up_s: modelled time of a
    scale-up collective; group_size: ranks per group.
    """

    line: int
    layer: str
    phase: str
    token: str
    collective: str
    algorithm: str
    group: str
    where: str
    size_bytes: int
    compute_s: float
    update_s: float
    blocking: bool
    op_offset: Optional[int] = None
    scale_up_s: float = 0.0
    group_size: int = 0


@dataclass(frozen=True)
class ReplayPlan:
    """The timeline of one iteration, run ``iterations`` times.

    overlap: ``on``, ``off`` or ``compare`` (testbed.replay_run states the model); iterations: per
    mode (:attr:`modes` lists the overlap of every iteration run);
    compute_scale: real compute ns -> emulated ns; gpus_per_host: ranks on
    each host; fabric_ops_per_iteration: PlannedOps of one iteration.
    """

    path: str
    steps: Tuple[ReplayStep, ...]
    iterations: int
    overlap: str
    compute_scale: float
    gpus_per_host: int
    fabric_ops_per_iteration: int

    @property
    def modes(self) -> Tuple[str, ...]:
        """The overlap of each iteration in run order: ``compare`` gives off, on, on, off, off, on, ..."""
        if self.overlap != "compare":
            return (self.overlap,) * self.iterations
        return tuple(m for p in range(self.iterations) for m in (("off", "on") if p % 2 == 0 else ("on", "off")))

    @property
    def compute_s_per_iteration(self) -> float:
        return sum(s.compute_s + s.update_s for s in self.steps)

    @property
    def scale_up_s_per_iteration(self) -> float:
        return sum(s.scale_up_s for s in self.steps)


def algorithm_for(collective: str, asked: str) -> str:
    """``asked`` when registered for ``collective``, else its default (:data:`DEFAULT_ALGORITHMS`)."""
    return asked if (collective, asked) in collectives.ALGORITHMS else DEFAULT_ALGORITHMS[collective]


def compute_scale(spec: ScenarioSpec) -> float:
    """Emulated / real compute time: ``workload.simai.compute_scale``, ``auto`` = dilation x size_scale, off = 0."""
    s = spec.workload.simai
    if s.compute_scale == "auto":
        return spec.scale_factor * s.size_scale
    return 0.0 if s.compute_scale is None else float(s.compute_scale)


def _load(spec: ScenarioSpec):
    from traffic.workloads.simai import SimaiFormatError, collective_ops, iteration_compute_ns, load_simai
    s, key = spec.workload.simai, "workload.simai.path"
    try:
        wl = load_simai(s.path)
        ops = collective_ops(wl, collectives=None, size_scale=s.size_scale, time_unit=s.time_unit)
        total_ns = iteration_compute_ns(wl, s.time_unit)
    except (SimaiFormatError, ValueError) as e:       # malformed, or a policy collective_ops cannot order
        raise ScenarioError(f"{key}: {e}") from None
    except OSError as e:
        raise ScenarioError(f"{key}: cannot read {s.path}: {e.strerror or e}") from None
    return wl, ops, total_ns


def _all_gpus(spec: ScenarioSpec, wl, notes: list) -> Tuple[int, int]:
    """(all_gpus, GPUs per host); ScenarioError when the job does not fit the fabric's hosts."""
    from traffic.workloads.placement import PlacementError, gpus_per_host
    s, f, h, n = spec.workload.simai, spec.fabric, wl.header, spec.fabric.n_hosts
    if h.all_gpus is None:
        notes.append(f"{s.path}: the header gives no all_gpus: one rank per host, {n} ranks")
        return n, 1
    try:
        per_host = gpus_per_host(h.all_gpus, n)
    except PlacementError:
        raise ScenarioError(
            f"workload.simai.path: {s.path}:1: all_gpus: {h.all_gpus} but the fabric has {n} hosts "
            f"({f.describe()}); the testbed runs one rank per host, or all_gpus / hosts ranks per host (a "
            f"server sharing one NIC): use a fabric of {h.all_gpus} hosts (or a divisor of it) or a workload "
            f"file written for a multiple of {n} GPUs") from None
    if per_host > 1:
        notes.append(f"{s.path}: {h.all_gpus} GPUs on {n} hosts: each host is a server of {per_host} GPUs "
                     f"sharing one NIC; groups inside a server run in its scale-up domain (modelled at "
                     f"{s.scale_up_ratio:g} x host_link_bps)")
    return h.all_gpus, per_host


def simai_plan(spec: ScenarioSpec):
    """The WorkloadPlan of a SimAI replay (module docstring): fabric ops, notes and the ReplayPlan.

    Raises ScenarioError naming the key and the file line when the workload cannot run here.
    """
    from traffic.workloads.parallel_groups import rank_groups
    from traffic.workloads.placement import PlacementError, place

    s, key = spec.workload.simai, "workload.simai.path"
    wl, all_ops, total_ns = _load(spec)
    notes: list = []
    all_gpus, per_host = _all_gpus(spec, wl, notes)
    h, scale = wl.header, compute_scale(spec)
    placements: dict = {}
    steps, fabric, skipped = [], [], {}
    for op in all_ops:
        coll = SIMAI_COLLECTIVES[op.collective]
        alg = algorithm_for(coll, spec.workload.algorithm)
        token = op.collective + ("" if op.group in ("TP", "DP") else f"_{op.group}")
        base = dict(line=op.line, layer=op.layer, phase=op.phase, token=token, collective=coll, algorithm=alg,
                    group=op.group, size_bytes=op.size_bytes, compute_s=op.compute_time_ns * scale / 1e9,
                    update_s=op.update_time_ns * scale / 1e9, blocking=op.blocking)
        place_at = f"line {op.line} {op.layer}:{op.phase}"
        if op.group not in placements:
            try:
                placements[op.group] = place(rank_groups(op.group, all_gpus, h.tp_size, h.ep_size, h.pp_size),
                                             per_host)
            except (ValueError, PlacementError) as e:
                raise ScenarioError(f"{key}: {s.path}:1: {e}") from None
        pl = placements[op.group]
        if op.size_bytes == 0 or pl.group_size < 2:
            why = (f"{op.collective} entries of size 0: nothing to send" if op.size_bytes == 0
                   else f"{op.collective} ({op.group}) entries over groups of 1 rank: no data moves")
            skipped.setdefault(why, []).append(place_at)
            steps.append(ReplayStep(**{**base, "where": "none"}))
            continue
        if pl.where == "scale_up":
            t = (collectives.busbw_factor(coll, alg, pl.group_size) * op.size_bytes * 8
                 / (s.scale_up_ratio * spec.fabric.host_link_bps))
            steps.append(ReplayStep(**base, where="scale_up", scale_up_s=t, group_size=pl.group_size))
            continue
        steps.append(ReplayStep(**base, where="fabric", op_offset=len(fabric), group_size=len(pl.host_groups[0])))
        fabric.append((op, coll, alg, pl))
    trailing_ns = total_ns - sum(op.compute_time_ns for op in all_ops)
    steps.append(ReplayStep(line=0, layer="(end of iteration)", phase="", token="NONE", collective="",
                            algorithm="", group="", where="none", size_bytes=0,
                            compute_s=trailing_ns * scale / 1e9, update_s=0.0, blocking=True))
    for reason, places in skipped.items():
        notes.append(f"{s.path}: skipped {len(places)} {reason} ({list_places(places)})")
    if not fabric:
        raise ScenarioError(f"{key}: {s.path} has no entry that crosses the fabric"
                            + "".join(f"; {m}" for m in notes))
    unit = "ranks" if per_host == 1 else "hosts"
    counts = Counter(f"{op.group}-scoped {coll}/{alg} ({len(pl.host_groups)} concurrent "
                     f"{'rings' if alg == 'ring' else alg + ' groups'} of {len(pl.host_groups[0])} {unit}"
                     + (f", {pl.multiplicity} rank groups each" if pl.multiplicity > 1 else "") + ")"
                     for op, coll, alg, pl in fabric)
    replay = ReplayPlan(path=s.path, steps=tuple(steps), iterations=s.iterations, overlap=s.overlap,
                        compute_scale=scale, gpus_per_host=per_host, fabric_ops_per_iteration=len(fabric))
    n_up = sum(st.where == "scale_up" for st in steps)
    notes.insert(0, f"{s.path}: replaying {len(fabric)} fabric entries"
                 + (f" and {n_up} scale-up entries" if n_up else "") + f" x {len(replay.modes)} iterations, "
                 f"compute x {scale:g}, overlap {s.overlap}: " + ", ".join(f"{c} {k}" for k, c in counts.items()))
    ops = tuple(PlannedOp(size_bytes=op.size_bytes * pl.multiplicity, iteration=it, warmup=False,
                          layer=f"{op.layer}:{op.phase}", collective=coll, group=op.group,
                          groups=pl.host_groups, algorithm=alg)
                for it in range(len(replay.modes)) for op, coll, alg, pl in fabric)
    return WorkloadPlan(ops, tuple(notes), replay)


def replay_plan(spec: ScenarioSpec, ops) -> ReplayPlan:
    """The ReplayPlan of ``spec``, checked against the op plan the run was given (``ops``).

    Raises RuntimeError when they differ (the workload file changed since the scenario was checked).
    """
    plan = simai_plan(spec)
    if tuple(ops) != plan.ops:
        raise RuntimeError(f"{spec.workload.simai.path} changed after the scenario was checked: its ops differ "
                           "from the run's plan")
    return plan.replay
