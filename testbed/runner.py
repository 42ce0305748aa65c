"""``testbed run``: one scenario end to end, from validated spec to results directory.

Steps: validate the scenario (nothing touches the kernel before this passes),
remove leftovers of dead runs, probe capabilities, take the run lock, build the
fabric (controller ready, links shaped and read back), start one agent per
host, run the workload while sampling switch queues and CPU, collect
counters, tear everything down, write the results directory and print the
nccl-tests-style table and the fidelity verdict.

Results directory ``<results>/<UTC time>-<name>-<run id>/``: manifest.json,
ops.csv (per operation), rank_ops.csv (per rank and operation), msgs.csv (per
message: FCT), qps.csv (per queue pair counters), ports.csv (switch queue
samples), cpu.csv, sizes.csv (the printed table), summary.json, the
controller's and agents' logs. Every ``*_ns`` column is Unix-epoch ns of
:func:`traffic.clock.unix_ns`. ``INCOMPLETE`` (the reason) is there from the
start and removed once a run with every measurement in wrote summary.json; a
run cut short during traffic writes the tables of the collectives that
finished and a summary.json with ``"complete": false``.
"""
from __future__ import annotations

from dataclasses import asdict
import logging
import platform
import signal
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import pandas as pd

from testbed.exitcodes import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_FAITHFUL, EXIT_INTERRUPTED_BASE,  # noqa: F401
                               EXIT_NOT_FAITHFUL, exit_code)
from testbed import signals
from testbed.host import capabilities
from testbed.host import cleanup
from testbed.spec import estimate
from testbed.measure import fidelity
from testbed.results import tables as results
from testbed.measure import timing
from testbed.emulation.agents import AgentGroup, transport_params
from testbed.emulation.controller_supervisor import verdict_line as controller_verdict_line
from testbed.measure.verdict import FAILED, PASSED
from testbed.emulation.fabric import Fabric
from testbed.naming import new_run_id
from testbed.plan import PlannedOp, plan_workload
from testbed.host.runlock import RunLock
from testbed.spec.scenario import ScenarioError, ScenarioSpec, load_scenario
from testbed.measure.telemetry import QdiscSampler
from traffic.transport import payload_efficiency, wire_bytes

log = logging.getLogger(__name__)


#: floor and cap of the automatic retransmission timeout (see :func:`auto_rto_us`)
MIN_AUTO_RTO_US = 5_000
MAX_AUTO_RTO_US = 2_000_000
#: queue pairs per host that can have data in flight at once (a ring rank talks to both neighbours)
QPS_PER_HOST = 2


def auto_rto_us(spec: ScenarioSpec) -> int:
    """Go-back-N timeout, us: :func:`rto_basis` ``["rto_us"]``."""
    return rto_basis(spec)["rto_us"]


def rto_basis(spec: ScenarioSpec) -> dict:
    """The automatic go-back-N timeout and how it was derived (stated in the manifest and printed).

    rto = 2 x (3 x queue_bytes x 8 / slow_bps + ack_every_pkts x frame x 8 / host_link_bps),
    clamped to [5 ms, 2 s]: twice (there and back) the worst queueing on a
    3-switch path plus an ACK interval. ``queue_bytes`` per hop is the smaller
    of the switch buffer and all data the senders may have unacknowledged
    (hosts x QPS_PER_HOST x window_pkts x frame): a queue cannot hold more than
    is in flight, so a 100 MB buffer does not make a 40-minute timeout (C15).
    The 2 s cap bounds how long one lost packet stalls a collective; where the
    derived value is larger (deep buffers on slow links) ``capped`` is true,
    and an ACK later than 2 s would show as a spurious retransmission in the
    fidelity verdict rather than pass unseen.

    Returns: dict with rto_us, derived_us, capped, queue_bytes, slow_bps.
    """
    from traffic import wire

    f, t = spec.fabric, spec.transport
    slow_bps = min(f.host_link_bps, f.fabric_link_bps)
    frame = wire_bytes(wire.BTH_BYTES + t.payload_bytes + wire.ICRC_BYTES)
    in_flight = f.n_hosts * QPS_PER_HOST * t.window_pkts * frame
    queue_bytes = min(f.buffer_bytes, in_flight)
    queue_s = 3 * queue_bytes * 8 / slow_bps
    pkt_s = frame * 8 / f.host_link_bps
    derived = int(2e6 * (queue_s + t.ack_every_pkts * pkt_s))
    rto = min(MAX_AUTO_RTO_US, max(MIN_AUTO_RTO_US, derived))
    return {"rto_us": rto, "derived_us": derived, "capped": derived > MAX_AUTO_RTO_US,
            "queue_bytes": queue_bytes, "slow_bps": slow_bps}


def describe_rto(spec: ScenarioSpec) -> str:
    """One line stating the run's retransmission timeout and where it came from."""
    if spec.transport.rto_us != "auto":
        return f"retransmission timeout {spec.transport.rto_us / 1e3:g} ms (transport.rto_us)"
    b = rto_basis(spec)
    text = (f"retransmission timeout {b['rto_us'] / 1e3:g} ms (auto: 2 x (3 hops x {b['queue_bytes']} B queued "
            f"at {b['slow_bps'] / 1e6:g} Mbit/s + ACK interval)")
    if b["capped"]:
        text += f"; derived {b['derived_us'] / 1e6:.1f} s, capped at {MAX_AUTO_RTO_US / 1e6:g} s"
    return text + ")"


def workload_ops(spec: ScenarioSpec) -> list[PlannedOp]:
    """The operations to run, in order (testbed.plan.PlannedOp: size, group scope and rank groups)."""
    return list(plan_workload(spec).ops)


def ring_peers(ops_plan) -> dict[int, list[int]]:
    """rank -> the ranks it needs queue pairs with: its ring neighbours in every group of the plan."""
    peers: dict[int, set] = {}
    for groups in {op.groups for op in ops_plan}:
        for g in groups:
            for i, r in enumerate(g):
                peers.setdefault(r, set()).update({g[(i + 1) % len(g)], g[i - 1]})
    return {r: sorted(p) for r, p in peers.items()}


def _git_commit() -> str | None:
    import subprocess
    try:
        res = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.strip() or None


def _versions() -> dict:
    out = {"python": platform.python_version(), "kernel": platform.release(), "git_commit": _git_commit()}
    for pkg in ("aifabric-testbed", "os-ken", "scapy", "pandas", "pyroute2", "pydantic", "mininet"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


class Progress:
    """One line per operation on a terminal (overwritten), one per size otherwise."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.quiet, self.tty = total, quiet, sys.stderr.isatty()
        self.t0 = time.monotonic()

    def op(self, k: int, size: int, busbw_bps: float, last_of_size: bool) -> None:
        if self.quiet or (not self.tty and not last_of_size):
            return
        line = (f"[{k:>4}/{self.total}] {time.monotonic() - self.t0:6.1f} s  size {size:>9} B  "
                f"busbw {busbw_bps / 1e6:7.3f} Mbit/s")
        sys.stderr.write(("\r" + line) if self.tty else line + "\n")
        if self.tty and last_of_size:
            sys.stderr.write("\n")
        sys.stderr.flush()

    def say(self, msg: str) -> None:
        if not self.quiet:
            sys.stderr.write(msg + "\n")
            sys.stderr.flush()


def run_scenario(spec: ScenarioSpec, scenario_path: Path | None, results_root: Path,
                 quiet: bool = False, run_id: str | None = None,
                 ops_plan: list[PlannedOp] | None = None) -> dict:
    """Run a validated scenario; return summary.json's content (also written to the run directory).

    ``ops_plan`` defaults to the plan of :func:`testbed.plan.plan_workload` ``(spec)`` (its notes printed).
    """
    run_id = run_id or new_run_id()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_dir = Path(results_root).resolve() / f"{stamp}-{spec.name}-{run_id}"
    if ops_plan is None:
        plan = plan_workload(spec)
        ops_plan = list(plan.ops)
        for note in plan.notes:
            print(f"testbed: note: {note}", file=sys.stderr)
    progress = Progress(len(ops_plan), quiet)  # --quiet: no progress, only the summary

    with RunLock(run_id):  # held from the probe on: a concurrent clean never takes our objects
        return _run_locked(spec, scenario_path, run_id, run_dir, ops_plan, progress, quiet)


def _run_locked(spec, scenario_path, run_id, run_dir, ops_plan, progress, quiet) -> dict:
    stamp = run_dir.name.split("-")[0]
    caps = capabilities.probe(run_id)
    datapath = caps.datapath if spec.fabric.datapath == "auto" else spec.fabric.datapath
    if datapath == "kernel" and caps.datapath != "kernel":
        raise ScenarioError("fabric.datapath: 'kernel' asked for, but this machine has no openvswitch "
                            "kernel module; allowed here: auto, user")
    n = spec.fabric.n_hosts
    rto_us = auto_rto_us(spec) if spec.transport.rto_us == "auto" else spec.transport.rto_us
    transport = transport_params(spec, rto_us)
    send_buffer = fidelity.check_run_send_buffer(spec, datapath)
    run_dir.mkdir(parents=True)
    results.mark_incomplete(run_dir, "running (still here after the run ended: it was killed before it could "
                                     "write its results)")
    efficiency = payload_efficiency(spec.transport.payload_bytes)
    goodput_bps = spec.fabric.host_link_bps * efficiency
    manifest = {
        "run_id": run_id, "started_utc": stamp, "scenario_path": str(Path(scenario_path).resolve()) if scenario_path else None,
        "scenario": spec.model_dump(mode="json"), "versions": _versions(),
        "capabilities": caps.as_dict(), "backends": {"datapath": datapath, "ecn_marker": caps.ecn_marker,
                                                     "delay": caps.delay},
        "scale_factor": spec.scale_factor, "reference_link_bps": spec.reference_link_bps,
        "seed": spec.seed, "transport": asdict(transport), "payload_efficiency": efficiency,
        "rto": {"source": "auto" if spec.transport.rto_us == "auto" else "transport.rto_us",
                **(rto_basis(spec) if spec.transport.rto_us == "auto" else {"rto_us": rto_us}),
                "text": describe_rto(spec)},
        "estimated_duration_s": round(estimate.estimate_for_spec(spec, ops_plan), 1),
        "fidelity_checks_switched_off": spec.fidelity.switched_off(),
        "rank_groups": {op.group: [list(g) for g in op.groups] for op in ops_plan},  # scope -> concurrent rings
        "link_model": timing.link_model(spec, caps.delay),  # refuses a delay this kernel cannot add
        "ovs_send_buffer": send_buffer,
    }
    results.write_json(run_dir / "manifest.json", manifest)
    progress.say(f"run {run_id}: {spec.fabric.spines} spines, {spec.fabric.leaves} leaves, {n} hosts, "
                 f"host links {spec.fabric.host_link_bps / 1e6:g} Mbit/s, datapath {datapath}; "
                 f"results in {run_dir}")
    progress.say(describe_rto(spec))

    rec = _Recording(run_id=run_id, ops_planned=len(ops_plan))
    measured = False
    try:
        with Fabric(spec, run_id, run_dir, datapath) as fab:
            rec.fab = fab
            progress.say(f"fabric up: {len(fab.ready.get('dpids', []))} switches confirmed flows and groups; "
                         f"{len(fab.port_rate_bps)} shaped links read back within 1%")
            peers = ring_peers(ops_plan)
            with AgentGroup(fab, transport, spec.seed, lambda r: peers.get(r, [])) as agents:
                host_pids = {h.name: fab.net.get(h.name).pid for h in fab.layout.hosts}
                host_ifs = {h.name: [h.intf] for h in fab.layout.hosts}
                drops_before = fidelity.DropSnapshot.take(host_pids, fab.switch_ports, host_ifs)
                rec.departures = timing.DepartureCapture(fab.switch_ports)
                rec.sampler = QdiscSampler(fab.switch_ports, spec.output.sample_period_ms / 1e3,
                                           on_sample=rec.departures.on_sample)
                rec.cpu = fidelity.CpuIdleMonitor()
                rec.phase = "traffic"
                try:
                    with rec.sampler, rec.cpu, rec.departures:
                        for k, op in enumerate(ops_plan):
                            size, factor = op.size_bytes, results.allreduce_busbw_factor(op.group_size)
                            expect_s = factor * size * 8 / goodput_bps
                            recs = agents.run_op(k, size, op.groups, timeout_s=10 * expect_s + 20)
                            rec.rank_rows.extend(recs)
                            rec.op_meta[k] = op.meta()
                            if k + 1 == len(ops_plan):  # every collective is done: finish measuring, then stop
                                signals.defer()
                                rec.phase = "the final measurements"
                            t_us = (max(r.t_end_ns for r in recs) - min(r.t_start_ns for r in recs)) / 1e3
                            last = k + 1 == len(ops_plan) or ops_plan[k + 1].size_bytes != size
                            progress.op(k + 1, size, size * 8 / (t_us / 1e6) * factor, last)
                        time.sleep(0.2)  # let the last ACKs land before counting
                        rec.stats = agents.stats()
                    drops_after = fidelity.DropSnapshot.take(host_pids, fab.switch_ports, host_ifs)
                    measured = True
                    rec.phase = "teardown"
                finally:
                    pending = signals.release()
                if pending:
                    raise KeyboardInterrupt(f"signal {pending}")
    except BaseException as e:
        if not measured:  # keep what was measured, marked incomplete, then fail as before
            _write_partial(spec, run_dir, n, goodput_bps, efficiency, rec, e)
            raise
        note = f"{_what_stopped(e)} during the teardown, after every measurement was in; results complete"
        summary = _write_results(spec, run_dir, n, goodput_bps, efficiency, rec.rank_rows, rec.op_meta, rec.stats,
                                 rec.sampler, rec.cpu, drops_before, drops_after, rec.fab, transport, send_buffer,
                                 note=note, departures=rec.departures)
        e.results_note = f"complete results kept in {run_dir}"
        raise
    return _write_results(spec, run_dir, n, goodput_bps, efficiency, rec.rank_rows, rec.op_meta, rec.stats,
                          rec.sampler, rec.cpu, drops_before, drops_after, fab, transport, send_buffer,
                          departures=rec.departures)


class _Recording:
    """What a run measured so far: kept and written even when the run is cut short."""

    def __init__(self, run_id: str, ops_planned: int):
        self.run_id, self.ops_planned = run_id, ops_planned
        self.phase = "start-up"
        self.fab = self.sampler = self.cpu = self.departures = None
        self.rank_rows: list[dict] = []
        self.op_meta: dict[int, dict] = {}
        self.stats: list = []  # traffic.protocol.Stats, one per agent


def _what_stopped(e: BaseException) -> str:
    if isinstance(e, KeyboardInterrupt):
        return signals.received_name()
    text = f"{type(e).__name__}: {e}"
    return "failed: " + (text if len(text) <= 300 else text[:300] + "...")


def _frame(sampler):
    """A sampler's table (QdiscSampler.to_frame / CpuIdleMonitor.samples), None if it never started."""
    if sampler is None:
        return None
    return sampler.to_frame() if hasattr(sampler, "to_frame") else sampler.samples()


def _write_partial(spec, run_dir, n, goodput_bps, efficiency, rec: _Recording, exc: BaseException) -> None:
    """The run stopped before every measurement was in: write what there is, mark the directory INCOMPLETE.

    Sets ``exc.results_note`` (what was kept, for the closing message). Never raises: the run's own
    error is the one to report.
    """
    done = len(rec.op_meta)
    reason = f"{_what_stopped(exc)} during {rec.phase} after {done} of {rec.ops_planned} collectives"
    signals.defer()
    try:
        results.mark_incomplete(run_dir, reason)
        ops, sizes, *_ = results.write_tables(run_dir, n, goodput_bps, rec.rank_rows, rec.op_meta, rec.stats,
                                              _frame(rec.sampler), _frame(rec.cpu))
        summary = {
            "run_id": rec.run_id, "run_dir": str(run_dir), "scenario": spec.name, "n_ranks": n,
            "complete": False, "incomplete_reason": reason, "ops_done": done, "ops_planned": rec.ops_planned,
            "faithful": None, "violations": [], "fidelity": "not judged: the run is incomplete",
            "controller": rec.fab.controller_report if rec.fab is not None else None,
            "host_link_bps": spec.fabric.host_link_bps, "payload_efficiency": efficiency,
            "scale_factor": spec.scale_factor, "transport": None,
            "percentile_method": results.PERCENTILE_METHOD, "sizes": results.size_rows_json(sizes),
        }
        results.write_json(run_dir / "summary.json", summary)
        if done:
            print(f"# INCOMPLETE: {reason}; the collectives that finished:")
            print(results.format_size_table(sizes))
        exc.results_note = (f"partial results ({done} of {rec.ops_planned} collectives) kept in {run_dir}, "
                            f"marked INCOMPLETE" if done else
                            f"no collective had finished; {run_dir} is marked INCOMPLETE")
    except Exception as e:  # noqa: BLE001  the directory keeps its INCOMPLETE mark
        log.warning("could not write the partial results to %s: %s", run_dir, e)
        exc.results_note = f"partial results could not be written; {run_dir} is marked INCOMPLETE"
    finally:
        if signals.release() and not isinstance(exc, KeyboardInterrupt):
            exc.results_note += "; interrupted while writing them"


def _thresholds(spec: ScenarioSpec) -> fidelity.FidelityThresholds:
    """The verdict's thresholds; a check the scenario switched ``off`` gets a limit it cannot fail
    (listed in manifest.json ``fidelity_checks_switched_off`` and printed)."""
    f = spec.fidelity
    return fidelity.FidelityThresholds(
        min_cpu_idle_pct=0.0 if f.min_cpu_idle_pct is None else f.min_cpu_idle_pct,
        max_unexplained_drops=2**62 if f.max_unexplained_drops_pkts is None else f.max_unexplained_drops_pkts,
        max_spurious_retx_pkts=2**62 if f.max_spurious_retx_pkts is None else f.max_spurious_retx_pkts,
        min_link_rate_ratio=1e-12 if f.min_link_rate_ratio is None else f.min_link_rate_ratio,
        max_frame_bytes=spec.fabric.mtu_bytes + 14)


def _write_results(spec, run_dir, n, goodput_bps, efficiency, rank_rows, op_meta, stats, sampler, cpu,
                   drops_before, drops_after, fab, transport, send_buffer, note=None, departures=None) -> dict:
    """Every measurement is in: write the tables, judge fidelity, write summary.json, clear INCOMPLETE, print.

    ``note``: what happened after the measurements (e.g. an interrupt during the teardown), kept in
    summary.json as ``interrupted``. Signals are held back while writing, so the directory is never
    left half-written by a Ctrl-C.
    """
    signals.defer()
    try:
        return _write_results_now(spec, run_dir, n, goodput_bps, efficiency, rank_rows, op_meta, stats, sampler,
                                  cpu, drops_before, drops_after, fab, transport, send_buffer, note,
                                  departures)
    except Exception as e:
        results.mark_incomplete(run_dir, f"every measurement was in, but writing the results failed: {e}"[:500])
        e.results_note = f"{run_dir} is marked INCOMPLETE"
        raise
    finally:
        if signals.release():
            print("testbed: interrupted while writing the results; they were written first", file=sys.stderr)


def _write_results_now(spec, run_dir, n, goodput_bps, efficiency, rank_rows, op_meta, stats, sampler, cpu,
                       drops_before, drops_after, fab, transport, send_buffer, note,
                       departures=None) -> dict:
    ops, sizes, qps, msgs, ports, cpu_df = results.write_tables(run_dir, n, goodput_bps, rank_rows, op_meta, stats,
                                                                _frame(sampler), _frame(cpu))

    # switch queue drops from the queue counters read before and after the traffic, not from sampler rows
    switch_drops = fidelity.queue_drops_delta(drops_before, drops_after)
    t = fidelity.transport_totals(qps, [st.rx_pkts for st in stats], switch_drops, transport.window_pkts)
    req = qps[qps["role"] == "requester"]
    # one row per host NIC: bytes of all its QPs over the longest time one of them had work
    # (an approximation when several QPs of a host overlap only partly)
    active = req[req["tx_pkts"] > 0]
    per_host = active.groupby("rank").agg(tx_wire_bytes=("tx_wire_bytes", "sum"), tx_work_ns=("tx_work_ns", "max"))
    host_tx = pd.DataFrame({"host": [fab.layout.hosts[int(r)].name for r in per_host.index],
                            "tx_wire_bytes": per_host["tx_wire_bytes"].to_numpy(),
                            "tx_busy_s": per_host["tx_work_ns"].to_numpy() / 1e9,
                            "link_bps": spec.fabric.host_link_bps})
    th = _thresholds(spec)
    verdict = fidelity.evaluate(cpu_df, fidelity.delta(drops_before, drops_after), ports, fab.port_rate_bps,
                                host_tx, th, transport=t,
                                departures=timing.write_departures(departures, run_dir))
    fidelity.judge_send_buffer(verdict, send_buffer)
    controller = fab.controller_report  # deaths, restarts, OpenFlow errors (testbed.emulation.controller_supervisor)
    verdict.add("controller", FAILED if controller["violations"] else PASSED, "\n".join(controller["violations"]))
    summary = {
        "run_id": fab.run_id, "run_dir": str(run_dir), "scenario": spec.name, "n_ranks": n,
        "complete": True, "interrupted": note, "ops_done": len(op_meta), "ops_planned": len(op_meta),
        "faithful": verdict.faithful, "violations": verdict.violations, "not_judged": verdict.not_judged,
        "checks": verdict.checks, "fidelity": verdict.figures, "controller": controller,
        "host_link_bps": spec.fabric.host_link_bps, "payload_efficiency": efficiency,
        "scale_factor": spec.scale_factor, "transport": t,
        "percentile_method": results.PERCENTILE_METHOD, "sizes": results.size_rows_json(sizes),
    }
    timing.add_busbw_error_bounds(summary["sizes"], spec, results.allreduce_busbw_factor, efficiency)
    results.write_json(run_dir / "summary.json", summary)
    results.mark_complete(run_dir)
    print(f"# ring all-reduce, {n} hosts (ranks: per ring), host link {spec.fabric.host_link_bps / 1e6:g} Mbit/s, "
          f"payload efficiency {efficiency:.3f} (busbw/link = busbw / (link x efficiency)); time = first rank's "
          f"start to last rank's end, avg = per-rank time averaged over ranks (nccl-tests); n = samples")
    print(results.format_size_table(sizes))
    print(f"# transport: {t['delivered_bytes']} of {t['posted_bytes']} posted bytes delivered exactly once, "
          f"{t['acked_bytes']} acknowledged (order errors {t['order_errors']}); {t['retx_pkts']} retransmitted "
          f"packets ({t['spurious_retx_pkts']} spurious); {t['switch_drops_pkts']} switch-queue drops, "
          f"{t['unexplained_lost_pkts']} packets lost elsewhere")
    print(f"# {controller_verdict_line(controller)}")
    if spec.fidelity.switched_off():
        print(f"# fidelity: switched off by the scenario: {', '.join(spec.fidelity.switched_off())}")
    for line in verdict.lines():
        print(line)
    print(f"# results: {run_dir}")
    return summary


def check_results_root(root: Path) -> None:
    """Raise ScenarioError unless ``root`` is a writable directory or can be created (nothing is made).

    Probes by really creating and removing a temporary file in ``root`` or in
    its nearest existing ancestor (so read-only mounts, files in the way and
    missing permissions are all caught before anything is built).
    """
    import tempfile

    root = Path(root).absolute()
    probe_dir = root
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise ScenarioError(f"--results {root}: {probe_dir} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe_dir):
            pass
    except OSError as e:
        what = "is not writable" if probe_dir == root else f"cannot be created ({probe_dir} is not writable)"
        raise ScenarioError(f"--results {root}: {what}: {e.strerror}") from None


def run_from_cli(args) -> int:
    """Entry of ``testbed run``: validate, run, print; return an exit code (EXIT_*)."""
    try:
        spec = load_scenario(args.scenario)
        plan = plan_workload(spec)
        ops_plan = list(plan.ops)
        for note in plan.notes:
            print(f"testbed: note: {note}", file=sys.stderr)
        check_results_root(Path(args.results or "results"))
        est_s = estimate.estimate_for_spec(spec, ops_plan)
        if not args.quiet:
            print(f"testbed: estimated duration {estimate.format_duration(est_s)} ({len(ops_plan)} operations; "
                  f"cap {estimate.format_duration(getattr(args, 'max_duration', None) or estimate.MAX_DURATION_S)})",
                  file=sys.stderr)
        estimate.check_duration(spec, est_s, getattr(args, "max_duration", None) or estimate.MAX_DURATION_S)
    except (ScenarioError, FileNotFoundError, IsADirectoryError, estimate.DurationError) as e:
        print(f"testbed: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from testbed.measure import capacity
    warning = capacity.check_scenario(spec)
    if warning:
        print(f"testbed: warning: {warning}", file=sys.stderr)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # SIGTERM tears down like Ctrl-C: context managers remove what the run created
    signals.install()
    try:
        removed = cleanup.clean()
        if getattr(removed, "total", 0):
            print(f"testbed: removed leftovers of dead runs: {removed}", file=sys.stderr)
        summary = run_scenario(spec, Path(args.scenario), Path(args.results or "results"), quiet=args.quiet,
                               ops_plan=ops_plan)
    except KeyboardInterrupt as e:
        kept = getattr(e, "results_note", "no results were written")
        print(f"testbed: interrupted; the fabric and everything else this run created were removed; {kept}",
              file=sys.stderr)
        return EXIT_INTERRUPTED_BASE + (signals.received() or signal.SIGINT)
    except ScenarioError as e:
        print(f"testbed: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except fidelity.RunRefused as e:
        print(f"testbed: error: run refused, nothing was built: {e}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:  # a failed run: one line, --debug for the traceback
        if getattr(args, "debug", False):
            import traceback
            traceback.print_exc()
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"testbed: error: run failed: {type(e).__name__}: {msg}".rstrip(": "), file=sys.stderr)
        if getattr(e, "results_note", None):
            print(f"testbed: the run failed; {e.results_note}", file=sys.stderr)
        return EXIT_FAILED
    code = exit_code(summary)
    if code == EXIT_FAILED:
        print("testbed: error: run failed: " + "; ".join(
            v for v in summary["violations"] if v.startswith("byte mismatch")), file=sys.stderr)
    return code
