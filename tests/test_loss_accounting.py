"""The loss identity (testbed.measure.accounting): every event counted once, benign backpressure apart."""
import pytest

from testbed.measure.accounting import elsewhere, host_of_interface, loss_identity
from testbed.measure.verdict import evaluate
from testbed.measure.thresholds import FidelityThresholds

H1, H2 = "tb12abh1", "tb12abh2"


def test_host_nic_queue_full_retried_is_backpressure_counted_once():
    # the fat-tree case of issue 16: 18,897 ENOBUFS events seen by three counters, every one retried
    counters = {f"host_qdisc_drops_pkts[{H1}-eth0]": 18_897, f"udp_sndbuf_errors_pkts[{H1}]": 18_897,
                f"ip_out_discards_pkts[{H1}]": 18_897}
    e = elsewhere(counters, {H1: 18_897})
    assert e.losses == {} and e.total_pkts == 0
    assert e.host_nic_retries == {H1: 18_897}
    assert e.merged == {f"udp_sndbuf_errors_pkts[{H1}]": 18_897, f"ip_out_discards_pkts[{H1}]": 18_897}


def test_host_nic_drops_beyond_the_retries_are_losses():
    counters = {f"host_qdisc_drops_pkts[{H1}-eth0]": 120, f"ip_out_discards_pkts[{H1}]": 125}
    e = elsewhere(counters, {H1: 100})
    assert e.losses == {f"host_nic_queue_drops_pkts[{H1}]": 20, f"ip_out_discards_beyond_nic_queue_pkts[{H1}]": 5}
    assert e.total_pkts == 25


def test_a_background_senders_own_nic_drops_are_the_background_flows_not_the_workloads():
    # case C04: a 20 Mbit/s UDP background flow on a 20 Mbit/s host NIC; 468 of its datagrams dropped there
    counters = {f"host_qdisc_drops_pkts[{H1}-eth0]": 468, f"ip_out_discards_pkts[{H1}]": 468,
                f"host_qdisc_drops_pkts[{H2}-eth0]": 30}
    e = elsewhere(counters, {H1: 0, H2: 10}, background_senders=frozenset({H1}))
    assert e.losses == {f"host_nic_queue_drops_pkts[{H2}]": 20}
    assert e.merged[f"background_sender_nic_drops_pkts[{H1}]"] == 468
    assert elsewhere(counters, {H2: 10}).losses[f"host_nic_queue_drops_pkts[{H1}]"] == 468


def test_a_backlog_drop_seen_by_the_veth_and_softnet_counts_once():
    e = elsewhere({"softnet_dropped_pkts": 7, "switch_tx_dropped_pkts[tb12abl1-eth3]": 7}, {})
    assert e.losses == {"switch_tx_dropped_pkts[tb12abl1-eth3]": 7} and e.total_pkts == 7
    e = elsewhere({"softnet_dropped_pkts": 9, "switch_tx_dropped_pkts[tb12abl1-eth3]": 7}, {})
    assert e.total_pkts == 9 and e.losses["softnet_dropped_beyond_veth_pkts"] == 2


def test_receive_side_and_ovs_drops_are_named_losses():
    counters = {f"udp_rcvbuf_errors_pkts[{H2}]": 3, "ovs_rx_socket_drops_pkts[tb12abl1-eth1]": 2,
                "ovs_coverage_drop_action_of_pipeline_pkts": 1, f"udp_no_ports_pkts[{H2}]": 0}
    e = elsewhere(counters, {})
    assert e.losses == {f"udp_rcvbuf_errors_pkts[{H2}]": 3, "ovs_rx_socket_drops_pkts[tb12abl1-eth1]": 2,
                        "ovs_coverage_drop_action_of_pipeline_pkts": 1}
    assert e.total_pkts == 6


def test_host_of_interface():
    assert host_of_interface(f"{H1}-eth0", [H1, H2]) == H1
    assert host_of_interface("tb12abl1-eth3", [H1, H2]) is None


def _t(sent, received, queue, faults=None):
    t = {"sent_pkts": sent, "received_pkts": received, "switch_drops_pkts": queue, "spurious_retx_pkts": 0,
         "posted_bytes": 1, "acked_bytes": 1, "delivered_bytes": 1}
    if faults is not None:
        t["lost_to_faults_pkts"] = faults
    return t


def test_identity_adds_up_and_names_every_term():
    e = elsewhere({f"udp_rcvbuf_errors_pkts[{H2}]": 3}, {})
    i = loss_identity(_t(1000, 900, 97 + 5, faults=0), e, watchdog_drops_pkts=5)
    assert (i.switch_queue_drops_pkts, i.watchdog_drops_pkts, i.elsewhere_pkts, i.unexplained_pkts) == (97, 5, 3, -5)
    i = loss_identity(_t(1000, 900, 92 + 5), e, watchdog_drops_pkts=5)
    assert i.unexplained_pkts == 0
    assert i.sentence() == (f"sent 1000 = received 900 + switch queues 92 + PFC watchdog 5 + "
                            f"udp_rcvbuf_errors_pkts[{H2}] 3 + unexplained 0")
    assert i.as_json()["identity"].startswith("sent = received + switch_queue")


@pytest.mark.parametrize("received, expect", [(899, "transport lost 1 packets that no counter saw"),
                                              (901, "counter mismatch: the counters saw 1 packets more lost")])
def test_transport_loss_check_fails_either_way_naming_the_identity(received, expect):
    i = loss_identity(_t(1000, received, 100), elsewhere({}, {}), 0)
    v = evaluate(None, {}, None, {}, None, FidelityThresholds(), transport=_t(1000, received, 100), identity=i)
    assert v.checks["transport_loss"]["status"] == "failed"
    (msg,) = [x for x in v.violations if x.startswith(expect)]
    assert f"sent 1000 = received {received} + switch queues 100" in msg
    assert v.figures["transport_loss"]["unexplained_pkts"] == 1000 - received - 100
