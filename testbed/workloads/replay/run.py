"""Run a SimAI/AICB replay's timeline: the stages' programs, each group's collectives on its own stream, overlap.

Model (testbed.workloads.replay.program; plan: testbed.workloads.simai.plan): one program per
pipeline stage (one stage when pp = 1), every rank of a stage doing the same
work, so one compute stream stands for all of them (SimAI's order,
traffic.workloads.simai):

- ``overlap: on``: each stage's program runs in its own thread: compute is a
  timed wait (``time.sleep``, already scaled by the plan's compute scale),
  a collective is handed to the thread of its stream (one per communicator:
  the TP, DP, EP, DP_EP scope of a stage, one direction of a stage boundary
  (PP), a stage's scale-up domain), which runs its collectives one after
  another (first in, first out) on the agents' stream of that number; streams
  run concurrently, as NCCL runs each communicator on its own CUDA stream.
  The program waits for blocking collectives (SimAI: forward and
  input-gradient ones) and for the activations/gradients a pass needs from
  the neighbour stage; weight-gradient collectives run while the compute goes
  on. So a layer's TP collectives overlap the DP traffic queued before them,
  the other stage's traffic and compute;
- ``overlap: off`` (serialized, the baseline): nothing overlaps a
  collective: the compute keeps its communication-free schedule (W) and every
  collective runs alone, in issue order, while the whole job waits;
  iteration = W + the sum of the collectives' times;
- ``overlap: compare``: iterations alternate off, on, on, off, ... and the
  results hold both, with the saving of overlap (:func:`overlap_saving`);
- an iteration ends when every program is done and every stream is empty.

Figures per iteration: iteration time T (first compute to last collective
end); W the compute-only time (the plan's programs with free communication,
pipeline bubble included); exposed communication E = min(T - W, C) with C
the collectives' times added up, and the rest of T - W, max(0, T - W - C), as
``overhead_s`` (neither compute nor communication: dispatch, timer slack;
:func:`exposed_split`); per group scope its communication time C_g (the sum of
its collectives' times: submit to completion on its stream, which is the
span of its ranks' records plus the agents' command round trip) and busy time
(the union of those intervals); per stage compute, waits for its own
collectives, waits for the other stage, idle share 1 - compute / T and
bubble share (idle not spent on its own collectives) against the pipeline
papers' (p - 1) / (m + p - 1) and the communication-free schedule's; the
model's prediction of T from the measured collective times
(testbed.workloads.replay.program.simulate; serialized: W + sum).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from statistics import mean

from testbed.process import signals
from testbed.workloads.replay.program import simulate

#: the formula of the saving of overlap, stated in summary.json (testbed.workloads.replay.program)
SAVING_FORMULA = ("T_off - T_on = sum_g C_g(off) - E_on, E_on = min(T_on - W, C_on): the communication hidden "
                  "under compute and other groups' communication")


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


class _Aborted(RuntimeError):
    """Another stage's program failed; this one stops waiting."""


class _Replay:
    """One run's timeline over the agents; ``ctx``/``agents``/``rec``/``progress`` as in testbed.pipeline.runner;
    ``op_base``/``record``: as :func:`run_replay`'s."""

    def __init__(self, ctx, agents, rec, progress, plan, op_base: int = 0, record=None):
        self.ctx, self.agents, self.rec, self.progress, self.plan = ctx, agents, rec, progress, plan
        self.op_base, self.record = op_base, record
        self.streams = [ThreadPoolExecutor(1, thread_name_prefix=f"stream-{i}")
                        for i in range(len(plan.stream_names))]
        self.lock = threading.Lock()
        #: fabric ops completed so far (progress lines)
        self.done = 0
        self.zero = simulate(plan.programs, plan.tasks, [0.0] * len(plan.tasks))

    def _task(self, it: int, k: int, t0: float) -> tuple:
        """Run task ``k`` of iteration ``it``: (start, end) in s since ``t0``, span of the rank records (s)."""
        task = self.plan.tasks[k]
        start = time.monotonic()
        if task.where != "fabric":
            _sleep(task.scale_up_s)
            end = time.monotonic()
            return start - t0, end - t0, end - start
        op_id = self.op_base + it * self.plan.fabric_ops_per_iteration + task.op_offset
        op, n_ops = self.ctx.ops_plan[op_id], len(self.ctx.ops_plan)
        expect_s = op.busbw_factor * op.size_bytes * 8 / self.ctx.goodput_bps
        recs = self.agents.run_op(op_id, op.size_bytes, op.groups, timeout_s=10 * expect_s + 20,
                                  collective=op.collective, algorithm=op.algorithm, stream=op.stream)
        end = time.monotonic()
        span_s = (max(r.t_end_ns for r in recs) - min(r.t_start_ns for r in recs)) / 1e9
        if self.record is not None:
            self.record(op_id, op, recs)
            return start - t0, end - t0, span_s
        with self.lock:
            self.rec.rank_rows.extend(recs)
            self.rec.op_meta[op_id] = op.meta()
            self.done += 1
            self.progress.op(self.done, op.size_bytes, op.size_bytes * 8 / max(span_s, 1e-9) * op.busbw_factor,
                             self.done == n_ops)
        return start - t0, end - t0, span_s

    def _stage(self, it, s, t0, futs, issued, abort, out):
        """Run stage ``s``'s program (overlap on); figures into ``out[s]``."""
        compute = comm_wait = peer_wait = 0.0
        exposed: dict = {}

        def result(k):
            while not issued[k].wait(0.2):
                if abort.is_set():
                    raise _Aborted()
            return futs[k].result()

        for a in self.plan.programs[s]:
            if abort.is_set():
                raise _Aborted()
            if a.kind == "compute":
                _sleep(a.seconds)
                compute += a.seconds
            elif a.kind == "issue":
                futs[a.task] = self.streams[self.plan.tasks[a.task].stream].submit(self._task, it, a.task, t0)
                issued[a.task].set()
                if a.blocking:
                    tw = time.monotonic()
                    result(a.task)
                    exposed[a.task] = time.monotonic() - tw
                    comm_wait += exposed[a.task]
            else:
                tw = time.monotonic()
                result(a.task)
                peer_wait += time.monotonic() - tw
        out[s] = {"compute_s": compute, "comm_wait_s": comm_wait, "peer_wait_s": peer_wait,
                  "end_s": time.monotonic() - t0, "exposed": exposed}

    def _on(self, it: int) -> dict:
        n_tasks, n_stages = len(self.plan.tasks), len(self.plan.programs)
        futs: list = [None] * n_tasks
        issued = [threading.Event() for _ in range(n_tasks)]
        abort = threading.Event()
        out: list = [None] * n_stages
        t0 = time.monotonic()
        pool = ThreadPoolExecutor(n_stages, thread_name_prefix="stage")
        stage_futs = [pool.submit(self._stage, it, s, t0, futs, issued, abort, out) for s in range(n_stages)]
        try:
            for f in stage_futs:
                f.result()
        except BaseException:
            abort.set()             # the other stages stop at their next action or wait (Ctrl-C, an agent error)
            raise
        finally:
            pool.shutdown(wait=False)
        t_drain = time.monotonic()
        results = [f.result() for f in futs]
        iteration_s = time.monotonic() - t0
        exposed = {k: v for o in out for k, v in o["exposed"].items()}
        return self._figures(iteration_s, results, exposed, out, time.monotonic() - t_drain)

    def _off(self, it: int) -> dict:
        """Serialized: every task alone, in the communication-free schedule's issue order, the job waiting."""
        z = self.zero
        results: list = [None] * len(self.plan.tasks)
        shift = 0.0
        t0 = time.monotonic()
        for k in z.issue_order:
            _sleep(t0 + z.task_start_s[k] + shift - time.monotonic())
            fut: Future = self.streams[self.plan.tasks[k].stream].submit(self._task, it, k, t0)
            results[k] = fut.result()
            shift += results[k][1] - results[k][0]
        _sleep(t0 + z.makespan_s + shift - time.monotonic())
        iteration_s = time.monotonic() - t0
        total = sum(e - s for s, e, _ in results)
        out = [{"compute_s": c, "comm_wait_s": total, "peer_wait_s": z.stage_peer_wait_s[s],
                "end_s": z.stage_end_s[s] + shift} for s, c in enumerate(z.stage_compute_s)]
        return self._figures(iteration_s, results, {k: r[1] - r[0] for k, r in enumerate(results)}, out, 0.0)

    def _figures(self, iteration_s: float, results: list, exposed: dict, stages: list, drain_s: float) -> dict:
        plan, w = self.plan, self.zero.makespan_s
        durations = [e - s for s, e, _ in results]
        groups: dict = {}
        for t, (s, e, span) in zip(plan.tasks, results):
            g = groups.setdefault(t.group, {"comm_s": 0.0, "span_s": 0.0, "ops": 0, "intervals": []})
            g["comm_s"] += e - s
            g["span_s"] += span
            g["ops"] += 1
            g["intervals"].append((s, e))
        for g in groups.values():
            g["busy_s"] = union_s(g.pop("intervals"))
        step_comm: dict = {}
        step_exposed: dict = {}
        for k, t in enumerate(plan.tasks):
            if t.step >= 0:
                step_comm[t.step] = step_comm.get(t.step, 0.0) + durations[k]
                step_exposed[t.step] = step_exposed.get(t.step, 0.0) + exposed.get(k, 0.0)
        streams: dict = {}
        for t, d in zip(plan.tasks, durations):
            streams[plan.stream_names[t.stream]] = streams.get(plan.stream_names[t.stream], 0.0) + d
        split = exposed_split(iteration_s, w, sum(durations))
        return {"iteration_s": iteration_s, "compute_only_s": w, "exposed_comm_s": split["exposed_comm_s"],
                "overhead_s": split["overhead_s"],
                "comm_s": step_comm, "exposed_s": step_exposed, "drain_s": drain_s, "durations_s": durations,
                "groups": groups, "streams": streams,
                "stages": [{k: v for k, v in st.items() if k != "exposed"} for st in stages]}

    def iteration(self, it: int, mode: str) -> dict:
        """Run iteration ``it`` (0-based, in run order) with overlap ``mode`` (on/off); its figures."""
        return self._on(it) if mode == "on" else self._off(it)

    def close(self) -> None:
        for ex in self.streams:
            ex.shutdown(wait=False, cancel_futures=True)


def union_s(intervals: list) -> float:
    """Total length of the union of (start, end) intervals, s."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


def run_replay(ctx, agents, rec, progress, plan, op_base: int = 0, record=None, keep_going=None) -> dict:
    """Run ``plan`` (testbed.workloads.simai.plan.ReplayPlan) ``plan.iterations`` times; return summary.json's ``replay``.

    The fabric ops are ``ctx.ops_plan[op_base:]`` (the plan's PlannedOps in order; ``op_base`` > 0 for one
    job of a jobs list, testbed.workloads.jobs.workload). ``record(op_id, op, recs)``: called with each fabric op's
    records instead of appending them to ``rec`` and saying progress (a job's shared bookkeeping);
    ``keep_going()``: asked before every iteration after the first (with ``overlap: compare`` before every
    off/on pair), False stops there (a job's ``duration_s``). A single workload (no ``record``) holds
    signals back once the last collective is done (as testbed.pipeline.runner does). Raises what the agents raise
    (a collective's timeout or error).
    """
    r = _Replay(ctx, agents, rec, progress, plan, op_base, record)
    modes = plan.modes
    pair = 2 if plan.overlap == "compare" else 1
    try:
        iters = []
        for it, mode in enumerate(modes):
            if it and it % pair == 0 and keep_going is not None and not keep_going():
                break
            iters.append(r.iteration(it, mode))
            if it + 1 == len(modes) and record is None:
                signals.defer()
                rec.phase = "the final measurements"
    finally:
        r.close()
    modes = modes[:len(iters)]
    if plan.overlap != "compare":
        return replay_block(plan, iters, plan.overlap)
    blocks = {m: replay_block(plan, [i for i, mm in zip(iters, modes) if mm == m], m) for m in ("off", "on")}
    return {"file": plan.path, "overlap": "compare", "order": list(modes), **blocks,
            "saving": overlap_saving(blocks["off"], blocks["on"])}


def overlap_saving(off: dict, on: dict) -> dict:
    """What overlap saved, measured and predicted (testbed.workloads.replay.program), s, from the ``off`` and ``on`` blocks.

    measured_s = T_off - T_on; formula_s = sum_g C_g(off) - E_on (SAVING_FORMULA: the communication the
    overlapped run hid); model_s = (W + sum of the serialized run's collective times) - the overlapped
    timeline simulated with its own measured collective times (its critical path).
    """
    serial_comm = sum(g["comm_s"] for g in off["groups"].values())
    return {"measured_s": off["iteration_s"] - on["iteration_s"],
            "model_s": off["predicted_iteration_s"] - on["predicted_iteration_s"],
            **hidden_comm(serial_comm, on["exposed_comm_s"])}


def exposed_split(makespan_s: float, compute_only_s: float, comm_s: float) -> dict:
    """Split a run's time beyond compute, T - W (s), into exposed communication and overhead.

    ``makespan_s`` T (measured), ``compute_only_s`` W (the same schedule with free communication),
    ``comm_s`` C (the collectives' times added up). ASTRA-sim reports exposed communication as the finish
    tick minus the GPU compute ticks (astra-sim/workload/Workload.cc, Workload::report: ``curr_tick -
    hw_resource->tics_gpu_ops``): in a simulator nothing but communication fills T - W. On the emulation
    dispatch (issuing to the agents, their command round trip, thread wake-ups, timer slack) also lies
    outside compute and the collectives' spans, so T - W can exceed C; then it is not communication:
    exposed_comm_s = min(max(T - W, 0), C), overhead_s = max(0, T - W - C) (neither compute nor
    communication), hidden_comm_s = C - exposed_comm_s >= 0 (the communication hidden under compute and
    other collectives), hidden_share = hidden_comm_s / C (0 without communication)."""
    beyond = max(0.0, makespan_s - compute_only_s)
    exposed = min(beyond, comm_s)
    return {"exposed_comm_s": exposed, "overhead_s": beyond - exposed, "hidden_comm_s": comm_s - exposed,
            "hidden_share": (comm_s - exposed) / comm_s if comm_s > 0 else 0.0}


def hidden_comm(serial_comm_s: float, exposed_comm_s: float) -> dict:
    """The communication an overlapped run hid (SAVING_FORMULA), s: ``serial_comm_s`` = sum_g C_g (its
    collectives' times added up, what a serialized run adds to W), ``exposed_comm_s`` = E, the overlapped
    run's exposed communication (:func:`exposed_split`: min(T - W, C), overhead left out).
    Returns formula, serialized_comm_s, exposed_comm_on_s, formula_s = sum_g C_g - E and hidden_share =
    formula_s / sum_g C_g (0 without communication). Also the Chakra replay's (testbed.workloads.chakra.run), where
    both come from one run and E <= sum_g C_g, so formula_s >= 0; in the SimAI compare sum_g C_g is the
    serialized run's, and formula_s < 0 means the overlapped run's collectives, slower under contention,
    stayed exposed longer than the serialized ones took (overlap cost time)."""
    hidden = serial_comm_s - exposed_comm_s
    return {"formula": SAVING_FORMULA, "serialized_comm_s": serial_comm_s, "exposed_comm_on_s": exposed_comm_s,
            "formula_s": hidden, "hidden_share": hidden / serial_comm_s if serial_comm_s else 0.0}


def replay_block(plan, iters: list, mode: str) -> dict:
    """summary.json's ``replay`` (with ``overlap: compare``: its ``off`` and ``on`` blocks): the model's
    settings, per-iteration figures, per-group, per-stream, per-stage and per-step communication times of the
    iterations run with overlap ``mode`` (module docstring). Means are over iterations.
    """
    from traffic.workloads.pipeline_schedule import bubble_fraction
    steps = []
    for i, s in enumerate(plan.steps):
        if s.where == "none" or not any(i in it["comm_s"] for it in iters):
            continue
        steps.append({"line": s.line, "layer": s.layer, "phase": s.phase, "collective": s.token,
                      "algorithm": s.algorithm, "group": s.group, "where": s.where, "group_size": s.group_size,
                      "size_bytes": s.size_bytes, "blocking": s.blocking, "compute_before_s": s.compute_s,
                      "comm_s": mean(it["comm_s"].get(i, 0.0) for it in iters),
                      "exposed_s": mean(it["exposed_s"].get(i, 0.0) for it in iters)})
    iteration_s = [it["iteration_s"] for it in iters]
    exposed_s = [it["exposed_comm_s"] for it in iters]
    shares = [e / t for e, t in zip(exposed_s, iteration_s)]
    comm_total = [sum(it["durations_s"]) for it in iters]
    w = iters[0]["compute_only_s"]
    predicted = [simulate(plan.programs, plan.tasks, it["durations_s"]).makespan_s if mode == "on"
                 else w + sum(it["durations_s"]) for it in iters]
    groups = {g: {k: mean(it["groups"][g][k] for it in iters) for k in ("comm_s", "busy_s", "span_s", "ops")}
              for g in iters[0]["groups"]}
    zero = simulate(plan.programs, plan.tasks, [0.0] * len(plan.tasks))
    stages = []
    for s in range(len(plan.programs)):
        rows = [it["stages"][s] for it in iters]
        c = mean(r["compute_s"] for r in rows)
        cw = mean(r["comm_wait_s"] for r in rows)
        stages.append({"stage": s, "compute_s": c, "comm_wait_s": cw,
                       "peer_wait_s": mean(r["peer_wait_s"] for r in rows),
                       "idle_fraction": 1 - c / mean(iteration_s),
                       "bubble_fraction": max(0.0, 1 - (c + cw) / mean(iteration_s)),
                       "bubble_fraction_schedule": 1 - zero.stage_compute_s[s] / w if w else 0.0})
    block = {
        "file": plan.path, "overlap": mode, "iterations": len(iters),
        "compute_scale": plan.compute_scale, "gpus_per_host": plan.gpus_per_host,
        "compute_s_per_iteration": w,
        "iteration_s": mean(iteration_s), "iterations_s": iteration_s,
        "predicted_iteration_s": mean(predicted),
        "comm_s_per_iteration": mean(comm_total),
        "exposed_comm_s": mean(exposed_s), "overhead_s": mean(it["overhead_s"] for it in iters),
        "drain_s": mean(it["drain_s"] for it in iters),
        "exposed_share": mean(shares), "exposed_shares": shares,
        "equivalent_iteration_ms": (mean(iteration_s) / plan.compute_scale * 1e3 if plan.compute_scale else None),
        "groups": groups,
        "streams": {n: mean(it["streams"].get(n, 0.0) for it in iters) for n in plan.stream_names},
        "stages": stages,
        "pipeline": {"stages": plan.n_stages, "micro_batches": plan.micro_batches, "schedule": plan.pp_schedule,
                     "bubble_fraction_formula": bubble_fraction(plan.n_stages, plan.micro_batches)},
        "steps": steps,
    }
    return block
