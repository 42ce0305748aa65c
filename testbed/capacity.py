"""Faithful capacity of this machine: how much host link traffic it can emulate before the CPU saturates.

:func:`calibrate` builds a small real fabric (1 spine, 2 leaves, 2 hosts per
leaf: 4 hosts, 3 OVS switches) and has every host send paced 1 KB UDP
datagrams to the next host of a ring (half the packets cross one switch,
half three: the mix of the quickstart ring) at rising rates, STEP_S seconds
each (STEP_RATES_BPS per host, about x1.4 apart). Each step is judged by the
fidelity verdict's criteria, applied to the CPU time the emulation itself
used, so that other work on the machine does not blur the figure:

- the emulation's CPU time (ovs-vswitchd, the senders and receivers, and the
  machine's softirq and irq time, where the kernel forwards veth traffic and
  runs the qdiscs) stayed below ``cores x (100 - MIN_IDLE_PCT) %``,
- ovs-vswitchd's busiest thread (the userspace datapath forwards on one
  thread) was busy at most 100 - MIN_IDLE_PCT % of a core,
- at least MIN_DELIVERED of the datagrams sent arrived.

The least idle core of each step is recorded too (``min_core_idle_pct``), but
not judged: on a shared machine it measures the neighbours.

The capacity is the delivered packet rate of the highest step before the
first one that fails (a lower bound when none fails). The senders are small
Python loops like the testbed's agents (one syscall per packet), so their
CPU cost counts, as the agents' does in a run. The figure is stated in
packets/s and in bit/s of host link traffic with 1082-byte frames (a
1024-byte RoCE payload); the cost is per packet, so other path MTUs give
about the same packets/s, i.e. more bit/s with larger frames (DESIGN.md: 4 KB
datagrams bought 2.5-4x the bandwidth). The figure is what the machine can
emulate when nothing else runs; a run is still judged on its own seconds.

The result is cached in ``$TESTBED_CACHE_DIR/capacity.json`` (default
``/var/lib/testbed``) with the machine facts it holds for (cores, kernel,
datapath, CPU model); :func:`check_scenario` compares a scenario with it.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

#: idle % every core must keep (the fidelity verdict's default min_cpu_idle_pct)
MIN_IDLE_PCT = 5.0
#: share of the sent datagrams that must arrive
MIN_DELIVERED = 0.99
#: per-host offered rates of the steps, bit/s (4 hosts: 0.9k .. 60k packets/s in all)
STEP_RATES_BPS = (2e6, 4e6, 8e6, 11e6, 16e6, 22e6, 32e6, 45e6, 64e6, 90e6, 128e6)
STEP_S = 1.2
#: UDP payload of the calibration datagrams: frame = 14 + 20 + 8 + 1040 = 1082 B, as a 1024 B RoCE packet
DATAGRAM_BYTES = 1040
FRAME_BYTES = 14 + 20 + 8 + DATAGRAM_BYTES
PORT = 4792

# sender: sends DATAGRAM_BYTES datagrams to DST at each step's rate during its window; byte 0 = step index.
# Paced in batches: every millisecond it sends the packets that fell due (one syscall each).
_SENDER = r"""
import socket, sys, time
dst, t0, step_s, size = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rates = [float(r) for r in sys.argv[5:]]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent = []
for i, rate in enumerate(rates):
    start, end = t0 + i * step_s, t0 + (i + 1) * step_s
    pkt = bytes([i]) + bytes(size - 1)
    gap = size * 8 / rate
    while time.time() < start:
        time.sleep(min(0.01, max(0.0, start - time.time())))
    n = 0
    while True:
        now = time.time()
        if now >= end:
            break
        due = int((now - start) / gap) + 1
        while n < due:
            try:
                s.sendto(pkt, (dst, %d))
            except OSError:
                pass
            n += 1
        time.sleep(0.001)
    sent.append(n)
print(" ".join(map(str, sent)), flush=True)
""" % PORT

# receiver: counts datagrams per step index until END
_RECEIVER = r"""
import socket, sys, time
ip, end, nsteps = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind((ip, %d))
s.settimeout(0.1)
got = [0] * nsteps
while time.time() < end:
    try:
        data = s.recv(4096)
    except socket.timeout:
        continue
    if data and data[0] < nsteps:
        got[data[0]] += 1
print(" ".join(map(str, got)), flush=True)
""" % PORT


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


def judge_step(step: dict, cores: int | None = None) -> str | None:
    """Why a step was not faithful (one line), or None when it was (module docstring criteria)."""
    cores = cores or os.cpu_count() or 1
    usable = 1 - MIN_IDLE_PCT / 100
    if step["sent_pkts"] and step["delivered_pkts"] < MIN_DELIVERED * step["sent_pkts"]:
        return f"{step['delivered_pkts']} of {step['sent_pkts']} datagrams delivered"
    if step["busy_cores"] > cores * usable:
        return f"the emulation used {step['busy_cores']:.2f} of {cores} cores"
    if step["ovs_thread_busy"] > usable:
        return f"ovs-vswitchd's busiest thread was {step['ovs_thread_busy']:.0%} busy"
    return None


def capacity_from_steps(steps: list[dict], cores: int | None = None) -> dict:
    """Capacity from measured steps in rising order (module docstring).

    Args:
        steps: dicts with sent_pkts, delivered_pkts, delivered_pps, busy_cores (the
            emulation's CPU time, in cores), ovs_thread_busy (busiest ovs-vswitchd thread, in cores).
        cores: CPUs of the machine (default: this one's).

    Returns: dict with capacity_pps, capacity_bps (host link traffic in
    FRAME_BYTES frames), limited_by (the first failing step's reason, or
    "not reached"), lower_bound (True when no step failed). capacity_pps is 0
    when even the first step failed.
    """
    best, why = 0.0, None
    for st in steps:
        why = judge_step(st, cores)
        if why:
            why = f"at {st['delivered_pps']:,.0f} packets/s {why}"
            break
        best = max(best, st["delivered_pps"])
    return {"capacity_pps": best, "capacity_bps": best * FRAME_BYTES * 8,
            "limited_by": why or "not reached: every step was faithful", "lower_bound": why is None}


def _ovs_vswitchd_pid() -> int | None:
    for d in (os.environ.get("OVS_RUNDIR"), "/var/run/openvswitch", "/run/openvswitch"):
        if d:
            try:
                return int(Path(d, "ovs-vswitchd.pid").read_text().strip())
            except (OSError, ValueError):
                continue
    return None


def _thread_times(pid: int | None) -> dict[int, float]:
    import psutil

    if pid is None:
        return {}
    try:
        return {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads()}
    except psutil.Error:
        return {}


def _emulation_cpu_s(pids: list[int]) -> float:
    """CPU seconds so far of ``pids`` (user + system) plus the machine's irq and softirq time."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    m = psutil.cpu_times()
    return total + getattr(m, "softirq", 0.0) + getattr(m, "irq", 0.0)


def _idle_pct(a, b) -> float:
    """Idle % of one CPU between two psutil.cpu_times snapshots (idle + iowait, as the verdict counts)."""
    idle = (b.idle - a.idle) + (getattr(b, "iowait", 0) - getattr(a, "iowait", 0))
    total = sum(b) - sum(a)
    return 100.0 * idle / total if total > 0 else 100.0


def calibrate(datapath: str, quiet: bool = False) -> dict:
    """Measure the faithful capacity on a real fabric (root, OVS running); return the cache record.

    Builds and tears down its own fabric under its own run id and run lock.
    Raises RuntimeError when no traffic was delivered (fabric broken).
    """
    import psutil

    from testbed.fabric import Fabric
    from testbed.naming import new_run_id
    from testbed.runlock import RunLock
    from testbed.spec import parse_scenario

    top = max(STEP_RATES_BPS)
    spec = parse_scenario({"name": "calibrate", "fabric": {
        "spines": 1, "leaves": 2, "hosts_per_leaf": 2, "host_link_bps": 2 * top, "fabric_link_bps": 4 * top},
        "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})
    rates = tuple(STEP_RATES_BPS)
    rid = new_run_id()
    say = (lambda m: None) if quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    say(f"calibrating: fabric {rid} (4 hosts, 3 switches), 1 KB UDP ring at "
        f"{', '.join(f'{r / 1e6:g}' for r in rates)} Mbit/s per host, {STEP_S:g} s each")
    with tempfile.TemporaryDirectory(prefix=f"{rid}-") as tmp, RunLock(rid):
        with Fabric(spec, rid, Path(tmp), datapath) as fab:
            n = len(fab.layout.hosts)
            t0 = time.time() + 1.5
            end = t0 + len(rates) * STEP_S + 0.5
            recv = [fab.host(r).popen([sys.executable, "-c", _RECEIVER, fab.layout.hosts[r].ip, str(end),
                                       str(len(rates))]) for r in range(n)]
            send = [fab.host(r).popen([sys.executable, "-c", _SENDER, fab.layout.hosts[(r + 1) % n].ip, str(t0),
                                       str(STEP_S), str(DATAGRAM_BYTES), *map(str, rates)]) for r in range(n)]
            ovs_pid = _ovs_vswitchd_pid()
            pids = [p.pid for p in send + recv] + ([ovs_pid] if ovs_pid else [])
            marks = []
            for i in range(len(rates)):
                # skip the first 0.25 s of each step (senders starting), measure the rest
                start, stop = t0 + i * STEP_S + 0.25, t0 + (i + 1) * STEP_S - 0.05
                time.sleep(max(0.0, start - time.time()))
                a = (time.time(), psutil.cpu_times(percpu=True), _thread_times(ovs_pid), _emulation_cpu_s(pids))
                time.sleep(max(0.0, stop - time.time()))
                b = (time.time(), psutil.cpu_times(percpu=True), _thread_times(ovs_pid), _emulation_cpu_s(pids))
                marks.append((a, b))
            sent = [list(map(int, p.communicate(timeout=30)[0].split())) for p in send]
            got = [list(map(int, p.communicate(timeout=30)[0].split())) for p in recv]
    steps = []
    for i, ((ta, ca, tha, ea), (tb, cb, thb, eb)) in enumerate(marks):
        dt = tb - ta
        thread_busy = max((thb[k] - tha[k] for k in thb if k in tha), default=0.0) / dt
        sent_i, got_i = sum(s[i] for s in sent), sum(g[i] for g in got)
        idle = [_idle_pct(a, b) for a, b in zip(ca, cb)]
        steps.append({"per_host_bps": rates[i], "sent_pkts": sent_i, "delivered_pkts": got_i,
                      "delivered_pps": got_i / STEP_S, "busy_cores": (eb - ea) / dt,
                      "min_core_idle_pct": min(idle),
                      "mean_idle_pct": sum(idle) / len(idle), "ovs_thread_busy": thread_busy})
        say(f"  {rates[i] / 1e6:g} Mbit/s per host: {got_i}/{sent_i} datagrams delivered, emulation CPU "
            f"{(eb - ea) / dt:.2f} cores, ovs-vswitchd busiest thread {thread_busy:.0%}, least idle core "
            f"{min(idle):.0f}%"
            + (f"  <- {judge_step(steps[-1])}" if judge_step(steps[-1]) else ""))
    if not any(s["delivered_pkts"] for s in steps):
        raise RuntimeError("calibration fabric delivered no packets")
    result = capacity_from_steps(steps)
    result.update({"machine": machine_facts(datapath), "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                      time.gmtime()),
                   "frame_bytes": FRAME_BYTES, "hosts": 4, "switches": 3, "min_idle_pct": MIN_IDLE_PCT,
                   "steps": steps})
    return result


def format_capacity(cal: dict | None) -> str:
    """One line for the doctor's report."""
    if not cal:
        return "not calibrated: run 'testbed doctor --calibrate' (root; builds a 4-host fabric, about 20 s)"
    return (f"{'at least ' if cal.get('lower_bound') else ''}{cal['capacity_bps'] / 1e6:.0f} Mbit/s of host link "
            f"traffic in 1 KB packets ({cal['capacity_pps']:,.0f} packets/s; hosts x host_link_bps, e.g. 8 hosts x "
            f"{cal['capacity_bps'] / 8 / 1e6:.0f} Mbit/s); next step: {cal['limited_by']}; "
            f"measured {cal.get('measured_utc', '?')}")
