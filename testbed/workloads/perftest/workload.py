"""perftest runs over Soft-RoCE as the workload (``workload.perftest``; testbed.spec.perftest).

The hosts named by the runs get rxe devices for the whole measurement (testbed.emulation.rxe); the runs
go one after the other (testbed.emulation.perftest.run_pair). The agents start as for any workload (the
run's tables and verdict expect them) with idle queue pairs and no operations, so every RoCE packet on
the fabric is perftest's. Results: perftest.csv and summary.json ``perftest`` (testbed.results.perftest).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

from testbed.process import signals
from testbed.emulation.agents import AgentGroup
from testbed.workloads.plan import PlannedOp, WorkloadPlan
from testbed.spec import estimate
from testbed.spec.yaml_loader import ScenarioError
from testbed.workloads.base import Workload

#: how the rxe devices are made (summary.json ``perftest.rxe_backend``; testbed.emulation.rxe)
RXE_BACKEND = "rdma_rxe on a veth in the machine's namespace, bridged to the host's fabric interface by tc"


class PerftestRuns(Workload):
    """``workload.perftest``: an empty op plan; the runs' rows kept in :attr:`rows`."""

    section = "perftest"

    def __init__(self, spec):
        super().__init__(spec)
        self.rows: list[dict] = []
        self.devices = None

    def _runs(self) -> list[dict]:
        from testbed.spec.hosts import host_infos
        from testbed.spec.perftest import check_runs
        return check_runs(self.spec.workload.perftest, [h.name for h in host_infos(self.spec.fabric.layout_preview())])

    def plan(self) -> WorkloadPlan:
        """No collectives."""
        return WorkloadPlan((), ())

    def check_machine(self) -> None:
        """Refuse (ScenarioError) a machine without rdma_rxe, the rdma tool or perftest
        (testbed.spec.perftest.check_machine)."""
        from testbed.spec.perftest import check_machine
        try:
            check_machine(self.spec.workload.perftest)
        except ValueError as e:
            raise ScenarioError(str(e)) from None

    def estimate_s(self, ops: tuple[PlannedOp, ...]) -> float:
        """Set-up plus each run's messages at the host link rate (both ways for a ping-pong)."""
        from testbed.results.perftest import roce_pkts_min
        f = self.spec.fabric
        wire_s = sum(roce_pkts_min(r["test"], r["size_bytes"], r["iterations"], None)
                     * (min(r["size_bytes"], 4096) + 78) * 8 / f.host_link_bps for r in self._runs())
        return estimate.setup_s(f) + wire_s

    def scaling_keys(self) -> str:
        return "workload.perftest[].iterations, workload.perftest[].size_bytes (or fabric.host_link_bps)"

    def fan_in(self, ops: tuple[PlannedOp, ...]) -> int:
        return 1

    def loss_note(self, ops: tuple[PlannedOp, ...]) -> Optional[str]:
        return None

    def peers(self, ops: tuple[PlannedOp, ...]) -> dict[int, list[int]]:
        """Each run's two hosts, to each other: the agents open these queue pairs and leave them idle (the
        run's tables and verdict are those of a run whose transport sent nothing)."""
        out: dict[int, list[int]] = {}
        for r in self._runs():
            for a, b in ((r["src"], r["dst"]), (r["dst"], r["src"])):
                if b not in out.setdefault(a, []):
                    out[a].append(b)
        return out

    @contextmanager
    def session(self, ctx, fab) -> Iterator[AgentGroup]:
        """Idle agents (queue pairs that send nothing: :meth:`peers`) and the runs' hosts' rxe devices
        (testbed.emulation.rxe.RxeDevices)."""
        from testbed.emulation.rxe import RxeDevices
        runs = self._runs()
        peers = self.peers(())
        with AgentGroup(fab, ctx.transport, ctx.spec.seed, lambda r: peers.get(r, [])) as agents, \
                RxeDevices(fab, [r["src"] for r in runs] + [r["dst"] for r in runs]) as devices:
            self.devices = devices
            yield agents

    def run(self, ctx, agents, rec, progress) -> None:
        """Every run in order (testbed.emulation.perftest.run_pair); the agents' (empty) statistics; signals
        held back after the last run."""
        from testbed.emulation.perftest import run_pair
        runs = self._runs()
        for i, r in enumerate(runs):
            progress.say(f"perftest {i + 1}/{len(runs)}: {r['test']} {r['size_bytes']} B x {r['iterations']}")
            row = run_pair(rec.fab, self.devices.devices, r, i, ctx.run_dir / "perftest")
            self.rows.append(row)
            if row["status"] != "done":
                progress.say(f"perftest {r['name']}: {row['status']}: {row['error']}")
        rec.stats = agents.stats()
        signals.defer()

    def add_results(self, ctx, rec, summary: dict, qps, ports, faults) -> None:
        """perftest.csv and summary.json ``perftest`` (testbed.results.perftest)."""
        from testbed.results.perftest import frame, perftest_block
        from testbed.results.rundir import RunDir
        RunDir(ctx.run_dir).write_table("perftest", frame(self.rows))
        summary["perftest"] = perftest_block(self.rows, RXE_BACKEND)

    def lines_after(self, ctx, summary: dict) -> list[str]:
        from testbed.results.perftest import perftest_lines
        return perftest_lines(summary["perftest"]) if summary.get("perftest") else []
