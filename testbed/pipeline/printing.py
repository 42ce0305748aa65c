"""What a run prints: progress on stderr while it runs, the nccl-tests-style table and the verdict at the end.

Progress (stderr, none with ``--quiet``): the run's shape and results
directory, the retransmission timeout, the fabric's self-check, then one line
per operation on a terminal (overwritten) or one per size otherwise.
Results (stdout, always): a header naming the busbw convention, the size
table (testbed.results.tables.format_size_table), the transport's byte and
packet balance, the controller's line, switched-off checks, the fidelity
verdict's lines and the results directory.
"""
from __future__ import annotations

import errno
import sys
import time
from pathlib import Path

from testbed.emulation.controller_supervisor import verdict_line as controller_verdict_line
from traffic import collectives
from testbed.results import nccl_table
from testbed.results.tables import format_size_table
from testbed.measure.link_model import above_link_note
from testbed.pipeline.context import RunContext
from testbed.spec.estimate import format_duration
from testbed.spec.rto import describe_rto


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

    def run_start(self, ctx: RunContext) -> None:
        """The run's shape, datapath and results directory, then its retransmission timeout."""
        f = ctx.spec.fabric
        self.say(f"run {ctx.run_id}: {f.describe()}, {ctx.n_ranks} hosts, "
                 f"host links {f.host_link_bps / 1e6:g} Mbit/s, datapath {ctx.datapath}; "
                 f"results in {ctx.run_dir}")
        self.say(describe_rto(ctx.spec))

    def fabric_up(self, fab) -> None:
        """The fabric's start-up self-check: switches that confirmed their flows, links read back."""
        self.say(f"fabric up: {len(fab.ready.dpids) if fab.ready else 0} switches confirmed flows and groups; "
                 f"{len(fab.port_rate_bps)} shaped links read back within 1%")


def print_notes(notes) -> None:
    """The op plan's notes (what the testbed skipped or changed), one ``testbed: note:`` line each, stderr; a
    note starting ``warning: `` (what the plan assumed, e.g. a SimAI header key the file leaves out) prints as
    ``testbed: warning:``."""
    for note in notes:
        kind, text = ("warning", note[9:]) if note.startswith("warning: ") else ("note", note)
        print(f"testbed: {kind}: {text}", file=sys.stderr)


def print_estimate(est_s: float, n_ops: int, cap_s: float, loss_note: str | None = None,
                   setup_note: str | None = None, ops_note: str | None = None) -> None:
    """The estimated duration of a run of ``n_ops`` operations and the cap it must stay under, stderr;
    ``loss_note``: why the estimate may be short (testbed.spec.estimate.loss_note); ``setup_note``: what
    the fabric's build and teardown add (testbed.spec.estimate.describe_setup); ``ops_note``: what the
    operations are (testbed.workloads.base.Workload.operations, e.g. ``2 trials x 4 flows``)."""
    print(f"testbed: estimated duration {format_duration(est_s)} ({n_ops} operations"
          f"{': ' + ops_note if ops_note else ''}; "
          f"{setup_note + '; ' if setup_note else ''}cap {format_duration(cap_s)})"
          f"{'; ' + loss_note if loss_note else ''}", file=sys.stderr)


def print_interrupted(e: BaseException) -> None:
    """Closing line of an interrupted run: the teardown is done; what was kept (``e.results_note``)."""
    kept = getattr(e, "results_note", "no results were written")
    print(f"testbed: interrupted; the fabric and everything else this run created were removed; {kept}",
          file=sys.stderr)


#: what to do when a results file cannot be written, by errno
_WRITE_ADVICE = {
    errno.ENOSPC: "free space on that file system (df -h {dir}) or give --results (results= in a script) a "
                  "directory on another one",
    errno.EDQUOT: "free space within your disk quota (quota -s) or give --results (results= in a script) a "
                  "directory on another file system",
    errno.EROFS: "the file system is read-only: give --results (results= in a script) a writable directory",
    errno.EACCES: "make {dir} writable for root or give --results (results= in a script) another directory",
}


def write_error_line(e: BaseException) -> str | None:
    """``could not write FILE in DIR: REASON (ERRNO); WHAT TO DO`` for an OSError naming a file (the atomic
    writers name the file being written, dataplane.atomic_files); None for any other error."""
    if not isinstance(e, OSError) or not e.filename or e.errno is None:
        return None
    path = Path(e.filename)
    advice = _WRITE_ADVICE.get(e.errno, "check the file system of {dir} (df -h {dir}; dmesg)").format(dir=path.parent)
    return (f"could not write {path.name} in {path.parent}: {e.strerror} ({errno.errorcode.get(e.errno, e.errno)}); "
            f"{advice}")


def print_run_failed(e: BaseException, debug: bool) -> None:
    """Closing lines of a failed run: the error's first line (for a file that could not be written: which,
    where and what to do, :func:`write_error_line`; the traceback with ``debug``), what was kept."""
    if debug:
        import traceback
        traceback.print_exc()
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    msg = write_error_line(e) or f"{type(e).__name__}: {msg}".rstrip(": ")
    print(f"testbed: error: run failed: {msg}", file=sys.stderr)
    if getattr(e, "results_note", None):
        print(f"testbed: the run failed; {e.results_note}", file=sys.stderr)


def print_byte_mismatch(summary: dict) -> None:
    """Closing line of a complete run whose bytes check failed (exit code 4): the mismatch."""
    print("testbed: error: run failed: " + "; ".join(
        v for v in summary["violations"] if v.startswith("byte mismatch")), file=sys.stderr)


def print_partial(reason: str, sizes) -> None:
    """A run cut short: the reason and the table of the collectives that finished."""
    print(f"# INCOMPLETE: {reason}; the collectives that finished:")
    print(format_size_table(sizes))


def nccl_text(ctx: RunContext, title: str | None = None) -> str:
    """nccl-tests' table of the run (``output.table: nccl``; testbed.results.nccl_table.format_nccl_table), with
    ``title`` (a ``#`` line) after its version line."""
    from testbed.results.rundir import RunDir

    spec, o = ctx.spec, ctx.spec.output.nccl
    w = spec.workload
    return nccl_table.format_nccl_table(
        nccl_table.run_rows(ctx), scale_factor=spec.scale_factor, host_link_bps=spec.fabric.host_link_bps,
        goodput_bps=ctx.goodput_bps, hosts=RunDir(ctx.run_dir).host_names,
        warmup_iters=w.warmup_iterations if w is not None else 0, per_iter=o.per_iter, per_iter_skip=o.per_iter_skip,
        given=o, title=title)


def _printed_sizes(ctx: RunContext, sizes):
    """The size table to print: ``sizes`` (sizes.csv), or in a run of several jobs (its ops.csv has a ``job``
    column) one row per job and size (testbed.results.tables.job_size_table)."""
    from testbed.results.rundir import RunDir
    from testbed.results.tables import job_size_table

    ops = RunDir(ctx.run_dir).table("ops")
    if ops is None or "job" not in ops.columns:
        return sizes
    return job_size_table(ops, ctx.n_ranks, ctx.goodput_bps)


def print_results(ctx: RunContext, sizes, t: dict, controller: dict, verdict, op_meta: dict) -> None:
    """A complete run: the table, the transport's balance, the controller, the verdict, the directory.

    ``t``: summary.json ``transport`` (testbed.measure.transport_totals.transport_totals);
    ``controller``: summary.json ``controller``; ``verdict``: FidelityVerdict; ``op_meta``:
    op id -> testbed.workloads.plan.PlannedOp.meta() (names the collectives in the title).
    """
    spec = ctx.spec
    titles = ", ".join(dict.fromkeys(collectives.get(m.get("collective", collectives.DEFAULT_COLLECTIVE),
                                                     m.get("algorithm", collectives.DEFAULT_ALGORITHM)).title
                                     for m in op_meta.values()))
    if not op_meta:  # no collective ran (a pattern: its table is printed before)
        pass
    elif spec.output.table == "nccl":
        print(nccl_text(ctx, title=(
            f"# testbed nccl: {titles} on {ctx.n_ranks} hosts, host link {spec.fabric.host_link_bps / 1e6:g} "
            f"Mbit/s, payload efficiency {ctx.efficiency:.3f}; nccl-tests' table, time = per-rank time averaged "
            f"over the ranks of each op, on the reference system ({spec.reference_link_bps / 1e9:g} Gbit/s links: "
            f"emulated time / {spec.scale_factor:g})")))
    else:
        print(f"# {titles}, {ctx.n_ranks} hosts (ranks: per group), host link "
              f"{spec.fabric.host_link_bps / 1e6:g} Mbit/s, payload efficiency {ctx.efficiency:.3f} (busbw/link = "
              f"busbw / (link x efficiency)); time = first rank's start to last rank's end, avg = per-rank time "
              f"averaged over ranks (nccl-tests); n = samples")
        print(format_size_table(_printed_sizes(ctx, sizes)))
    note = above_link_note(sizes, spec, ctx.efficiency) if op_meta else None
    if note:
        print(f"# {note}")
    print(f"# transport: {t['delivered_bytes']} of {t['posted_bytes']} posted bytes delivered exactly once, "
          f"{t['acked_bytes']} acknowledged (order errors {t['order_errors']}); {t['retx_pkts']} retransmitted "
          f"packets ({t['spurious_retx_pkts']} spurious); {t['switch_drops_pkts']} switch-queue drops, "
          f"{t['unexplained_lost_pkts']} packets lost elsewhere"
          + (f"; {t['host_nic_retries']} sends retried on a full host NIC queue (backpressure, not loss)"
             if t.get("host_nic_retries") else ""))
    loss = verdict.figures.get("transport_loss") or {}
    if loss.get("identity") and (loss["elsewhere_pkts"] or loss["unexplained_pkts"]):
        from testbed.measure.accounting import LossIdentity
        print("# losses: " + LossIdentity(**{k: v for k, v in loss.items() if k != "identity"}).sentence())
    if t.get("retx_pkts"):
        print(f"# loss recovery {t.get('loss_recovery', '?')}: {t.get('retx_bytes', 0)} payload bytes resent "
              f"({t.get('resent_share', 0):.1%} of the posted bytes), {t['timeouts']} timeouts, {t['naks']} NAKs")
    if spec.transport.congestion_control != "none":
        print(f"# congestion control {spec.transport.congestion_control}: {t['ce_marked_rx_pkts']} data packets "
              f"arrived CE-marked, {t['cnps_tx']} CNPs sent, {t['cnps_rx']} received (per QP: qps.csv; rate "
              f"changes: qp_rates.csv; CNP times: cnp_events.csv)")
    audit = verdict.figures.get("cnp_interval")
    if audit and audit["np"]["cnps"]:  # DCQCN's CNP audit (testbed.measure.cnp_audit; cnp_events.csv)
        npf, rpf = audit["np"], audit["rp"]
        ms = lambda v: "n/a" if v is None else f"{v:g} ms"  # noqa: E731
        print(f"# CNP audit (N = {audit['interval_us'] / 1e3:g} ms): shortest NP interval {ms(npf['min_interval_ms'])}, "
              f"{npf['below_n']} below N on {npf['qps']} QPs; shortest RP arrival gap {ms(rpf['min_gap_ms'])}, "
              f"{rpf['below_n']} below N ({rpf['below_n_after_paced_np']} after NP intervals >= N), "
              f"{rpf['cnps_not_received']} not received; CNP delay {ms(rpf['delay_min_ms'])} to {ms(rpf['delay_max_ms'])}")
    print(f"# {controller_verdict_line(controller)}")
    if spec.fidelity.switched_off():
        print(f"# fidelity: switched off by the scenario: {', '.join(spec.fidelity.switched_off())}")
    for line in verdict.lines():
        print(line)
    per_server = verdict.figures.get("servers")
    if per_server:  # a run over several servers: each server's own verdict (testbed.cluster.verdict)
        print("# servers: " + ", ".join(f"{srv} {fig['verdict'].replace('_', ' ')}" for srv, fig in per_server.items()))
    print(f"# results: {ctx.run_dir}")


def print_blocks(summary: dict) -> None:
    """One line per injected fault (detection and reroute times, how it was seen) and one line of the
    ``congestion`` block's scalar figures, so the terminal explains retransmissions and marks (the whole
    blocks are in summary.json)."""
    faults = summary.get("faults")
    if faults:
        for f in faults["list"]:
            seen = (f"detected by {f['detected_by']} in {f['detect_ms']:.1f} ms" if f.get("detect_ms") is not None
                    else "not detected")
            reroute = f", rerouted in {f['reroute_ms']:.1f} ms" if f.get("reroute_ms") is not None else ""
            print(f"# fault {f['fault']}: {f['action']} {f['target']} at {f['at_s']:g} s: {seen}{reroute}")
        print(f"# faults: {faults.get('lost_to_faults_pkts', 0)} transport packets charged to them "
              f"(gray rules took {faults.get('gray_drops_pkts', 0)}; faults.csv)")
    congestion = summary.get("congestion") or {}
    if congestion.get("enabled", bool(congestion)):  # runs before the stable shape: no "enabled", a block
        scalars = {k: v for k, v in congestion.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        print("# congestion: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                           for k, v in scalars.items()))
