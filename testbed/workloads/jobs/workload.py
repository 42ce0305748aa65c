"""Several jobs at once (the scenario's ``jobs`` list): each job is a workload of its kind on its own hosts and
streams (``Workload.job_*``: testbed.workloads.job_workload; a sweep job's collectives FIFO on its stream, a SimAI
job's whole-job replay on its streams, a pattern job's passes of flows to its ranks only), the jobs concurrently
on one agent group (testbed.workloads.jobs: plan, links, results; testbed.emulation.agents.AgentGroup.submit).
Nothing here asks which kind a job is."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional

import pandas as pd

from testbed.process import signals
from testbed.emulation.agents import AgentGroup
from testbed.workloads.jobs import links as job_links
from testbed.workloads.jobs.plan import PlacedJob, jobs_plan, stream_tos
from testbed.workloads.jobs.results import (FAIR_SHARE_MODEL, class_wire_bytes, format_jobs, job_entries, job_ops,
                                            jobs_table, tenant_entries, tenants_table)
from testbed.workloads.pattern.job import host_pair_bytes
from testbed.workloads.plan import PlannedOp, WorkloadPlan, plan_peers
from testbed.spec.jobs import jobs_channels
from testbed.spec import estimate
from testbed.workloads.collectives import Collectives

#: seconds between the main thread's checks for a signal or a failed job while the jobs run
POLL_S = 0.2


class Jobs(Collectives):
    """``jobs:``: one thread per job from its ``start_s`` on, each running its kind's ``Workload.run_job`` on its
    hosts and streams; the ops of different jobs run at once, on disjoint hosts and streams."""

    section = "jobs"
    reads_files = True  # a SimAI job's file: its world size against the job's ranks

    @classmethod
    def selects(cls, spec) -> bool:
        """A scenario with a ``jobs`` list (instead of ``workload``)."""
        return bool(spec.jobs)

    def __init__(self, spec):
        super().__init__(spec)
        #: the placed jobs (testbed.workloads.jobs.plan.PlacedJob), set by :meth:`plan`
        self.jobs: tuple[PlacedJob, ...] = ()
        #: summary.json's ``jobs`` block once the results are written
        self.block: Optional[dict] = None
        #: each job's Workload of its kind (testbed.workloads.job_workload), made with :attr:`jobs`
        self.kinds: tuple = ()

    def plan(self) -> WorkloadPlan:
        from testbed.workloads import job_workload

        plan, self.jobs = jobs_plan(self.spec)
        self.kinds = tuple(job_workload(self.spec, k) for k in range(len(self.jobs)))
        return plan

    def _placed(self) -> tuple[PlacedJob, ...]:
        if not self.jobs:
            self.plan()
        return self.jobs

    def estimate_s(self, ops: tuple[PlannedOp, ...]) -> float:
        """Set-up plus the longest job: its start_s plus its own estimate on an idle fabric (``Workload.job_s``:
        its ops, a SimAI job's compute waits and scale-up collectives, a pattern job's passes' ideal spans); the
        jobs run at once; sharing links makes them longer, which this does not model."""
        self._placed()
        longest = max((j.start_s + w.job_s(j, tuple(op for op in ops if op.job == j.name))
                       for j, w in zip(self.jobs, self.kinds)), default=0.0)
        return estimate.setup_s(self.spec.fabric) + longest

    def peers(self, ops: tuple[PlannedOp, ...]) -> dict[int, list[int]]:
        """The op plan's peers (testbed.workloads.plan.plan_peers) and each job's own (``Workload.job_peers``: a
        pattern job's flows' other ends)."""
        self._placed()
        out = {r: set(p) for r, p in plan_peers(ops).items()}
        for j, w in zip(self.jobs, self.kinds):
            for r, p in w.job_peers(j).items():
                out.setdefault(r, set()).update(p)
        return {r: sorted(p) for r, p in out.items()}

    def streams(self, ops: tuple[PlannedOp, ...]) -> int:
        """Every job's streams (testbed.workloads.jobs.plan: numbered job by job): one for a sweep or pattern job, one
        per communicator for a SimAI job."""
        return max((j.stream + j.n_streams for j in self._placed()), default=1)

    def scaling_keys(self) -> str:
        return ("jobs[].workload.sizes.max_bytes, jobs[].workload.iterations, jobs[].workload.simai.size_scale, "
                "jobs[].workload.simai.iterations, jobs[].workload.pattern.size_bytes, jobs[].iterations, "
                "jobs[].duration_s, jobs[].start_s (or fabric.host_link_bps)")

    def fan_in(self, ops: tuple[PlannedOp, ...]) -> int:
        """The collectives' fan-in and each job's own (``Workload.job_fan_in``: a pattern job's QPs into one
        receiver); 2 when per-flow hashing can put two jobs' flows on one uplink."""
        self._placed()
        fan = max([estimate.collective_fan_in(self.spec, ops)] + [w.job_fan_in(j) for j, w in zip(self.jobs,
                                                                                                  self.kinds)])
        hashed = self.spec.transport.entropy != "spray" and len(self.spec.jobs) > 1
        return max(fan, 2 if hashed else 1)

    @contextmanager
    def session(self, ctx, fab) -> Iterator[AgentGroup]:
        """One agent per host, QPs to its peers (:meth:`peers`) on every job's stream, each stream's data packets
        with its job's DSCP (testbed.workloads.jobs.plan.stream_tos); what each job needs on ``fab``
        (``Workload.job_session``: a pattern job's flows)."""
        peers = self.peers(ctx.ops_plan)
        streams = self.streams(ctx.ops_plan)
        for k, (j, w) in enumerate(zip(self.jobs, self.kinds)):
            w.job_session(ctx, fab, k, j)
        with AgentGroup(fab, ctx.transport, ctx.spec.seed, lambda r: peers.get(r, []),
                        jobs_channels(ctx.spec.jobs), streams, stream_tos(self.jobs, streams)) as agents:
            yield agents

    def run_ops(self, ctx, agents: AgentGroup, rec, progress) -> None:
        """Every job in its own thread from its start_s on (time 0: now), running its kind's ``Workload.run_job``
        on its ops (its passes; a job with duration_s starts no pass, SimAI: iteration, once that many seconds
        passed since its start). Signals are held back once every job is done. Raises the first job's error
        (the others stop submitting; a SimAI job at its next iteration)."""
        ops = list(ctx.ops_plan)
        lock, stop = threading.Lock(), threading.Event()
        errors: list[BaseException] = []
        done = [0]
        t0 = time.monotonic()

        def record(k: int, op: PlannedOp, recs, last: bool) -> None:
            with lock:
                rec.rank_rows.extend(recs)
                rec.op_meta[k] = {**op.meta(), "job": op.job}
                done[0] += 1
                t_us = (max(r.t_end_ns for r in recs) - min(r.t_start_ns for r in recs)) / 1e3
                progress.op(done[0], op.size_bytes, op.size_bytes * 8 / (t_us / 1e6) * op.busbw_factor, last)

        def run_job(job: PlacedJob, kind) -> None:
            if stop.wait(max(0.0, t0 + job.start_s - time.monotonic())):
                return
            try:
                kind.run_job(ctx, agents, rec, progress, job, [(k, op) for k, op in enumerate(ops)
                                                               if op.job == job.name], record, lock, stop)
            except BaseException as e:  # noqa: BLE001  handed to the main thread
                with lock:
                    errors.append(e)
                stop.set()

        threads = [threading.Thread(target=run_job, args=(j, w), name=f"job-{j.name}", daemon=True)
                   for j, w in zip(self._placed(), self.kinds)]
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
        ``jobs`` block (testbed.workloads.jobs.results; a SimAI job's entry holds its ``replay`` block)."""
        from testbed.results.rundir import RunDir

        jobs = self._placed()
        layout = ctx.spec.fabric.layout_preview()  # node names without the run id (s1, l1): comparable across runs
        host_of = {h.rank: h.name for h in layout.hosts}
        loads = job_links.job_loads(layout, jobs, ctx.ops_plan,
                                    {j.name: host_pair_bytes(list(j.flows), host_of) for j in jobs if j.flows})
        caps = job_links.capacities(layout)
        fair = job_links.fair_rates(loads, caps)
        fair_solo = {j: job_links.fair_rates({j: ls}, caps)[j] for j, ls in loads.items()}
        shared = job_links.shared_links(loads)
        ops = job_ops(rec.rank_rows, rec.op_meta, ctx.n_ranks)
        extra: dict[str, dict] = {"replays": {}, "patterns": {}}
        tables: dict[str, list] = {}
        for j, w in zip(jobs, self.kinds):  # what each job's kind adds: its entry's blocks, its rows of tables
            for key, blocks in w.job_results(j).items():
                extra.setdefault(key, {}).update(blocks)
            for name, frame in w.job_tables(j, qps).items():
                tables.setdefault(name, []).append(frame)
        entries = job_entries(ops, jobs, ctx.goodput_bps, fair, fair_solo, ctx.spec.fabric.host_link_bps, loads, shared,
                              **extra)
        for e in entries:  # bytes its QPs sent per traffic class (tenants.csv)
            e["tx_wire_bytes_by_class"] = class_wire_bytes(qps, e["ranks"])
        tenants = tenant_entries(entries)
        run = RunDir(ctx.run_dir)
        run.write_table("jobs", jobs_table(ops, entries, ctx.goodput_bps))
        for name, frames in tables.items():
            run.write_table(name, pd.concat(frames, ignore_index=True))
        run.write_table("tenants", tenants_table(tenants))
        self.block = {"jobs": entries, "tenants": tenants,
                      "shared_links": {job_links.link_name(k): v for k, v in shared.items()},
                      "fair_share_model": FAIR_SHARE_MODEL}
        summary["jobs"] = self.block

    def lines_after(self, ctx, summary: dict) -> list[str]:
        """The jobs table, then what each job's kind prints for it (``Workload.job_lines``: a SimAI job's replay
        table)."""
        if not summary.get("jobs"):
            return []
        entries = {e["name"]: e for e in summary["jobs"]["jobs"]}
        return [format_jobs(summary["jobs"])] + [line for k, (j, w) in enumerate(zip(self.jobs, self.kinds))
                                                 for line in w.job_lines(ctx, k, entries[j.name])]
