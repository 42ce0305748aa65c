"""C07: the lossless class never drops. 4:1 incast at half the link rate each (10 Mbit/s links, 150 KB
class buffers, Xoff 100 KB, Xon 70 KB), two senders on the receiver's leaf and two behind the spine, so
the pauses must spread hop by hop (receiver's leaf -> spine -> the far leaf -> its hosts). The PFC loop
runs in the controller process; its files are read after the fabric stopped."""
import pytest

from testbed.emulation.fabric import Fabric
from testbed.host.runlock import RunLock
from topology.naming import new_run_id
from testbed.results.congestion import congestion_block
from testbed.results.rundir import RunDir
from testbed.spec.scenario import parse_scenario
from tests.instruments.incast import TOS_LOSSLESS, TOS_LOSSY, run_incast

pytestmark = pytest.mark.integration

BUFFER_BYTES = 150_000
RATE_BPS = 5e6  # half the link rate
TOTAL_BYTES = 1_250_000  # 2 s at 5 Mbit/s
RECEIVER, SENDERS = 0, [1, 2, 3, 4]  # hosts 0-2 on leaf 1, 3-5 on leaf 2


def c07_spec():
    return parse_scenario({
        "name": "c07",
        "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 3, "host_link_bps": "10M",
                   "fabric_link_bps": "10M", "buffer_bytes": BUFFER_BYTES, "queue_backend": "htb_classes"},
        "congestion": {"buffers": {"lossless_bytes": BUFFER_BYTES, "lossy_bytes": BUFFER_BYTES},
                       "pfc": {"xoff_bytes": 100_000, "xon_bytes": 70_000}},
        "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})


def test_c07_lossless_class_never_drops_and_pauses_every_sender_port(tmp_path, datapath):
    spec, rid = c07_spec(), new_run_id()
    with RunLock(rid), Fabric(spec, rid, tmp_path, datapath) as fab:
        layout = fab.layout
        sender_ports = {layout.attachment(layout.hosts[r].name).intf for r in SENDERS}
        lossless = run_incast(fab, SENDERS, RECEIVER, TOS_LOSSLESS, RATE_BPS, TOTAL_BYTES, port=47_930)
        lossy = run_incast(fab, SENDERS, RECEIVER, TOS_LOSSY, RATE_BPS, TOTAL_BYTES, port=47_931)
    # the controller stopped: its loop wrote its files
    run = RunDir(tmp_path)
    loop = run.congestion_loop
    events, queues = run.pfc_events, run.lossless_queues
    block = congestion_block(tmp_path)

    # 0 drops on priority 3: every byte sent arrived, and the switches' lossless queues dropped nothing
    assert lossless["received"] == lossless["sent"], lossless
    assert block["lossless_drops_pkts"] == 0 and loop.lossless_drops_pkts == 0, loop
    # at least one pause on every sender-facing ingress port, while the lossless incast ran
    during = events[(events["time_ns"] >= lossless["t_start_ns"]) & (events["time_ns"] <= lossless["t_end_ns"])]
    paused = set(during.loc[during["event"] == "pause", "port"])
    assert sender_ports <= paused, (sender_ports - paused, sorted(paused))
    assert set(during["class"]) == {3}
    # the pauses spread hop by hop: the spine paused the far leaf's uplink, which paused its hosts
    ups = set(during.loc[during["event"] == "pause", "upstream"])
    assert {f"{rid}l2", f"{rid}s1"} <= ups, ups
    # the queue never above the buffer
    assert queues["backlog_bytes"].max() <= BUFFER_BYTES, queues["backlog_bytes"].max()
    assert block["pause_frames"] >= len(sender_ports) and block["paused_time_s"] > 0, block
    assert block["controller_loop_p99_ms"] is not None and loop.ticks > 1000, loop
    assert RunDir(tmp_path).pfc_ports["pauses_sent"].min() >= 1
    # control: the same load on the lossy class drops packets
    assert sum(lossy["received"].values()) < sum(lossy["sent"].values()), lossy


def test_a_run_with_pfc_pauses_hosts_loses_nothing_and_reports_it(tmp_path):
    """scenarios/ecn_marking.yaml with PFC instead of ECN, one size: the ring's cross-leaf hops queue up to
    a window (16 x 4214 B) at the 5 Mbit/s uplinks, past Xoff (5 frames): the leaves pause their hosts."""
    from conftest import REPO, run_scenario_file

    text = (REPO / "scenarios" / "ecn_marking.yaml").read_text().replace(
        "sizes: {min_bytes: 256KiB, max_bytes: 1MiB, factor: 4}", "sizes: {min_bytes: 1MiB, max_bytes: 1MiB}").replace(
        "ecn: {kmin_pkts: 5, kmax_pkts: 20, pmax: 0.2}", "pfc: {xoff_pkts: 5, xon_pkts: 3}")
    res, s = run_scenario_file(tmp_path, text, expect_rc=None)  # completed; faithful or not (CPU is shared)
    c, t = s["congestion"], s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] and t["switch_drops_pkts"] == 0, t
    assert c["lossless_drops_pkts"] == 0 and c["pause_frames"] > 0 and c["paused_time_s"] > 0, c
    assert c["controller_loop_p99_ms"] is not None and c["pfc"]["kick_frames"] > 0, c
    assert not any("of_pipeline" in v for v in s["violations"]), s["violations"]  # kick frames are not losses
    run_dir = tmp_path / "scenario" / next(p.name for p in (tmp_path / "scenario").iterdir())
    run = RunDir.open(run_dir)
    manifest = run.manifest
    assert manifest["backends"]["pfc"].startswith("controller loop"), manifest["backends"]
    ports = run.pfc_ports
    assert ports["upstream_port"].str.endswith("-eth0").any(), ports  # hosts were paused
    assert "pause_frames" in res.stdout  # the terminal's congestion line
