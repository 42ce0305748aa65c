"""Congestion loop results (controllers.loop_result.LoopResult) for unit tests, written as the loop writes them."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from controllers import contract
from controllers.loop_result import EcnResult, LoopResult, Percentiles, PfcResult, WatchdogResult

#: a loop that ran 5,000 ticks with ECN on (sch_red marks) and PFC off
ECN_LOOP = LoopResult(
    period_s=0.001, ports=12, ticks=5000, missed_ticks=3, sampler_cpu_pct=9.5, loop_p50_ms=0.8, loop_p99_ms=1.045,
    loop_max_ms=2.0, lossless_drops_pkts=0, lossless_queue_p99_bytes=41000.0, lossless_queue_max_bytes=52000,
    ecn=EcnResult(marker="red", kmin_bytes=20000, kmax_bytes=60000, pmax=0.2, ect_pkts=9000, ce_marked_pkts=389),
    pfc=None)

#: PFC's part of a loop with the watchdog on
PFC = PfcResult(xoff_bytes=100, xon_bytes=70, kick_frames=25, host_pfc_frames=4, storms=1, restores=1,
                rx_pfc_frames=7, rx_paused_time_s=0.25, watchdog_drops_pkts=11, watchdog_drops_bytes=46354,
                watchdog=WatchdogResult(storms=1, restores=1, mitigate=True, in_storm_now=[]),
                pause_actuation_us=Percentiles(p50=500.0, p99=510.0, n=3),
                resume_actuation_us=Percentiles(p50=600.0, p99=600.0, n=2))

#: a loop with PFC on and ECN off
PFC_LOOP = dataclasses.replace(ECN_LOOP, ecn=None, pfc=PFC)


def write_loop_result(run_dir: Path, result: LoopResult | dict) -> Path:
    """Write ``result`` (a record, or its JSON object as another writer would send it) as the loop does."""
    doc = contract.encode(result) if isinstance(result, LoopResult) else result
    path = Path(run_dir) / contract.LOOP_RESULT_FILE
    path.write_text(json.dumps(doc, indent=1))
    return path
