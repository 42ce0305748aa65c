"""Several jobs at once (the scenario's ``jobs`` list): a sweep job's collectives FIFO on its own stream, a SimAI
job's whole-job replay on its own streams (testbed.workloads.replay.run), a pattern job's passes of flows on its own stream
to its ranks only (testbed.workloads.pattern.job, AgentGroup.submit_flows), the jobs concurrently on one agent group
(testbed.workloads.jobs: placement, plan, simai, pattern, links, results; testbed.emulation.agents.AgentGroup.submit)."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional

from testbed.process import signals
from testbed.emulation.agents import AgentGroup, taking_part
from testbed.workloads.jobs import links as job_links
from testbed.workloads.jobs.plan import PlacedJob, jobs_plan, pass_estimate_s, stream_tos
from testbed.workloads.pattern.job import fct_rows, figures as pattern_figures, flows_ranks, host_pair_bytes
from testbed.workloads.pattern.job import pass_s as pattern_pass_s
from testbed.workloads.jobs.results import (FAIR_SHARE_MODEL, class_wire_bytes, format_jobs, job_entries, job_ops, jobs_table,
                                  replay_lines, tenant_entries, tenants_table)
from testbed.workloads.pattern.driver import PASS_AHEAD_S, PatternRun
from testbed.workloads.pattern.plan import flows_fan_in, pattern_peers
from testbed.workloads.plan import PlannedOp, WorkloadPlan, plan_peers
from testbed.workloads.replay.run import run_replay
from testbed.spec.jobs import MAX_PASSES, jobs_channels
from testbed.spec import estimate
from testbed.workloads.collectives import Collectives

#: seconds between the main thread's checks for a signal or a failed job while the jobs run
POLL_S = 0.2


class Jobs(Collectives):
    """``jobs:``: one thread per job from its ``start_s`` on: a sweep job submits its ops in order on its
    stream, a SimAI job runs its replay's timeline on its streams, a pattern job sends its passes on its
    stream; the ops of different jobs run at once, on disjoint hosts and streams."""

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
        #: SimAI job name -> its ``replay`` block (testbed.workloads.replay.run.run_replay) once it ran
        self.replays: dict[str, dict] = {}
        #: each pattern job's flows and passes (testbed.workloads.pattern.driver.PatternRun), made by :meth:`session`
        self.patterns: dict = {}

    def plan(self) -> WorkloadPlan:
        plan, self.jobs = jobs_plan(self.spec)
        return plan

    def _placed(self) -> tuple[PlacedJob, ...]:
        if not self.jobs:
            self.plan()
        return self.jobs

    def estimate_s(self, ops: tuple[PlannedOp, ...]) -> float:
        """Set-up plus the longest job: its start_s plus its ops' estimate on an idle fabric, plus a SimAI job's
        compute waits and scale-up collectives (a pattern job: its passes' ideal spans,
        testbed.workloads.pattern.job.pass_s); the jobs run at once; sharing links makes them longer, which this does
        not model."""
        def job_s(j: PlacedJob) -> float:
            if j.flows:
                return j.passes * pattern_pass_s(self.spec, list(j.flows))
            return (pass_estimate_s(self.spec, [op for op in ops if op.job == j.name])
                    + (j.replay.timeline_extra_s if j.replay is not None else 0.0))
        longest = max((j.start_s + job_s(j) for j in self._placed()), default=0.0)
        return estimate.setup_s(self.spec.fabric) + longest

    def peers(self, ops: tuple[PlannedOp, ...]) -> dict[int, list[int]]:
        """The op plan's peers (testbed.workloads.plan.plan_peers) and each pattern job's flows' other ends."""
        out = {r: set(p) for r, p in plan_peers(ops).items()}
        for j in self._placed():
            for r, p in pattern_peers(list(j.flows)).items():
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
        """The collectives' fan-in and each pattern job's (its QPs into one receiver,
        testbed.workloads.pattern.plan.flows_fan_in); 2 when per-flow hashing can put two jobs' flows on one uplink."""
        fan = max([estimate.collective_fan_in(self.spec, ops)] + [flows_fan_in(list(j.flows))
                                                                  for j in self._placed() if j.flows])
        hashed = self.spec.transport.entropy != "spray" and len(self.spec.jobs) > 1
        return max(fan, 2 if hashed else 1)

    @contextmanager
    def session(self, ctx, fab) -> Iterator[AgentGroup]:
        """One agent per host, QPs to its peers (:meth:`peers`) on every job's stream, each stream's data packets
        with its job's DSCP (testbed.workloads.jobs.plan.stream_tos); each pattern job's flows on ``fab``
        (testbed.workloads.pattern.driver.PatternRun, in :attr:`patterns`)."""
        peers = self.peers(ctx.ops_plan)
        streams = self.streams(ctx.ops_plan)
        self.patterns = {j.name: PatternRun(ctx, fab, js.workload.pattern, list(j.flows))
                         for j, js in zip(self._placed(), ctx.spec.jobs) if j.flows}
        with AgentGroup(fab, ctx.transport, ctx.spec.seed, lambda r: peers.get(r, []),
                        jobs_channels(ctx.spec.jobs), streams, stream_tos(self._placed(), streams)) as agents:
            yield agents

    def run_ops(self, ctx, agents: AgentGroup, rec, progress) -> None:
        """Every job in its own thread from its start_s on (time 0: now); a sweep job's op submitted when its
        previous one finished, a SimAI job's replay (testbed.workloads.replay.run.run_replay on its ops), a pattern job's
        passes (each a RunFlows with op id len(ops) + stream x MAX_PASSES + pass, sent when the previous pass is
        in); a job with duration_s starts no pass (SimAI: iteration) once that many seconds passed since its
        start. Signals are held back once every job is done. Raises the first job's error (the others stop
        submitting; a SimAI job at its next iteration)."""
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

        def run_simai(job: PlacedJob, started: float) -> None:
            def keep_going() -> bool:
                return not stop.is_set() and (job.duration_s is None or time.monotonic() - started < job.duration_s)

            self.replays[job.name] = run_replay(
                ctx, agents, rec, progress, job.replay, op_base=job.first_op,
                record=lambda k, op, recs: record(k, op, recs, False), keep_going=keep_going)

        def run_pattern(job: PlacedJob) -> None:  # each pass one RunFlows to the job's ranks, on its stream
            run = self.patterns[job.name]
            started = time.monotonic()
            for p in range(job.passes):
                if stop.is_set() or (job.duration_s is not None and p and
                                     time.monotonic() - started >= job.duration_s):
                    return
                cmd = run.command(p, stream=job.stream, op_id=len(ops) + job.stream * MAX_PASSES + p,
                                  ahead_s=PASS_AHEAD_S)
                fut = agents.submit_flows(cmd, flows_ranks(list(job.flows)))
                records = agents.wait(fut, cmd.op_id, run.timeout_s + PASS_AHEAD_S + 10)
                with lock:
                    line = run.record(cmd, ctx.spec.seed, records)
                progress.say(f"job {job.name} pass {p + 1}/{job.passes}: {line}")

        def run_job(job: PlacedJob) -> None:
            mine = [(k, op) for k, op in enumerate(ops) if op.job == job.name]
            if stop.wait(max(0.0, t0 + job.start_s - time.monotonic())):
                return
            if job.flows:
                try:
                    run_pattern(job)
                except BaseException as e:  # noqa: BLE001  handed to the main thread
                    with lock:
                        errors.append(e)
                    stop.set()
                return
            started = time.monotonic()
            if job.replay is not None:
                try:
                    run_simai(job, started)
                except BaseException as e:  # noqa: BLE001  handed to the main thread
                    with lock:
                        errors.append(e)
                    stop.set()
                return
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
                record(k, op, recs, n + 1 == len(mine) or mine[n + 1][1].size_bytes != op.size_bytes)

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
        patterns = {name: pattern_figures(r) for name, r in self.patterns.items()}
        entries = job_entries(ops, jobs, ctx.goodput_bps, fair, fair_solo, ctx.spec.fabric.host_link_bps, loads, shared,
                              replays=self.replays, patterns=patterns)
        for e in entries:  # bytes its QPs sent per traffic class (tenants.csv)
            e["tx_wire_bytes_by_class"] = class_wire_bytes(qps, e["ranks"])
        tenants = tenant_entries(entries)
        run = RunDir(ctx.run_dir)
        run.write_table("jobs", jobs_table(ops, entries, ctx.goodput_bps))
        if self.patterns:
            run.write_table("fct", fct_rows(self.patterns, qps))
        run.write_table("tenants", tenants_table(tenants))
        self.block = {"jobs": entries, "tenants": tenants,
                      "shared_links": {job_links.link_name(k): v for k, v in shared.items()},
                      "fair_share_model": FAIR_SHARE_MODEL}
        summary["jobs"] = self.block

    def lines_after(self, ctx, summary: dict) -> list[str]:
        """The jobs table, then each SimAI job's replay table (testbed.workloads.jobs.results.replay_lines)."""
        if not summary.get("jobs"):
            return []
        return [format_jobs(summary["jobs"])] + replay_lines(ctx.spec, summary["jobs"])


def pass_starts(ops: list[PlannedOp], passes: int) -> set[int]:
    """Indices in one job's ops (testbed.workloads.jobs.plan order: warm-ups in pass 0 only) where passes 1.. start."""
    timed = sum(1 for op in ops if not op.warmup) // max(passes, 1)
    first = len(ops) - timed * (passes - 1)
    return {first + p * timed for p in range(passes - 1)}
