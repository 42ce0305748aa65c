"""Packet timing on a real shaped veth: departures of a backlogged port are paced at the frame time.

A veth pair ``<rid>t0``/``<rid>t1`` in the root namespace; ``<rid>t0`` is shaped like a switch
port (HTB 10 Mbit/s + 30 kB bfifo). 1082-byte frames are offered at 15 Mbit/s for 2 s from an
AF_PACKET socket, so the queue stays backlogged; the queue sampler arms a DepartureCapture on
it, and the verdict judges the captured gaps. The veth is deleted in ``finally``. Each attempt also
records the host's load (steal, other processes' CPU): a CI machine once measured 79-89 % of gaps
within 10 % twice in a row while this machine measures 99-100 %; the figures now say whether the host
was busy elsewhere.
"""
import socket
import time

import psutil
import pytest
from pyroute2 import IPRoute

from dataplane.queues import htb_bfifo
from testbed.measure import packet_timing
from testbed.measure.departure_capture import DepartureCapture
from topology.naming import new_run_id
from testbed.host.runlock import RunLock
from dataplane.qdisc_sampler import QdiscSampler

pytestmark = pytest.mark.integration

RATE_BPS = 10e6
FRAME_BYTES = 1082


#: attempts when a failed measurement coincided with a host busy elsewhere (steal, other processes)
ATTEMPTS = 4
#: other processes' CPU (and the hypervisor's steal) above this share of one core make a failed attempt the
#: host's, not the link model's: the qdisc watchdog's softirq then waits for a core (a ~100 us late departure
#: is a failed 866 us gap)
CONTENDED_CORE_SHARE = 0.15


def _host_load(before, after, own_cpu_s: float, wall_s: float) -> dict:
    """Steal and other processes' CPU during an attempt, as shares of one core (psutil cpu_times deltas)."""
    steal = (getattr(after, "steal", 0.0) - getattr(before, "steal", 0.0)) / wall_s
    busy = sum(getattr(after, k, 0.0) - getattr(before, k, 0.0)
               for k in ("user", "nice", "system", "irq", "softirq", "steal"))
    return {"steal_core_share": steal, "others_core_share": max(0.0, busy - own_cpu_s) / wall_s}


def _measure_once():
    rid = new_run_id()
    a, b = f"{rid}t0", f"{rid}t1"
    with RunLock(rid) as lock, IPRoute() as ipr:
        lock.record("interface", a)
        ipr.link("add", ifname=a, kind="veth", peer=b)
        try:
            for name in (a, b):  # no IPv6 router solicitations or MLD reports in the measured queue
                with open(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6", "w") as f:
                    f.write("1")
                ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
            htb_bfifo.shape_egress(ipr, a, RATE_BPS, 30_000, 1500)
            frame = bytes.fromhex("020000000002" "020000000001" "88b5") + bytes(FRAME_BYTES - 14)
            tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            tx.bind((a, 0))
            cap = DepartureCapture([a], window_s=1.0)
            sampler = QdiscSampler([a], 0.01, on_sample=cap.on_sample)
            cpu0, own0, t0 = psutil.cpu_times(), time.process_time(), time.monotonic()
            with sampler, cap:
                t_end = time.monotonic() + 2.0
                period = FRAME_BYTES * 8 / 15e6
                nxt = time.monotonic()
                while time.monotonic() < t_end:
                    try:
                        tx.send(frame)
                    except OSError:  # bfifo full: the emulated buffer dropped it
                        pass
                    nxt += period
                    time.sleep(max(0.0, nxt - time.monotonic()))
            load = _host_load(cpu0, psutil.cpu_times(), time.process_time() - own0, time.monotonic() - t0)
            tx.close()
            dep = cap.to_frame()
            violations: list[str] = []
            fig = packet_timing.check_departures(dep, sampler.to_frame(), {a: RATE_BPS}, violations)
        finally:
            ipr.link("del", index=ipr.link_lookup(ifname=a)[0])
    return a, dep, fig, violations, load


def test_backlogged_port_departures_within_10pct_of_serialization_time():
    """One 2 s measurement; a failed one is measured again (up to ATTEMPTS) only when the host was busy
    elsewhere meanwhile (steal or other processes above CONTENDED_CORE_SHARE of a core): a failure on a
    quiet host fails at once."""
    for attempt in range(1, ATTEMPTS + 1):
        a, dep, fig, violations, load = _measure_once()
        p = fig["ports"][a]
        print(f"packet timing (attempt {attempt}): {p['gaps_judged']} gaps judged, {p['within_fraction']:.3f} "
              f"within 10%, median error {p['median_error']:+.4f}, capture CPU {fig['capture_cpu_s']:.3f} s; "
              f"steal {load['steal_core_share']:.3f}, other processes {load['others_core_share']:.3f} of a core")
        contended = max(load.values()) > CONTENDED_CORE_SHARE
        if p["status"] == "passed" or not contended or attempt == ATTEMPTS:
            break
        time.sleep(3.0)
    assert set(dep["frame_bytes"]) == {FRAME_BYTES}
    assert p["gaps_judged"] >= 800  # one 1 s window at 1155 frames/s
    assert p["status"] == "passed" and p["within_fraction"] >= 0.95, (violations, load)
    assert abs(p["median_error"]) < 0.01
    assert fig["capture_cpu_s"] < 0.5
