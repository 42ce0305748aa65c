"""``testbed doctor --calibrate``: measure this machine's faithful capacity with the testbed itself.

For each path MTU of testbed.measure.capacity.CALIBRATED_PAYLOADS, the quickstart fabric (2 spines,
4 leaves, 8 hosts) runs a short ring all-reduce with ``testbed run`` at a link rate (host and
fabric links alike; path MTU 1024 on 1500-byte links, 4096 on 4200-byte links with the
quickstart's transport), and each run (a *step*) is judged by the fidelity verdict itself
(per-core CPU, drops, link rates, packet timing, ...) and by its busbw/link, which must be at least
:data:`MIN_BUSBW_RATIO` (the ring on this fabric meets no contention, so less can only come from
the emulation).

Search for the highest faithful rate, on the grid ``START_BPS x 2^(k/4)``:

1. coarse: from :data:`START_BPS`, double the rate while steps are faithful (halve it while they are
   not) until a faithful rate L and an unfaithful rate U = 2L bracket the edge;
2. refine: :data:`REFINE_STEPS` bisections in log scale (sqrt(L x U)), so U / L ends at
   :data:`RATE_STEP` = 2^(1/4) (a 19 % step, finer than the coarse 2x near the edge);
3. confirm: L is run once more; when that run is not faithful (a marginal rate), L steps one
   :data:`RATE_STEP` down and that rate's run must be faithful, at most :data:`MAX_STEP_DOWNS` times.

So the result is a rate that was faithful in the search and in a second run, one fine step below a
rate that failed at least once: two calibrations in a row agree within one :data:`RATE_STEP`
(docs/cli.md, ``testbed doctor``, records two). A rate above :data:`MAX_BPS` is not tried (the result
is then a lower bound).

The capacity at each MTU is the packet-hops/s (testbed.measure.packet_load) the step's scenario
offers at the confirmed rate, so a scenario is compared with it in the same unit and model.
"""
from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from testbed.measure import capacity
from testbed.measure.packet_load import packet_load
from testbed.measure.link_model import data_frame_bytes
from testbed.results.rundir import RunDir
from traffic import collectives

N_HOSTS = 8
#: fine rate step of the search (ratio between neighbouring rates of the final grid)
RATE_STEP = 2 ** 0.25
#: log-scale bisections after the coarse 2x bracket: 2x -> 2^(1/2) -> 2^(1/4)
REFINE_STEPS = 2
#: confirmation failures that step the result down before the calibration gives up
MAX_STEP_DOWNS = 2
#: first rate of the coarse search per path MTU, bit/s per link (near the figures measured here)
START_BPS = {1024: 10e6, 4096: 20e6}
#: no rate above this is tried, bit/s per link
MAX_BPS = 640e6
#: lowest rate tried; below it the machine emulates nothing faithfully (capacity 0)
MIN_BPS = 0.5e6
#: a step also needs busbw/link at least this (the contention-free ring)
MIN_BUSBW_RATIO = 0.95
#: seconds one timed all-reduce lasts at each step's rate (every step moves the same number of packet times)
OP_S = 2.0
#: link MTU and transport of each calibrated path MTU (4096: the quickstart's)
STEP_SETTINGS = {1024: {"mtu": 1500, "window": 64, "ack": 8}, 4096: {"mtu": 4200, "window": 16, "ack": 4}}

STEP_SCENARIO = """
name: calibrate-{payload}-{rate_k}k
fabric: {{spines: 2, leaves: 4, hosts_per_leaf: 2, host_link_bps: {rate}, fabric_link_bps: {rate},
          buffer_bytes: 100KB, mtu_bytes: {mtu}}}
transport: {{payload_bytes: {payload}, window_pkts: {window}, ack_every_pkts: {ack}}}
workload: {{sizes: {{min_bytes: {size}, max_bytes: {size}}}, iterations: 2, warmup_iterations: 1}}
"""


def step_size_bytes(rate_bps: float, payload_bytes: int = 1024, op_s: float = OP_S) -> int:
    """All-reduce size (whole packets per rank) that takes about ``op_s`` on 8 ranks at ``rate_bps``.

    Time of a ring all-reduce = 2(n-1)/n x S x 8 / (rate x payload / frame) (nccl-tests busbw factor).
    """
    goodput_bps = rate_bps * payload_bytes / data_frame_bytes(payload_bytes)
    size = op_s * goodput_bps / 8 / collectives.busbw_factor("allreduce", "ring", N_HOSTS)
    unit = payload_bytes * N_HOSTS
    return max(unit, int(size) // unit * unit)


def step_text(rate_bps: float, payload_bytes: int) -> str:
    """The scenario of one step (YAML)."""
    st = STEP_SETTINGS[payload_bytes]
    return STEP_SCENARIO.format(payload=payload_bytes, rate_k=int(rate_bps / 1e3), rate=int(rate_bps), mtu=st["mtu"],
                                window=st["window"], ack=st["ack"], size=step_size_bytes(rate_bps, payload_bytes))


def step_hop_pps(rate_bps: float, payload_bytes: int) -> float:
    """Packet-hops/s the step's scenario offers at ``rate_bps`` (testbed.measure.packet_load)."""
    from testbed.spec.scenario import parse_scenario
    from testbed.spec.yaml_loader import load_yaml
    from testbed.workloads import workload_for

    spec = parse_scenario(load_yaml(step_text(rate_bps, payload_bytes), "calibration step"), "calibration step")
    workload = workload_for(spec)
    return packet_load(spec, workload.peers(workload.plan().ops)).hop_pps


def search(judge: Callable[[float], bool], start_bps: float, max_bps: float = MAX_BPS,
           min_bps: float = MIN_BPS) -> tuple[float, bool]:
    """The highest confirmed faithful rate (module docstring), bit/s, and whether it is a lower bound
    (every rate up to ``max_bps`` was faithful, the last one confirmed). ``judge(rate_bps)`` runs one
    step: True when faithful. 0.0 when no rate down to ``min_bps`` is faithful (or none is confirmed)."""
    def grid(r: float) -> float:  # the nearest rate of start_bps x 2^(k/4)
        return start_bps * 2 ** (round(4 * math.log2(r / start_bps)) / 4)

    lo, hi = None, None
    rate = start_bps
    if judge(rate):
        lo = rate
        while hi is None and rate * 2 <= max_bps:
            rate *= 2
            if judge(rate):
                lo = rate
            else:
                hi = rate
    else:
        hi = rate
        while lo is None:
            rate /= 2
            if rate < min_bps:
                return 0.0, False
            if judge(rate):
                lo = rate
            else:
                hi = rate
    for _ in range(REFINE_STEPS if hi is not None else 0):
        mid = grid(math.sqrt(lo * hi))
        if judge(mid):
            lo = mid
        else:
            hi = mid
    for _ in range(MAX_STEP_DOWNS + 1):
        if judge(lo):
            return lo, hi is None
        hi, lo = lo, grid(lo / RATE_STEP)
        if lo < min_bps:
            break
    return 0.0, False


def _run_step(rate_bps: float, payload_bytes: int, workdir: Path) -> dict:
    """One ``testbed run`` of the step's scenario; the verdict's figures. RuntimeError when the run fails."""
    scen = workdir / f"step-{payload_bytes}-{rate_bps:.0f}.yaml"
    scen.write_text(step_text(rate_bps, payload_bytes))
    out = workdir / f"res-{payload_bytes}-{rate_bps:.0f}-{time.monotonic_ns()}"
    # --over-capacity: a step is judged by its run, not refused by the capacity it measures
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scen), "--results", str(out), "--quiet",
                           "--over-capacity"], capture_output=True, text=True, timeout=600)
    found = list(out.glob("*/summary.json"))
    if not found:
        raise RuntimeError(f"calibration run at {rate_bps / 1e6:g} Mbit/s, path MTU {payload_bytes} failed "
                           f"(exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-400:]}")
    s = RunDir.open(found[0].parent).summary
    busbw = s["sizes"][0]["busbw_ratio"] if s["sizes"] else None
    cpu = s.get("fidelity", {}).get("cpu", {})
    violation = s["violations"][0] if s["violations"] else ""
    if s["faithful"] and (busbw is None or busbw < MIN_BUSBW_RATIO):
        violation = f"busbw/link {busbw} below {MIN_BUSBW_RATIO} on a contention-free ring"
    return {"per_host_bps": rate_bps, "size_bytes": step_size_bytes(rate_bps, payload_bytes),
            "faithful": bool(s["faithful"]) and not violation, "violation": violation, "busbw_ratio": busbw,
            "mean_idle_pct": cpu.get("mean_idle_pct")}


def calibrate_mtu(payload_bytes: int, run_step: Callable[[float], dict], start_bps: Optional[float] = None,
                  max_bps: float = MAX_BPS, say: Callable[[str], None] = lambda m: None) -> dict:
    """Search one path MTU with ``run_step(rate_bps) -> step dict`` (:func:`_run_step`'s); its record:
    per_host_bps, hop_pps, frame_bytes, lower_bound, limited_by (the lowest unfaithful rate and why) and
    steps (every run in order)."""
    steps: list[dict] = []

    def judge(rate: float) -> bool:
        st = run_step(rate)
        steps.append(st)
        busbw = "?" if st["busbw_ratio"] is None else f"{st['busbw_ratio']:.3f}"
        say(f"  path MTU {payload_bytes}, {rate / 1e6:.3g} Mbit/s per link: busbw/link {busbw}, "
            + ("faithful" if st["faithful"] else f"NOT faithful: {st['violation'][:160]}"))
        return st["faithful"]

    rate, lower_bound = search(judge, start_bps or START_BPS[payload_bytes], max_bps)
    failed = sorted((s for s in steps if not s["faithful"]), key=lambda s: s["per_host_bps"])
    why = (f"{failed[0]['per_host_bps'] / 1e6:.3g} Mbit/s per link: {failed[0]['violation'] or 'not faithful'}"
           if failed else "not reached: every step was faithful")
    return {"payload_bytes": payload_bytes, "per_host_bps": rate, "hosts": N_HOSTS,
            "hop_pps": step_hop_pps(rate, payload_bytes) if rate else 0.0,
            "frame_bytes": data_frame_bytes(payload_bytes), "lower_bound": lower_bound, "limited_by": why,
            "runs": len(steps), "steps": steps}


def calibrate(datapath: str, quiet: bool = False, payloads: tuple = capacity.CALIBRATED_PAYLOADS,
              start_bps: Optional[dict] = None, max_bps: float = MAX_BPS) -> dict:
    """Measure the faithful capacity with real runs (root, OVS running); return the cache record
    (testbed.measure.capacity: ``version``, ``machine``, ``measured_utc``, ``mtus``: payload -> record of
    :func:`calibrate_mtu`). ``start_bps``: payload -> first rate (default :data:`START_BPS`).

    Each step is a ``testbed run`` in a child process (its own run id, lock and cleanup). Raises
    RuntimeError when a run fails.
    """
    say = (lambda m: None) if quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    say(f"calibrating: ring all-reduce on the quickstart fabric ({N_HOSTS} hosts) at path MTU "
        f"{' and '.join(map(str, payloads))}, judged by the fidelity verdict; coarse 2x steps, then "
        f"{RATE_STEP:.2f}x near the edge, the result confirmed by a second run")
    t0 = time.monotonic()
    mtus = {}
    with tempfile.TemporaryDirectory(prefix="testbed-calibrate-") as tmp:
        for payload in payloads:
            mtus[str(payload)] = calibrate_mtu(payload, lambda r, p=payload: _run_step(r, p, Path(tmp)),
                                               (start_bps or {}).get(payload), max_bps, say)
    return {"version": capacity.VERSION, "machine": capacity.machine_facts(datapath),
            "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "duration_s": round(time.monotonic() - t0, 1), "mtus": mtus}
