"""What the congestion loop hands back to the testbed: its result record and the PFC events table's columns.

The loop (controllers.congestion.loop) writes, when it stops, :class:`LoopResult` into
``congestion_loop.json`` (controllers.contract.LOOP_RESULT_FILE) and one row per PFC decision into
``pfc_events.csv`` (columns :data:`PFC_EVENT_COLUMNS`, in this order); the testbed reads the first
with :func:`read_loop_result` (testbed.results.rundir.RunDir.congestion_loop) and documents the second
from the same columns (testbed.results.schema). Decoding is strict, as for the settings
(controllers.contract): every field present (None where not measured), no other, each of its type;
a bad file raises controllers.contract.ContractError naming the file, the field and what was expected.
Runs on Python 3.9 too (the Ryu controller's Python): no ``X | Y`` annotations here.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union

from controllers.contract import LOOP_RESULT_FILE, read_json


@dataclass(frozen=True)
class Percentiles:
    """p50 and p99 of ``n`` values (both None when ``n`` is 0), in the unit of the field holding it."""

    p50: Optional[float]
    p99: Optional[float]
    n: int


@dataclass(frozen=True)
class EcnResult:
    """ECN marking of the lossless class: the marker (``nftables``, or the sch_red leaves' text), its
    RED curve (Kmin, Kmax bytes, Pmax) and the ECT packets it saw (None: sch_red does not count them)
    and CE-marked."""

    marker: str
    kmin_bytes: int
    kmax_bytes: int
    pmax: float
    ect_pkts: Optional[int]
    ce_marked_pkts: int


@dataclass(frozen=True)
class WatchdogResult:
    """The PFC watchdog (controllers.congestion.watchdog.PfcWatchdog.summary): storms declared, restores,
    whether it mitigated (dropped), and the (port, class) keys (as text) still in storm at the stop."""

    storms: int
    restores: int
    mitigate: bool
    in_storm_now: List[str]


@dataclass(frozen=True)
class PfcResult:
    """PFC: the Xoff/Xon thresholds (bytes), kick frames the class gates sent, PFC frames sent to host NICs,
    the watchdog's storms and restores (0 without one), PFC frames received from hosts and the time their
    switch ports were asked to pause (s, summed over ports), the watchdog's drops (packets, bytes), the
    watchdog (None: none), and the actuation times of pauses and resumes (us)."""

    xoff_bytes: int
    xon_bytes: int
    kick_frames: int
    host_pfc_frames: int
    storms: int
    restores: int
    rx_pfc_frames: int
    rx_paused_time_s: float
    watchdog_drops_pkts: int
    watchdog_drops_bytes: int
    watchdog: Optional[WatchdogResult]
    pause_actuation_us: Percentiles
    resume_actuation_us: Percentiles


@dataclass(frozen=True)
class LoopResult:
    """``congestion_loop.json``: the sampling period (s), ports sampled, ticks run and missed, the sampler's
    CPU (% of one core), the loop time per tick (ms: p50, p99, max; None without ticks), the lossless
    class's drops (packets), queue p99 and max (bytes; None without samples), and ECN and PFC (None when off)."""

    period_s: float
    ports: int
    ticks: int
    missed_ticks: int
    sampler_cpu_pct: float
    loop_p50_ms: Optional[float]
    loop_p99_ms: Optional[float]
    loop_max_ms: Optional[float]
    lossless_drops_pkts: Optional[int]
    lossless_queue_p99_bytes: Optional[float]
    lossless_queue_max_bytes: Optional[int]
    ecn: Optional[EcnResult]
    pfc: Optional[PfcResult]


def read_loop_result(run_dir: Union[str, Path]) -> Optional[LoopResult]:
    """The loop's result in the run directory ``run_dir``; None when it wrote none (no loop ran). Raises
    controllers.contract.ContractError naming the file and the field when the file is not a LoopResult."""
    try:
        return read_json(Path(run_dir) / LOOP_RESULT_FILE, LoopResult)
    except FileNotFoundError:
        return None


#: ``pfc_events.csv``: (column, dtype, description with its unit), in file order; the loop's event rows are
#: tuples in this order (controllers.congestion.loop, rx_pauses), testbed.results.schema documents the table
PFC_EVENT_COLUMNS = (
    ("time_ns", "int", "the sample that decided it, Unix ns"),
    ("port", "str", "ingress switch port charged"),
    ("class", "int", "priority (3: lossless)"),
    ("event", "str", "pause, resume (the port paused its upstream), rx_pause, rx_resume (the port's egress held "
                     "for its host's PFC frames), storm or restore (the PFC watchdog)"),
    ("charged_bytes", "int", "bytes charged to the ingress at the decision (-1: not applicable)"),
    ("upstream", "str", "device paused (switch or host)"),
    ("upstream_port", "str", "its port toward the ingress"),
    ("actuation_us", "float", "time to pause/resume the upstream queue, us"),
    ("pfc_frame", "bool", "a PFC frame was also sent to a host NIC"),
)
#: the column names of ``pfc_events.csv``, in file order
PFC_EVENT_NAMES = [name for name, _dtype, _text in PFC_EVENT_COLUMNS]

__all__ = ["EcnResult", "LoopResult", "PFC_EVENT_COLUMNS", "PFC_EVENT_NAMES", "Percentiles", "PfcResult",
           "WatchdogResult", "read_loop_result"]
