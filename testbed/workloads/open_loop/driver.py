"""Run an open-loop plan on a running fabric, and its results: fct.csv, slowdown.csv, summary.json's
``open_loop``.

The agents start with a queue pair per lane (``workload.open_loop.lanes``) towards every other host; one
traffic.protocol.RunFlows carries every flow, each on its lane (FlowOrder.channel), posted at the traffic's
start (0.3 s after the command, so every agent starts together) plus its arrival time. A flow's FCT is its
sender's time from posting its message to the ACK of its last byte; slowdown = FCT / its ideal FCT alone on
an idle path (testbed.workloads.open_loop.standalone).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from testbed.emulation.agents import AgentGroup
from testbed.results.rundir import RunDir
from testbed.results.schema import table as documented
from testbed.results.slowdown import format_slowdown, slowdown_table
from testbed.results.tables import percentile_us
from testbed.spec.hosts import short
from testbed.workloads.open_loop.plan import OpenLoopPlan
from traffic.clock import unix_ns
from traffic.protocol import FlowOrder, FlowsDone, RunFlows

#: the agents post their flows this long after the command (as a pattern trial's, testbed.workloads.pattern.driver)
START_AHEAD_S = 0.3
#: receivers sample delivered bytes this often (the samples are not kept), ns
SAMPLE_PERIOD_NS = 100_000_000


class OpenLoopRun:
    """``plan`` (testbed.workloads.open_loop.plan.OpenLoopPlan) on ``fab``; after :meth:`run`, ``done``: every
    agent's FlowsDone and ``start_at_ns``: the traffic's start (Unix ns)."""

    def __init__(self, ctx, fab, plan: OpenLoopPlan):
        self.ctx, self.fab, self.plan = ctx, fab, plan
        self.lanes = ctx.spec.workload.open_loop.lanes
        self.done: list = []
        self.start_at_ns = 0

    @property
    def timeout_s(self) -> float:
        """The run's limit: 10 x its ideal span + 20 s."""
        return 10 * self.plan.ideal_span_s + 20

    def run(self, rec, progress) -> None:
        """Start the agents, run every flow, keep their FlowsDone and append their statistics to ``rec.stats``."""
        n = len(self.fab.layout.hosts)
        flows = self.plan.flows
        progress.say(f"open loop: {len(flows)} flows on {n} hosts over {flows[-1].start_s:.1f} s of arrivals, "
                     f"ideal span {self.plan.ideal_span_s:.1f} s (limit {self.timeout_s:.0f} s)")
        orders = [FlowOrder(flow=f.flow, src=f.src, dst=f.dst, size_bytes=f.size_bytes,
                            start_ns=int(round(f.start_s * 1e9)), channel=f.channel) for f in flows]
        with AgentGroup(self.fab, self.ctx.transport, self.ctx.spec.seed,
                        lambda r: [q for q in range(n) if q != r], channels=self.lanes) as agents:
            cmd = RunFlows(trial=0, flows=orders, start_at_ns=unix_ns() + int(START_AHEAD_S * 1e9),
                           sample_period_ns=SAMPLE_PERIOD_NS, timeout_s=float(self.timeout_s))
            self.start_at_ns = cmd.start_at_ns
            self.done = agents.command(cmd, FlowsDone, self.timeout_s + START_AHEAD_S + 10)
            rec.stats.extend(agents.stats())
        last = max(m.t_acked_ns for d in self.done for m in d.sent)
        progress.say(f"open loop: {len(flows)} flows done in {(last - self.start_at_ns) / 1e9:.1f} s")

    def during_traffic(self, cpu):
        """The rows of ``cpu`` (cpu.csv: one per second, ``time_ns`` its end) whose second overlaps the traffic
        (its start to the last ACK): the agents' start loads the CPU while no packet moves (as a pattern
        trial's, testbed.workloads.pattern.driver.PatternRun.during_traffic)."""
        if cpu is None or cpu.empty or not self.done:
            return cpu
        end = max(m.t_acked_ns for d in self.done for m in d.sent)
        t = cpu["time_ns"].to_numpy()
        return cpu[(t > self.start_at_ns) & (t - 1_000_000_000 < end)].reset_index(drop=True)

    def fct_rows(self) -> pd.DataFrame:
        """fct.csv (testbed.results.schema): one row per flow, trial 0, ``lost_pkts`` empty (a lane's losses
        are not one flow's)."""
        names = [short(self.fab.layout, h.name) for h in self.fab.layout.hosts]
        flows = {f.flow: f for f in self.plan.flows}
        rows = []
        for m in sorted((m for d in self.done for m in d.sent), key=lambda m: m.flow):
            f = flows[m.flow]
            fct_us = (m.t_acked_ns - m.t_post_ns) / 1e3
            ideal_us = self.plan.ideal_fct_s[f.flow] * 1e6
            rows.append({"trial": 0, "flow": f.flow, "src": names[f.src], "dst": names[f.dst],
                         "size_bytes": f.size_bytes, "start_ns": m.t_post_ns, "end_ns": m.t_acked_ns,
                         "fct_us": fct_us, "ideal_fct_us": ideal_us, "slowdown": fct_us / ideal_us,
                         "lost_pkts": math.nan})
        return pd.DataFrame(rows, columns=[c.name for c in documented("fct").columns if c.name != "job"])


def write_open_loop_results(ctx, run: OpenLoopRun) -> dict:
    """Write fct.csv and slowdown.csv into the run directory; return summary.json's ``open_loop`` block: the
    settings, ``offered_load`` (payload bits of all flows / (arrival span x hosts x host_link_bps)), the
    flows, the overall slowdown p50/p99 (below 1 as 1, as slowdown.csv), the smallest measured one and the flows
    below 1 (testbed.results.slowdown), and ``buckets`` (slowdown.csv's rows)."""
    o, plan = ctx.spec.workload.open_loop, run.plan
    fct = run.fct_rows()
    table = slowdown_table(fct, plan.edges_bytes)
    out = RunDir(ctx.run_dir)
    out.write_table("fct", fct)
    out.write_table("slowdown", table)
    n_hosts = len(run.fab.layout.hosts)
    span_s = plan.flows[-1].start_s
    bits = 8 * sum(f.size_bytes for f in plan.flows)
    slow = fct["slowdown"].to_numpy(dtype=float)
    rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in table.astype(object).to_dict("records")]
    return {
        "cdf": o.cdf, "cdf_mean_bytes": plan.cdf.mean_bytes, "size_scale": o.size_scale, "load": o.load,
        "offered_load": bits / (span_s * n_hosts * ctx.spec.fabric.host_link_bps) if span_s > 0 else None,
        "mean_interarrival_s": plan.mean_interarrival_s, "arrival_span_s": span_s, "hosts": n_hosts,
        "lanes": o.lanes, "seed": plan.seed, "flows": len(plan.flows), "flows_done": len(fct),
        "bytes": bits // 8, "entropy": ctx.spec.transport.entropy, "policy": ctx.spec.load_balance.policy,
        "slowdown_p50": float(percentile_us(np.maximum(slow, 1), 50)) if len(slow) else None,
        "slowdown_p99": float(percentile_us(np.maximum(slow, 1), 99)) if len(slow) else None,
        "slowdown_min": float(np.min(slow)) if len(slow) else None,
        "below_ideal": int((slow < 1).sum()),
        "buckets": rows,
    }


def format_open_loop(b: dict) -> list[str]:
    """The ``open_loop`` block as printed lines: the run's flows and load, then slowdown by size bucket."""
    offered = "n/a" if b["offered_load"] is None else f"{b['offered_load']:.2f}"
    return [f"# open loop {b['cdf']} x {b['size_scale']:g}: {b['flows_done']}/{b['flows']} flows on {b['hosts']} "
            f"hosts, load {b['load']:.2f} (offered {offered}), entropy {b['entropy']}, policy {b['policy']}",
            f"# FCT slowdown = FCT / FCT alone on an idle path, by flow size (slowdown.csv; below 1 as 1, as HPCC: "
            f"{b['below_ideal']} flows, smallest {b['slowdown_min']:.2f}):"] + format_slowdown(b["buckets"])
