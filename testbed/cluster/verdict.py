"""The fidelity verdict per server of a run split over several servers.

Each server's CPU and drops are judged by the same checks as a single-server run's
(testbed.measure.fidelity_checks: ``cpu``, ``drops``) on that server's own samples and counters
(testbed.cluster.telemetry). The run's ``servers`` check fails when any server's did, naming the
server: a run is faithful only if every server was. The figures (``fidelity.servers`` in
summary.json) give each server's verdict, its CPU figures and its unexplained drops.
"""
from __future__ import annotations

from dataclasses import replace

from testbed.measure.fidelity_checks import FAILED, PASSED, Check, check_cpu, check_drops
from testbed.measure.verdict import FAITHFUL, NOT_FAITHFUL
from testbed.measure.drops import delta


def server_verdicts(telemetry, thresholds, cpu_filter=None) -> dict:
    """server -> {"verdict": faithful|not_faithful, "violations": [...], "failed_checks": the names of its
    failed checks (cpu, drops), "cpu": figures, "drops": figures} of
    ``telemetry`` (a finished testbed.cluster.telemetry.ClusterTelemetry with drop snapshots before and
    after the traffic); ``cpu_filter``: the workload's CPU-while-traffic filter (frame -> frame) or None."""
    out = {}
    first, last = telemetry.snapshots[0], telemetry.snapshots[-1]
    for srv, frames in telemetry.by_server.items():
        cpu = frames.get("cpu")
        if cpu is not None and cpu_filter is not None:
            cpu = cpu_filter(cpu)
        cpu_chk, drops_chk = Check(), Check()
        cpu_fig = check_cpu(cpu, thresholds, cpu_chk)
        # counters only: ovs-vswitchd's log is the server's, not readable here (testbed.cluster.telemetry)
        drops_fig = check_drops(delta(replace(first[srv], ovs_log_bytes=None), replace(last[srv], ovs_log_bytes=None)),
                                thresholds, drops_chk)
        violations = cpu_chk.violations + drops_chk.violations
        out[srv] = {"verdict": NOT_FAITHFUL if violations else FAITHFUL, "violations": violations,
                    "failed_checks": [name for name, chk in (("cpu", cpu_chk), ("drops", drops_chk)) if chk.violations],
                    "cpu": cpu_fig, "drops": drops_fig}
    return out


def judge_servers(verdict, telemetry, thresholds, cpu_filter=None) -> dict:
    """Add the ``servers`` check to ``verdict`` (failed, naming each server that was not faithful and why);
    return the per-server figures (:func:`server_verdicts`)."""
    per = server_verdicts(telemetry, thresholds, cpu_filter)
    bad = [f"server {srv}: {line}" for srv, fig in per.items() for line in fig["violations"]]
    verdict.add("servers", FAILED if bad else PASSED, "\n".join(bad), per)
    return per
