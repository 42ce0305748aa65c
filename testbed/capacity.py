"""Faithful capacity of this machine: how much host link traffic it can emulate before the CPU saturates.

:func:`calibrate` builds a small real fabric (1 spine, 2 leaves, 2 hosts per
leaf: 4 hosts, 3 OVS switches) and has every host send paced 1 KB UDP
datagrams to the next host of a ring (half the packets cross one switch,
half three, the mix of the quickstart ring) at a few rising rates, STEP_S
seconds each, after an idle step. For each step it measures the packets
delivered, the busy time of every CPU (/proc/stat through psutil) and of
ovs-vswitchd's busiest thread (the userspace datapath forwards on one
thread). A least-squares line through (delivered packets/s, busy) gives the
CPU cost per packet; the capacity is the packet rate at which either

- all cores together would be busy ``100 - MIN_IDLE_PCT`` % (less
  RUN_OVERHEAD_CORES for the run's own sampler and controller), or
- ovs-vswitchd's busiest thread would be busy ``100 - MIN_IDLE_PCT`` % of one core,

whichever comes first. The senders are small Python loops like the
testbed's agents (blocking sockets, one syscall per packet), so their cost is
counted. The figure is stated in packets/s and in bit/s of host link traffic
with 1082-byte frames (a 1024-byte RoCE payload); other path MTUs cost about
the same per packet, so their capacity in bit/s scales with the frame size
(DESIGN.md: 4 KB datagrams bought 2.5-4x the bandwidth).

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

#: idle % a core must keep (the fidelity verdict's default min_cpu_idle_pct)
MIN_IDLE_PCT = 5.0
#: cores the run itself uses besides forwarding (1 ms queue sampler ~10 % of a core, DESIGN.md)
RUN_OVERHEAD_CORES = 0.1
#: per-host offered rates of the load steps, bit/s (after an idle step)
STEP_RATES_BPS = (4e6, 8e6, 16e6)
STEP_S = 1.5
#: UDP payload of the calibration datagrams: frame = 14 + 20 + 8 + 1040 = 1082 B, as a 1024 B RoCE packet
DATAGRAM_BYTES = 1040
FRAME_BYTES = 14 + 20 + 8 + DATAGRAM_BYTES
PORT = 4792

# sender: sends DATAGRAM_BYTES datagrams to DST at each step's rate during its window; byte 0 = step index
_SENDER = r"""
import socket, sys, time
dst, t0, step_s, size = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rates = [float(r) for r in sys.argv[5:]]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent = []
for i, rate in enumerate(rates):
    start, end = t0 + i * step_s, t0 + (i + 1) * step_s
    pkt = bytes([i]) + bytes(size - 1)
    gap = size * 8 / rate if rate > 0 else None
    while time.time() < start:
        time.sleep(min(0.01, max(0.0, start - time.time())))
    n = 0
    while gap:
        now = time.time()
        if now >= end:
            break
        due = start + n * gap
        if due > now:
            time.sleep(due - now)
            continue
        try:
            s.sendto(pkt, (dst, %d))
        except OSError:
            pass
        n += 1
    if not gap:
        time.sleep(max(0.0, end - time.time()))
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


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares line y = a + b x; returns (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def capacity_from_steps(steps: list[dict], cores: int) -> dict:
    """Capacity figures from measured steps (module docstring).

    Args:
        steps: dicts with delivered_pps, busy_cores (all CPUs together, in
            cores) and ovs_thread_busy (busiest ovs-vswitchd thread, in cores).
        cores: CPUs of the machine.

    Returns: dict with capacity_pps, capacity_bps (host link traffic in
    FRAME_BYTES frames), limited_by ('cpu' or 'ovs_thread'), cost_core_us_per_pkt,
    ovs_thread_us_per_pkt. capacity_pps is None when the busy time did not
    grow with the load (nothing to extrapolate).
    """
    xs = [s["delivered_pps"] for s in steps]
    a_all, b_all = _fit(xs, [s["busy_cores"] for s in steps])
    a_ovs, b_ovs = _fit(xs, [s["ovs_thread_busy"] for s in steps])
    usable = 1 - MIN_IDLE_PCT / 100
    limits = {}
    if b_all > 0:
        limits["cpu"] = (cores * usable - RUN_OVERHEAD_CORES - a_all) / b_all
    if b_ovs > 0:
        limits["ovs_thread"] = (usable - a_ovs) / b_ovs
    out = {"cost_core_us_per_pkt": b_all * 1e6, "ovs_thread_us_per_pkt": b_ovs * 1e6,
           "idle_busy_cores": a_all, "capacity_pps": None, "capacity_bps": None, "limited_by": None}
    if limits:
        by = min(limits, key=limits.get)
        pps = max(0.0, limits[by])
        out.update(capacity_pps=pps, capacity_bps=pps * FRAME_BYTES * 8, limited_by=by)
    return out


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


def _busy_s(t0, t1) -> float:
    """Busy CPU seconds between two psutil.cpu_times(percpu=True) snapshots, all CPUs together."""
    total = 0.0
    for a, b in zip(t0, t1):
        idle = (b.idle - a.idle) + (getattr(b, "iowait", 0) - getattr(a, "iowait", 0))
        all_ = sum(b) - sum(a)
        total += all_ - idle
    return total


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
        "spines": 1, "leaves": 2, "hosts_per_leaf": 2, "host_link_bps": 4 * top, "fabric_link_bps": 8 * top},
        "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})
    rates = (0.0,) + tuple(STEP_RATES_BPS)
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
            marks = []
            for i in range(len(rates)):
                # skip the first 0.25 s of each step (senders starting), measure the rest
                start, stop = t0 + i * STEP_S + 0.25, t0 + (i + 1) * STEP_S - 0.05
                time.sleep(max(0.0, start - time.time()))
                a = (time.time(), psutil.cpu_times(percpu=True), _thread_times(ovs_pid))
                time.sleep(max(0.0, stop - time.time()))
                b = (time.time(), psutil.cpu_times(percpu=True), _thread_times(ovs_pid))
                marks.append((a, b))
            sent = [list(map(int, p.communicate(timeout=30)[0].split())) for p in send]
            got = [list(map(int, p.communicate(timeout=30)[0].split())) for p in recv]
    steps = []
    for i, ((ta, ca, tha), (tb, cb, thb)) in enumerate(marks):
        dt = tb - ta
        thread_busy = max((thb[k] - tha[k] for k in thb if k in tha), default=0.0) / dt
        sent_i, got_i = sum(s[i] for s in sent), sum(g[i] for g in got)
        steps.append({"per_host_bps": rates[i], "sent_pkts": sent_i, "delivered_pkts": got_i,
                      "delivered_pps": got_i / STEP_S, "busy_cores": _busy_s(ca, cb) / dt,
                      "ovs_thread_busy": thread_busy})
        say(f"  step {i}: {rates[i] / 1e6:g} Mbit/s per host, {got_i}/{sent_i} packets delivered, "
            f"CPU busy {_busy_s(ca, cb) / dt:.2f} cores, ovs-vswitchd busiest thread {thread_busy:.0%}")
    if not any(s["delivered_pkts"] for s in steps):
        raise RuntimeError("calibration fabric delivered no packets")
    cores = os.cpu_count() or 1
    result = capacity_from_steps(steps, cores)
    result.update({"machine": machine_facts(datapath), "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                      time.gmtime()),
                   "frame_bytes": FRAME_BYTES, "hosts": 4, "switches": 3, "min_idle_pct": MIN_IDLE_PCT,
                   "steps": steps})
    return result


def format_capacity(cal: dict | None) -> str:
    """One line for the doctor's report."""
    if not cal:
        return "not calibrated: run 'testbed doctor --calibrate' (root; builds a 4-host fabric, about 15 s)"
    if not cal.get("capacity_pps"):
        return f"calibration on {cal.get('measured_utc', '?')} found no CPU cost to extrapolate"
    return (f"{cal['capacity_bps'] / 1e6:.0f} Mbit/s of host link traffic in 1 KB packets "
            f"({cal['capacity_pps']:,.0f} packets/s; hosts x host_link_bps, e.g. 8 hosts x "
            f"{cal['capacity_bps'] / 8 / 1e6:.0f} Mbit/s), limited by {cal['limited_by']}; "
            f"measured {cal.get('measured_utc', '?')}")
