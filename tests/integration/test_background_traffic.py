"""Background traffic (issue 18 item 4): an iperf3 TCP flow across the spine lowers a ring all-reduce's busbw
by the share it takes of the links it shares with the ring; both are reported, and the loss identity
still adds up with the TCP flow's drops in the switch queues.

Fabric: 1 spine, 2 leaves, 2 hosts each (h1 h2 | h3 h4), 10 Mbit/s links. The ring h1->h2->h3->h4->h1
crosses the spine on h2->h3 and h4->h1; the TCP flow h1->h3 shares h1's uplink with ring flow h1->h2 and
l1->s1, s1->l2, l2->h3 with ring flow h2->h3 (one spine: ECMP has one path to give). A ring runs at its
slowest link, so with the TCP flow taking G_wire bit/s of frames on the shared links the ring is left
R - G_wire: expected busbw = busbw alone x (1 - G_wire / R), G_wire = the TCP goodput iperf3 measured x
frame / segment payload ((MTU + 14) / (MTU - 52)). The TCP flow is paced by the kernel at 4 Mbit/s
(rate_bps: SO_MAX_PACING_RATE) and the switch buffers hold 200 KB: the ring's window (64 KiB per QP)
and what the paced flow keeps in flight fit, so neither loses packets and the link splits into the
flow's rate and the rest. With 100 KB buffers, or an uncapped flow, TCP fills the buffer now and then
and the ring's go-back-N resends cost it more than the TCP share (docs/background.md has the figures).
"""
import pytest

from conftest import EXIT_FAITHFUL, assert_losses_accounted, run_scenario_file

LINK_BPS = 10e6
MTU_BYTES = 4200
TCP_CAP_BPS = 4e6
#: switch buffer: above the ring's window (16 x 4 KiB per QP) plus what the paced TCP flow keeps in flight
BUFFER = "200KB"

SCENARIO = """
name: {name}
seed: 1
fabric: {{spines: 1, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M,
         buffer_bytes: {buffer}, mtu_bytes: 4200}}
transport: {{payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}}
workload:
  collective: allreduce
  algorithm: ring
  sizes: {{min_bytes: 1MiB, max_bytes: 1MiB}}
  iterations: 4
  warmup_iterations: 1
{background}
"""

BACKGROUND = """background:
  - {{kind: tcp, name: bulk, src: h1, dst: h3, start_s: 0, duration_s: 300, rate_bps: {rate}}}
"""


def _busbw_bps(summary: dict) -> float:
    (row,) = summary["sizes"]
    return float(row["busbw_bps"])


def test_tcp_flow_takes_its_share_of_the_ring(tmp_path):
    _, alone = run_scenario_file(tmp_path, SCENARIO.format(name="ring_alone", background="", buffer=BUFFER), name="alone",
                                 expect_rc=EXIT_FAITHFUL)
    _, shared = run_scenario_file(tmp_path, SCENARIO.format(name="ring_tcp", buffer=BUFFER, background=BACKGROUND.format(
        rate=int(TCP_CAP_BPS))), name="shared", expect_rc=EXIT_FAITHFUL)
    assert alone["background"] is None  # summary.json has one shape: a block the run lacks is null
    assert_losses_accounted(alone)
    assert_losses_accounted(shared)  # the TCP flow's drops are left out of the RoCE identity, not unexplained

    bg = shared["background"]
    (flow,) = bg["flows"]
    assert (flow["kind"], flow["src"], flow["dst"], flow["status"]) == ("tcp", "h1", "h3", "cut")
    goodput = flow["goodput_bps"]
    assert 0.8 * TCP_CAP_BPS <= goodput <= 1.02 * TCP_CAP_BPS, flow
    assert flow["bytes"] > 0 and flow["retransmits"] is not None
    g_wire = goodput * (MTU_BYTES + 14) / (MTU_BYTES - 52)

    busbw_alone, busbw_shared = _busbw_bps(alone), _busbw_bps(shared)
    expected = busbw_alone * (1 - g_wire / LINK_BPS)
    print(f"busbw alone {busbw_alone / 1e6:.3f} Mbit/s, with TCP {busbw_shared / 1e6:.3f} Mbit/s; TCP goodput "
          f"{goodput / 1e6:.3f} Mbit/s ({g_wire / 1e6:.3f} on the wire, {flow['retransmits']} retransmits); "
          f"expected busbw {expected / 1e6:.3f} Mbit/s (ratio {busbw_shared / expected:.3f})")
    assert busbw_alone > 0.9 * LINK_BPS * alone["payload_efficiency"]
    assert busbw_shared == pytest.approx(expected, rel=0.10)


MIXED = """
name: bg_mixed
seed: 1
fabric: {spines: 1, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M,
         buffer_bytes: 100KB, mtu_bytes: 4200}
transport: {payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}
workload:
  collective: allreduce
  algorithm: ring
  sizes: {min_bytes: 1MiB, max_bytes: 1MiB}
  iterations: 3
  warmup_iterations: 1
background:
  - {kind: udp, src: h2, dst: h4, start_s: 0.2, duration_s: 2, rate_bps: 2M}
  - {kind: tcp, name: ckpt, src: h4, dst: h1, start_s: 0.5, size_bytes: 400KB, parallel: 2}
  - {kind: storage, name: store, clients: [h2, h3], server: h1, burst_bytes: 100KB, interval_s: 1.5, count: 2}
  - {kind: tcp, name: late, src: h3, dst: h2, start_s: 600, duration_s: 2}
"""


def test_udp_sized_tcp_and_storage_bursts(tmp_path):
    """Every kind runs and is reported apart from the all-reduce: UDP at its rate, sized flows with an FCT no
    shorter than their bytes at the link rate, a flow due after the workload never started; the run is
    faithful, the loss identity holds and no background process outlives the run."""
    import psutil

    _, s = run_scenario_file(tmp_path, MIXED, name="mixed", expect_rc=EXIT_FAITHFUL)
    assert_losses_accounted(s)
    rows = {(r["name"], r["burst"], r["src"]): r for r in s["background"]["flows"]}
    assert len(rows) == 1 + 1 + 2 * 2 + 1
    udp = rows[("udp0", 0, "h2")]
    assert udp["status"] == "done" and udp["goodput_bps"] == pytest.approx(2e6, rel=0.05) and udp["lost_pkts"] == 0
    for key in [("ckpt", 0, "h4")] + [("store", b, h) for b in (0, 1) for h in ("h2", "h3")]:
        r = rows[key]
        assert r["status"] == "done" and r["bytes"] == r["size_bytes"], r
        assert r["fct_s"] >= r["size_bytes"] * 8 / LINK_BPS, r  # no faster than the link
        assert r["retransmits"] is not None
    assert rows[("ckpt", 0, "h4")]["streams"] == 2
    assert rows[("late", 0, "h3")]["status"] == "not_started" and rows[("late", 0, "h3")]["bytes"] is None
    assert (tmp_path / "mixed").glob("*/background.csv")
    left = [p.info for p in psutil.process_iter(["pid", "name", "cmdline"])
            if p.info["name"] == "iperf3" or s["run_id"] in " ".join(p.info["cmdline"] or [])]
    assert not left, left
