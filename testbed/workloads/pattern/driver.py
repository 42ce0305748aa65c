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
from testbed.workloads.pattern.ideal import ideal_fct_s
from testbed.workloads.pattern.plan import pattern_flows, pattern_peers
from traffic.clock import unix_ns
from traffic.protocol import FlowOrder, FlowsDone, RunFlows
from traffic.protocol import Stats

#: the runner tells every agent to start this long ahead, so all post their flows at once
START_AHEAD_S = 0.3
#: the lead of a job's pattern pass (testbed.workloads.pattern.job): its agents are up and idle, the command reaches
#: them within milliseconds, and the lead is a gap in the job's completion time between passes
PASS_AHEAD_S = 0.05


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

    ``flows``: the pattern (traffic.patterns.Flow, src/dst global ranks); ``ideal_fct_s``: flow -> ideal
    completion time (testbed.workloads.pattern.ideal); ``trials``: a TrialRecord per finished trial. ``pattern`` and
    ``flows`` given: a job's pattern (testbed.workloads.pattern.job), its flows on the job's hosts; its passes are
    the trials, run by the job on the run's agents (:meth:`command`)."""

    def __init__(self, ctx, fab, pattern=None, flows=None):
        self.ctx, self.fab = ctx, fab
        self.pattern = pattern if pattern is not None else ctx.spec.workload.pattern
        self.flows = flows if flows is not None else pattern_flows(ctx.spec, fab.layout)
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

    @property
    def timeout_s(self) -> float:
        """A trial's limit: 10 x its ideal span + 20 s."""
        return 10 * self.ideal_span_s + 20

    def command(self, trial: int, stream: int = 0, op_id=None, ahead_s: float = START_AHEAD_S) -> RunFlows:
        """The RunFlows of trial (or pass) ``trial``, starting ``ahead_s`` from now, on ``stream``."""
        orders = [FlowOrder(flow=f.flow, src=f.src, dst=f.dst, size_bytes=f.size_bytes,
                            start_ns=int(round(f.start_s * 1e9)), qps=f.qps) for f in self.flows]
        return RunFlows(trial=trial, flows=orders, start_at_ns=unix_ns() + int(ahead_s * 1e9),
                        sample_period_ns=int(self.pattern.rate_bin_ms * 1e6), timeout_s=float(self.timeout_s),
                        stream=stream, op_id=op_id)

    def record(self, cmd: RunFlows, seed: int, done: list) -> str:
        """Keep trial ``cmd``'s FlowsDone records (a TrialRecord); return its progress line."""
        self.trials.append(TrialRecord(cmd.trial, seed, cmd.start_at_ns, done))
        span_s = (max(s.t_acked_ns for d in done for s in d.sent) - cmd.start_at_ns) / 1e9
        return f"{len(self.flows)} flows done in {span_s:.3f} s (ideal {self.ideal_span_s:.3f} s)"

    def run(self, rec, progress) -> None:
        """Run every trial; append each agent's statistics (TrialStats) to ``rec.stats``. Says a line as each
        trial starts (its flows, ideal span and limit) and one as it ends (:meth:`record`)."""
        n = self.pattern.trials
        for t in range(n):
            seed = self.ctx.spec.seed + t
            progress.say(f"trial {t + 1}/{n} (seed {seed}): {len(self.flows)} flows starting, ideal "
                         f"{self.ideal_span_s:.3f} s (limit {self.timeout_s:.0f} s)")
            with AgentGroup(self.fab, self.ctx.transport, seed, lambda r: self.peers.get(r, []),
                            channels=self.channels) as agents:
                cmd = self.command(t)
                done = agents.command(cmd, FlowsDone, self.timeout_s + START_AHEAD_S + 10)
                stats = agents.stats()
            rec.stats.extend(TrialStats.of(st, t) for st in stats)
            progress.say(f"trial {t + 1}/{n} (seed {seed}): {self.record(cmd, seed, done)}")
