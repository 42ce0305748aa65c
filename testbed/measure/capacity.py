"""Faithful capacity of this machine: how much host link traffic it can emulate faithfully.

:func:`calibrate` runs the testbed itself, the way a user's run goes: the
quickstart fabric (2 spines, 4 leaves, 8 hosts; RoCE path MTU 1024 on
1500-byte links) runs a short ring all-reduce with ``testbed run`` at rising
link rates (STEP_RATES_BPS, host and fabric links alike), and each run is
judged by the fidelity verdict itself (per-core CPU, drops, link rates,
packet timing, ...). The capacity is the highest rate before the first run
that was not faithful, as host link traffic: 8 x that rate, and in packets/s
of full 1082-byte frames (a 1024-byte RoCE payload).

An earlier version measured plain paced UDP through Open vSwitch; it found
about 6x more than the transport agents can drive faithfully (the quickstart
at path MTU 1024 and 8 x 10 Mbit/s pegs a core while plain UDP at 4 x 128
Mbit/s did not), because the agents' per-packet work (ACKs, go-back-N state,
one syscall per packet in Python) costs more than the datapath's. Only the
real pipeline gives an honest figure.

The cost is per packet, so other path MTUs reach about the same packets/s,
i.e. more bit/s with larger frames (benchmarks/mtu_capacity.py sweeps both).
The figure holds when nothing else runs: calibrate on a quiet machine (the
per-core CPU check cannot tell the emulation's load from a neighbour's).

The result is cached in ``$TESTBED_CACHE_DIR/capacity.json`` (default
``/var/lib/testbed``) with the machine facts it holds for (cores, kernel,
datapath, CPU model); :func:`check_scenario` compares a scenario with it.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.results.rundir import RunDir
from traffic import collectives

#: per-link rates of the steps, bit/s, rising
STEP_RATES_BPS = (2.5e6, 5e6, 7.5e6, 10e6, 15e6, 20e6, 30e6, 40e6)
N_HOSTS = 8
PAYLOAD_BYTES = 1024
#: full data frame of a 1024-byte RoCE payload: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + payload + ICRC 4
FRAME_BYTES = 14 + 20 + 8 + 12 + PAYLOAD_BYTES + 4
#: seconds one timed all-reduce lasts at each step's rate (every step moves the same number of packet times)
OP_S = 2.0

STEP_SCENARIO = """
name: calibrate-{rate_k}k
fabric: {{spines: 2, leaves: 4, hosts_per_leaf: 2, host_link_bps: {rate}, fabric_link_bps: {rate},
          buffer_bytes: 100KB}}
transport: {{payload_bytes: {payload}, window_pkts: 64, ack_every_pkts: 8}}
workload: {{sizes: {{min_bytes: {size}, max_bytes: {size}}}, iterations: 2, warmup_iterations: 1}}
"""


def step_size_bytes(rate_bps: float, op_s: float = OP_S) -> int:
    """All-reduce size (whole packets per rank) that takes about ``op_s`` on 8 ranks at ``rate_bps``.

    Time of a ring all-reduce = 2(n-1)/n x S x 8 / (rate x payload / frame) (nccl-tests busbw factor).
    """
    goodput_bps = rate_bps * PAYLOAD_BYTES / FRAME_BYTES
    size = op_s * goodput_bps / 8 / collectives.busbw_factor("allreduce", "ring", N_HOSTS)
    unit = PAYLOAD_BYTES * N_HOSTS
    return max(unit, int(size) // unit * unit)


def cache_path() -> Path:
    return Path(os.environ.get("TESTBED_CACHE_DIR", "/var/lib/testbed")) / "capacity.json"


def machine_facts(datapath: str) -> dict:
    """What a calibration holds for: cores, kernel, datapath, CPU model."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": os.cpu_count(), "kernel": platform.release(), "datapath": datapath, "cpu_model": model}


def load_cached(datapath: str | None = None) -> dict | None:
    """The cached calibration if it was made on this machine as it is now (same facts), else None.

    ``datapath`` None accepts the cached datapath.
    """
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return None
    facts = data.get("machine", {})
    now = machine_facts(datapath or facts.get("datapath", ""))
    if any(facts.get(k) != now[k] for k in ("cores", "kernel", "cpu_model", "datapath")):
        return None
    return data


def save(result: dict) -> Path:
    """Write ``result`` to :func:`cache_path` atomically; returns the path."""
    p = cache_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=p.parent, delete=False, suffix=".tmp") as f:
        json.dump(result, f, indent=1)
    os.replace(f.name, p)
    return p


def scenario_load_pps(spec) -> float:
    """Packets/s of host link traffic a scenario can offer: hosts x host_link_bps / full-frame bits."""
    from traffic import wire
    from traffic.transport import wire_bytes

    frame = wire_bytes(wire.BTH_BYTES + spec.transport.payload_bytes + wire.ICRC_BYTES)
    return spec.fabric.n_hosts * spec.fabric.host_link_bps / (frame * 8)


def check_scenario(spec, cached: dict | None = None) -> str | None:
    """A warning when ``spec`` offers more packets/s than the calibrated capacity, else None.

    Without a valid cached calibration (:func:`load_cached`) there is nothing to compare: None.
    """
    datapath = None if spec.fabric.datapath == "auto" else spec.fabric.datapath
    cached = cached if cached is not None else load_cached(datapath)
    if not cached or not cached.get("capacity_pps"):
        return None
    load_pps = scenario_load_pps(spec)
    cap_pps = float(cached["capacity_pps"])
    if load_pps <= cap_pps:
        return None
    f = spec.fabric
    return (f"{f.n_hosts} hosts x {f.host_link_bps / 1e6:g} Mbit/s at payload {spec.transport.payload_bytes} B "
            f"offer up to {load_pps:,.0f} packets/s, above this machine's calibrated faithful capacity of "
            f"{cap_pps:,.0f} packets/s ({cached['capacity_bps'] / 1e6:.0f} Mbit/s of host link traffic in 1 KB "
            f"packets; 'testbed doctor'): the CPU may saturate and the run be judged not faithful; "
            f"lower fabric.host_link_bps or the hosts, or raise transport.payload_bytes")


def capacity_from_steps(steps: list[dict]) -> dict:
    """Capacity from judged steps in rising order.

    Args:
        steps: dicts with per_host_bps (the step's link rate, bit/s), faithful (bool: the run's
            fidelity verdict) and violation (its first violation, "" when faithful).

    Returns: dict with capacity_bps (N_HOSTS x the highest rate before the first unfaithful step),
    capacity_pps (that traffic in FRAME_BYTES frames), limited_by (the first unfaithful step and
    why, or "not reached") and lower_bound (True when every step was faithful). Both figures are
    0 when even the first step was not faithful.
    """
    best, why = 0.0, None
    for st in steps:
        if not st["faithful"]:
            why = f"at {st['per_host_bps'] / 1e6:g} Mbit/s per host: {st['violation'] or 'not faithful'}"
            break
        best = max(best, st["per_host_bps"])
    cap_bps = best * N_HOSTS
    return {"capacity_bps": cap_bps, "capacity_pps": cap_bps / (FRAME_BYTES * 8),
            "limited_by": why or "not reached: every step was faithful", "lower_bound": why is None}


def _run_step(rate_bps: float, workdir: Path) -> dict:
    """One short ``testbed run`` of the quickstart fabric at ``rate_bps``; the verdict's figures."""
    size = step_size_bytes(rate_bps)
    scen = workdir / f"step-{rate_bps:.0f}.yaml"
    scen.write_text(STEP_SCENARIO.format(rate_k=int(rate_bps / 1e3), rate=int(rate_bps), payload=PAYLOAD_BYTES,
                                         size=size))
    out = workdir / f"res-{rate_bps:.0f}"
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scen), "--results", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=600)
    found = list(out.glob("*/summary.json"))
    if not found:
        raise RuntimeError(f"calibration run at {rate_bps / 1e6:g} Mbit/s failed (exit {proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    s = RunDir.open(found[0].parent).summary
    return {"per_host_bps": rate_bps, "size_bytes": size, "faithful": bool(s["faithful"]),
            "violation": s["violations"][0] if s["violations"] else "",
            "busbw_ratio": s["sizes"][0]["busbw_ratio"] if s["sizes"] else None}


def calibrate(datapath: str, quiet: bool = False, rates_bps: tuple = STEP_RATES_BPS) -> dict:
    """Measure the faithful capacity with real runs (root, OVS running); return the cache record.

    Each step is a ``testbed run`` in a child process (its own run id, lock and cleanup); the
    sweep stops at the first step that is not faithful. Raises RuntimeError when a run fails.
    """
    say = (lambda m: None) if quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    say(f"calibrating: ring all-reduce on the quickstart fabric ({N_HOSTS} hosts, path MTU {PAYLOAD_BYTES}) "
        f"at {', '.join(f'{r / 1e6:g}' for r in rates_bps)} Mbit/s per link, judged by the fidelity verdict")
    steps = []
    with tempfile.TemporaryDirectory(prefix="testbed-calibrate-") as tmp:
        for rate in rates_bps:
            st = _run_step(rate, Path(tmp))
            steps.append(st)
            say(f"  {rate / 1e6:g} Mbit/s per link: busbw/link {st['busbw_ratio']:.3f}, "
                + ("faithful" if st["faithful"] else f"NOT faithful: {st['violation'][:160]}"))
            if not st["faithful"]:
                break
    result = capacity_from_steps(steps)
    result.update({"machine": machine_facts(datapath), "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                      time.gmtime()),
                   "frame_bytes": FRAME_BYTES, "hosts": N_HOSTS, "steps": steps})
    return result


def format_capacity(cal: dict | None) -> str:
    """One line for the doctor's report."""
    if not cal:
        return "not calibrated: run 'testbed doctor --calibrate' (root; short real runs of the quickstart fabric, 1-2 min)"
    return (f"{'at least ' if cal.get('lower_bound') else ''}{cal['capacity_bps'] / 1e6:.0f} Mbit/s of host link "
            f"traffic in 1 KB packets ({cal['capacity_pps']:,.0f} packets/s; hosts x host_link_bps, e.g. 8 hosts x "
            f"{cal['capacity_bps'] / 8 / 1e6:.0f} Mbit/s); next step: {cal['limited_by']}; "
            f"measured {cal.get('measured_utc', '?')}")
