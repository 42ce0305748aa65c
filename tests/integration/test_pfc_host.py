"""PFC frames from a switch port pause a streaming host like an RNIC (issue 7, item 4, host side).

One leaf, two hosts at 10 Mbit/s streaming to each other (ring all-reduce). While they stream, the
test sends real PFC frames (MAC control 0x8808, opcode 0x0101) from the leaf's port toward h1
(testbed.emulation.pfc_frames): first one frame of 0.5 s of quanta, left to expire; then a
:class:`PfcSender` pause of 0.2 s of quanta kept refreshed for 0.8 s and resumed with quanta 0.
A tcpdump capture on that link (at h1's end) must show h1's data stopping for each pause and starting again when
it ends, the frames decoding with scapy as class-based flow control with the vector and quanta
sent, and no packet lost (no drops, retransmissions or timeouts).
"""
import subprocess
import threading
import time

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.inet import IP
from scapy.utils import rdpcap

from testbed.emulation.agents import AgentGroup, transport_params
from testbed.emulation.fabric import Fabric
from testbed.emulation.pfc_frames import PfcSender, send_pfc
from testbed.host.runlock import RunLock
from testbed.measure.drops import DropSnapshot, queue_drops_delta
from testbed.naming import new_run_id
from testbed.spec.scenario import parse_scenario
from traffic.wire.pfc import LOSSLESS_PRIORITY, quanta_for_s, quanta_s

pytestmark = pytest.mark.integration

LINK_BPS = 10e6
ONE_SHOT_S, HELD_S, REFRESHED_QUANTA_S = 0.5, 0.8, 0.2


def _capture(node, ifname: str, path):
    """tcpdump on ``ifname`` in ``node``'s namespace, armed when this returns."""
    p = node.popen(["tcpdump", "-i", ifname, "-w", str(path), "-s", "96", "-U", "-B", "8192", "-n"],
                   stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in p.stderr:  # tcpdump prints "listening on ..." once the capture is armed
        if "listening on" in line:
            return p
    raise RuntimeError(f"tcpdump on {ifname} did not start")


def _gaps(times, t_from, min_gap_s=0.1):
    """(last packet before, first packet after) of each gap longer than ``min_gap_s`` after ``t_from``."""
    after = [t for t in times if t >= t_from - 0.05]
    return [(a, b) for a, b in zip(after, after[1:]) if b - a > min_gap_s]


def test_host_obeys_pfc_frames_from_its_switch_port(tmp_path, datapath):
    spec = parse_scenario({"name": "pfc_host", "fabric": {"spines": 1, "leaves": 1, "hosts_per_leaf": 2,
                                                          "host_link_bps": "10M", "fabric_link_bps": "10M",
                                                          "mtu_bytes": 4200},
                           "transport": {"payload_bytes": 4096, "window_pkts": 16, "ack_every_pkts": 4},
                           "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})
    rid = new_run_id()
    with RunLock(rid), Fabric(spec, rid, tmp_path, datapath) as fab:
        h1 = fab.layout.hosts[0]
        port = fab.layout.attachment(h1.name).intf  # the leaf's port toward h1, in the root namespace
        params = transport_params(spec, rto_us=100_000)
        with AgentGroup(fab, params, spec.seed, lambda r: [1 - r]) as agents:
            before = DropSnapshot.take({}, fab.switch_ports, {})
            # on h1's end of the link: frames sent past the qdisc (PACKET_QDISC_BYPASS) skip the
            # sending interface's packet taps, so the switch port's own capture cannot show them
            cap = _capture(fab.net.get(h1.name), h1.intf, tmp_path / "link.pcap")
            try:
                done = {}
                op = threading.Thread(target=lambda: done.update(r=agents.run_op(0, 6 * 2**20, [[0, 1]], 60)))
                op.start()
                time.sleep(1.0)
                one_shot_q = quanta_for_s(ONE_SHOT_S, LINK_BPS)
                sent_frame = send_pfc(port, 1 << LOSSLESS_PRIORITY, [0, 0, 0, one_shot_q, 0, 0, 0, 0])
                time.sleep(ONE_SHOT_S + 1.0)
                refreshed_q = quanta_for_s(REFRESHED_QUANTA_S, LINK_BPS)
                with PfcSender(port, LINK_BPS) as sender:
                    sender.pause(LOSSLESS_PRIORITY, refreshed_q)
                    time.sleep(HELD_S)
                    sender.resume(LOSSLESS_PRIORITY)
                    counters = sender.counters
                op.join(60)
                assert "r" in done, "the all-reduce did not finish"
                stats = agents.stats()
            finally:
                time.sleep(0.2)
                cap.terminate()
                cap.wait(5)
            after = DropSnapshot.take({}, fab.switch_ports, {})

    pkts = rdpcap(str(tmp_path / "link.pcap"))
    pfc = [(float(p.time), p[MACControlClassBasedFlowControl]) for p in pkts if MACControlClassBasedFlowControl in p]
    data = [float(p.time) for p in pkts if IP in p and p[IP].src == h1.ip and p[IP].tos >> 2 == 26]
    # the frames decode as class-based flow control: priority 3 enabled, the quanta sent
    assert len(pfc) == 1 + counters.frames, pfc
    vectors = [[getattr(f, f"c{i}_enabled") for i in range(8)] for _, f in pfc]
    assert all(v == [0, 0, 0, 1, 0, 0, 0, 0] for v in vectors), vectors
    quanta = [f.c3_pause_time for _, f in pfc]
    assert quanta[0] == one_shot_q and quanta[-1] == 0 and set(quanta[1:-1]) == {refreshed_q}, quanta
    assert counters.refresh_frames >= HELD_S / (quanta_s(refreshed_q, LINK_BPS) / 2) - 2, counters
    assert bytes(pkts[[i for i, p in enumerate(pkts) if MACControlClassBasedFlowControl in p][0]]) == sent_frame

    # h1's data stops for each pause and resumes at its end (quanta expiry, then the quanta-0 frame)
    t_one, t_held, t_resume = pfc[0][0], pfc[1][0], pfc[-1][0]
    for t_pause, t_end, what in ((t_one, t_one + quanta_s(one_shot_q, LINK_BPS), "expiry"),
                                 (t_held, t_resume, "resume frame")):
        gaps = _gaps(data, t_pause)
        assert gaps, f"h1 never stopped after the pause at {t_pause:.3f}"
        last, first = gaps[0]
        drain_s, restart_s = last - t_pause, first - t_end
        # what h1 had handed to its NIC still leaves (its socket buffer at 10 Mbit/s); nothing new after
        assert -0.005 <= drain_s <= params.sndbuf_bytes * 2 * 8 / LINK_BPS + 0.01, (what, drain_s)
        assert -0.005 <= restart_s <= 0.03, (what, restart_s)  # sending resumes within 30 ms of the end
        print(f"pfc host figures: pause ended by {what}: last packet {drain_s * 1e3:.1f} ms after the frame, "
              f"first packet {restart_s * 1e3:.1f} ms after the end, gap {(first - last) * 1e3:.1f} ms")
    # nothing lost: no queue drops, no retransmission, no timeout; the host counted the pauses
    assert queue_drops_delta(before, after) == 0
    reqs = [q.counters for s in stats for q in s.requesters]
    assert sum(c.retx_pkts + c.timeouts + c.naks_rx for c in reqs) == 0, reqs
    h1_stats = stats[0].pfc
    assert h1_stats.pause_frames == 1 + counters.pause_frames + counters.refresh_frames
    assert h1_stats.resume_frames == 1 and stats[1].pfc.pause_frames == 0
    assert ONE_SHOT_S + HELD_S - 0.02 <= h1_stats.paused_ns / 1e9 <= ONE_SHOT_S + HELD_S + 0.05, h1_stats
    assert stats[0].requesters[0].counters.pfc_paused_ns / 1e9 >= ONE_SHOT_S + HELD_S - 0.1
    print(f"pfc host figures: h1 paused {h1_stats.paused_ns / 1e6:.1f} ms by {h1_stats.pause_frames} pause frames "
          f"and {h1_stats.resume_frames} resume; frames in the capture {len(pfc)}")
