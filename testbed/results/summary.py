"""summary.json and the end of a run's directory: complete results, or what there is of a run cut short.

:func:`write_complete` (every measurement in): write the tables, judge
fidelity, write summary.json, remove ``INCOMPLETE``, print the results.
:func:`write_partial` (the run stopped before every measurement was in):
write the tables of the collectives that finished and a summary.json with
``"complete": false``; ``INCOMPLETE`` holds the reason. Signals are held back
while either writes, so the directory is never left half-written by a Ctrl-C.
"""
from __future__ import annotations

import logging
import sys

from testbed.results.congestion import congestion_block
from testbed import signals
from testbed.measure import timing
from testbed.measure.judge import judge_run
from testbed.results import fit, printing
from testbed.results.replay_table import format_replay_table
from testbed.results.adaptive import summary_adaptive
from testbed.results.faults import faults_block
from testbed.results.parquet import write_parquet_or_warn
from testbed.results.pfc_hosts import pfc_hosts_block
from testbed.results import tables
from testbed.report import command as report_command
from testbed.run_context import Recording, RunContext

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
    return tables.write_tables(ctx.run_dir, ctx.n_ranks, ctx.goodput_bps, rec.rank_rows, rec.op_meta, rec.stats,
                               _frame(rec.sampler), _frame(rec.cpu))


def _common(ctx: RunContext) -> dict:
    """The summary.json keys that close every summary, complete or not."""
    return {"host_link_bps": ctx.spec.fabric.host_link_bps, "payload_efficiency": ctx.efficiency,
            "scale_factor": ctx.spec.scale_factor}


def write_partial(ctx: RunContext, rec: Recording, exc: BaseException) -> None:
    """The run stopped before every measurement was in: write what there is, mark the directory INCOMPLETE.

    Sets ``exc.results_note`` (what was kept, for the closing message). Never raises: the run's own
    error is the one to report.
    """
    done = len(rec.op_meta)
    reason = f"{what_stopped(exc)} during {rec.phase} after {done} of {rec.ops_planned} collectives"
    signals.defer()
    try:
        tables.mark_incomplete(ctx.run_dir, reason)
        ops, sizes, *_ = _write_tables(ctx, rec)
        summary = {
            "run_id": ctx.run_id, "run_dir": str(ctx.run_dir), "scenario": ctx.spec.name, "n_ranks": ctx.n_ranks,
            "complete": False, "incomplete_reason": reason, "ops_done": done, "ops_planned": rec.ops_planned,
            "faithful": None, "violations": [], "fidelity": "not judged: the run is incomplete",
            "controller": rec.fab.controller_report if rec.fab is not None else None,
            **_common(ctx), "transport": None,
            "percentile_method": tables.PERCENTILE_METHOD, "sizes": tables.size_rows_json(sizes),
        }
        write_parquet_or_warn(ctx.run_dir)
        tables.write_json(ctx.run_dir / "summary.json", summary)
        if done:
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


def write_complete(ctx: RunContext, rec: Recording, note: str | None = None) -> dict:
    """Every measurement is in: write the tables, judge fidelity, write summary.json, clear INCOMPLETE, print.

    ``note``: what happened after the measurements (e.g. an interrupt during the teardown), kept in
    summary.json as ``interrupted``. Returns summary.json's content. On an error the directory is
    marked INCOMPLETE, ``results_note`` set on the error, and the error raised.
    """
    signals.defer()
    try:
        return _write_complete_now(ctx, rec, note)
    except Exception as e:
        tables.mark_incomplete(ctx.run_dir, f"every measurement was in, but writing the results failed: {e}"[:500])
        e.results_note = f"{ctx.run_dir} is marked INCOMPLETE"
        raise
    finally:
        if signals.release():
            print("testbed: interrupted while writing the results; they were written first", file=sys.stderr)


def _write_complete_now(ctx: RunContext, rec: Recording, note: str | None) -> dict:
    ops, sizes, qps, msgs, ports, cpu = _write_tables(ctx, rec)
    faults = faults_block(rec.faults, ctx.run_dir, ctx.run_id)
    verdict, t = judge_run(ctx, rec, qps, ports, cpu, faults)
    controller = rec.fab.controller_report
    summary = {
        "run_id": ctx.run_id, "run_dir": str(ctx.run_dir), "scenario": ctx.spec.name, "n_ranks": ctx.n_ranks,
        "complete": True, "interrupted": note, "ops_done": len(rec.op_meta), "ops_planned": len(rec.op_meta),
        "faithful": verdict.faithful, "violations": verdict.violations, "not_judged": verdict.not_judged,
        "checks": verdict.checks, "fidelity": verdict.figures, "controller": controller,
        **_common(ctx), "transport": t,
        "percentile_method": tables.PERCENTILE_METHOD, "sizes": tables.size_rows_json(sizes),
        "congestion": congestion_block(ctx.run_dir),  # the controller's ECN/PFC loop (None when off)
    }
    if faults is not None:
        summary["faults"] = faults
    pfc_hosts = pfc_hosts_block(rec.stats, [h.name for h in rec.fab.layout.hosts])
    if pfc_hosts is not None:
        summary["pfc_hosts"] = pfc_hosts
    c = ctx.spec.congestion
    if summary["congestion"] is not None and any(x is not None and x.uses_bdp for x in (c.ecn, c.pfc)):
        from testbed.spec.congestion import bdp_basis
        summary["congestion"]["bdp"] = bdp_basis(ctx.spec.fabric)  # the BDP the *_bdp thresholds used
    if rec.patterns is not None:  # workload.pattern: fct.csv, flow_rates.csv, uplinks.csv (testbed.patterns.results)
        from testbed.patterns.results import write_pattern_results
        summary["load_balance"] = write_pattern_results(ctx, rec.patterns, qps, ports, faults)
        if summary["congestion"] is not None:  # fairness, bottleneck, CNPs, victim dip from the flows
            from testbed.results.congestion_flows import flow_figures
            from testbed.spec.transport import dcqcn_settings
            dcqcn = dcqcn_settings(ctx.spec)
            summary["congestion"].update(flow_figures(ctx.run_dir, dcqcn.cnp_interval_us if dcqcn else None))
    if summary["congestion"] is not None:  # a PFC storm fault: watchdog detection, restore, rest of the fabric
        from testbed.results.pfc_storm import storm_block
        summary["congestion"].update(storm_block(ctx.run_dir, faults))
    if rec.replay is not None:
        summary["replay"] = rec.replay
    adaptive = summary_adaptive(ctx.spec, ctx.run_dir)
    if adaptive is not None:
        summary.setdefault("load_balance", {})["adaptive"] = adaptive
    fits = fit.fit_rows(sizes, ctx.spec.fabric.host_link_bps, ctx.efficiency)
    if fits is not None:
        summary["fit"] = fits
    timing.add_busbw_error_bounds(summary["sizes"], ctx.spec, ctx.efficiency)
    write_parquet_or_warn(ctx.run_dir)  # every table is in: NAME.parquet beside NAME.csv
    tables.write_json(ctx.run_dir / "summary.json", summary)
    tables.mark_complete(ctx.run_dir)
    if rec.patterns is not None:
        from testbed.patterns.results import format_load_balance
        print(format_load_balance(summary["load_balance"]))
    printing.print_results(ctx, sizes, t, controller, verdict, rec.op_meta)
    printing.print_blocks(summary)
    if rec.replay is not None:
        for block in ([rec.replay["off"], rec.replay["on"]] if rec.replay["overlap"] == "compare" else [rec.replay]):
            print(format_replay_table(block, ctx.spec.scale_factor, ctx.spec.workload.simai.size_scale))
    for row in fits or ():
        print(fit.fit_line(row))
    print(report_command.after_run(ctx.run_dir))  # report.html from the tables just written (testbed.report)
    return summary
