"""Run a SimAI/AICB replay's timeline: compute waits, collectives on their streams, overlap.

Model (one training job, every GPU doing the same work, so one timeline
stands for all of them; SimAI's order, traffic.workloads.simai):

- a compute stream: for each step (testbed.simai_plan.ReplayStep) it waits
  the step's compute time (``time.sleep``, already scaled by the plan's
  compute scale), then issues the step's collective;
- two communication streams, each first in first out: the fabric stream runs
  fabric collectives one after another on the agents (real packets; its own
  thread), the scale-up stream runs scale-up collectives as timed waits (a
  server's NVLink-like domain, testbed.simai_plan). The streams run
  concurrently, as NCCL runs each communicator on its own CUDA stream;
- ``overlap: off``: the compute stream waits for every collective it issues
  before its next compute (nothing overlaps);
- ``overlap: compare``: iterations alternate off, on, on, off, ... and the
  results hold both;
- ``overlap: on``: it waits only for blocking collectives (SimAI: forward and
  input-gradient collectives block; weight-gradient collectives do not, they
  run while the input-gradient and weight-gradient compute of the layers below
  goes on). A blocking collective on the fabric stream also waits for the
  weight-gradient collectives queued before it (first in, first out);
- the weight-update time of a row follows its collective on the compute
  stream (after the wait for a blocking one, at issue for the others);
- an iteration ends when the compute is done and both streams are empty
  (the optimizer step needs every gradient).

Figures per iteration: iteration time (first compute to last collective end),
exposed communication = time the compute stream waited for a stream (what a
GPU would idle on the network), exposed share = exposed / iteration time; per
step, the collective's communication time: for a fabric collective the span
of its rank records (first rank's start to last rank's end), for a scale-up
one its modelled wait.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, wait as wait_futures
from statistics import mean

from testbed import signals


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


class _Replay:
    """One run's timeline over the agents; ``ctx``/``agents``/``rec``/``progress`` as in testbed.runner."""

    def __init__(self, ctx, agents, rec, progress, plan):
        self.ctx, self.agents, self.rec, self.progress, self.plan = ctx, agents, rec, progress, plan
        self.fabric = ThreadPoolExecutor(1, thread_name_prefix="fabric-stream")
        self.scale_up = ThreadPoolExecutor(1, thread_name_prefix="scale-up-stream")

    def _fabric_op(self, k: int) -> float:
        """Run fabric op ``k`` of the op plan on every agent; its span in seconds (rank records)."""
        op, n_ops = self.ctx.ops_plan[k], len(self.ctx.ops_plan)
        expect_s = op.busbw_factor * op.size_bytes * 8 / self.ctx.goodput_bps
        recs = self.agents.run_op(k, op.size_bytes, op.groups, timeout_s=10 * expect_s + 20,
                                  collective=op.collective, algorithm=op.algorithm)
        self.rec.rank_rows.extend(recs)
        self.rec.op_meta[k] = op.meta()
        span_s = (max(r.t_end_ns for r in recs) - min(r.t_start_ns for r in recs)) / 1e9
        self.progress.op(k + 1, op.size_bytes, op.size_bytes * 8 / max(span_s, 1e-9) * op.busbw_factor,
                         k + 1 == n_ops)
        return span_s

    def _scale_up_op(self, seconds: float) -> float:
        _sleep(seconds)
        return seconds

    def _issue(self, it: int, step):
        if step.where == "fabric":
            k = it * self.plan.fabric_ops_per_iteration + step.op_offset
            return self.fabric.submit(self._fabric_op, k)
        return self.scale_up.submit(self._scale_up_op, step.scale_up_s)

    def iteration(self, it: int, mode: str) -> dict:
        """Run iteration ``it`` (0-based, in run order) with overlap ``mode`` (on/off); its figures (module
        docstring) and each step's communication time."""
        overlap = mode == "on"
        t0 = time.monotonic()
        exposed = {}
        issued = []
        for i, step in enumerate(self.plan.steps):
            _sleep(step.compute_s)
            if step.where == "none":
                continue
            fut = self._issue(it, step)
            issued.append((i, fut))
            if step.blocking or not overlap:
                t_wait = time.monotonic()
                fut.result()
                exposed[i] = time.monotonic() - t_wait
            _sleep(step.update_s)
        t_wait = time.monotonic()
        wait_futures([f for _, f in issued])
        drain_s = time.monotonic() - t_wait
        comm = {i: f.result() for i, f in issued}
        iteration_s = time.monotonic() - t0
        return {"iteration_s": iteration_s, "exposed_comm_s": sum(exposed.values()) + drain_s, "comm_s": comm,
                "exposed_s": exposed, "drain_s": drain_s}

    def close(self) -> None:
        for ex in (self.fabric, self.scale_up):
            ex.shutdown(wait=False, cancel_futures=True)


def run_replay(ctx, agents, rec, progress, plan) -> dict:
    """Run ``plan`` (testbed.simai_plan.ReplayPlan) ``plan.iterations`` times; return summary.json's ``replay``.

    The fabric ops are ``ctx.ops_plan`` (the plan's PlannedOps in order). Signals
    are held back once the last collective is done (as testbed.runner does).
    Raises what the agents raise (a collective's timeout or error).
    """
    r = _Replay(ctx, agents, rec, progress, plan)
    modes = plan.modes
    try:
        iters = []
        for it, mode in enumerate(modes):
            iters.append(r.iteration(it, mode))
            if it + 1 == len(modes):
                signals.defer()
                rec.phase = "the final measurements"
    finally:
        r.close()
    if plan.overlap != "compare":
        return replay_block(plan, iters, plan.overlap)
    return {"file": plan.path, "overlap": "compare", "order": list(modes),
            **{m: replay_block(plan, [i for i, mm in zip(iters, modes) if mm == m], m) for m in ("off", "on")}}


def replay_block(plan, iters: list, mode: str) -> dict:
    """summary.json's ``replay`` (with ``overlap: compare``: its ``off`` and ``on`` blocks): the model's
    settings, per-iteration figures, per-step communication times of the iterations run with overlap ``mode``.

    ``iters``: per iteration ``{"iteration_s", "exposed_comm_s", "drain_s", "comm_s": {step index: seconds},
    "exposed_s": {step index: seconds the compute stream waited right after issuing it}}``. Means are over
    iterations.
    """
    steps = []
    for i, s in enumerate(plan.steps):
        if s.where == "none":
            continue
        comm = [it["comm_s"][i] for it in iters]
        steps.append({"line": s.line, "layer": s.layer, "phase": s.phase, "collective": s.token,
                      "algorithm": s.algorithm, "group": s.group, "where": s.where, "group_size": s.group_size,
                      "size_bytes": s.size_bytes, "blocking": s.blocking, "compute_before_s": s.compute_s,
                      "comm_s": mean(comm), "exposed_s": mean(it["exposed_s"].get(i, 0.0) for it in iters)})
    iteration_s = [it["iteration_s"] for it in iters]
    exposed_s = [it["exposed_comm_s"] for it in iters]
    shares = [e / t for e, t in zip(exposed_s, iteration_s)]
    comm_total = [sum(it["comm_s"].values()) for it in iters]
    return {
        "file": plan.path, "overlap": mode, "iterations": len(iters),
        "compute_scale": plan.compute_scale, "gpus_per_host": plan.gpus_per_host,
        "compute_s_per_iteration": plan.compute_s_per_iteration,
        "iteration_s": mean(iteration_s), "iterations_s": iteration_s,
        "comm_s_per_iteration": mean(comm_total),
        "exposed_comm_s": mean(exposed_s), "drain_s": mean(it["drain_s"] for it in iters),
        "exposed_share": mean(shares), "exposed_shares": shares,
        "equivalent_iteration_ms": (mean(iteration_s) / plan.compute_scale * 1e3 if plan.compute_scale else None),
        "steps": steps,
    }
