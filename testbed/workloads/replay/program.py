"""A replay iteration as programs: what each pipeline stage's compute stream does, and the communication
tasks it issues on their streams; and its timeline computed in virtual time (:func:`simulate`).

One program per pipeline stage (one stage when pp = 1): every rank of a stage
does the same work, so one compute stream stands for all of them (SimAI runs
one such timeline per GPU, traffic.workloads.simai). A program is a sequence
of :class:`Action`:

- ``compute``: the stream is busy for ``seconds``;
- ``issue``: hand communication task ``task`` to its stream (FIFO per
  stream, streams run concurrently); with ``blocking`` the compute stream then
  waits for it (SimAI: forward and input-gradient collectives block,
  weight-gradient ones do not);
- ``wait``: wait until task ``task`` (issued by another stage: the
  activations or gradients of a micro-batch) has completed.

A :class:`CommTask` runs on one stream: a communicator, i.e. one group scope
(TP, DP, EP, DP_EP) of one stage, or one direction of one stage boundary (PP),
or the stage's scale-up domain. An iteration ends when every program has run
and every task has completed.

Two ways to run the same programs (testbed.workloads.replay.run runs them for real; this
module computes them in virtual time from task durations):

- overlapped: as above, all stages and streams concurrently;
- serialized (``overlap: off``): nothing overlaps a communication task. The
  compute keeps the schedule it has with free communication (W, the makespan
  of :func:`simulate` with every duration 0: the pipeline's compute-only
  time, its bubble included), and every task runs alone, in the order of its
  issue time in that schedule, while the whole job's timeline stops for it.
  Its iteration time is therefore W + sum of the task durations.

Exposed communication of an iteration: E = T - W (time beyond the compute-only
schedule). Serialized, E_off = sum of the task durations = the per-group
communication times added up. The saving of overlap is
T_off - T_on = E_off - E_on = sum_g C_g(off) - E_on: the communication hidden
under compute and under other groups' communication (C_g: group g's
communication time, summed over its tasks).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple


@dataclass(frozen=True)
class Action:
    """One action of a stage's program (module docstring): kind ``compute`` (seconds), ``issue`` (task,
    blocking) or ``wait`` (task); label: the pass it belongs to (``F3``, ``B0``; '' outside a pipeline)."""

    kind: str
    seconds: float = 0.0
    task: int = -1
    blocking: bool = False
    label: str = ""


@dataclass(frozen=True)
class CommTask:
    """One communication of one iteration.

    step: index into the plan's steps (the file row and phase it comes from; -1 for a PP transfer);
    stage: the stage that issues it; micro_batch; stream: its communicator (0.. for fabric streams, the
    agents' stream numbers; scale-up streams after them); group: scope (TP, DP, EP, DP_EP, PP); where:
    ``fabric`` or ``scale_up``; op_offset: index of its PlannedOp within an iteration (fabric only);
    scale_up_s: modelled time of a scale-up task; blocking: the issuing program waits for it.
    """

    step: int
    stage: int
    micro_batch: int
    stream: int
    group: str
    where: str
    op_offset: Optional[int] = None
    scale_up_s: float = 0.0
    blocking: bool = False


@dataclass
class Timeline:
    """The outcome of :func:`simulate`, seconds from the iteration's start.

    makespan_s; stage_compute_s, stage_comm_wait_s (waiting on its own blocking tasks), stage_peer_wait_s
    (waiting on other stages' transfers), stage_end_s: per stage; task_start_s, task_end_s: per task;
    issue_order: task indices by issue time (ties in an order that respects dependencies).
    """

    makespan_s: float
    stage_compute_s: List[float]
    stage_comm_wait_s: List[float]
    stage_peer_wait_s: List[float]
    stage_end_s: List[float]
    task_start_s: Dict[int, float] = field(default_factory=dict)
    task_end_s: Dict[int, float] = field(default_factory=dict)
    issue_order: Tuple[int, ...] = ()


class ProgramDeadlock(RuntimeError):
    """Programs that wait for a task nobody issues (a bug in the plan); the message names the stages."""


def simulate(programs: Sequence[Sequence[Action]], tasks: Sequence[CommTask],
             durations_s: Sequence[float]) -> Timeline:
    """The overlapped timeline of ``programs`` when task k takes ``durations_s[k]`` seconds once its stream
    is free (streams FIFO in issue order, concurrent with each other). Raises ProgramDeadlock when a wait
    can never be satisfied, ValueError when a duration is negative or missing."""
    if len(durations_s) != len(tasks) or any(d < 0 for d in durations_s):
        raise ValueError(f"need {len(tasks)} durations >= 0, got {len(durations_s)}")
    n = len(programs)
    t = [0.0] * n
    pc = [0] * n
    compute, comm_wait, peer_wait = [0.0] * n, [0.0] * n, [0.0] * n
    stream_free: Dict[int, float] = {}
    start: Dict[int, float] = {}
    end: Dict[int, float] = {}
    issued: List[Tuple[float, int, int]] = []
    while any(pc[s] < len(programs[s]) for s in range(n)):
        progressed = False
        for s in range(n):
            prog = programs[s]
            while pc[s] < len(prog):
                a = prog[pc[s]]
                if a.kind == "compute":
                    t[s] += a.seconds
                    compute[s] += a.seconds
                elif a.kind == "issue":
                    k = a.task
                    st = tasks[k].stream
                    start[k] = max(t[s], stream_free.get(st, 0.0))
                    end[k] = stream_free[st] = start[k] + durations_s[k]
                    issued.append((t[s], len(issued), k))
                    if a.blocking:
                        comm_wait[s] += end[k] - t[s]
                        t[s] = end[k]
                elif a.kind == "wait":
                    if a.task not in end:
                        break
                    if end[a.task] > t[s]:
                        peer_wait[s] += end[a.task] - t[s]
                        t[s] = end[a.task]
                else:
                    raise ValueError(f"action kind {a.kind!r} unknown: allowed compute, issue, wait")
                pc[s] += 1
                progressed = True
        if not progressed:
            stuck = [f"stage {s} at action {pc[s]}" for s in range(n) if pc[s] < len(programs[s])]
            raise ProgramDeadlock("programs wait for tasks never issued: " + ", ".join(stuck))
    makespan = max([*t, *end.values(), 0.0])
    return Timeline(makespan, compute, comm_wait, peer_wait, list(t), start, end,
                    tuple(k for _, _, k in sorted(issued)))


def serialized_s(programs: Sequence[Sequence[Action]], tasks: Sequence[CommTask],
                 durations_s: Sequence[float]) -> float:
    """Iteration time of the serialized run (module docstring): W + sum of the durations, s."""
    return simulate(programs, tasks, [0.0] * len(tasks)).makespan_s + sum(durations_s)
