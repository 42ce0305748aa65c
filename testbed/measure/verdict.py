"""The fidelity verdict: did the emulation stay honest, check by check?

Handigol et al., "Reproducible network experiments using container-based
emulation", CoNEXT 2012: an emulation is only trustworthy while the CPU is not
the bottleneck, links deliver their configured rate while busy and no packet
is lost outside the emulated queues. :func:`evaluate` judges one run with the
checks below; each gets a status:

* ``passed``: there was something to judge and it was within the limits;
* ``failed``: a limit was broken (one sentence per violation, with figures);
* ``not_judged``: nothing to judge (e.g. no switch port stayed backlogged),
  with the reason. A not-judged check does not make a run unfaithful, but it
  is printed and written to summary.json, never passed silently.

A run is faithful when no check failed.

The checks themselves (what each judges, its figures, its sentences) are
:mod:`testbed.measure.fidelity_checks`; this module runs them in order and
assembles their outcomes into one :class:`FidelityVerdict`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import pandas as pd

from testbed.measure.fidelity_checks import (FAILED, NOT_JUDGED, PASSED, Check, check_bytes, check_cpu, check_drops,
                                             check_hosts, check_links, check_spurious, check_throughput, check_timing,
                                             check_transport_loss)
from testbed.measure.thresholds import FidelityThresholds

#: The checks in the order they are printed.
CHECKS = ("cpu", "drops", "transport_loss", "spurious_retx", "bytes", "links", "hosts", "throughput",
          "packet_timing")
#: checks that measure whether the emulated links and NICs delivered their rate: a run is faithful only
#: when at least one of them was judged (and none failed); else its verdict is ``not_judged``
RATE_CHECKS = ("links", "hosts", "throughput")
#: the run verdicts (summary.json ``verdict``)
FAITHFUL, NOT_FAITHFUL = "faithful", "not_faithful"
#: checks that judge the machine's pacing, not the emulated network: the CPU check, packet timing and the rate
#: checks (:data:`RATE_CHECKS`: did the emulated links and NICs deliver their rate while backlogged). A shared
#: 2-core machine fails them in some runs (the verdict rightly says NOT faithful) while drops, bytes and losses
#: are counted exactly; a run that failed only these was disturbed by the machine and may be run again
#: (``testbed run --solo``'s solo runs, the integration tests' re-run policy). Spurious retransmissions are not
#: among them: a duplicate no lost packet explains is the transport's or the network's figure.
PACING_CHECKS = frozenset({"cpu", "packet_timing", *RATE_CHECKS})


@dataclass
class FidelityVerdict:
    """faithful: no check failed and a rate check (:data:`RATE_CHECKS`) was judged (:attr:`status`).
    violations: one sentence per broken limit, with figures.
    not_judged: ``"check: reason"`` per check that had nothing to judge.
    checks: check name -> {"status": passed|failed|not_judged, "reason": str}.
    figures: JSON-ready numbers per check (cpu, drops, transport_loss, ...)."""

    faithful: bool
    violations: list[str]
    figures: dict
    checks: dict = field(default_factory=dict)
    not_judged: list[str] = field(default_factory=list)

    def add(self, name: str, status: str, reason: str = "", figures: Optional[dict] = None) -> None:
        """Add (or replace) one check's outcome; ``reason`` is the violation or why not judged."""
        if status not in (PASSED, FAILED, NOT_JUDGED):
            raise ValueError(f"status {status!r}: allowed {PASSED}, {FAILED}, {NOT_JUDGED}")
        self.checks[name] = {"status": status, "reason": reason}
        if figures is not None:
            self.figures[name] = figures
        if status == FAILED and reason:
            self.violations.extend(reason.split("\n"))
        if status == NOT_JUDGED:
            self.not_judged.append(f"{name}: {reason}")
        self.faithful = self.status == FAITHFUL

    @property
    def status(self) -> str:
        """``not_faithful`` when a check failed; ``not_judged`` when none failed but no rate check
        (:data:`RATE_CHECKS`) was judged among the checks made: nothing then measured whether the links
        and NICs kept their rate, and a run far below its link rate would pass unseen; else ``faithful``."""
        if any(c["status"] == FAILED for c in self.checks.values()):
            return NOT_FAITHFUL
        made = [n for n in RATE_CHECKS if n in self.checks]
        if made and not any(self.checks[n]["status"] == PASSED for n in made):
            return NOT_JUDGED
        return FAITHFUL

    def replace(self, name: str, status: str, reason: str = "", figures: Optional[dict] = None) -> None:
        """Like :meth:`add`, after taking back the check's earlier outcome (its violations and not-judged
        line): a check judged again with more information (the controller's final report)."""
        old = self.checks.pop(name, None)
        if old is not None and old["status"] == FAILED and old["reason"]:
            for line in old["reason"].split("\n"):
                if line in self.violations:
                    self.violations.remove(line)
        if old is not None and old["status"] == NOT_JUDGED:
            entry = f"{name}: {old['reason']}"
            if entry in self.not_judged:
                self.not_judged.remove(entry)
        self.add(name, status, reason, figures)

    def lines(self) -> list[str]:
        """The printed verdict: ``# fidelity: ...`` then one line per failed or not-judged check."""
        head = {FAITHFUL: "# fidelity: faithful", NOT_FAITHFUL: "# fidelity: NOT faithful:",
                NOT_JUDGED: "# fidelity: NOT JUDGED (no link or host rate could be judged: the run cannot be "
                            "called faithful):"}[self.status]
        judged = sum(c["status"] != NOT_JUDGED for c in self.checks.values())
        out = [f"{head} ({judged} of {len(self.checks)} checks judged)"]
        out += [f"#   - {v}" for v in self.violations]
        out += [f"#   not judged: {r}" for r in self.not_judged]
        return out


def evaluate(
    cpu: Optional[pd.DataFrame],
    drops: dict[str, int],
    port_samples: Optional[pd.DataFrame],
    port_rate_bps: dict[str, float],
    host_tx: Optional[pd.DataFrame],
    thresholds: FidelityThresholds,
    transport: Optional[dict] = None,
    departures: Optional[pd.DataFrame] = None,
    identity=None,
    sizes: Optional[pd.DataFrame] = None,
    frame_bytes: int = 1514,
    window_pkts: int = 16,
    link_delay_us: float = 0,
) -> FidelityVerdict:
    """Judge one run (Handigol et al., CoNEXT 2012, section 3: fidelity monitor).

    Args:
        cpu: :meth:`testbed.measure.cpu.CpuIdleMonitor.samples` (time_ns, idle_pct,
            min_cpu_idle_pct, cpu<N>_idle_pct...).
        drops: :func:`testbed.measure.drops.delta` of two snapshots (packets per key).
        port_samples: :meth:`dataplane.qdisc_sampler.QdiscSampler.to_frame` of the
            switch ports (time_ns, port, tx_bytes, backlog_bytes, backlog_pkts, ...).
        port_rate_bps: port -> configured rate in bit/s; may also hold host
            names -> host link rate (used when ``host_tx`` has no link_bps).
        host_tx: one row per host: ``host``, ``tx_wire_bytes`` (frame bytes the
            host NIC sent, without FCS), ``tx_busy_s`` (seconds it had data
            queued), optional ``link_bps``; or None.
        thresholds: :class:`FidelityThresholds`.
        transport: totals of the transport, or None: ``sent_pkts`` (data, ACK
            and NAK packets sent), ``received_pkts`` (packets the endpoints
            received), ``switch_drops_pkts`` (emulated queue tail drops, from
            counters read before and after the traffic), ``spurious_retx_pkts``
            (:func:`testbed.measure.transport_totals.spurious_retx_pkts`), ``retx_pkts``, ``posted_bytes``,
            ``acked_bytes``, ``delivered_bytes``.
        departures: :meth:`testbed.measure.departure_capture.DepartureCapture.to_frame`, or None
            (packet_timing: :func:`testbed.measure.packet_timing.check_departures`).
        identity: the run's :class:`testbed.measure.accounting.LossIdentity`, or None (then
            transport_loss judges the older balance without the drops elsewhere).
        sizes: sizes.csv rows (size_bytes, busbw_ratio, busbw_factor), or None; ``frame_bytes``
            (a full data frame), ``window_pkts``, ``link_delay_us``: for
            :func:`testbed.measure.fidelity_checks.check_throughput`.

    Checks (statuses passed / failed / not_judged, see the module docstring):
        cpu: a second is saturated when the machine or ANY core was idle less
            than min_cpu_idle_pct; failed when more than ``max(1,
            max_saturated_fraction * seconds)`` seconds were (one saturated
            second, e.g. a process start, distorts at most that second),
            naming each core and its seconds (1-based seconds of the run).
        drops: sum of positive counter deltas (``ignored_drop_counters`` aside)
            > max_unexplained_drops, each counter named; any negative delta.
        transport_loss: the identity's unexplained packets beyond +-max_unexplained_drops
            (testbed.measure.accounting); without an identity ``sent - received - switch queue
            drops`` > max_unexplained_drops, or < 0 (a counter mismatch, never absorbed).
        spurious_retx: ``spurious_retx_pkts`` > max_spurious_retx_pkts.
        bytes: posted, acknowledged and delivered bytes differ.
        links: per switch port, over sampling intervals with backlog > 0 at
            both ends, ``8 * sum(delta tx_bytes) / (rate * sum(dt))`` <
            min_link_rate_ratio, for ports with >= min_backlogged_intervals such
            intervals; not judged when no port had that many.
        hosts: ``8 * tx_wire_bytes / tx_busy_s / rate`` < min_link_rate_ratio
            for hosts whose QPs had packets ready for >= min_host_busy_s
            (:func:`testbed.measure.fidelity_checks.check_hosts`).
        throughput: :func:`testbed.measure.fidelity_checks.check_throughput` (a slow collective on an
            uncontended fabric).
        packet_timing: :func:`testbed.measure.packet_timing.check_departures` (inter-departure
            gaps on backlogged links against the serialization time).

    Returns: :class:`FidelityVerdict`; ``figures`` has one entry per check plus "thresholds".
    Raises: ValueError when a sampled port or a host has no configured rate.
    """
    v = FidelityVerdict(faithful=True, violations=[], figures={})
    runs = {
        "cpu": lambda c: check_cpu(cpu, thresholds, c),
        "drops": lambda c: check_drops(drops, thresholds, c),
        "transport_loss": lambda c: check_transport_loss(transport, thresholds, c, identity),
        "spurious_retx": lambda c: check_spurious(transport, thresholds, c),
        "bytes": lambda c: check_bytes(transport, c),
        "links": lambda c: check_links(port_samples, port_rate_bps, thresholds, c),
        "hosts": lambda c: check_hosts(host_tx, port_rate_bps, thresholds, c, port_samples),
        "throughput": lambda c: check_throughput(
            sizes, port_samples, int((transport or {}).get("switch_drops_pkts", 0)), frame_bytes, c, window_pkts,
            link_delay_us),
        "packet_timing": lambda c: check_timing(departures, port_samples, port_rate_bps, c),
    }
    for name in CHECKS:
        chk = Check()
        fig = runs[name](chk)
        status, reason = chk.outcome()
        v.add(name, status, reason, fig)
    v.figures["thresholds"] = {k: (list(x) if isinstance(x, tuple) else x) for k, x in asdict(thresholds).items()}
    return v


def disturbed_checks(summary: dict) -> dict[str, str]:
    """Check name -> reason (its figure and threshold) of the failed checks of a run's summary.json content
    ``summary`` when every failed check is a pacing check (:data:`PACING_CHECKS`): the machine disturbed the run;
    ``{}`` when no check failed or any other check failed too. A run over several servers fails ``servers``
    when a server's own checks failed (testbed.cluster.verdict): a pacing failure when each server's failed
    checks (``fidelity.servers.<server>.failed_checks``) are pacing checks."""
    failed = {name: c.get("reason", "") for name, c in (summary.get("checks") or {}).items()
              if c.get("status") == FAILED}
    servers = ((summary.get("fidelity") or {}).get("servers") or {}).values()

    def pacing(name: str) -> bool:
        if name == "servers":
            return bool(servers) and all(set(s.get("failed_checks", ["unknown"])) <= PACING_CHECKS for s in servers)
        return name in PACING_CHECKS

    return failed if failed and all(pacing(name) for name in failed) else {}
