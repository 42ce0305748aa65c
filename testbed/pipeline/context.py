"""The state of one run: what it is (:class:`RunContext`) and what it measured so far (:class:`Recording`).

The runner (:mod:`testbed.pipeline.runner`) makes one :class:`RunContext` per run and
hands it, with the :class:`Recording`, to each room (manifest, summary,
printing, verdict) instead of a dozen loose values.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from testbed.workloads.plan import PlannedOp
from testbed.spec.scenario import ScenarioSpec
from topology import build as build_layout
from topology.model import Layout
from traffic.transport import TransportParams, payload_efficiency


@dataclass(frozen=True)
class RunContext:
    """One run's identity and set-up (inert data).

    spec: the validated scenario; run_id: ``tb`` + 4 hex digits; run_dir: the
    results directory ``<results>/<UTC time>-<name>-<run id>`` (made by the
    runner after the probe); scenario_path: the scenario file, or None;
    ops_plan: the collectives in order (testbed.workloads.plan.PlannedOp); quiet: no
    progress lines; print_results: the results (table, verdict, run directory) on stdout at the end
    (False: nothing on stdout, testbed.api.run's ``quiet``); started_utc: ``YYYYmmddTHHMMSSZ``.

    Set by the probe step (:meth:`probed`): datapath (``user`` or
    ``kernel``), transport (the agents' traffic.transport.TransportParams,
    testbed.emulation.agents.transport_params), send_buffer (Open vSwitch's send
    socket check, testbed.measure.send_buffer.check_run_send_buffer).
    controller: the manifest's controller block (framework, its version,
    load-balancing policy, settings file), set before the probe.
    layout: the run's topology.model.Layout, built once with the run id (:meth:`new`) and carried to
    the fabric, the controller (topology.json) and the pattern plan.
    """

    spec: ScenarioSpec
    run_id: str
    run_dir: Path
    scenario_path: Optional[Path]
    ops_plan: tuple[PlannedOp, ...]
    quiet: bool = False
    print_results: bool = True
    started_utc: str = ""
    datapath: str = ""
    transport: Optional[TransportParams] = None
    send_buffer: dict = field(default_factory=dict)
    controller: dict = field(default_factory=dict)
    layout: Optional[Layout] = None

    @classmethod
    def new(cls, spec: ScenarioSpec, scenario_path: Optional[Path], results_root: Path, run_id: str,
            ops_plan, quiet: bool = False, print_results: bool = True) -> "RunContext":
        """A context for a run starting now; ``run_dir`` is named, not made."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        run_dir = Path(results_root).resolve() / f"{stamp}-{spec.name}-{run_id}"
        return cls(spec=spec, run_id=run_id, run_dir=run_dir, scenario_path=scenario_path,
                   ops_plan=tuple(ops_plan), quiet=quiet, print_results=print_results, started_utc=stamp,
                   layout=build_layout(spec.fabric.kind, spec.fabric, run_id))

    def probed(self, datapath: str, transport: TransportParams, send_buffer: dict) -> "RunContext":
        """This context with the probe step's findings."""
        return replace(self, datapath=datapath, transport=transport, send_buffer=send_buffer)

    def with_controller(self, controller: dict) -> "RunContext":
        """This context with the manifest's controller block (testbed.emulation.controller_proc.preflight)."""
        return replace(self, controller=controller)

    @property
    def n_ranks(self) -> int:
        return self.spec.fabric.n_hosts

    @property
    def efficiency(self) -> float:
        """Payload bytes / frame bytes of a full data packet (traffic.transport.payload_efficiency)."""
        return payload_efficiency(self.spec.transport.payload_bytes)

    @property
    def goodput_bps(self) -> float:
        """Host link rate x payload efficiency: the busbw a ring at link speed reaches."""
        return self.spec.fabric.host_link_bps * self.efficiency


@dataclass
class Recording:
    """What a run measured so far: kept and written even when the run is cut short.

    phase: what the run was doing (named in an INCOMPLETE reason); fab: the
    Fabric once built; sampler, cpu, departures: the queue sampler, CPU idle
    monitor and departure capture once started; rank_rows: every rank's
    op_done record; op_meta: op_id -> PlannedOp.meta() of each finished
    collective; stats: the agents' final statistics; drops_before/after:
    testbed.measure.drops.DropSnapshot around the traffic; classes_before/after: each switch port's per-class
    counters around the traffic (testbed.measure.class_queues; None without htb_classes); faults: the fault
    scheduler (started with the traffic); background: the scenario's background flows
    (testbed.emulation.background, started with the traffic, None without them); workload: the run's
    testbed.workloads.base.Workload (it keeps
    what its results need, e.g. a pattern's trials or a replay's timeline figures); measured: every
    measurement is in (the teardown may still fail); t_measured_ns: when (Unix ns, the drop counters
    read after the traffic); controller: summary.json's ``controller`` block the verdict judged (the
    supervisor's report at the end of the measurement, then its final one after the teardown);
    results: testbed.pipeline.summary.Written once the complete results are on disk; tenants: the
    isolation probes and drop counters (testbed.tenants.results.TenantRecord); servers: a run over several
    servers' telemetry per server (testbed.cluster.telemetry.ClusterTelemetry; the per-server verdict).
    """

    ops_planned: int
    phase: str = "start-up"
    fab: object = None
    sampler: object = None
    cpu: object = None
    departures: object = None
    rank_rows: list = field(default_factory=list)
    op_meta: dict = field(default_factory=dict)
    stats: list = field(default_factory=list)
    drops_before: object = None
    drops_after: object = None
    classes_before: Optional[dict] = None
    classes_after: Optional[dict] = None
    faults: object = None  # testbed.emulation.faults.FaultScheduler
    background: object = None  # testbed.emulation.background.BackgroundTraffic (scenario ``background``)
    workload: object = None  # testbed.workloads.base.Workload
    measured: bool = False
    t_measured_ns: Optional[int] = None
    controller: Optional[dict] = None
    results: object = None
    tenants: object = None  # testbed.tenants.results.TenantRecord (None: no tenants)
    servers: object = None  # testbed.cluster.telemetry.ClusterTelemetry of a run over several servers (else None)
