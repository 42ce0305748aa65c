"""What the collective workloads share (size sweep, SimAI replay): one agent group for the whole run, queue
pairs from the op plan's algorithms, the estimate from the ops' sizes (testbed.spec.estimate)."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from testbed.emulation.agents import AgentGroup
from testbed.workloads.plan import PlannedOp, pass_estimate_s, plan_peers, plan_streams
from testbed.spec import estimate
from testbed.workloads.base import Workload

#: seconds to wait after the last collective before reading the agents' statistics (the last ACKs land)
LAST_ACKS_S = 0.2


class Collectives(Workload):
    """Collectives of the op plan on one agent group that lives for the whole measurement."""

    def estimate_s(self, ops: tuple[PlannedOp, ...]) -> float:
        f = self.spec.fabric
        return estimate.estimate_run_s(ops, f.n_hosts, f.host_link_bps, f.fabric_link_bps, f.ranks_per_switch,
                                       self.spec.transport.payload_bytes, estimate.setup_s(f))

    def fan_in(self, ops: tuple[PlannedOp, ...]) -> int:
        return estimate.collective_fan_in(self.spec, ops)

    def peers(self, ops: tuple[PlannedOp, ...]) -> dict[int, list[int]]:
        return plan_peers(ops)

    def job_s(self, job, ops: tuple[PlannedOp, ...]) -> float:
        """The job's ops on an idle fabric (testbed.workloads.plan.pass_estimate_s), s."""
        return pass_estimate_s(self.spec, ops)

    @contextmanager
    def session(self, ctx, fab) -> Iterator[AgentGroup]:
        """One agent per host with QPs to its op-plan peers (testbed.emulation.agents.AgentGroup)."""
        peers = plan_peers(ctx.ops_plan)
        with AgentGroup(fab, ctx.transport, ctx.spec.seed, lambda r: peers.get(r, []),
                        ctx.spec.workload.channels, plan_streams(ctx.ops_plan)) as agents:
            yield agents

    def run(self, ctx, agents: AgentGroup, rec, progress) -> None:
        """:meth:`run_ops`, then the agents' statistics once the last ACKs landed."""
        self.run_ops(ctx, agents, rec, progress)
        time.sleep(LAST_ACKS_S)  # let the last ACKs land before counting
        rec.stats = agents.stats()

    def run_ops(self, ctx, agents: AgentGroup, rec, progress) -> None:
        """Run ``ctx.ops_plan`` on ``agents``; signals held back after the last collective."""
        raise NotImplementedError
