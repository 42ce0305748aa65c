"""A traffic pattern as a job's workload (``jobs[].workload.pattern``): its flows on the job's hosts, its
passes on the run's agents, its figures.

- Hosts: the pattern sees only the job's placed hosts, pattern rank i = the job's i-th host (a host named
  in the pattern, ``h3``, must be one of them); its flows are then mapped to the run's ranks.
- Run: each pass is one traffic.protocol.RunFlows sent to the job's ranks only, on the job's stream
  (its own queue pairs: testbed.emulation.agents.AgentGroup.submit_flows), from the job's start_s on, one
  pass after the other (``iterations``, or ``duration_s``), each starting PASS_AHEAD_S after it is sent. The agents stay up for the whole run (the
  other jobs use them), so every pass keeps the same QPs and UDP source ports: the pattern's ``trials``
  (fresh agents, a new entropy seed each) do not apply in a job.
- Figures (testbed.workloads.pattern.results): fct.csv rows of every pass with the job's name, the job's JCT (its
  first pass's start to its last pass's last ACK) and its flows' FCT and slowdown (ideal: the job's flows
  alone on a perfectly balanced fabric, testbed.workloads.pattern.ideal).
"""
from __future__ import annotations

import pandas as pd

from testbed.workloads.pattern.ideal import ideal_fct_s
from testbed.spec.hosts import short
from testbed.workloads.pattern.results import completion_ratios, fct_figures, fct_table, lost_pkts, trial_end_ns
from traffic.patterns import Flow
from traffic.transport import payload_efficiency

def pass_s(spec, flows: list[Flow]) -> float:
    """Seconds one pass of ``flows`` takes on an idle, perfectly balanced fabric (testbed.workloads.pattern.ideal) plus
    the lead of its command (testbed.workloads.pattern.driver.PASS_AHEAD_S)."""
    from testbed.workloads.pattern.driver import PASS_AHEAD_S  # the driver starts agents: not at import

    layout = spec.fabric.layout_preview()
    fct = ideal_fct_s(flows, layout, payload_efficiency(spec.transport.payload_bytes))
    return max(f.start_s + fct[f.flow] for f in flows) + PASS_AHEAD_S


def host_pair_bytes(flows: list[Flow], host_of: dict[int, str]) -> dict[tuple[str, str], int]:
    """(sender host, receiver host) -> bytes of one pass (testbed.workloads.jobs.links' flows of a job)."""
    out: dict[tuple[str, str], int] = {}
    for f in flows:
        key = (host_of[f.src], host_of[f.dst])
        out[key] = out.get(key, 0) + f.size_bytes
    return out


def flows_ranks(flows: list[Flow]) -> list[int]:
    """Every rank a flow of ``flows`` names (the agents a pass is sent to)."""
    return sorted({r for f in flows for r in (f.src, f.dst)})


def figures(run) -> dict:
    """A pattern job's figures over the finished passes of ``run`` (testbed.workloads.pattern.driver.PatternRun):
    ``t_start_ns`` (first pass's start), ``t_end_ns`` (last ACK), ``jct_s``, ``passes``, and its ``pattern``
    block: kind, flows, QPs and bytes per pass, ideal span, mean pass time (its start to its last ACK, us),
    completion ratio (ideal span / pass time, mean), FCT and slowdown (testbed.workloads.pattern.results.fct_figures).
    Without a finished pass the times are None."""
    fct = fct_table(run, [short(run.fab.layout, h.name) for h in run.fab.layout.hosts])
    ratios = completion_ratios(run)
    spans_us = [(trial_end_ns(tr) - tr.start_at_ns) / 1e3 for tr in run.trials]
    t0 = min((tr.start_at_ns for tr in run.trials), default=None)
    t1 = max((trial_end_ns(tr) for tr in run.trials), default=None)
    return {"t_start_ns": t0, "t_end_ns": t1, "jct_s": (t1 - t0) / 1e9 if run.trials else None,
            "passes": len(run.trials),
            "pattern": {"kind": run.pattern.kind, "flows_per_pass": len(run.flows),
                        "qps_per_pass": sum(f.qps for f in run.flows),
                        "bytes_per_pass": sum(f.size_bytes for f in run.flows), "ideal_span_s": run.ideal_span_s,
                        "pass_time_us_mean": sum(spans_us) / len(spans_us) if spans_us else None,
                        "completion_ratio_mean": sum(ratios) / len(ratios) if ratios else None,
                        **fct_figures(fct)}}


def fct_rows(runs: dict, qps: pd.DataFrame | None) -> pd.DataFrame:
    """fct.csv of a jobs run (``runs``: job -> its PatternRun): every pattern job's flows of every pass (``trial`` = pass), its name in ``job``
    (first column). ``lost_pkts`` only for a job of one pass (qps.csv counts a QP's packets over the run)."""
    frames = []
    for name, run in runs.items():
        layout = run.fab.layout
        lost = lost_pkts(qps.assign(trial=0)) if qps is not None and len(qps) and len(run.trials) == 1 else None
        frame = fct_table(run, [short(layout, h.name) for h in layout.hosts], lost)
        frames.append(frame.assign(lost_pkts=frame["lost_pkts"].astype(float)).assign(job=name))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return out[["job"] + [c for c in out.columns if c != "job"]] if len(frames) else out


def placed(spec, index: int, job):
    """``job`` (testbed.workloads.jobs.plan.PlacedJob) with its flows on its hosts (testbed.spec.jobs.job_flows)
    and its passes (the job's, or enough passes of :func:`pass_s` to fill duration_s)."""
    from dataclasses import replace

    from testbed.spec.jobs import job_flows

    flows = tuple(job_flows(spec, index, job.hosts, spec.fabric.layout_preview()))
    return replace(job, flows=flows, passes=spec.jobs[index].passes(pass_s(spec, list(flows))), workload="pattern")


def plan(spec, index: int, job, first_stream: int, first_op: int):
    """(the job on stream ``first_stream``, no op (its flows run as passes), its note)."""
    from dataclasses import replace

    job = replace(job, stream=first_stream, first_op=first_op)
    p = spec.jobs[index].workload.pattern
    return job, [], [f"job {job.name} (tenant {job.tenant}): pattern {p.kind}, {len(job.flows)} flows of "
                     f"{sum(f.size_bytes for f in job.flows)} B in all on {', '.join(job.hosts)} ({job.placement}), "
                     f"starts at {job.start_s:g} s, {job.passes} pass(es) on stream {job.stream}"
                     + (f", stops starting passes after {job.duration_s:g} s" if job.duration_s else "")]


def run(ctx, agents, progress, job, trials, lock, stop, now) -> None:
    """The job's passes: each one traffic.protocol.RunFlows to the job's ranks on its stream (op id
    len(ops) + stream x MAX_PASSES + pass), sent when the previous pass is in; ``trials``: its
    testbed.workloads.pattern.driver.PatternRun (records each pass under ``lock``). Stops when ``stop`` is set
    or, with duration_s, at a pass once that many seconds passed since its first (``now()``: monotonic s)."""
    from testbed.spec.jobs import MAX_PASSES
    from testbed.workloads.pattern.driver import PASS_AHEAD_S

    started = now()
    for p in range(job.passes):
        if stop.is_set() or (job.duration_s is not None and p and now() - started >= job.duration_s):
            return
        cmd = trials.command(p, stream=job.stream, op_id=len(ctx.ops_plan) + job.stream * MAX_PASSES + p,
                             ahead_s=PASS_AHEAD_S)
        fut = agents.submit_flows(cmd, flows_ranks(list(job.flows)))
        records = agents.wait(fut, cmd.op_id, trials.timeout_s + PASS_AHEAD_S + 10)
        with lock:
            line = trials.record(cmd, ctx.spec.seed, records)
        progress.say(f"job {job.name} pass {p + 1}/{job.passes}: {line}")
