"""Limits of an honest run (:class:`FidelityThresholds`) and how a scenario's ``fidelity`` section sets them.

The verdict (:mod:`testbed.measure.verdict`) judges a run against these limits.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FidelityThresholds:
    """Limits of an honest run; every field is validated (ValueError names it).

    min_cpu_idle_pct: a second in which ANY core (or the machine) was idle less
        than this is saturated.
    max_saturated_fraction: saturated seconds allowed, as a fraction of the run's
        seconds; at least 1 second is always allowed (see :func:`evaluate`).
    max_unexplained_drops: packets lost outside the emulated queues allowed, for
        each way of seeing them: the drop counters, and the transport's balance.
    max_spurious_retx_pkts: spurious retransmissions allowed (see :func:`spurious_retx_pkts`).
    min_link_rate_ratio: delivered / configured rate while backlogged, minimum.
    min_backlogged_intervals: backlogged sampling intervals a port needs before
        its rate is judged.
    max_frame_bytes: the largest frame on the links (link MTU + 14): at each
        end of a run of backlogged intervals the byte counter can be off by up
        to one frame in flight, so the links check allows one frame per run
        (at 2.5 Mbit/s one 1514-byte frame lasts 4.8 ms, half a 10 ms sample).
    min_host_busy_s: seconds a host's QPs must have had packets ready to send before
        its rate is judged.
    ignored_drop_counters: drop-counter key prefixes reported in figures but not
        judged (e.g. ``"ovs_coverage_drop_action_of_pipeline"`` when the
        controller drops on purpose).
    """

    min_cpu_idle_pct: float = 5.0
    max_saturated_fraction: float = 0.05
    max_unexplained_drops: int = 0
    max_spurious_retx_pkts: int = 0
    min_link_rate_ratio: float = 0.9
    min_backlogged_intervals: int = 10
    max_frame_bytes: int = 1514
    min_host_busy_s: float = 0.1
    ignored_drop_counters: tuple[str, ...] = ()

    def __post_init__(self):
        def count(v):
            return isinstance(v, int) and not isinstance(v, bool) and v >= 0

        checks = {
            "min_cpu_idle_pct": 0 <= self.min_cpu_idle_pct <= 100,
            "max_saturated_fraction": 0 <= self.max_saturated_fraction <= 1,
            "max_unexplained_drops": count(self.max_unexplained_drops),
            "max_spurious_retx_pkts": count(self.max_spurious_retx_pkts),
            "min_link_rate_ratio": 0 < self.min_link_rate_ratio <= 1,
            "min_backlogged_intervals": isinstance(self.min_backlogged_intervals, int) and self.min_backlogged_intervals >= 1,
            "min_host_busy_s": self.min_host_busy_s > 0,
            "ignored_drop_counters": isinstance(self.ignored_drop_counters, tuple),
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"FidelityThresholds.{name}={getattr(self, name)!r} is out of range")


def thresholds_for(spec) -> FidelityThresholds:
    """The verdict's thresholds for ``spec`` (a ScenarioSpec); a check the scenario switched ``off`` gets
    a limit it cannot fail (listed in manifest.json ``fidelity_checks_switched_off`` and printed)."""
    f = spec.fidelity
    return FidelityThresholds(
        min_cpu_idle_pct=0.0 if f.min_cpu_idle_pct is None else f.min_cpu_idle_pct,
        max_unexplained_drops=2**62 if f.max_unexplained_drops_pkts is None else f.max_unexplained_drops_pkts,
        max_spurious_retx_pkts=2**62 if f.max_spurious_retx_pkts is None else f.max_spurious_retx_pkts,
        min_link_rate_ratio=1e-12 if f.min_link_rate_ratio is None else f.min_link_rate_ratio,
        max_frame_bytes=spec.fabric.mtu_bytes + 14)
