"""Side A of benchmarks/udp_ring_vs_testbed.py (the plain UDP ring, benchmarks.instruments.udp_ring) on a small
fabric: one short step at a low rate is delivered within the verdict's link-rate band and judged faithful, so the
benchmark's machinery (senders, receivers, counters, verdict) cannot rot unseen."""
from benchmarks.instruments.udp_ring import run_ring
from testbed.measure.thresholds import FidelityThresholds

RATE_BPS = 10e6


def test_udp_ring_step_is_delivered_and_faithful(make_fabric):
    fab = make_fabric(spines=1, leaves=2, hosts_per_leaf=2, host_link_bps=RATE_BPS, fabric_link_bps=RATE_BPS)
    st = run_ring(fab, payload_bytes=1024, duration_s=3.0, warmup_s=0.5)
    print("\n".join(st.verdict.lines()), st.figures)
    band = FidelityThresholds().min_link_rate_ratio
    assert st.frame_bytes == 1082
    assert len(st.delivered_bps) == len(st.fed_bps) == 4
    for host in st.delivered_bps:  # paced by the host NIC's shaper at the link rate, never above it
        assert band * RATE_BPS <= st.fed_bps[host] <= 1.01 * RATE_BPS, (host, st.fed_bps)
        assert band * RATE_BPS <= st.delivered_bps[host] <= 1.01 * RATE_BPS, (host, st.delivered_bps)
    assert st.received_pkts + st.switch_queue_drops_pkts == st.sent_pkts > 3 * 4 * RATE_BPS / (8 * 1082) * 0.9
    checks = st.verdict.checks
    for name in ("cpu", "drops", "hosts", "delivered", "udp_loss"):
        assert checks[name]["status"] == "passed", (name, checks[name])
    assert st.faithful, st.verdict.lines()
