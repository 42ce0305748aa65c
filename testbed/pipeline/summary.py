"""summary.json and the end of a run's directory: complete results, or what there is of a run cut short.

A run with every measurement in writes its results in two steps, so that they
are on disk before anything is torn down (a SIGKILL during the teardown keeps
them):

1. :func:`write_results`, the fabric and agents still up: write every table,
   judge fidelity (the controller check on the supervisor's report as of now),
   write summary.json (``"complete": true``, ``"teardown": "pending"``) and
   remove ``INCOMPLETE``;
2. :func:`finish`, after the teardown: update summary.json with what only the
   teardown knows (the controller's final report, the controller check judged
   again on it, ``"teardown": "done"``, an interrupt during the teardown),
   atomically, then print the results and make report.html.

:func:`write_partial` (the run stopped before every measurement was in):
write the tables of the collectives that finished and a summary.json with
``"complete": false``; ``INCOMPLETE`` holds the reason. :func:`write_refused` (refused after it got its run id,
before its fabric): a run directory with INCOMPLETE and a summary.json with ``"status": "refused"``. Every
summary.json has one shape (testbed.results.shape.RunSummary). Signals are held back
while any of them writes, so the directory is never left half-written by a Ctrl-C.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from testbed.measure.class_queues import traffic_classes_block
from testbed.results.congestion import congestion_block, stable_congestion
from testbed.process import signals
from testbed.measure.link_model import add_busbw_error_bounds, early_bytes
from testbed.pipeline.judge import judge_controller, judge_run
from testbed.measure.verdict import FidelityVerdict
from testbed.results import fit
from testbed.pipeline import printing
from testbed.results.adaptive import summary_adaptive
from testbed.results.faults import faults_block
from testbed.results.pfc_hosts import pfc_hosts_block
from testbed.results.rundir import RunDir
from testbed.results.shape import INCOMPLETE, stable_summary
from testbed.results import tables
from testbed.report import command as report_command
from testbed.pipeline.context import Recording, RunContext
from testbed.tenants import results as tenant_results

log = logging.getLogger(__name__)


def what_stopped(e: BaseException) -> str:
    """A run's stopping cause in a few words: the signal's name, or ``failed: <error>`` (300 characters at most)."""
    if isinstance(e, KeyboardInterrupt):
        return signals.received_name()
    text = f"{type(e).__name__}: {e}"
    return "failed: " + (text if len(text) <= 300 else text[:300] + "...")


def _frame(sampler):
    """A sampler's table (QdiscSampler.to_frame / CpuIdleMonitor.samples), None if it never started."""
    if sampler is None:
        return None
    return sampler.to_frame() if hasattr(sampler, "to_frame") else sampler.samples()


def _write_tables(ctx: RunContext, rec: Recording):
    return tables.write_tables(RunDir(ctx.run_dir), ctx.n_ranks, ctx.goodput_bps, rec.rank_rows, rec.op_meta, rec.stats,
                               _frame(rec.sampler), _frame(rec.cpu))


def _common(ctx: RunContext) -> dict:
    """The summary.json keys that close every summary, complete or not."""
    return {"host_link_bps": ctx.spec.fabric.host_link_bps, "payload_efficiency": ctx.efficiency,
            "scale_factor": ctx.spec.scale_factor}


def _congestion_so_far(ctx: RunContext) -> dict | None:
    """The congestion block of a run cut short (the loop wrote its files when the controller stopped), None
    when there is none or it cannot be read (the partial results are written all the same)."""
    try:
        return congestion_block(ctx.run_dir)
    except Exception as e:  # noqa: BLE001
        log.warning("the congestion loop's files in %s could not be read: %s", ctx.run_dir, e)
        return None


def write_partial(ctx: RunContext, rec: Recording, exc: BaseException) -> None:
    """The run stopped before every measurement was in: write what there is, mark the directory INCOMPLETE.

    Sets ``exc.results_note`` (what was kept, for the closing message). Never raises: the run's own
    error is the one to report.
    """
    done = len(rec.op_meta)
    reason = f"{what_stopped(exc)} during {rec.phase} after {done} of {rec.ops_planned} collectives"
    run = RunDir(ctx.run_dir)
    signals.defer()
    try:
        run.mark_incomplete(reason)
        ops, sizes, *_ = _write_tables(ctx, rec)
        summary = {
            "run_id": ctx.run_id, "run_dir": str(ctx.run_dir), "scenario": ctx.spec.name, "n_ranks": ctx.n_ranks,
            "status": "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed", "status_reason": reason,
            "complete": False, "incomplete_reason": reason,
            "interrupted": signals.received_name() if isinstance(exc, KeyboardInterrupt) else None,
            "ops_done": done, "ops_planned": rec.ops_planned, "faithful": None, "verdict": INCOMPLETE,
            "violations": [], "not_judged": [], "checks": {}, "fidelity": {},
            "controller": rec.fab.controller_report if rec.fab is not None else None,
            **_common(ctx), "transport": {"loss_recovery": getattr(ctx.transport, "loss_recovery", None)},
            "percentile_method": tables.PERCENTILE_METHOD, "sizes": tables.size_rows_json(sizes),
            "congestion": stable_congestion(_congestion_so_far(ctx)),
        }
        if rec.background is not None and rec.background.stopped:  # what the background flows did until then
            from testbed.results.background import write_background
            summary["background"] = write_background(ctx.run_dir, rec.background)
        run.write_parquet_or_warn()
        run.write_summary(stable_summary(summary))
        if done and ctx.print_results:
            printing.print_partial(reason, sizes)
        print(report_command.after_run(ctx.run_dir), file=sys.stderr)
        exc.results_note = (f"partial results ({done} of {rec.ops_planned} collectives) kept in {ctx.run_dir}, "
                            f"marked INCOMPLETE" if done else
                            f"no collective had finished; {ctx.run_dir} is marked INCOMPLETE")
    except Exception as e:  # noqa: BLE001  the directory keeps its INCOMPLETE mark
        log.warning("could not write the partial results to %s: %s", ctx.run_dir, e)
        exc.results_note = f"partial results could not be written; {ctx.run_dir} is marked INCOMPLETE"
    finally:
        if signals.release() and not isinstance(exc, KeyboardInterrupt):
            exc.results_note += "; interrupted while writing them"


def write_refused(ctx: RunContext, exc: BaseException) -> bool:
    """The run was refused after it got its run id, before its run directory was made (the controller framework
    is not installed, the machine lacks the datapath, ECN marker or link delay asked for, Open vSwitch is unusable):
    make the run directory (or keep the one the manifest was written to), marked INCOMPLETE, holding a summary.json
    with ``"status": "refused"``, the reason and every other block ``null`` or empty. Returns whether it was written; never raises (the refusal is the error to
    report). A summary.json already there (the run got further and wrote its own) is left alone."""
    if (ctx.run_dir / "summary.json").exists():
        return False
    reason = f"refused: {exc}"[:500]
    try:
        ctx.run_dir.mkdir(parents=True, exist_ok=True)
        run = RunDir(ctx.run_dir)
        run.mark_incomplete(reason)
        run.write_summary(stable_summary({
            "run_id": ctx.run_id, "run_dir": str(ctx.run_dir), "scenario": ctx.spec.name, "n_ranks": ctx.n_ranks,
            "status": "refused", "status_reason": reason, "complete": False, "incomplete_reason": reason,
            "ops_done": 0, "ops_planned": len(ctx.ops_plan), "faithful": None, "verdict": INCOMPLETE,
            "violations": [], "not_judged": [], "checks": {}, "fidelity": {}, **_common(ctx),
            "percentile_method": tables.PERCENTILE_METHOD, "sizes": [], "congestion": stable_congestion(None)}))
        return True
    except Exception as e:  # noqa: BLE001
        log.warning("could not write the refused run's summary to %s: %s", ctx.run_dir, e)
        return False


@dataclass
class Written:
    """What :func:`write_results` put on disk, for :func:`finish`: summary.json's content, the size table
    (DataFrame, testbed.results.tables.SIZES_COLUMNS), the transport totals, the verdict and the fit rows."""

    summary: dict
    sizes: object
    transport: dict
    verdict: FidelityVerdict
    fits: list | None


def write_results(ctx: RunContext, rec: Recording) -> dict:
    """Every measurement is in, the fabric still up: write every table and summary.json, clear INCOMPLETE.

    The controller check judges the supervisor's report as of now (``rec.fab.controller_health()``).
    Sets ``rec.results`` (:class:`Written`) and returns summary.json's content; prints nothing
    (:func:`finish` does, after the teardown). On an error the directory is marked INCOMPLETE,
    ``results_note`` set on the error, and the error raised. SIGINT/SIGTERM are held back meanwhile;
    one that arrived is raised (KeyboardInterrupt) once the results are written, unless the caller
    holds signals back too (testbed.process.signals.defer).
    """
    signals.defer()
    try:
        rec.controller = rec.fab.controller_health()
        rec.results = _write_results_now(ctx, rec)
    except Exception as e:
        e.results_note = f"{ctx.run_dir} is marked INCOMPLETE"
        try:
            RunDir(ctx.run_dir).mark_incomplete(f"every measurement was in, but writing the results failed: {e}"[:500])
        except OSError:  # a full file system: the INCOMPLETE written at the start stays
            e.results_note += " (since the start: the reason could not be written)"
        raise
    finally:
        pending = signals.release()
    if pending:
        raise KeyboardInterrupt(f"signal {pending}")
    return rec.results.summary


def finish(ctx: RunContext, rec: Recording, note: str | None = None) -> dict:
    """After the teardown: update summary.json with the controller's final report, write report.html and
    print the results (stdout; nothing with ``ctx.print_results`` False).

    The controller block becomes ``rec.fab.controller_report`` (taken when the fabric stopped) and the
    controller check is judged again on it (testbed.pipeline.judge.judge_controller: an OpenFlow error
    logged during the teardown fails it; a death after the measurement is named, not failed);
    ``teardown`` becomes ``done``; ``note`` (what happened after the measurements, e.g. an interrupt
    during the teardown) is kept as ``interrupted``. summary.json is replaced atomically; if that
    fails, the one written before the teardown stays (a warning says so). Returns summary.json's
    content. Needs :func:`write_results` to have succeeded (``rec.results``).
    """
    w: Written = rec.results
    signals.defer()
    try:
        summary = dict(w.summary)
        final = rec.fab.controller_report if rec.fab is not None else None
        if final is not None:
            rec.controller = final
            judge_controller(w.verdict, final, rec.t_measured_ns)
        summary.update({"interrupted": note, "controller": rec.controller, "faithful": w.verdict.faithful,
                        "verdict": w.verdict.status,
                        "violations": w.verdict.violations, "not_judged": w.verdict.not_judged,
                        "checks": w.verdict.checks,
                        "teardown": "done" if final is not None else
                        "done, without the controller's final report (the controller block is from the end of "
                        "the measurement)"})
        try:
            summary = stable_summary(summary)
            RunDir(ctx.run_dir).write_summary(summary)
        except Exception as e:  # noqa: BLE001  the complete results written before the teardown stay
            log.warning("could not update %s after the teardown (%s); it holds the results as of the end of "
                        "the measurement", ctx.run_dir / "summary.json", e)
        w.summary = summary
        report_line = report_command.after_run(ctx.run_dir)  # report.html from the tables just written
        if ctx.print_results:
            _print_results(ctx, rec, w)
            print(report_line)
        elif not report_line.startswith("#"):  # the warning that report.html was not written
            print(report_line, file=sys.stderr)
        return summary
    finally:
        if signals.release():
            print("testbed: interrupted while writing the results; they were written first", file=sys.stderr)


def _print_results(ctx: RunContext, rec: Recording, w: Written) -> None:
    summary = w.summary
    workload = rec.workload
    for line in workload.lines_before(ctx, summary) if workload is not None else ():
        print(line)
    printing.print_results(ctx, w.sizes, w.transport, summary["controller"], w.verdict, rec.op_meta)
    printing.print_blocks(summary)
    for line in tenant_results.lines(summary):
        print(line)
    for line in workload.lines_after(ctx, summary) if workload is not None else ():
        print(line)
    if summary.get("background") is not None:
        from testbed.results.background import background_lines
        for line in background_lines(summary["background"]):
            print(line)
    for row in w.fits or ():
        print(fit.fit_line(row))


def _write_results_now(ctx: RunContext, rec: Recording) -> Written:
    ops, sizes, qps, msgs, ports, cpu = _write_tables(ctx, rec)
    faults = faults_block(rec.faults, ctx.run_dir, ctx.run_id)
    background = None  # background.csv and its block; its fabric losses leave the loss identity's switch queues,
    bg_tx = None  # and its bytes join its senders' NIC figures (testbed.pipeline.judge)
    if rec.background is not None:
        from testbed.results.background import host_tx_wire_bytes, write_background
        background = write_background(ctx.run_dir, rec.background)
        bg_tx = {ctx.run_id + h: b for h, b in host_tx_wire_bytes(background["flows"],
                                                                  ctx.spec.fabric.mtu_bytes).items()}
    verdict, t = judge_run(ctx, rec, qps, ports, cpu, faults, sizes,
                           background_lost_pkts=background["lost_pkts"] if background else 0,
                           background_tx_bytes=bg_tx)
    tenants: dict = {}  # summary.json ``tenants`` and the verdict's ``isolation`` check (testbed.tenants)
    tenant_results.add_results(rec.tenants, tenants, verdict, ctx.run_dir)
    summary = {
        "run_id": ctx.run_id, "run_dir": str(ctx.run_dir), "scenario": ctx.spec.name, "n_ranks": ctx.n_ranks,
        "status": "complete", "status_reason": None, "complete": True, "interrupted": None, "teardown": "pending",
        "ops_done": len(rec.op_meta), "ops_planned": len(rec.op_meta),
        "faithful": verdict.faithful, "verdict": verdict.status, "violations": verdict.violations,
        "not_judged": verdict.not_judged, "checks": verdict.checks, "fidelity": verdict.figures,
        "controller": rec.controller,
        **_common(ctx), "transport": t,
        "percentile_method": tables.PERCENTILE_METHOD, "sizes": tables.size_rows_json(sizes),
        "congestion": congestion_block(ctx.run_dir),  # the controller's ECN/PFC loop (None when off)
        **tenants,
    }
    if faults is not None:
        summary["faults"] = faults
    classes = traffic_classes_block(ctx.run_dir, rec.classes_before, rec.classes_after)
    if classes is not None:
        summary["traffic_classes"] = classes
    if background is not None:
        summary["background"] = background
    pfc_hosts = pfc_hosts_block(rec.stats, [h.name for h in rec.fab.layout.hosts])
    if pfc_hosts is not None:
        summary["pfc_hosts"] = pfc_hosts
    c = ctx.spec.congestion
    if summary["congestion"] is not None and any(x is not None and x.uses_bdp for x in (c.ecn, c.pfc)):
        from testbed.spec.congestion import bdp_basis
        summary["congestion"]["bdp"] = bdp_basis(ctx.spec.fabric)  # the BDP the *_bdp thresholds used
    if rec.workload is not None:  # the workload's own tables and blocks (testbed.workloads)
        rec.workload.add_results(ctx, rec, summary, qps, ports, faults)
    if summary["congestion"] is not None:  # a PFC storm fault: watchdog detection, restore, rest of the fabric
        from testbed.results.pfc_storm import storm_block
        summary["congestion"].update(storm_block(ctx.run_dir, faults))
    adaptive = summary_adaptive(ctx.spec, ctx.run_dir)
    if adaptive is not None:
        summary.setdefault("load_balance", {})["adaptive"] = adaptive
    f = ctx.spec.fabric
    fits = fit.fit_rows(sizes, f.host_link_bps, ctx.efficiency,
                        early_bytes(f.host_link_bps, f.mtu_bytes) * 8 / f.host_link_bps)
    if fits is not None:
        summary["fit"] = fits
    summary["congestion"] = stable_congestion(summary["congestion"])  # every key in every run
    add_busbw_error_bounds(summary["sizes"], ctx.spec, ctx.efficiency)
    run = RunDir(ctx.run_dir)
    summary = stable_summary(summary)  # every block in every run (None where this run had none)
    run.write_parquet_or_warn()  # every table is in: NAME.parquet beside NAME.csv
    run.write_summary(summary)
    run.mark_complete()
    return Written(summary, sizes, t, verdict, fits)
