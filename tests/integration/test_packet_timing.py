"""Packet timing on a real shaped veth: departures of a backlogged port are paced at the frame time.

A veth pair ``<rid>t0``/``<rid>t1`` in the root namespace; ``<rid>t0`` is shaped like a switch
port (HTB 10 Mbit/s + 30 kB bfifo). 1082-byte frames are offered at 15 Mbit/s for 2 s from an
AF_PACKET socket, so the queue stays backlogged; the queue sampler arms a DepartureCapture on
it, and the verdict judges the captured gaps. The veth is deleted in ``finally``.
"""
import socket
import time

import pytest
from pyroute2 import IPRoute

from dataplane.queues import htb_bfifo
from testbed.measure import timing
from topology.naming import new_run_id
from testbed.host.runlock import RunLock
from dataplane.qdisc_sampler import QdiscSampler

pytestmark = pytest.mark.integration

RATE_BPS = 10e6
FRAME_BYTES = 1082


def test_backlogged_port_departures_within_10pct_of_serialization_time():
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
            cap = timing.DepartureCapture([a], window_s=1.0)
            sampler = QdiscSampler([a], 0.01, on_sample=cap.on_sample)
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
            tx.close()
            dep = cap.to_frame()
            fig = timing.check_departures(dep, sampler.to_frame(), {a: RATE_BPS}, violations := [])
        finally:
            ipr.link("del", index=ipr.link_lookup(ifname=a)[0])
    p = fig["ports"][a]
    print(f"packet timing: {p['gaps_judged']} gaps judged, {p['within_fraction']:.3f} within 10%, "
          f"median error {p['median_error']:+.4f}, capture CPU {fig['capture_cpu_s']:.3f} s")
    assert set(dep["frame_bytes"]) == {FRAME_BYTES}
    assert p["gaps_judged"] >= 800  # one 1 s window at 1155 frames/s
    assert p["status"] == "passed" and p["within_fraction"] >= 0.95, violations
    assert abs(p["median_error"]) < 0.01
    assert fig["capture_cpu_s"] < 0.5
