"""``testbed run``: one scenario end to end, from validated spec to results directory.

The steps of a run, in order, each a call into its room:

1. validate the scenario and the op plan (testbed.spec, testbed.plan; nothing
   touches the kernel before this passes) and the results root
   (testbed.results.rundir);
2. remove leftovers of dead runs (testbed.host.cleanup);
3. take the run lock (testbed.host.runlock), probe capabilities
   (testbed.host.capabilities), check Open vSwitch's send buffer
   (testbed.measure.send_buffer);
4. make the run directory and write the manifest (testbed.results.manifest);
5. build the fabric (testbed.emulation.fabric: controller ready, queues
   installed and read back) and start one agent per host
   (testbed.emulation.agents);
6. run the workload while sampling switch queues, CPU and departures
   (testbed.measure), reading the drop counters before and after;
7. with the fabric and agents still up: stop the controller's congestion loop
   (its tables), write every table and summary.json with the fidelity verdict
   (testbed.results.summary.write_results, testbed.measure.judge), remove
   ``INCOMPLETE`` and say ``results written ...; tearing down``;
8. tear everything down (context managers);
9. update summary.json with what only the teardown knows (the controller's
   final report and its check), print (testbed.results.summary.finish,
   testbed.results.printing); a run cut short writes what it has, marked
   INCOMPLETE.

One :class:`testbed.run_context.RunContext` carries the run's identity and
set-up from step to step; a :class:`testbed.run_context.Recording` what it
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
import signal
import sys
import time
from pathlib import Path

from testbed.exitcodes import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_FAITHFUL, EXIT_INTERRUPTED_BASE,  # noqa: F401
                               EXIT_NOT_FAITHFUL, exit_code)
from testbed import signals
from testbed.host import capabilities
from testbed.host import cleanup
from testbed.spec import estimate
from testbed.measure import timing
from testbed.measure.capture import captures_for
from testbed.measure.cpu import CpuIdleMonitor
from testbed.measure.drops import DropSnapshot
from testbed.measure.send_buffer import RunRefused, check_run_send_buffer
from dataplane.qdisc_sampler import QdiscSampler
from testbed.emulation.agents import AgentGroup, transport_params
from testbed.emulation import congestion_conf, controller_proc
from testbed.emulation.fabric import Fabric
from testbed.emulation.faults import FaultScheduler
from topology.naming import new_run_id
from testbed.patterns.driver import PatternRun
from testbed.plan import PlannedOp, plan_peers, plan_workload
from testbed.replay_run import run_replay
from testbed.simai_plan import replay_plan
from testbed.host.runlock import RunLock
from testbed.results import manifest, summary as results_summary, tables
from testbed.results import printing
from testbed.results.printing import Progress, print_notes
from testbed.results.rundir import check_results_root
from testbed.run_context import Recording, RunContext
from testbed.spec.rto import run_rto_us
from testbed.spec.scenario import ScenarioError, ScenarioSpec, load_scenario
from traffic.clock import unix_ns

log = logging.getLogger(__name__)


def workload_ops(spec: ScenarioSpec) -> list[PlannedOp]:
    """The operations to run, in order (testbed.plan.PlannedOp: size, group scope and rank groups)."""
    return list(plan_workload(spec).ops)


def run_scenario(spec: ScenarioSpec, scenario_path: Path | None, results_root: Path,
                 quiet: bool = False, run_id: str | None = None,
                 ops_plan: list[PlannedOp] | None = None, cli: bool = False) -> dict:
    """Run a validated scenario; return summary.json's content (also written to the run directory).

    ``ops_plan`` defaults to the plan of :func:`testbed.plan.plan_workload` ``(spec)`` (its notes printed).
    ``cli``: after the workload, open the Mininet CLI on the live fabric (testbed.interactive).
    """
    if ops_plan is None:
        plan = plan_workload(spec)
        ops_plan = list(plan.ops)
        print_notes(plan.notes)
    ctx = RunContext.new(spec, scenario_path, results_root, run_id or new_run_id(), ops_plan, quiet)
    progress = Progress(len(ops_plan), quiet)  # --quiet: no progress, only the summary
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
    caps = capabilities.probe(ctx.run_id)
    if caps.datapath == "none":
        raise RunRefused("Open vSwitch is not usable (" + caps.features["ovs"].detail + "); start it with "
                         "scripts/start-ovs (as root)")
    datapath = caps.datapath if spec.fabric.datapath == "auto" else spec.fabric.datapath
    if datapath == "kernel" and caps.datapath != "kernel":
        raise ScenarioError("fabric.datapath: 'kernel' asked for, but this machine has no openvswitch "
                            "kernel module; allowed here: auto, user")
    peers = _run_peers(ctx)
    transport = transport_params(spec, run_rto_us(spec), max((len(p) for p in peers.values()), default=2))
    send_buffer = check_run_send_buffer(spec, datapath)
    return ctx.probed(datapath, transport, send_buffer), caps


def _run_peers(ctx: RunContext) -> dict[int, list[int]]:
    """rank -> the ranks it needs queue pairs with: the op plan's peers, or a pattern's."""
    if ctx.spec.workload.pattern is None:
        return plan_peers(ctx.ops_plan)
    from testbed.patterns.plan import check_pattern_peers
    return check_pattern_peers(ctx.spec)


def _open_run_dir(ctx: RunContext, caps, progress: Progress) -> None:
    """Make the run directory, marked INCOMPLETE until summary.json of a complete run is in; write the manifest."""
    ctx.run_dir.mkdir(parents=True)
    tables.mark_incomplete(ctx.run_dir, "running (still here after the run ended: it was killed before it "
                                        "could write its results)")
    manifest.write(ctx, caps)
    progress.run_start(ctx)


def _run_fabric(ctx: RunContext, progress: Progress, cli: bool = False) -> dict:
    """Build the fabric, start the agents, measure, write the results, tear down, then update the results
    with what the teardown knows (partial results when cut short before every measurement was in)."""
    rec = Recording(ops_planned=len(ctx.ops_plan))
    try:
        with Fabric(ctx.spec, ctx.run_id, ctx.run_dir, ctx.datapath) as fab:
            rec.fab = fab
            progress.fabric_up(fab)
            if ctx.spec.workload.pattern is not None:  # flows: fresh agents per trial (testbed.patterns)
                rec.patterns = PatternRun(ctx, fab)
                _measure(ctx, fab, None, rec, progress, write=not cli)
            else:
                peers = plan_peers(ctx.ops_plan)
                with AgentGroup(fab, ctx.transport, ctx.spec.seed, lambda r: peers.get(r, []),
                                ctx.spec.workload.channels) as agents:
                    _measure(ctx, fab, agents, rec, progress, write=not cli)
            if cli:  # --cli: the fabric stays up in the Mininet CLI until the user leaves it, then the results
                from testbed.interactive import run_cli
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


def _write_before_teardown(ctx: RunContext, rec: Recording, progress: Progress) -> None:
    """Every measurement is in, the fabric and agents still up: stop the controller's congestion loop (its
    tables), write every table and summary.json (testbed.results.summary.write_results), then say
    ``results written to DIR; tearing down`` (the line a watcher can wait for). Raises what
    write_results raises, KeyboardInterrupt for a signal held back meanwhile (unless the caller holds
    signals back)."""
    warning = congestion_conf.stop_loop(rec.fab)
    if warning:
        log.warning("%s", warning)
    results_summary.write_results(ctx, rec)
    progress.say(f"results written to {ctx.run_dir}; tearing down")


def _measure(ctx: RunContext, fab: Fabric, agents: AgentGroup, rec: Recording, progress: Progress,
             write: bool = True) -> None:
    """Run the workload while sampling switch queues, CPU and departures; read the counters around it;
    with ``write``, write the results before returning (:func:`_write_before_teardown`), signals still
    held back."""
    host_pids = {h.name: fab.net.get(h.name).pid for h in fab.layout.hosts}
    host_ifs = {h.name: fab.host_intfs(h.name) for h in fab.layout.hosts}
    rec.drops_before = DropSnapshot.take(host_pids, fab.switch_ports, host_ifs)
    rec.departures = timing.DepartureCapture(fab.switch_ports)
    rec.sampler = QdiscSampler(fab.switch_ports, ctx.spec.output.sample_period_ms / 1e3,
                               parent=fab.queues.sampled_parent, on_sample=rec.departures.on_sample)
    rec.cpu = CpuIdleMonitor()
    rec.faults = FaultScheduler(fab.layout, ctx.spec.faults, ctx.run_dir, host_pids)
    rec.phase = "traffic"
    capture = captures_for(fab, ctx.spec, ctx.run_dir, ctx.quiet)  # output.pcap: tcpdump listening before traffic
    try:  # faults last: at_s counts from the traffic
        with capture, rec.sampler, rec.cpu, rec.departures, rec.faults:
            if rec.patterns is not None:
                rec.patterns.run(rec, progress)
                signals.defer()
            else:
                _run_workload(ctx, agents, rec, progress)
                time.sleep(0.2)  # let the last ACKs land before counting
                rec.stats = agents.stats()
        rec.drops_after = DropSnapshot.take(host_pids, fab.switch_ports, host_ifs)
        rec.t_measured_ns = unix_ns()
        rec.measured = True
        rec.phase = "teardown"
        if write:
            _write_before_teardown(ctx, rec, progress)
    finally:
        pending = signals.release()
    if pending:
        raise KeyboardInterrupt(f"signal {pending}")


def _run_workload(ctx: RunContext, agents: AgentGroup, rec: Recording, progress: Progress) -> None:
    """Every collective of the plan in order, each a barrier; signals are held back after the last one.

    A SimAI replay runs its timeline instead (testbed.replay_run: compute waits, streams, overlap)."""
    ops_plan = ctx.ops_plan
    if ctx.spec.workload.simai is not None:
        rec.replay = run_replay(ctx, agents, rec, progress, replay_plan(ctx.spec, ops_plan))
        return
    for k, op in enumerate(ops_plan):
        size, factor = op.size_bytes, op.busbw_factor
        expect_s = factor * size * 8 / ctx.goodput_bps
        recs = agents.run_op(k, size, op.groups, timeout_s=10 * expect_s + 20,
                             collective=op.collective, algorithm=op.algorithm)
        rec.rank_rows.extend(recs)
        rec.op_meta[k] = op.meta()
        if k + 1 == len(ops_plan):  # every collective is done: finish measuring, then stop
            signals.defer()
            rec.phase = "the final measurements"
        t_us = (max(r.t_end_ns for r in recs) - min(r.t_start_ns for r in recs)) / 1e3
        last = k + 1 == len(ops_plan) or ops_plan[k + 1].size_bytes != size
        progress.op(k + 1, size, size * 8 / (t_us / 1e6) * factor, last)


def run_from_cli(args, build_spec=None, raise_bad_input: bool = False) -> int:
    """Entry of ``testbed run``: validate, remove leftovers, run, print; return an exit code (EXIT_*).

    ``build_spec(args)``: the spec to run (default: the scenario file ``args.scenario``;
    ``testbed nccl`` overrides its workload), raising ScenarioError on bad input.
    ``raise_bad_input`` (testbed.api): raise the bad-input error instead of printing it and returning 2."""
    try:
        spec, ops_plan = _validate(args, build_spec or (lambda a: load_scenario(a.scenario)))
    except (ScenarioError, FileNotFoundError, IsADirectoryError, estimate.DurationError) as e:
        if raise_bad_input:
            raise
        what = f"no such file: {e.filename}" if isinstance(e, FileNotFoundError) and e.filename else e
        print(f"testbed: error: {what}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from testbed.measure import capacity
    from testbed.emulation.congestion_conf import headroom_warning
    for warning in (capacity.check_scenario(spec), headroom_warning(spec)):
        if warning:
            print(f"testbed: warning: {warning}", file=sys.stderr)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # SIGTERM tears down like Ctrl-C: context managers remove what the run created
    signals.install()
    try:
        removed = cleanup.clean()
        if getattr(removed, "total", 0):
            print(f"testbed: removed leftovers of dead runs: {removed}", file=sys.stderr)
        summary = run_scenario(spec, Path(args.scenario) if args.scenario else None, Path(args.results or "results"),
                               quiet=args.quiet, run_id=getattr(args, "run_id", None), ops_plan=ops_plan,
                               cli=getattr(args, "cli", False))
    except KeyboardInterrupt as e:
        printing.print_interrupted(e)
        return EXIT_INTERRUPTED_BASE + (signals.received() or signal.SIGINT)
    except ScenarioError as e:
        if raise_bad_input:
            raise
        print(f"testbed: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RunRefused as e:
        print(f"testbed: error: run refused, nothing was built: {e}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:  # a failed run: one line, --debug for the traceback
        printing.print_run_failed(e, getattr(args, "debug", False))
        return EXIT_FAILED
    code = exit_code(summary)
    if code == EXIT_FAILED:
        printing.print_byte_mismatch(summary)
    return code


def _validate(args, build_spec) -> tuple[ScenarioSpec, list[PlannedOp]]:
    """The scenario (``build_spec(args)``), its op plan (notes printed), the results root and the duration
    cap, checked.

    Raises ScenarioError, FileNotFoundError, IsADirectoryError or estimate.DurationError; nothing is built.
    """
    spec = build_spec(args)
    plan = plan_workload(spec)
    ops_plan = list(plan.ops)
    print_notes(plan.notes)
    check_results_root(Path(args.results or "results"))
    est_s = estimate.estimate_for_spec(spec, ops_plan)
    if plan.replay is not None:  # compute waits and scale-up collectives of a SimAI replay
        est_s += len(plan.replay.modes) * (plan.replay.compute_s_per_iteration + plan.replay.scale_up_s_per_iteration)
    cap_s = getattr(args, "max_duration", None) or estimate.MAX_DURATION_S
    if not args.quiet:
        printing.print_estimate(est_s, len(ops_plan), cap_s, estimate.loss_note(spec, ops_plan))
    estimate.check_duration(spec, est_s, cap_s)
    return spec, ops_plan
