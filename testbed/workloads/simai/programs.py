"""A SimAI replay's iteration as programs and tasks (testbed.workloads.replay.program), built only when a run needs them.

Every stage runs the file's rows once per pass (testbed.workloads.simai.plan): F(i) the forward steps, B(i) the
input- and weight-gradient steps (weight-gradient collectives only in the last micro-batch's B). So one
iteration has, per stage, ``2 x micro_batches`` passes of at most three shapes (:class:`PassShape`: F,
B, the last B), and a file at real size many actions: SimAI's ``example/workload_analytical.txt``
(9,216 GPUs, pp 12, ga 24, 1,789 rows) on 12 hosts has 956,736 tasks and about 2.9 million actions per
iteration, 956,208 of them scale-up collectives. :class:`Timeline` therefore computes what a plan needs
before the run from the pass shapes (the fabric ops, the stream names, the counts, the scale-up time, the
compute-only time W) and builds the programs and tasks themselves (:class:`LazyTuple`) only when a run or
a caller reads them, exactly as they were built before (the same objects, order and numbers; tested in
tests/test_simai_scale.py).

W (:attr:`Timeline.compute_s`) comes from programs of one compute action per pass (the pass's compute
summed) and the stage-to-stage transfers: with every task's duration 0 an issue never moves a stage's
clock (each stream is issued by one stage, so it is free by then: testbed.workloads.replay.program.simulate), so
the makespan is the same up to float rounding (about 1e-15 relative).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from testbed.workloads.replay.program import Action, CommTask, simulate


class LazyTuple(Sequence):
    """A tuple made on first use by ``timeline.materialize()[part]`` (0: programs, 1: tasks); ``length`` known
    before. Compares equal to the tuple it stands for."""

    __slots__ = ("_timeline", "_part", "_len")

    def __init__(self, timeline: "Timeline", part: int, length: int):
        self._timeline, self._part, self._len = timeline, part, length

    def _items(self) -> tuple:
        return self._timeline.materialize()[self._part]

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i):
        return self._items()[i]

    def __iter__(self):
        return iter(self._items())

    def __eq__(self, other) -> bool:
        if isinstance(other, LazyTuple):
            other = other._items()
        return isinstance(other, (tuple, list)) and self._items() == tuple(other)

    def __hash__(self) -> int:
        return hash(self._items())

    def __repr__(self) -> str:
        return repr(self._items())


@dataclass(frozen=True)
class PassShape:
    """What one pass of one stage does, in order: ``items`` ``("compute", seconds)`` or ``("issue", step)``
    (step: index into the plan's steps); with the issued steps split by where they run."""

    items: Tuple[tuple, ...]
    fabric_steps: Tuple[int, ...]
    scale_up_steps: Tuple[int, ...]
    #: the scopes of the scale-up steps, each once, in first-use order
    scale_up_scopes: Tuple[str, ...]
    #: the scale-up steps' modelled times, in order, s
    scale_up_s: Tuple[float, ...]
    #: the pass's compute, summed in order, s
    compute_s: float


class Timeline:
    """The iteration of a SimAI replay (module docstring).

    steps: the plan's ReplayStep list; f_idx/b_idx: indices of the F and B steps; f_tail_s: forward
    compute after the last forward step, s (pipelines only); passes: per stage its (kind, micro-batch)
    passes (traffic.workloads.pipeline_schedule.stage_passes); m: micro-batches; placed(scope, stage): the
    scope's GroupPlacement in that stage; pp_tasks / pp_fwd / pp_bwd: the stage-to-stage tasks (the first
    tasks of the iteration) and their indices by (stage, micro-batch); streams: the plan's stream numbering
    (fabric and scale-up names, first use), holding the PP streams already; fabric_ops: the PP fabric ops
    (PlannedOp fields) already; tagged: layer names carry ``:s<stage>:mb<i>``.
    """

    def __init__(self, steps, f_idx, b_idx, f_tail_s: float, passes, m: int, placed: Callable, pp_tasks: list,
                 pp_fwd: dict, pp_bwd: dict, streams, fabric_ops: list, tagged: bool):
        self.steps, self.passes, self.m, self.placed = steps, passes, m, placed
        self.pp_tasks, self.pp_fwd, self.pp_bwd, self.streams = tuple(pp_tasks), pp_fwd, pp_bwd, streams
        self.shapes = {(kind, last): self._shape(f_idx if kind == "F" else b_idx, last,
                                                 0.0 if kind == "F" else f_tail_s,
                                                 f_tail_s if kind == "F" else 0.0)
                       for kind in ("F", "B") for last in (False, True)}
        self.fabric_ops, self.tagged = fabric_ops, tagged
        self.n_pp_ops = len(fabric_ops)
        #: step index -> index of its first fabric op in an iteration
        self.first_op: dict = {}
        self.n_scale_up = sum(t.where == "scale_up" for t in self.pp_tasks)
        self.n_tasks = len(self.pp_tasks)
        up_s = [t.scale_up_s for t in self.pp_tasks]
        for stage, stage_passes in enumerate(passes):
            for kind, mb in stage_passes:
                shape = self.shapes[(kind, mb == m - 1)]
                self._walk_pass(stage, mb, shape)
                up_s.extend(shape.scale_up_s)
                self.n_scale_up += len(shape.scale_up_steps)
                self.n_tasks += len(shape.fabric_steps) + len(shape.scale_up_steps)
        #: the scale-up collectives' modelled time in an iteration, summed in task order (as before), s
        self.scale_up_s = sum(up_s)
        # scale-up streams are numbered after the fabric's (the agents never see them)
        n_fabric = len(streams.fabric)
        self.pp_tasks = tuple(t if t.where == "fabric" else CommTask(**{**t.__dict__, "stream": n_fabric + t.stream})
                              for t in self.pp_tasks)
        self._made: Optional[tuple] = None

    def _shape(self, indices, last: bool, first_extra_s: float, tail_s: float) -> PassShape:
        items: list = []
        fabric, scale_up = [], []
        for j, i in enumerate(indices):
            st = self.steps[i]
            c = st.compute_s - (first_extra_s if j == 0 else 0.0)
            items.append(("compute", max(0.0, c)))
            if st.where == "none" or (st.phase == "wg" and not last):
                continue
            items.append(("issue", i))
            (fabric if st.where == "fabric" else scale_up).append(i)
            if st.update_s:
                items.append(("compute", st.update_s))
        if tail_s:
            items.append(("compute", tail_s))
        total = 0.0
        for kind, x in items:
            if kind == "compute":
                total += x
        return PassShape(tuple(items), tuple(fabric), tuple(scale_up),
                         tuple(dict.fromkeys(self.steps[i].group for i in scale_up)),
                         tuple(self.steps[i].scale_up_s for i in scale_up), total)

    def _walk_pass(self, stage: int, mb: int, shape: PassShape) -> None:
        """Register the pass's streams in first-use order and add its fabric ops (the plan's, in order)."""
        steps, streams = self.steps, self.streams
        for scope in shape.scale_up_scopes:
            streams.get("scale_up", f"{scope} s{stage}")
        for i in shape.fabric_steps:
            st = steps[i]
            name = f"{st.group} s{stage}"
            pl = self.placed(st.group, stage)
            layer = f"{st.layer}:{st.phase}" + (f":s{stage}:mb{mb}" if self.tagged else "")
            self.first_op.setdefault(i, len(self.fabric_ops))
            self.fabric_ops.append(dict(size_bytes=st.size_bytes * pl.multiplicity, layer=layer,
                                        collective=st.collective, group=st.group, groups=pl.host_groups,
                                        algorithm=st.algorithm, stream=streams.get("fabric", name)))

    @property
    def compute_s(self) -> float:
        """W: the compute-only makespan of the iteration (module docstring), s."""
        programs = []
        for stage, stage_passes in enumerate(self.passes):
            last_stage = len(self.passes) - 1
            prog: list = []
            for kind, mb in stage_passes:
                c = self.shapes[(kind, mb == self.m - 1)].compute_s
                if kind == "F":
                    prog += [Action("wait", task=self.pp_fwd[(stage - 1, mb)])] if stage > 0 else []
                    prog.append(Action("compute", seconds=c))
                    prog += [Action("issue", task=self.pp_fwd[(stage, mb)])] if stage < last_stage else []
                else:
                    prog += [Action("wait", task=self.pp_bwd[(stage + 1, mb)])] if stage < last_stage else []
                    prog.append(Action("compute", seconds=c))
                    prog += [Action("issue", task=self.pp_bwd[(stage, mb)])] if stage > 0 else []
            programs.append(prog)
        return simulate(programs, self.pp_tasks, [0.0] * len(self.pp_tasks)).makespan_s

    def materialize(self) -> tuple:
        """(programs, tasks) of the iteration, made once (testbed.workloads.replay.program: one program per stage)."""
        if self._made is None:
            self._made = self._make()
        return self._made

    def _make(self) -> tuple:
        steps, streams = self.steps, self.streams
        n_fabric = len(streams.fabric)
        tasks = list(self.pp_tasks)
        off = self.n_pp_ops
        computes: dict = {}          # (shape, label) -> its compute actions, shared by the stages
        programs = []
        last_stage = len(self.passes) - 1
        for stage, stage_passes in enumerate(self.passes):
            prog: list = []
            for kind, mb in stage_passes:
                label = f"{kind}{mb}"
                key = (kind, mb == self.m - 1)
                shape = self.shapes[key]
                acts = computes.get((key, label))
                if acts is None:
                    acts = computes[(key, label)] = [Action("compute", seconds=x, label=label) if k == "compute"
                                                     else None for k, x in shape.items]
                if kind == "F" and stage > 0:
                    prog.append(Action("wait", task=self.pp_fwd[(stage - 1, mb)], label=label))
                if kind == "B" and stage < last_stage:
                    prog.append(Action("wait", task=self.pp_bwd[(stage + 1, mb)], label=label))
                for (k, x), act in zip(shape.items, acts):
                    if act is not None:
                        prog.append(act)
                        continue
                    st = steps[x]
                    name = f"{st.group} s{stage}"
                    if st.where == "fabric":
                        tasks.append(CommTask(step=x, stage=stage, micro_batch=mb, stream=streams.fabric[name],
                                              group=st.group, where="fabric", op_offset=off, scale_up_s=0.0,
                                              blocking=st.blocking))
                        off += 1
                    else:
                        tasks.append(CommTask(step=x, stage=stage, micro_batch=mb,
                                              stream=n_fabric + streams.scale_up[name], group=st.group,
                                              where="scale_up", op_offset=None, scale_up_s=st.scale_up_s,
                                              blocking=st.blocking))
                    prog.append(Action("issue", task=len(tasks) - 1, blocking=st.blocking, label=label))
                if kind == "F" and stage < last_stage:
                    prog.append(Action("issue", task=self.pp_fwd[(stage, mb)], label=label))
                if kind == "B" and stage > 0:
                    prog.append(Action("issue", task=self.pp_bwd[(stage, mb)], label=label))
            programs.append(tuple(prog))
        return tuple(programs), tuple(tasks)
