"""Run a pattern's trials on a running fabric: fresh agents per trial, each with its own entropy seed.

Trial t runs with seed ``spec.seed + t``: the agents draw their QPs' UDP source ports (ECMP entropy),
spray and flowlet choices and initial PSNs from it (traffic.transport.entropy), so trials are
independent draws of the same pattern. Each trial starts every agent afresh (new QPs, empty
counters), sends one :class:`traffic.protocol.RunFlows` with a start time 0.3 s ahead (every
agent posts its flows at that Unix time plus their ``start_s``, each over its ``qps`` queue pairs:
the agents start with as many channels as the widest flow needs), collects every agent's
:class:`~traffic.protocol.FlowsDone` and statistics, and stops the agents.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from testbed.emulation.agents import AgentGroup
from testbed.patterns.ideal import ideal_fct_s
from testbed.patterns.plan import pattern_flows, pattern_peers
from traffic.clock import unix_ns
from traffic.protocol import FlowOrder, FlowsDone, RunFlows
from traffic.protocol import Stats

#: the runner tells every agent to start this long ahead, so all post their flows at once
START_AHEAD_S = 0.3


@dataclass(frozen=True)
class TrialStats(Stats):
    """An agent's statistics of one trial: its qps.csv, msgs.csv, qp_rates.csv and cnp_events.csv rows carry
    ``trial``."""

    trial: int = 0

    @classmethod
    def of(cls, st: Stats, trial: int) -> "TrialStats":
        return cls(**{f.name: getattr(st, f.name) for f in fields(Stats)}, trial=trial)

    def qp_rows(self) -> list[dict]:
        return [{"trial": self.trial, **r} for r in super().qp_rows()]

    def msg_rows(self) -> list[dict]:
        return [{"trial": self.trial, **r} for r in super().msg_rows()]

    def rate_rows(self) -> list[dict]:
        return [{"trial": self.trial, **r} for r in super().rate_rows()]

    def cnp_rows(self) -> list[dict]:
        return [{"trial": self.trial, **r} for r in super().cnp_rows()]


@dataclass(frozen=True)
class TrialRecord:
    """What one trial measured: its number, entropy seed, start (Unix ns) and every agent's FlowsDone."""

    trial: int
    seed: int
    start_at_ns: int
    done: list


class PatternRun:
    """The trials of ``ctx.spec.workload.pattern`` on ``fab`` (a running testbed.emulation.fabric.Fabric).

    ``flows``: the pattern (traffic.patterns.Flow); ``ideal_fct_s``: flow -> ideal completion time
    (testbed.patterns.ideal); ``trials``: a TrialRecord per finished trial."""

    def __init__(self, ctx, fab):
        self.ctx, self.fab = ctx, fab
        self.pattern = ctx.spec.workload.pattern
        self.flows = pattern_flows(ctx.spec, fab.layout)
        self.peers = pattern_peers(self.flows)
        self.ideal_fct_s = ideal_fct_s(self.flows, fab.layout, ctx.efficiency)
        self.trials: list[TrialRecord] = []
        #: queue pairs per peer each agent starts with: the most any flow splits over (FlowOrder.qps)
        self.channels = max(f.qps for f in self.flows)

    @property
    def ideal_span_s(self) -> float:
        """Ideal time from the trial's start to its last flow's end."""
        return max(f.start_s + self.ideal_fct_s[f.flow] for f in self.flows)

    def during_traffic(self, cpu):
        """The rows of ``cpu`` (cpu.csv: one per second, ``time_ns`` its end) whose second overlaps a trial's
        traffic (its start to its last ACK): agents start between trials, which loads the CPU while no
        packet moves, so the fidelity verdict judges only these seconds."""
        if cpu is None or cpu.empty or not self.trials:
            return cpu
        t = cpu["time_ns"].to_numpy()
        keep = False
        for tr in self.trials:
            end = max(m.t_acked_ns for d in tr.done for m in d.sent)
            keep = keep | ((t > tr.start_at_ns) & (t - 1_000_000_000 < end))
        return cpu[keep].reset_index(drop=True)

    def run(self, rec, progress) -> None:
        """Run every trial; append each agent's statistics (TrialStats) to ``rec.stats``."""
        n = self.pattern.trials
        timeout_s = 10 * self.ideal_span_s + 20
        orders = [FlowOrder(flow=f.flow, src=f.src, dst=f.dst, size_bytes=f.size_bytes,
                            start_ns=int(round(f.start_s * 1e9)), qps=f.qps) for f in self.flows]
        for t in range(n):
            seed = self.ctx.spec.seed + t
            with AgentGroup(self.fab, self.ctx.transport, seed, lambda r: self.peers.get(r, []),
                            channels=self.channels) as agents:
                start_at = unix_ns() + int(START_AHEAD_S * 1e9)
                cmd = RunFlows(trial=t, flows=orders, start_at_ns=start_at,
                               sample_period_ns=int(self.pattern.rate_bin_ms * 1e6), timeout_s=float(timeout_s))
                done = agents.command(cmd, FlowsDone, timeout_s + START_AHEAD_S + 10)
                stats = agents.stats()
            rec.stats.extend(TrialStats.of(st, t) for st in stats)
            self.trials.append(TrialRecord(t, seed, start_at, done))
            span_s = (max(s.t_acked_ns for d in done for s in d.sent) - start_at) / 1e9
            progress.say(f"trial {t + 1}/{n} (seed {seed}): {len(self.flows)} flows done in {span_s:.3f} s "
                         f"(ideal {self.ideal_span_s:.3f} s)")
