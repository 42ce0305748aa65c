"""Several jobs at once (the scenario's ``jobs`` list): each job's collectives FIFO on its own stream, the jobs
concurrently on one agent group (testbed.jobs: placement, plan, links, results; testbed.emulation.agents
.AgentGroup.submit)."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional

from testbed import signals
from testbed.emulation.agents import AgentGroup, taking_part
from testbed.jobs import links as job_links
from testbed.jobs.plan import PlacedJob, jobs_plan, pass_estimate_s, stream_tos
from testbed.jobs.results import (FAIR_SHARE_MODEL, class_wire_bytes, format_jobs, job_entries, job_ops, jobs_table, tenant_entries,
                                  tenants_table)
from testbed.plan import PlannedOp, WorkloadPlan, plan_peers, plan_streams
from testbed.spec import estimate
from testbed.workloads.collectives import Collectives

#: seconds between the main thread's checks for a signal or a failed job while the jobs run
POLL_S = 0.2


class Jobs(Collectives):
    """``jobs:``: one thread per job submits its ops in order (stream = the job's index) from its ``start_s``
    on; the ops of different jobs run at once, on disjoint hosts."""

    section = "jobs"

    def __init__(self, spec):
        super().__init__(spec)
        #: the placed jobs (testbed.jobs.plan.PlacedJob), set by :meth:`plan`
        self.jobs: tuple[PlacedJob, ...] = ()
        #: summary.json's ``jobs`` block once the results are written
        self.block: Optional[dict] = None

    def plan(self) -> WorkloadPlan:
        plan, self.jobs = jobs_plan(self.spec)
        return plan

    def _placed(self) -> tuple[PlacedJob, ...]:
        if not self.jobs:
            self.plan()
        return self.jobs

    def estimate_s(self, ops: tuple[PlannedOp, ...]) -> float:
        """Set-up plus the longest job: its start_s plus its ops' estimate on an idle fabric (the jobs run
        at once; sharing links makes them longer, which this does not model)."""
        longest = max((j.start_s + pass_estimate_s(self.spec, [op for op in ops if op.job == j.name])
                       for j in self._placed()), default=0.0)
        return estimate.setup_s(self.spec.fabric) + longest

    def scaling_keys(self) -> str:
        return ("jobs[].workload.sizes.max_bytes, jobs[].workload.iterations, jobs[].iterations, jobs[].duration_s, "
                "jobs[].start_s (or fabric.host_link_bps)")

    def fan_in(self, ops: tuple[PlannedOp, ...]) -> int:
        """The collectives' fan-in; 2 when per-flow hashing can put two jobs' flows on one uplink."""
        fan = estimate.collective_fan_in(self.spec, ops)
        hashed = self.spec.transport.entropy != "spray" and len(self.spec.jobs) > 1
        return max(fan, 2 if hashed else 1)

    @contextmanager
    def session(self, ctx, fab) -> Iterator[AgentGroup]:
        """One agent per host, QPs to its op-plan peers on every job's stream, each stream's data packets with
        its job's DSCP (testbed.jobs.plan.stream_tos)."""
        peers = plan_peers(ctx.ops_plan)
        streams = plan_streams(ctx.ops_plan)
        with AgentGroup(fab, ctx.transport, ctx.spec.seed, lambda r: peers.get(r, []),
                        ctx.spec.jobs[0].workload.channels, streams,
                        stream_tos(self._placed(), streams)) as agents:
            yield agents

    def run_ops(self, ctx, agents: AgentGroup, rec, progress) -> None:
        """Every job in its own thread from its start_s on (time 0: now); each op submitted when the job's
        previous one finished; a job with duration_s starts no pass once that many seconds passed since its
        start. Signals are held back once every job is done. Raises the first job's error (the others stop
        submitting)."""
        ops = list(ctx.ops_plan)
        lock, stop = threading.Lock(), threading.Event()
        errors: list[BaseException] = []
        done = [0]
        t0 = time.monotonic()

        def run_job(job: PlacedJob) -> None:
            mine = [(k, op) for k, op in enumerate(ops) if op.job == job.name]
            if stop.wait(max(0.0, t0 + job.start_s - time.monotonic())):
                return
            started = time.monotonic()
            starts = pass_starts([op for _, op in mine], job.passes)
            for n, (k, op) in enumerate(mine):
                if stop.is_set():
                    return
                if job.duration_s is not None and n in starts and time.monotonic() - started >= job.duration_s:
                    return
                expect_s = op.busbw_factor * op.size_bytes * 8 / ctx.goodput_bps
                timeout_s = 10 * expect_s + 20
                try:
                    fut = agents.submit(k, op.size_bytes, op.groups, timeout_s=timeout_s, collective=op.collective,
                                        algorithm=op.algorithm, stream=op.stream)
                    recs = taking_part(agents.wait(fut, k, timeout_s + 10), op.groups)
                except BaseException as e:  # noqa: BLE001  handed to the main thread
                    with lock:
                        errors.append(e)
                    stop.set()
                    return
                with lock:
                    rec.rank_rows.extend(recs)
                    rec.op_meta[k] = {**op.meta(), "job": job.name}
                    done[0] += 1
                    t_us = (max(r.t_end_ns for r in recs) - min(r.t_start_ns for r in recs)) / 1e3
                    last = n + 1 == len(mine) or mine[n + 1][1].size_bytes != op.size_bytes
                    progress.op(done[0], op.size_bytes, op.size_bytes * 8 / (t_us / 1e6) * op.busbw_factor, last)

        threads = [threading.Thread(target=run_job, args=(j,), name=f"job-{j.name}", daemon=True)
                   for j in self._placed()]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(POLL_S)
        except BaseException:
            stop.set()
            raise
        signals.defer()
        rec.phase = "the final measurements"
        if errors:
            raise errors[0]

    def add_results(self, ctx, rec, summary: dict, qps, ports, faults) -> None:
        """jobs.csv, tenants.csv (with each tenant's bytes per traffic class from ``qps``) and summary.json's
        ``jobs`` block (testbed.jobs.results)."""
        from testbed.results.rundir import RunDir

        jobs = self._placed()
        layout = ctx.spec.fabric.layout_preview()  # node names without the run id (s1, l1): comparable across runs
        loads = job_links.job_loads(layout, jobs, ctx.ops_plan)
        caps = job_links.capacities(layout)
        fair = job_links.fair_rates(loads, caps)
        fair_solo = {j: job_links.fair_rates({j: ls}, caps)[j] for j, ls in loads.items()}
        shared = job_links.shared_links(loads)
        ops = job_ops(rec.rank_rows, rec.op_meta, ctx.n_ranks)
        entries = job_entries(ops, jobs, ctx.goodput_bps, fair, fair_solo, ctx.spec.fabric.host_link_bps, loads, shared)
        for e in entries:  # bytes its QPs sent per traffic class (tenants.csv)
            e["tx_wire_bytes_by_class"] = class_wire_bytes(qps, e["ranks"])
        tenants = tenant_entries(entries)
        run = RunDir(ctx.run_dir)
        run.write_table("jobs", jobs_table(ops, entries, ctx.goodput_bps))
        run.write_table("tenants", tenants_table(tenants))
        self.block = {"jobs": entries, "tenants": tenants,
                      "shared_links": {job_links.link_name(k): v for k, v in shared.items()},
                      "fair_share_model": FAIR_SHARE_MODEL}
        summary["jobs"] = self.block

    def lines_after(self, ctx, summary: dict) -> list[str]:
        return [format_jobs(summary["jobs"])] if summary.get("jobs") else []


def pass_starts(ops: list[PlannedOp], passes: int) -> set[int]:
    """Indices in one job's ops (testbed.jobs.plan order: warm-ups in pass 0 only) where passes 1.. start."""
    timed = sum(1 for op in ops if not op.warmup) // max(passes, 1)
    first = len(ops) - timed * (passes - 1)
    return {first + p * timed for p in range(passes - 1)}
