"""The plan of a SimAI/AICB replay: the fabric ops the agents run and the timeline around them.

Every collective type of the format maps to a registered collective
(:data:`SIMAI_COLLECTIVES`), run by ``workload.algorithm`` where that algorithm
is registered for it, else by the collective's default
(:data:`DEFAULT_ALGORITHMS`: all-to-all has no ring, so ``pairwise``).
``ALLREDUCEALLTOALL`` runs as an all-reduce, as SimAI runs it (it matches the
type by its first 9 letters). ``BROADCAST`` runs as a broadcast from the
group's first rank (its size the root's buffer), which SimAI skips: a note
says where (traffic.workloads.simai, ``SIMAI_SKIPS``).

World size (``all_gpus``): ``workload.simai.all_gpus``, else the file's
``all_gpus:``, else the fabric's host count (SimAI builds its groups from the
topology's GPU count, not the file's). When the scenario's value differs from
the file's, the scenario's wins (as SimAI's topology does) with a warning.
Header keys the file leaves out (SimAI tolerates them) take their defaults
(traffic.workloads.simai ``TOLERATED_KEYS``); one ``warning:`` note names
what was assumed, and the replay's summary block records it (``reader``). A type the format does not have is refused by
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

Streams and pipeline (testbed.workloads.replay.program states the model and the
overlap formula): the iteration is one program per pipeline stage; every
collective becomes a task on the stream of its scope in its stage (TP, DP,
EP, DP_EP of stage s: one communicator each, as NCCL gives each process
group its own communicator and CUDA stream), so a layer's TP collectives
overlap the DP/EP traffic queued before them. With pp > 1 (layout:
traffic.workloads.parallel_groups) the file's rows are one micro-batch's
pass through one stage (SimAI runs the same file on every GPU; AICB writes
the rows of one stage); each of ``micro_batches`` runs F (the fwd steps) and
B (the ig/wg steps and the trailing compute) in the order of
``pp_schedule`` (traffic.workloads.pipeline_schedule); weight-gradient
collectives run only in the last micro-batch's B (gradient accumulation, as
Megatron reduces gradients once per iteration), their compute in every B.
After F(i) stage s sends the micro-batch's activations to stage s + 1, after
B(i) stage s + 1 sends their gradients back: ``pp_comm`` bytes of the header
x size_scale each, one ``send/chain`` op over the PP pairs of the boundary,
on one stream per boundary and direction. AICB writes pp_comm = 2 x
micro_batch x seq_length x hidden_size (bf16 activations; / TP with sequence
parallelism: ``SimAI_training_workload_generator.py`` ``dump_file``), the
size of Megatron's ``send_forward``/``send_backward`` (AICB
``generate_megatron_workload.py``: msg_size 2 x hidden x seq x micro_batch).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Tuple

from testbed.workloads.plan import PlannedOp, WorkloadPlan, list_places
from testbed.workloads.replay.program import Action, CommTask, simulate
from testbed.workloads.simai.programs import LazyTuple, Timeline
from testbed.workloads.simai.reader import all_gpus_of, fit_hint_of, load_file, micro_batches, world_size_key
from testbed.spec.scenario import ScenarioError, ScenarioSpec
from traffic import collectives
from traffic.workloads.job_mapping import counted

#: SimAI/AICB collective type -> collective name of traffic.collectives
SIMAI_COLLECTIVES = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reducescatter",
                     "ALLTOALL": "alltoall", "ALLREDUCEALLTOALL": "allreduce", "BROADCAST": "broadcast"}
#: algorithm of a collective when ``workload.algorithm`` is not registered for it
DEFAULT_ALGORITHMS = {"allreduce": "ring", "allgather": "ring", "reducescatter": "ring", "alltoall": "pairwise",
                      "broadcast": "ring"}


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

    overlap: ``on``, ``off`` or ``compare`` (testbed.workloads.replay.run states the model); iterations: per
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
    #: one program per pipeline stage and the communication tasks of one iteration (testbed.workloads.replay.program);
    #: simai_plan gives testbed.workloads.simai.programs.LazyTuple's, made when first read
    programs: Tuple[Tuple[Action, ...], ...] = ()
    tasks: Tuple[CommTask, ...] = ()
    #: stream number -> its name (``TP s0``, ``PP s0>s1``, ``scale-up TP s0``)
    stream_names: Tuple[str, ...] = ()
    n_stages: int = 1
    micro_batches: int = 1
    pp_schedule: str = "1f1b"
    #: how the file was read: summary.json's ``replay.reader`` (:func:`reader_block`)
    reader: Optional[dict] = field(default=None, compare=False)
    #: W and the scale-up time known without the programs (``compute_s``, ``scale_up_s``: simai_plan's, from
    #: testbed.workloads.simai.programs.Timeline; None: computed from ``programs`` and ``tasks``)
    figures: Optional[dict] = field(default=None, compare=False, repr=False)
    #: how the file's ranks map onto the hosts: summary.json's ``replay.mapping``
    #: (traffic.workloads.job_mapping.mapping)
    mapping: Optional[dict] = field(default=None, compare=False, repr=False)

    @property
    def modes(self) -> Tuple[str, ...]:
        """The overlap of each iteration in run order: ``compare`` gives off, on, on, off, off, on, ..."""
        if self.overlap != "compare":
            return (self.overlap,) * self.iterations
        return tuple(m for p in range(self.iterations) for m in (("off", "on") if p % 2 == 0 else ("on", "off")))

    @property
    def compute_s_per_iteration(self) -> float:
        """W: the iteration's compute-only time (its programs with free communication; with pp > 1 the
        pipeline's makespan, bubble included), s."""
        if self.figures is not None:
            return self.figures["compute_s"]
        return simulate(self.programs, self.tasks, [0.0] * len(self.tasks)).makespan_s

    @property
    def scale_up_s_per_iteration(self) -> float:
        """The scale-up collectives' modelled time in one iteration, s."""
        if self.figures is not None:
            return self.figures["scale_up_s"]
        return sum(t.scale_up_s for t in self.tasks)

    @property
    def timeline_extra_s(self) -> float:
        """Compute waits and scale-up collectives of every iteration run, s (beyond the fabric ops' estimate)."""
        return len(self.modes) * (self.compute_s_per_iteration + self.scale_up_s_per_iteration)


def algorithm_for(collective: str, asked: str, defaults: dict = DEFAULT_ALGORITHMS) -> str:
    """``asked`` when registered for ``collective``, else its default in ``defaults`` (:data:`DEFAULT_ALGORITHMS`)."""
    return asked if (collective, asked) in collectives.ALGORITHMS else defaults[collective]


def compute_scale(spec: ScenarioSpec, section=None) -> float:
    """Emulated / real compute time of a replay section (``workload.simai`` unless ``section`` is given, e.g.
    ``workload.chakra``): its ``compute_scale``, ``auto`` = dilation x size_scale, off = 0."""
    s = spec.workload.simai if section is None else section
    if s.compute_scale == "auto":
        return spec.scale_factor * s.size_scale
    return 0.0 if s.compute_scale is None else float(s.compute_scale)


class _Streams:
    """Stream numbers in first-use order: fabric streams first (the agents' streams), scale-up ones after."""

    def __init__(self):
        self.fabric: dict = {}
        self.scale_up: dict = {}

    def get(self, where: str, name: str) -> int:
        d = self.fabric if where == "fabric" else self.scale_up
        return d.setdefault(name, len(d))

    def names(self) -> Tuple[str, ...]:
        return tuple(self.fabric) + tuple(f"scale-up {n}" for n in self.scale_up)


def simai_plan(spec: ScenarioSpec, n_hosts: Optional[int] = None):
    """The WorkloadPlan of a SimAI replay (module docstring): fabric ops, notes and the ReplayPlan.

    ``n_hosts``: the hosts the job runs on, ranks 0..n_hosts-1 of the ops' groups (default: the fabric's;
    a job of a ``jobs`` list passes its own, testbed.workloads.simai.job). Raises ScenarioError naming the key and
    the file line when the workload cannot run here.
    """
    from traffic.workloads.job_mapping import JobShape, mapping, mapping_text, scopes_of
    from traffic.workloads.parallel_groups import stage_groups
    from traffic.workloads.pipeline_schedule import stage_passes
    from traffic.workloads.placement import PlacementError, place

    s, key = spec.workload.simai, "workload.simai.path"
    wl, all_ops, total_ns = load_file(spec)
    notes: list = []
    scopes = scopes_of(op.group for op in all_ops)
    all_gpus, per_host, source, reader = all_gpus_of(spec, wl, notes, n_hosts, scopes)
    world = world_size_key(s, all_gpus, source)        # what a refusal of this world size names
    h, scale = wl.header, compute_scale(spec)
    n_stages, m = micro_batches(spec, wl, notes)
    n_fabric_hosts = all_gpus // per_host
    if n_stages > 1 and (all_gpus // n_stages) % per_host:
        raise ScenarioError(f"{world}: pp {n_stages} stages of {counted(all_gpus // n_stages, 'GPU')} do not "
                            f"fill whole hosts of {per_host} GPUs ({all_gpus} GPUs on "
                            f"{counted(n_fabric_hosts, 'host')}): "
                            f"allowed a fabric whose hosts divide a stage; "
                            f"{fit_hint_of(all_gpus, h, n_fabric_hosts, scopes)}")

    placements: dict = {}

    def placed(scope: str, stage: int):
        if (scope, stage) in placements:             # every step of a scope in a stage places the same groups
            return placements[(scope, stage)]
        try:
            pl = placements[(scope, stage)] = place(stage_groups(scope, stage, all_gpus, h.tp_size, h.ep_size,
                                                                 n_stages), per_host)
            return pl
        except (ValueError, PlacementError) as e:
            raise ScenarioError(f"{world} on the fabric's {counted(n_fabric_hosts, 'host')}: {e}; "
                                f"{fit_hint_of(all_gpus, h, n_fabric_hosts, scopes)}") from None

    steps, skipped = [], {}
    for op in all_ops:
        coll = SIMAI_COLLECTIVES[op.collective]
        alg = algorithm_for(coll, spec.workload.algorithm)
        token = op.collective + ("" if op.group in ("TP", "DP") else f"_{op.group}")
        base = dict(line=op.line, layer=op.layer, phase=op.phase, token=token, collective=coll, algorithm=alg,
                    group=op.group, size_bytes=op.size_bytes, compute_s=op.compute_time_ns * scale / 1e9,
                    update_s=op.update_time_ns * scale / 1e9, blocking=op.blocking)
        place_at = f"line {op.line} {op.layer}:{op.phase}"
        pl = placed(op.group, 0)
        if op.size_bytes == 0 or pl.group_size < 2:
            why = ((op.collective, "of size 0: nothing to send") if op.size_bytes == 0
                   else (f"{op.collective} ({op.group})", "over groups of 1 rank: no data moves"))
            skipped.setdefault(why, []).append(place_at)
            steps.append(ReplayStep(**{**base, "where": "none"}))
            continue
        if pl.where == "scale_up":
            t = (collectives.busbw_factor(coll, alg, pl.group_size) * op.size_bytes * 8
                 / (s.scale_up_ratio * spec.fabric.host_link_bps))
            steps.append(ReplayStep(**base, where="scale_up", scale_up_s=t, group_size=pl.group_size))
            continue
        steps.append(ReplayStep(**base, where="fabric", group_size=len(pl.host_groups[0])))
    trailing_ns = total_ns - sum(op.compute_time_ns for op in all_ops)
    steps.append(ReplayStep(line=0, layer="(end of iteration)", phase="", token="NONE", collective="",
                            algorithm="", group="", where="none", size_bytes=0,
                            compute_s=trailing_ns * scale / 1e9, update_s=0.0, blocking=True))
    for (what, reason), places in skipped.items():
        notes.append(f"{s.path}: skipped {counted(len(places), what + ' entry', what + ' entries')} {reason} "
                     f"({list_places(places)})")
    ranks_map = mapping(JobShape(all_gpus, h.tp_size, h.ep_size, n_stages), n_fabric_hosts, scopes,
                        Counter(st.group for st in steps if st.where != "none"))
    if reader["simai_skips"]:
        bc = [st for st in steps if st.token.split("_")[0] == "BROADCAST"]
        ran = sorted({"on the fabric" if st.where == "fabric" else "in the scale-up domain" for st in bc
                      if st.where != "none"})
        notes.append(f"{s.path}: {counted(len(bc), 'BROADCAST entry', 'BROADCAST entries')} ("
                     f"{list_places(reader['simai_skips'])}) run{'s' if len(bc) == 1 else ''} here as "
                     f"broadcasts from each group's first rank ({' and '.join(ran) or 'none: skipped above'}); "
                     "SimAI's reader skips BROADCAST (Workload.cc matches it to no collective type)")

    # -- the programs: F steps (forward phase) and B steps (the rest), per micro-batch and stage
    f_idx = [i for i, st in enumerate(steps) if st.phase == "fwd"]
    b_idx = [i for i, st in enumerate(steps) if st.phase != "fwd"]
    ns = 1e-9 * scale * {"ns": 1, "us": 1_000}[s.time_unit]
    # the forward compute after the last forward collective belongs to F (collective_ops charges it to the
    # first backward step): move it when the file is a pipeline
    f_tail_s = 0.0
    if n_stages > 1:
        f_tail_s = max(0.0, sum(r.fwd_compute_ticks for r in wl.rows) * ns
                       - sum(steps[i].compute_s + (steps[i].update_s if steps[i].where != "none" else 0.0)
                             for i in f_idx))
    streams = _Streams()
    tasks: list = []               # the stage-to-stage tasks (the iteration's first tasks)
    fabric_ops: list = []          # PlannedOp fields, in op order

    def add_task(step: int, stage: int, mb: int, group: str, where: str, stream_name: str, size: int,
                 coll: str, alg: str, host_groups, mult: int, layer: str, blocking: bool, scale_up_s=0.0) -> int:
        stream = streams.get(where, stream_name)
        off = None
        if where == "fabric":
            off = len(fabric_ops)
            fabric_ops.append(dict(size_bytes=size * mult, layer=layer, collective=coll, group=group,
                                   groups=host_groups, algorithm=alg, stream=stream))
        tasks.append(CommTask(step=step, stage=stage, micro_batch=mb, stream=stream, group=group, where=where,
                              op_offset=off, scale_up_s=scale_up_s, blocking=blocking))
        return len(tasks) - 1

    tagged = n_stages > 1 or m > 1
    pp_fwd: dict = {}
    pp_bwd: dict = {}
    if n_stages > 1:
        pp_size = max(1, round(h.pp_comm_bytes * s.size_scale))
        pp_groups = stage_groups("PP", 0, all_gpus, h.tp_size, h.ep_size, n_stages)
        for bnd in range(n_stages - 1):
            for direction, src, dst, table in (("F", bnd, bnd + 1, pp_fwd), ("B", bnd + 1, bnd, pp_bwd)):
                try:
                    pl = place(tuple((g[src], g[dst]) for g in pp_groups), per_host)
                except PlacementError as e:
                    raise ScenarioError(f"{world}: {e}; {fit_hint_of(all_gpus, h, n_fabric_hosts, scopes)}"
                                        ) from None
                where = pl.where
                t_up = pp_size * 8 / (s.scale_up_ratio * spec.fabric.host_link_bps) if where == "scale_up" else 0.0
                for i in range(m):
                    table[(src, i)] = add_task(-1, src, i, "PP", where, f"PP s{src}>s{dst}", pp_size, "send",
                                               "chain", pl.host_groups, pl.multiplicity,
                                               f"pp:{'activations' if direction == 'F' else 'gradients'}:"
                                               f"s{src}>s{dst}:mb{i}", False, t_up)
    # the programs (F steps: forward phase, B steps: the rest, per micro-batch and stage) and their tasks are
    # built when a run reads them; the fabric ops, streams and figures now (testbed.workloads.simai.programs)
    timeline = Timeline(steps, f_idx, b_idx, f_tail_s,
                        [stage_passes(s.pp_schedule, st, n_stages, m) for st in range(n_stages)], m, placed,
                        tasks, pp_fwd, pp_bwd, streams, fabric_ops, tagged)
    if not fabric_ops:
        raise ScenarioError(f"{key}: {s.path} has no entry that crosses the fabric"
                            + "".join(f"; {msg}" for msg in notes))
    steps = [st if st.where != "fabric" else ReplayStep(**{**st.__dict__, "op_offset": timeline.first_op.get(i)})
             for i, st in enumerate(steps)]
    unit = "rank" if per_host == 1 else "host"
    counts = Counter(f"{f['group']}-scoped {f['collective']}/{f['algorithm']} ("
                     + counted(len(f["groups"]), "concurrent " + ("ring" if f["algorithm"] == "ring"
                                                                  else f"{f['algorithm']} group"))
                     + f" of {counted(len(f['groups'][0]), unit)})" for f in fabric_ops)
    replay = ReplayPlan(path=s.path, steps=tuple(steps), iterations=s.iterations, overlap=s.overlap,
                        compute_scale=scale, gpus_per_host=per_host, fabric_ops_per_iteration=len(fabric_ops),
                        programs=LazyTuple(timeline, 0, n_stages), tasks=LazyTuple(timeline, 1, timeline.n_tasks),
                        stream_names=streams.names(), n_stages=n_stages, micro_batches=m, pp_schedule=s.pp_schedule,
                        reader=reader, figures={"compute_s": timeline.compute_s, "scale_up_s": timeline.scale_up_s},
                        mapping=ranks_map)
    n_up = timeline.n_scale_up
    notes.insert(0, f"{s.path}: replaying {counted(len(fabric_ops), 'fabric op')}"
                 + (f" and {counted(n_up, 'scale-up collective')}" if n_up else "") + f" per iteration x "
                 f"{counted(len(replay.modes), 'iteration')} on {counted(len(streams.fabric), 'fabric stream')}, "
                 f"compute x {scale:g}, overlap {s.overlap}: "
                 + ", ".join(f"{c} {k}" for k, c in counts.items()))
    notes.insert(1, mapping_text(ranks_map))
    ops = tuple(PlannedOp(iteration=it, warmup=False, **f) for it in range(len(replay.modes)) for f in fabric_ops)
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
