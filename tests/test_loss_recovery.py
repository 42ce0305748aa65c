"""transport.loss_recovery (issue 16, item 3) without a fabric: the spec's choices and refusals, the
agents' parameters per regime (reorder window, RTO_low, BDP cap), the estimate's loss note and the
resend share in the transport totals."""
import pandas as pd
import pytest
import yaml
from pathlib import Path

from testbed.emulation.agents import transport_params
from testbed.measure.transport_totals import transport_totals
from testbed.spec import estimate
from testbed.spec.rto import bdp_cap, describe_rto, manifest_rto, rto_low, run_rto_us
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.spec.transport import LOSS_RECOVERIES

QUICKSTART = yaml.safe_load((Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml").read_text())


def spec_of(transport=None, fabric=None, workload=None, **top):
    s = yaml.safe_load(yaml.safe_dump(QUICKSTART))
    s["transport"].update(transport or {})
    s["fabric"].update(fabric or {})
    if workload is not None:
        s["workload"] = workload
    s.update(top)
    return parse_scenario(s)


LOSSY = {"fabric_link_bps": "5M", "buffer_bytes": "8KB"}


def test_loss_recovery_names_match_the_transport():
    from traffic.transport.selective import LOSS_RECOVERIES as TRAFFIC
    assert LOSS_RECOVERIES == TRAFFIC == ("go_back_n", "selective_repeat")


@pytest.mark.parametrize("entropy, want", [("per_flow", "go_back_n"), ("flowlet", "go_back_n"),
                                           ("spray", "selective_repeat")])
def test_default_keeps_go_back_n_unless_packets_overtake(entropy, want):
    assert spec_of({"entropy": entropy}).transport.loss_recovery == want
    # the resolved value is written out, so a dumped scenario reads back the same
    assert spec_of({"entropy": entropy}).model_dump()["transport"]["loss_recovery"] == want


@pytest.mark.parametrize("entropy", ["per_flow", "flowlet", "spray"])
def test_selective_repeat_in_every_regime(entropy):
    assert spec_of({"entropy": entropy, "loss_recovery": "selective_repeat"}).transport.loss_recovery == \
        "selective_repeat"


@pytest.mark.parametrize("transport, words", [
    ({"loss_recovery": "irn"}, ["transport.loss_recovery", "'irn'", "allowed: go_back_n, selective_repeat"]),
    ({"loss_recovery": "go_back_n", "entropy": "spray"}, ["go_back_n cannot serve transport.entropy: spray",
                                                          "selective_repeat"]),
    ({"bdp_cap_pkts": 4}, ["transport.bdp_cap_pkts = 4", "selective_repeat"]),
    ({"loss_recovery": "selective_repeat", "bdp_cap_pkts": 0}, ["transport.bdp_cap_pkts"]),
    ({"loss_recovery": "selective_repeat", "bdp_cap_pkts": True}, ["transport.bdp_cap_pkts"]),
])
def test_refused(transport, words):
    with pytest.raises(ScenarioError) as ei:
        spec_of(transport)
    for w in words:
        assert w in str(ei.value), (w, str(ei.value))


def test_agent_parameters_per_regime():
    # go-back-N: spec-faithful RoCEv2, no reorder window, no RTO_low, no BDP cap
    s = spec_of(fabric=LOSSY)
    p = transport_params(s, run_rto_us(s))
    assert (p.loss_recovery, p.reorder_window_us, p.rto_low_us, p.rto_low_pkts, p.bdp_cap_pkts) == \
        ("go_back_n", 0, 0, 0, 0)
    # selective repeat, per flow: nothing overtakes, a gap is a loss at once; RTO_low floor 2 x base RTT;
    # BDP cap = 3 frames in flight at 5 Mbit/s over the 20.5 ms base RTT + 1 frame in the 8 KB buffer
    s = spec_of({"loss_recovery": "selective_repeat"}, LOSSY)
    rto = run_rto_us(s)
    p = transport_params(s, rto)
    assert p.loss_recovery == "selective_repeat" and p.reorder_window_us == 0
    assert p.rto_low_us == 41_049 < rto and p.rto_low_pkts == 4
    assert p.bdp_cap_pkts == 4 and bdp_cap(s) == {"cap_pkts": 4, "source": "auto", "pipe_pkts": 3, "buffer_pkts": 1,
                                                 "slow_bps": 5e6, "base_rtt_us": 20524.8, "frame_bytes": 4154}
    assert "BDP cap 4 packets (3 in flight at 5 Mbit/s over the 20.5 ms base RTT + 1 in a switch buffer" in \
        describe_rto(s)
    assert manifest_rto(s)["bdp_cap"]["cap_pkts"] == 4 and manifest_rto(s)["rto_low_us"] == 41_049
    # flowlet does not reorder either
    s = spec_of({"loss_recovery": "selective_repeat", "entropy": "flowlet"})
    assert transport_params(s, run_rto_us(s)).reorder_window_us == 0
    # spraying keeps today's window (half the timeout) and no RTO_low; the deep buffer leaves the window alone
    s = spec_of({"entropy": "spray"})
    rto = run_rto_us(s)
    p = transport_params(s, rto)
    assert p.loss_recovery == "selective_repeat" and p.reorder_window_us == rto // 2
    assert (p.rto_low_us, p.bdp_cap_pkts) == (0, 16) and rto_low(s, rto) == (0, 0)
    # set or switched off by the scenario
    assert transport_params(spec_of({"loss_recovery": "selective_repeat", "bdp_cap_pkts": 6}, LOSSY),
                            rto).bdp_cap_pkts == 6
    assert transport_params(spec_of({"loss_recovery": "selective_repeat", "bdp_cap_pkts": "off"}, LOSSY),
                            rto).bdp_cap_pkts == 0


def test_ack_interval_fits_the_bdp_cap():
    from traffic.transport import TransportParams
    from traffic.transport.qp import RequesterQP
    from traffic.transport.selective import SelectiveRequesterQP
    p = TransportParams(ack_every_pkts=8, bdp_cap_pkts=5, loss_recovery="selective_repeat")
    assert SelectiveRequesterQP.ack_interval(p) == 5 and RequesterQP.ack_interval(p) == 8
    assert SelectiveRequesterQP.ack_interval(TransportParams(ack_every_pkts=8)) == 8


def test_estimate_says_when_it_assumes_no_loss():
    assert estimate.loss_note(spec_of()) is None  # quickstart: 100 KB buffers, equal links, one sender per port
    note = estimate.loss_note(spec_of(fabric=LOSSY))
    assert note.startswith("assumes no loss") and "16 x 4154 B" in note and "8000 B" in note
    assert "5 Mbit/s fabric links" in note and "go-back-N" in note and "several times" in note
    sr = estimate.loss_note(spec_of({"loss_recovery": "selective_repeat"}, LOSSY))
    assert "selective repeat resends about one packet per loss" in sr
    # fan-in: a direct all-to-all puts 7 senders on each receiver's port
    a2a = {"collective": "alltoall", "algorithm": "direct", "sizes": {"min_bytes": "1MiB", "max_bytes": "1MiB"}}
    s = spec_of(fabric={"buffer_bytes": "16KB"}, workload=a2a)
    from testbed.workloads import workload_for
    w = workload_for(s)
    assert "up to 7 QPs converge on one port" in w.loss_note(w.plan().ops)
    # lossless with PFC: no note
    pfc = spec_of(fabric={**LOSSY, "queue_backend": "htb_classes"}, congestion={"pfc": {"xoff_pkts": 1, "xon_pkts": 0}})
    assert estimate.loss_note(pfc) is None


def test_print_estimate_carries_the_note(capsys):
    from testbed.pipeline.printing import print_estimate
    print_estimate(79.0, 41, 7200.0, "assumes no loss, but ...")
    assert capsys.readouterr().err == "testbed: estimated duration 79 s (41 operations; cap 2.00 h); assumes no loss, but ...\n"


def test_transport_totals_report_the_resend_share():
    qps = pd.DataFrame([
        {"role": "requester", "tx_pkts": 30, "retx_pkts": 10, "retx_bytes": 40960, "posted_bytes": 81920,
         "acked_bytes": 81920, "timeouts": 2, "naks_rx": 3, "acks_rx": 5, "cnps_rx": 0},
        {"role": "responder", "rx_pkts": 20, "delivered_bytes": 81920, "order_errors": 0, "dup_pkts": 0,
         "acks_tx": 5, "naks_tx": 3, "cnps_tx": 0, "ce_pkts": 0, "max_reorder_pkts": 0, "out_of_order_pkts": 0},
    ])
    qps["rank"], qps["peer"] = 0, 1
    t = transport_totals(qps, [28], 10, 16)
    assert t["retx_bytes"] == 40960 and t["resent_share"] == 0.5
