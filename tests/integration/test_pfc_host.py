"""PFC frames from a switch port pause a streaming host like an RNIC (issue 7, item 4, host side).

One leaf, two hosts at 10 Mbit/s streaming to each other (benchmarks.instruments.pfc_host_reaction). While they
stream, the test sends real PFC frames (MAC control 0x8808, opcode 0x0101) from the leaf's port
toward h1: first one frame of 0.5 s of quanta, left to expire; then a :class:`PfcSender` pause of
0.2 s of quanta kept refreshed for 0.8 s and resumed with quanta 0. A tcpdump capture of the link
(at h1's end) must show h1's data stopping for each pause and starting again when it ends, the
frames decoding with scapy as class-based flow control with the vector and quanta sent, and no
packet lost (no drops, retransmissions or timeouts).
"""
import time

import pytest

from benchmarks.instruments.pfc_host_reaction import LINK_BPS, capture, read_capture, reaction, scenario, streaming
from testbed.emulation.agents import AgentGroup, transport_params
from testbed.emulation.fabric import Fabric
from dataplane.pfc_frames import PfcSender, send_pfc
from testbed.host.runlock import RunLock
from testbed.measure.drops import DropSnapshot, queue_drops_delta
from topology.naming import new_run_id
from traffic.wire.pfc import LOSSLESS_PRIORITY, quanta_for_s, quanta_s

pytestmark = pytest.mark.integration

ONE_SHOT_S, HELD_S, REFRESHED_QUANTA_S = 0.5, 0.8, 0.2


def test_host_obeys_pfc_frames_from_its_switch_port(tmp_path, datapath):
    spec, rid = scenario(), new_run_id()
    pcap = tmp_path / "link.pcap"
    one_shot_q, refreshed_q = quanta_for_s(ONE_SHOT_S, LINK_BPS), quanta_for_s(REFRESHED_QUANTA_S, LINK_BPS)
    with RunLock(rid), Fabric(spec, rid, tmp_path, datapath) as fab:
        h1 = fab.layout.hosts[0]
        port = fab.layout.attachment(h1.name).intf  # the leaf's port toward h1, in the root namespace
        params = transport_params(spec, rto_us=100_000)
        with AgentGroup(fab, params, spec.seed, lambda r: [1 - r]) as agents:
            before = DropSnapshot.take({}, fab.switch_ports, {})
            with capture(fab.net.get(h1.name), h1.intf, pcap), streaming(agents, 6 * 2**20):
                time.sleep(1.0)
                sent_frame = send_pfc(port, 1 << LOSSLESS_PRIORITY, [0, 0, 0, one_shot_q, 0, 0, 0, 0])
                time.sleep(ONE_SHOT_S + 1.0)
                with PfcSender(port, LINK_BPS) as sender:
                    sender.pause(LOSSLESS_PRIORITY, refreshed_q)
                    time.sleep(HELD_S)
                    sender.resume(LOSSLESS_PRIORITY)
            time.sleep(0.2)
            stats = agents.stats()
            after = DropSnapshot.take({}, fab.switch_ports, {})

    pfc, data = read_capture(pcap, h1.ip)
    counters = sender.counters
    # the frames decode as class-based flow control: priority 3 enabled, the quanta sent
    assert len(pfc) == 1 + counters.frames, pfc
    vectors = [[getattr(f, f"c{i}_enabled") for i in range(8)] for _, f in pfc]
    assert all(v == [0, 0, 0, 1, 0, 0, 0, 0] for v in vectors), vectors
    quanta = [f.c3_pause_time for _, f in pfc]
    assert quanta[0] == one_shot_q and quanta[-1] == 0 and set(quanta[1:-1]) == {refreshed_q}, quanta
    assert counters.refresh_frames >= HELD_S / (quanta_s(refreshed_q, LINK_BPS) / 2) - 2, counters
    assert bytes(pfc[0][1].firstlayer()) == sent_frame

    # h1's data stops for each pause and resumes at its end (quanta expiry, then the quanta-0 frame)
    t_one, t_held, t_resume = pfc[0][0], pfc[1][0], pfc[-1][0]
    for t_frame, t_end, what in ((t_one, t_one + quanta_s(one_shot_q, LINK_BPS), "expiry"),
                                 (t_held, t_resume, "resume frame")):
        r = reaction(data, t_frame, t_end)
        # what h1 had handed to its NIC still leaves (its socket buffer at 10 Mbit/s); nothing new after
        assert -0.005 <= r["drain_s"] <= params.sndbuf_bytes * 2 * 8 / LINK_BPS + 0.01, (what, r)
        assert -0.005 <= r["restart_s"] <= 0.03, (what, r)  # sending resumes within 30 ms of the end
        print(f"pfc host figures: pause ended by {what}: last packet {r['drain_s'] * 1e3:.1f} ms after the frame, "
              f"first packet {r['restart_s'] * 1e3:.1f} ms after the end, gap {r['gap_s'] * 1e3:.1f} ms")
    # nothing lost: no queue drops, no retransmission, no timeout; the host counted the pauses
    assert queue_drops_delta(before, after) == 0
    reqs = [q.counters for s in stats for q in s.requesters]
    assert sum(c.retx_pkts + c.timeouts + c.naks_rx for c in reqs) == 0, reqs
    h1_pfc = stats[0].pfc
    assert h1_pfc.pause_frames == 1 + counters.pause_frames + counters.refresh_frames
    assert h1_pfc.resume_frames == 1 and stats[1].pfc.pause_frames == 0
    assert ONE_SHOT_S + HELD_S - 0.02 <= h1_pfc.paused_ns / 1e9 <= ONE_SHOT_S + HELD_S + 0.05, h1_pfc
    assert stats[0].requesters[0].counters.pfc_paused_ns / 1e9 >= ONE_SHOT_S + HELD_S - 0.1
    assert [f[2] for f in h1_pfc.frames] == quanta  # pfc_rx.csv rows: every frame, its lossless quanta
