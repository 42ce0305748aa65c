"""``testbed run``: one scenario end to end, from validated spec to results directory.

The steps of a run, in order, each a call into its room:

1. validate the scenario and the op plan (testbed.spec, testbed.workloads; nothing
   touches the kernel before this passes), the results root
   (testbed.results.rundir), the duration cap and the machine's faithful
   capacity (testbed.spec.estimate, testbed.measure.capacity_check);
2. remove leftovers of dead runs (testbed.host.cleanup);
3. take the run lock (testbed.host.runlock), probe capabilities
   (testbed.host.capabilities), check Open vSwitch's send buffer
   (testbed.measure.send_buffer);
4. make the run directory and write the manifest (testbed.pipeline.manifest);
5. build the fabric (testbed.emulation.fabric: controller ready, queues
   installed and read back) and start one agent per host
   (testbed.emulation.agents);
6. with tenants, probe isolation with real packets (testbed.tenants); run the workload while sampling switch queues, CPU and departures
   (testbed.measure), reading the drop counters before and after; the
   workload's mode (testbed.workloads: size sweep, SimAI replay or pattern
   trials) plans it, names the queue pairs, drives the agents and adds its
   own tables and summary blocks;
7. with the fabric and agents still up: stop the controller's congestion loop
   (its tables), write every table and summary.json with the fidelity verdict
   (testbed.pipeline.summary.write_results, testbed.pipeline.judge), remove
   ``INCOMPLETE`` and say ``results written ...; tearing down``;
8. tear everything down (context managers);
9. update summary.json with what only the teardown knows (the controller's
   final report and its check), print (testbed.pipeline.summary.finish,
   testbed.pipeline.printing); a run cut short writes what it has, marked
   INCOMPLETE.

One :class:`testbed.pipeline.context.RunContext` carries the run's identity and
set-up from step to step; a :class:`testbed.pipeline.context.Recording` what it
measured so far.

Results directory ``<results>/<UTC time>-<name>-<run id>/``: manifest.json,
ops.csv (per operation), rank_ops.csv (per rank and operation), msgs.csv (per
message: FCT), qps.csv (per queue pair counters), ports.csv (switch queue
samples), cpu.csv, sizes.csv (the printed table), summary.json, report.html
(testbed.report), the controller's and agents' logs. Every ``*_ns`` column is Unix-epoch ns of
:func:`traffic.clock.unix_ns`. ``INCOMPLETE`` (the reason) is there from the
start and removed once a run with every measurement in wrote summary.json
(before the teardown: a SIGKILL from then on leaves complete results, and
``testbed clean`` removes what the teardown did not); a
run cut short during traffic writes the tables of the collectives that
finished and a summary.json with ``"complete": false``.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
from contextlib import nullcontext
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from testbed.process.exitcodes import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_FAITHFUL, EXIT_INTERRUPTED_BASE,  # noqa: F401
                                       EXIT_NOT_FAITHFUL, exit_code)
from testbed.process import signals
from testbed.host import capabilities
from testbed.host.timeout_scale import timeout_scale
from testbed.host import cleanup
from testbed.host.mininet_logging import restore_logging
from testbed.spec import estimate
from testbed.measure import capacity_check
from testbed.measure.departure_capture import DepartureCapture
from testbed.measure.capture import captures_for
from testbed.measure.cpu import CpuIdleMonitor
from testbed.measure.class_queues import class_counters
from testbed.measure.drops import DropSnapshot
from testbed.measure.send_buffer import RunRefused, check_run_send_buffer
from dataplane.qdisc_sampler import QdiscSampler
from testbed.emulation.agents import AgentGroup, transport_params
from testbed.emulation.background import BackgroundTraffic
from testbed.emulation import congestion_conf, controller_proc
from testbed.emulation.fabric import Fabric
from testbed.emulation.faults import FaultScheduler
from topology.naming import new_run_id
from testbed.workloads.plan import PlannedOp
from testbed.host.runlock import RunLock
from testbed.pipeline import manifest, printing, summary as results_summary
from testbed.pipeline.printing import Progress, print_notes
from testbed.results.rundir import RunDir, check_results_root
from testbed.pipeline.context import Recording, RunContext
from testbed.spec.congestion import CLASS_NAMES
from testbed.spec.rto import run_rto_us
from testbed.spec.scenario import ScenarioError, ScenarioSpec
from testbed.tenants import results as tenant_results
from testbed.workloads import workload_for
from traffic.clock import unix_ns

log = logging.getLogger(__name__)


def run_scenario(spec: ScenarioSpec, scenario_path: Path | None, results_root: Path,
                 quiet: bool = False, run_id: str | None = None,
                 ops_plan: list[PlannedOp] | None = None, cli: bool = False) -> dict:
    """Run a validated scenario; return summary.json's content (also written to the run directory).

    ``ops_plan`` defaults to the plan of the scenario's workload (testbed.workloads; its notes printed).
    ``cli``: after the workload, open the Mininet CLI on the live fabric (testbed.pipeline.interactive).
    """
    if ops_plan is None:
        plan = workload_for(spec).plan()
        ops_plan = list(plan.ops)
        print_notes(plan.notes)
    ctx = RunContext.new(spec, scenario_path, results_root, run_id or new_run_id(), ops_plan, quiet)
    return _run_context(ctx, cli)


def _run_context(ctx: RunContext, cli: bool = False) -> dict:
    """:func:`run_scenario` from its new context on: the lock, the probe, the run directory, the fabric."""
    spec = ctx.spec
    progress = Progress(len(ctx.ops_plan), ctx.quiet)  # --quiet: no progress, only the summary
    # controller.framework installed? ScenarioError (exit 2) before the probe; the manifest's controller block
    ctx = ctx.with_controller(controller_proc.preflight(spec))
    with RunLock(ctx.run_id):  # held from the probe on: a concurrent clean never takes our objects
        ctx, caps = _probe(ctx)
        _open_run_dir(ctx, caps, progress)
        return _run_fabric(ctx, progress, cli)


def _probe(ctx: RunContext) -> tuple[RunContext, "capabilities.Capabilities"]:
    """Probe the machine; fix the datapath, the agents' transport parameters and OVS's send buffer.

    Raises ScenarioError (a kernel datapath this machine lacks) or RunRefused (Open vSwitch not running, or
    its send buffer too small).
    """
    spec = ctx.spec
    if spec.cluster is not None:  # the servers' Open vSwitch, not this machine's (testbed.cluster.run_probe)
        from testbed.cluster.run_probe import probe_servers
        caps, send_buffer = probe_servers(spec, ctx.run_id)
    else:
        caps = capabilities.probe(ctx.run_id)
    if caps.datapath == "none":
        detail = caps.features["ovs"].detail  # names its own remedy (scripts/install, start-ovs, root) or none
        fix = "" if "scripts/" in detail or "root" in detail else "; start it with scripts/start-ovs (as root)"
        raise RunRefused(f"Open vSwitch is not usable ({detail}){fix}")
    datapath = caps.datapath if spec.fabric.datapath == "auto" else spec.fabric.datapath
    if spec.cluster is not None:  # a cluster run's servers use the userspace datapath (testbed.spec.cluster)
        datapath = "user"
    if datapath == "kernel" and caps.datapath != "kernel":
        raise ScenarioError("fabric.datapath: 'kernel' asked for, but this machine has no openvswitch "
                            "kernel module; allowed here: auto, user")
    workload = workload_for(spec)
    peers = workload.peers(ctx.ops_plan)
    transport = transport_params(spec, run_rto_us(spec), max((len(p) for p in peers.values()), default=2),
                                 workload.streams(ctx.ops_plan))
    if spec.cluster is None:
        send_buffer = check_run_send_buffer(spec, datapath)
    ctx = dataclasses.replace(ctx, spec=with_ecn_marker(spec, caps.ecn_marker))
    return ctx.probed(datapath, transport, send_buffer), caps


def with_ecn_marker(spec, machine_marker: str):
    """``spec`` with ``congestion.ecn.marker`` resolved for this machine (testbed.spec.congestion.resolve_marker;
    unchanged without ECN). Raises ScenarioError when the scenario asks for a marker the kernel lacks."""
    from testbed.spec.congestion import resolve_marker

    ecn = spec.congestion.ecn
    if ecn is None:
        return spec
    try:
        marker = resolve_marker(spec.congestion, machine_marker)
    except ValueError as e:
        raise ScenarioError(str(e)) from None
    congestion = spec.congestion.model_copy(update={"ecn": ecn.model_copy(update={"marker": marker})})
    return spec.model_copy(update={"congestion": congestion})


def _open_run_dir(ctx: RunContext, caps, progress: Progress) -> None:
    """Make the run directory, marked INCOMPLETE until summary.json of a complete run is in; write the manifest."""
    ctx.run_dir.mkdir(parents=True)
    RunDir(ctx.run_dir).mark_incomplete("running (still here after the run ended: it was killed before it "
                                        "could write its results)")
    manifest.write(ctx, caps)
    progress.run_start(ctx)


def _run_fabric(ctx: RunContext, progress: Progress, cli: bool = False) -> dict:
    """Build the fabric, start the agents, measure, write the results, tear down, then update the results
    with what the teardown knows (partial results when cut short before every measurement was in)."""
    rec = Recording(ops_planned=len(ctx.ops_plan), workload=workload_for(ctx.spec))
    try:
        from testbed.spec.jobs import run_tenant_map  # the scenario's tenants and the jobs' placed hosts
        with _fabric_class(ctx.spec)(ctx.spec, ctx.run_id, ctx.run_dir, ctx.datapath, layout=ctx.layout,
                                     tenants=run_tenant_map(ctx.spec)) as fab:
            rec.fab = fab
            progress.fabric_up(fab)
            with rec.workload.session(ctx, fab) as agents:  # the workload's agents (testbed.workloads)
                _measure(ctx, fab, agents, rec, progress, write=not cli)
            if cli:  # --cli: the fabric stays up in the Mininet CLI until the user leaves it, then the results
                from testbed.pipeline.interactive import run_cli
                run_cli(ctx, fab)
                _write_before_teardown(ctx, rec, progress)
    except BaseException as e:
        if not rec.measured:  # keep what was measured, marked incomplete, then fail as before
            results_summary.write_partial(ctx, rec, e)
            raise
        if rec.results is None and getattr(e, "results_note", None) is None:  # left the CLI by a signal
            results_summary.write_results(ctx, rec)
        if rec.results is not None:
            note = (f"{results_summary.what_stopped(e)} during the teardown, after every measurement was in; "
                    f"results complete")
            results_summary.finish(ctx, rec, note=note)
            e.results_note = f"complete results kept in {ctx.run_dir}"
        raise
    return results_summary.finish(ctx, rec)


def _fabric_class(spec) -> type:
    """Fabric, or with a ``cluster`` section testbed.cluster.run_fabric.ClusterRunFabric (the fabric over servers)."""
    if spec.cluster is None:
        return Fabric
    from testbed.cluster.run_fabric import ClusterRunFabric
    return ClusterRunFabric


def _write_before_teardown(ctx: RunContext, rec: Recording, progress: Progress) -> None:
    """Every measurement is in, the fabric and agents still up: stop the controller's congestion loop (its
    tables), write every table and summary.json (testbed.pipeline.summary.write_results), then say
    ``results written to DIR; tearing down`` (the line a watcher can wait for). Raises what
    write_results raises, KeyboardInterrupt for a signal held back meanwhile (unless the caller holds
    signals back)."""
    warning = congestion_conf.stop_loop(rec.fab)
    if warning:
        log.warning("%s", warning)
    results_summary.write_results(ctx, rec)
    progress.say(f"results written to {ctx.run_dir}; tearing down")


def _measure(ctx: RunContext, fab: Fabric, agents: AgentGroup | None, rec: Recording, progress: Progress,
             write: bool = True) -> None:
    """Run the workload while sampling switch queues, CPU and departures; read the counters around it;
    with ``write``, write the results before returning (:func:`_write_before_teardown`), signals still
    held back."""
    if ctx.spec.cluster is not None:  # every server samples its own ports and CPU (testbed.cluster.telemetry)
        return _measure_cluster(ctx, fab, agents, rec, progress, write)
    host_pids = {h.name: fab.net.get(h.name).pid for h in fab.layout.hosts}
    host_ifs = {h.name: fab.host_intfs(h.name) for h in fab.layout.hosts}
    rec.tenants = tenant_results.start(ctx.spec, fab)  # isolation probes, before the counters are read
    rec.drops_before = DropSnapshot.take(host_pids, fab.switch_ports, host_ifs)
    rec.classes_before = class_counters(fab.switch_ports, fab.queues, CLASS_NAMES)
    rec.departures = DepartureCapture(fab.switch_ports)
    rec.sampler = QdiscSampler(fab.switch_ports, ctx.spec.output.sample_period_ms / 1e3,
                               parent=fab.queues.sampled_parent, on_sample=rec.departures.on_sample)
    rec.cpu = CpuIdleMonitor()
    rec.faults = FaultScheduler(fab.layout, ctx.spec.faults, ctx.run_dir, host_pids)
    rec.background = BackgroundTraffic(fab, ctx.spec.background, ctx.run_dir) if ctx.spec.background else None
    rec.phase = "traffic"
    capture = captures_for(fab, ctx.spec, ctx.run_dir, ctx.quiet)  # output.pcap: tcpdump listening before traffic
    try:  # faults and background flows last: at_s and start_s count from the traffic
        with capture, rec.sampler, rec.cpu, rec.departures, rec.faults, rec.background or nullcontext():
            rec.workload.run(ctx, agents, rec, progress)  # signals held back once its traffic is done
        rec.drops_after = DropSnapshot.take(host_pids, fab.switch_ports, host_ifs)
        rec.classes_after = class_counters(fab.switch_ports, fab.queues, CLASS_NAMES)
        tenant_results.read_counters(rec.tenants, fab)  # the isolation drop flows' counters
        _all_measured(ctx, rec, progress, write)
    finally:
        pending = signals.release()
    if pending:
        raise KeyboardInterrupt(f"signal {pending}")


def _all_measured(ctx: RunContext, rec: Recording, progress: Progress, write: bool) -> None:
    """Every measurement is in (now, Unix ns): the teardown phase; with ``write`` the results written."""
    rec.t_measured_ns = unix_ns()
    rec.measured = True
    rec.phase = "teardown"
    if write:
        _write_before_teardown(ctx, rec, progress)


def _measure_cluster(ctx: RunContext, fab, agents: AgentGroup | None, rec: Recording, progress: Progress,
                     write: bool = True) -> None:
    """:func:`_measure` of a run over several servers (testbed.cluster.run_fabric): the queue sampler, the
    departure capture, the CPU monitor and the drop counters run on every server (testbed.cluster.telemetry)
    and their tables are gathered here; the scenario features they need on one machine (faults, background,
    pcap, tenants, priority classes) are refused for a cluster run (testbed.spec.cluster)."""
    from testbed.cluster.telemetry import ClusterTelemetry

    on = fab.placement.server_of
    host_pids = {srv: {h.name: fab.net.get(h.name).pid for h in fab.layout.hosts if on[h.name] == srv}
                 for srv in fab.sessions}
    host_ifs = {srv: {h.name: fab.host_intfs(h.name) for h in fab.layout.hosts if on[h.name] == srv}
                for srv in fab.sessions}
    tel = ClusterTelemetry(fab.sessions, fab.switch_ports_on, ctx.spec.output.sample_period_ms / 1e3,
                           fab.queues.sampled_parent, host_pids, host_ifs)
    rec.servers = tel
    rec.drops_before = tel.drops()
    rec.phase = "traffic"
    try:
        with tel:
            rec.workload.run(ctx, agents, rec, progress)  # signals held back once its traffic is done
        rec.sampler, rec.cpu = tel.sampler, tel.cpu
        rec.departures = tel.departures if tel.departures.to_frame() is not None else None
        rec.drops_after = tel.drops()
        _all_measured(ctx, rec, progress, write)
    finally:
        pending = signals.release()
    if pending:
        raise KeyboardInterrupt(f"signal {pending}")


@dataclass(frozen=True)
class RunOutcome:
    """What :func:`run` made: ``exit_code`` (testbed.process.exitcodes) and ``run_dir`` (the run's results directory,
    None when the run stopped before making it)."""

    exit_code: int
    run_dir: Optional[Path]


def run(spec: ScenarioSpec, results_root: str | os.PathLike = "results", *, scenario_path: Optional[Path] = None,
        quiet: bool = False, max_duration_s: Optional[float] = None, debug: bool = False,
        cli: bool = False, over_capacity: bool = False, print_results: bool = True) -> RunOutcome:
    """``testbed run`` of a validated scenario: check, remove leftovers, run, print; return its outcome.

    ``results_root``: where the run directory goes (checked before anything is built); ``scenario_path``:
    the scenario file (manifest.json), None for a scenario built in code; ``quiet``: no progress lines;
    ``max_duration_s``: the duration cap (default :data:`testbed.spec.estimate.MAX_DURATION_S`);
    ``debug``: a failed run prints its traceback; ``cli``: open the Mininet CLI on the live fabric after
    the workload (testbed.pipeline.interactive); ``over_capacity``: only warn when the scenario offers more than
    ``fidelity.max_capacity_ratio`` x this machine's faithful capacity (testbed.measure.capacity_check);
    ``print_results``: the results on stdout at the end (False: nothing on stdout; errors still on stderr).

    Raises one of testbed.api.BAD_INPUT_ERRORS on bad input (the scenario, its op plan, the results root, the
    duration cap, the machine's capacity, the controller framework), nothing built. A failed or refused run
    is exit code 4 (one line printed, the traceback with ``debug``), an interrupted one 128+N after its
    teardown.
    """
    results_root = Path(results_root)
    ops_plan = _validate(spec, results_root, quiet, max_duration_s, over_capacity)
    from testbed.emulation.congestion_conf import headroom_warning
    warning = headroom_warning(spec)
    if warning:
        print(f"testbed: warning: {warning}", file=sys.stderr)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Mininet's logger prints through its own handler; passed on to the root one every line came twice
    # ("Level 25 mininet: ..." in --cli)
    logging.getLogger("mininet").propagate = False
    restore_logging()  # our loggers made after Mininet's import printed each warning twice (mininet_logging)
    # SIGTERM tears down like Ctrl-C: context managers remove what the run created
    signals.install()
    ctx = None
    try:
        removed = cleanup.clean()
        if getattr(removed, "total", 0):
            print(f"testbed: removed leftovers of dead runs: {removed}", file=sys.stderr)
        ctx = RunContext.new(spec, scenario_path, results_root, new_run_id(), ops_plan, quiet, print_results)
        if cli:
            from testbed.pipeline.interactive import stdin_kept_for_the_cli
            with stdin_kept_for_the_cli():  # commands piped in wait for the prompt, not for a child to eat them
                summary = _run_context(ctx, cli)
        else:
            summary = _run_context(ctx, cli)
    except KeyboardInterrupt as e:
        printing.print_interrupted(e)
        return _outcome(EXIT_INTERRUPTED_BASE + (signals.received() or signal.SIGINT), ctx)
    except ScenarioError as e:  # refused by this machine once the run had its id: its summary.json says so
        if ctx is not None:
            results_summary.write_refused(ctx, e)
        raise
    except RunRefused as e:
        if ctx is not None:
            results_summary.write_refused(ctx, e)
        print(f"testbed: error: run refused, nothing was built: {e}", file=sys.stderr)
        return _outcome(EXIT_FAILED, ctx)
    except Exception as e:  # a failed run: one line, --debug for the traceback
        printing.print_run_failed(e, debug)
        return _outcome(EXIT_FAILED, ctx)
    code = exit_code(summary)
    if code == EXIT_FAILED:
        printing.print_byte_mismatch(summary)
    return _outcome(code, ctx)


def _outcome(code: int, ctx: Optional[RunContext]) -> RunOutcome:
    """The outcome with the run directory when the run made it."""
    made = ctx is not None and ctx.run_dir.is_dir()
    return RunOutcome(code, ctx.run_dir if made else None)


def _validate(spec: ScenarioSpec, results_root: Path, quiet: bool, max_duration_s: Optional[float],
              over_capacity: bool = False) -> list[PlannedOp]:
    """The op plan of ``spec``'s workload (notes printed), the results root, the duration cap and the machine's
    faithful capacity (testbed.measure.capacity_check: a warning printed above it), checked; the estimate
    printed unless ``quiet``.

    Raises ScenarioError (also for a bad $TESTBED_TIMEOUT_SCALE or a server of ``cluster.servers`` this machine
    cannot resolve), FileNotFoundError, IsADirectoryError,
    estimate.DurationError or capacity_check.CapacityError; nothing is built.
    """
    try:
        timeout_scale()
    except ValueError as e:
        raise ScenarioError(str(e)) from None
    if spec.cluster is not None:  # every server known by name before anything is probed or built
        from testbed.cluster.run_probe import resolve_servers
        try:
            resolve_servers(spec.cluster.servers)
        except ValueError as e:
            raise ScenarioError(f"--servers (cluster.servers): {e}") from None
    workload = workload_for(spec)
    plan = workload.plan()
    ops_plan = list(plan.ops)
    workload.check_machine()  # e.g. workload.perftest where the kernel has no rdma_rxe
    check_results_root(results_root)  # a refused run prints nothing else first
    est_s = workload.estimate_s(plan.ops) + workload.extra_s(plan)
    cap_s = max_duration_s or estimate.MAX_DURATION_S
    if not quiet:
        n_ops, ops_note = workload.operations(plan.ops)
        printing.print_estimate(est_s, n_ops, cap_s, workload.loss_note(plan.ops),
                                estimate.describe_setup(spec.fabric), ops_note)
    print_notes(plan.notes)  # after the estimate: what the plan changed, not the run's first word
    estimate.check_duration(workload.scaling_keys(), est_s, cap_s)
    if spec.tenants:  # a workload across tenants would only time out against the isolation drops
        from testbed.spec.jobs import run_tenant_map
        from testbed.spec.tenants import check_peers
        check_peers(run_tenant_map(spec), workload.peers(plan.ops))
    warning = capacity_check.check_scenario(spec, workload.peers(plan.ops), over_capacity=over_capacity)
    if warning:
        print(f"testbed: warning: {warning}", file=sys.stderr)
    return ops_plan
