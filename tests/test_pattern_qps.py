"""Several queue pairs per pattern flow (workload.pattern.qps): spec, splitting, executor, ideal model, results."""
from types import SimpleNamespace

import pandas as pd
import pytest

from testbed.emulation.agents import transport_params
from testbed.workloads.pattern.ideal import ideal_fct_s, ideal_rates
from testbed.workloads.pattern.plan import pattern_flows
from testbed.workloads.pattern.results import fct_table, lost_pkts, qp_table, sent_flows
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.workloads.pattern.workload import PatternTrials
from topology import build
from traffic.collectives.channels import channel_sizes
from traffic.patterns import Flow, qp_shares
from traffic.protocol import FlowMessage, FlowOrder, RunFlows

FABRIC = {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "host_link_bps": "10M", "fabric_link_bps": "10M"}


def spec(pattern, fabric=None, **workload):
    return parse_scenario({"name": "p", "fabric": fabric or FABRIC, "workload": {"pattern": pattern, **workload}})


def flows_of(pattern, fabric=None):
    s = spec(pattern, fabric)
    lay = build(s.fabric.kind, s.fabric, "tb0000")
    return s, lay, pattern_flows(s, lay)


# -- spec and splitting ------------------------------------------------------------------------------------------

def test_pattern_qps_reach_every_flow_and_a_flow_may_set_its_own():
    _, _, k = flows_of({"kind": "kflows", "size_bytes": "1MiB", "qps": 4})
    assert [f.qps for f in k] == [4, 4]
    _, _, a2a = flows_of({"kind": "alltoall", "size_bytes": 1000, "qps": 2})
    assert {f.qps for f in a2a} == {2}
    s, _, listed = flows_of({"kind": "flows", "qps": 3, "flows": [
        {"src": "h1", "dst": "h3", "size_bytes": 1000, "qps": 8}, {"src": "h2", "dst": "h4", "size_bytes": 1000}]})
    assert [f.qps for f in listed] == [8, 3]
    assert s.workload.pattern.max_qps == 8
    _, _, default = flows_of({"kind": "incast", "size_bytes": 1000})
    assert {f.qps for f in default} == {1}


@pytest.mark.parametrize("pattern, workload, words", [
    ({"kind": "kflows", "size_bytes": 1000, "qps": 0}, {}, ["workload.pattern.qps", "greater than or equal to 1"]),
    ({"kind": "kflows", "size_bytes": 1000, "qps": 33}, {}, ["workload.pattern.qps", "less than or equal to 32"]),
    ({"kind": "flows", "flows": [{"src": "h1", "dst": "h3", "size_bytes": 10, "qps": 40}]}, {},
     ["workload.pattern.flows.0.qps"]),
    ({"kind": "flows", "flows": [{"src": "h1", "dst": "h3", "size_bytes": 3, "qps": 4}]}, {},
     ["workload.pattern.flows.0.size_bytes = 3", "qps (4)", "size_bytes >= qps"]),
    ({"kind": "permutation", "size_bytes": 2, "qps": 3}, {}, ["workload.pattern.size_bytes = 2", "size_bytes >= qps"]),
    ({"kind": "kflows", "size_bytes": 1000, "qps": True}, {}, ["workload.pattern.qps"]),
    ({"kind": "kflows", "size_bytes": 1000}, {"channels": 4}, ["workload.channels = 4", "workload.pattern.qps"]),
])
def test_bad_qps_are_refused_naming_the_key(pattern, workload, words):
    with pytest.raises(ScenarioError) as e:
        spec(pattern, **workload)
    for w in words:
        assert w in str(e.value)


def test_qp_shares_split_like_nccl_channels():
    assert qp_shares(10, 4) == channel_sizes(10, 4) == [3, 3, 2, 2]
    assert qp_shares(1 << 20, 1) == [1 << 20]
    assert sum(qp_shares(1_000_003, 7)) == 1_000_003
    with pytest.raises(ValueError, match="cannot be split over 4 queue pairs"):
        qp_shares(3, 4)
    with pytest.raises(ValueError, match="outside 1..32"):
        qp_shares(100, 33)


def test_agents_get_channels_for_the_widest_flow_and_fan_in_counts_qps():
    s = spec({"kind": "flows", "flows": [{"src": "h1", "dst": "h3", "size_bytes": "1MiB", "qps": 4},
                                         {"src": "h2", "dst": "h3", "size_bytes": "1MiB"}]})
    one = spec({"kind": "flows", "flows": [{"src": "h1", "dst": "h3", "size_bytes": "1MiB"},
                                           {"src": "h2", "dst": "h3", "size_bytes": "1MiB"}]})
    assert PatternTrials(s).fan_in(()) == 5 and PatternTrials(one).fan_in(()) == 2
    # every socket's send buffer shrinks with the QPs sharing the NIC queue (transport_params)
    assert transport_params(s, 10_000, 2).sndbuf_bytes < transport_params(one, 10_000, 2).sndbuf_bytes


# -- ideal fabric: QPs are sub-flows, max-min fair per QP ---------------------------------------------------------

def test_ideal_model_shares_a_bottleneck_per_queue_pair():
    _, lay, flows = flows_of({"kind": "flows", "flows": [
        {"src": "h1", "dst": "h3", "size_bytes": 1_000_000, "qps": 4},
        {"src": "h2", "dst": "h3", "size_bytes": 1_000_000}]})
    # 5 QPs into h3's 10 Mbit/s link: 2 Mbit/s each; flow 0 has 4 of them
    assert ideal_rates(flows, lay) == pytest.approx({0: 8e6, 1: 2e6})
    fct = ideal_fct_s(flows, lay, 1.0)
    # flow 0: 8 Mbit at 8 Mbit/s = 1 s; flow 1: 2 Mbit by then, the other 6 Mbit alone at 10 -> 1.6 s
    assert fct == pytest.approx({0: 1.0, 1: 1.6})


def test_ideal_model_of_a_lone_flow_does_not_depend_on_its_qps():
    fcts = []
    for q in (1, 4):
        _, lay, flows = flows_of({"kind": "flows", "flows": [{"src": "h1", "dst": "h3", "size_bytes": 1_250_000,
                                                              "qps": q}]})
        assert ideal_rates(flows, lay) == pytest.approx({0: 10e6})
        fcts.append(ideal_fct_s(flows, lay, 1.0)[0])
    assert fcts == pytest.approx([1.0, 1.0])


# -- executor: one message per QP, one record per QP, the receiver sums its QPs ------------------------------------

class _Sender:
    """A requester QP whose messages are acknowledged ``ack_ms`` after they are posted."""

    def __init__(self, ack_ms):
        self.messages, self.ack_ns = [], int(ack_ms * 1e6)

    def post_send(self, size_bytes):
        from traffic.clock import unix_ns
        now = unix_ns()
        self.messages.append(SimpleNamespace(t_post_ns=now, t_acked_ns=now + self.ack_ns, size_bytes=size_bytes))
        return len(self.messages) - 1

    def wait_acked(self, seq, timeout_s):
        return True


class _Receiver:
    """A responder QP that delivers ``size`` bytes evenly over ``dur_s`` from the first look at it."""

    def __init__(self, size, dur_s):
        import time
        self.size, self.dur_s, self.t0, self._time = size, dur_s, None, time.monotonic

    @property
    def counters(self):
        if self.t0 is None:
            self.t0 = self._time()
        frac = min(1.0, (self._time() - self.t0) / self.dur_s)
        return SimpleNamespace(delivered_bytes=int(self.size * frac), messages=1 if frac >= 1 else 0)

    def wait_messages(self, count, timeout_s):
        import time
        time.sleep(max(0.0, self.dur_s - (self._time() - (self.t0 or self._time()))) + 0.01)
        return True


def test_executor_splits_a_flow_over_its_queue_pairs():
    from traffic.clock import unix_ns
    from traffic.patterns.executor import run_flows
    start = unix_ns() + 30_000_000
    cmd = RunFlows(trial=0, flows=[FlowOrder(flow=0, src=0, dst=1, size_bytes=10_001, start_ns=0, qps=3),
                                   FlowOrder(flow=1, src=0, dst=2, size_bytes=500, start_ns=0, qps=1),
                                   FlowOrder(flow=2, src=3, dst=0, size_bytes=9_000, start_ns=0, qps=2)],
                   start_at_ns=start, sample_period_ns=10_000_000, timeout_s=5.0)
    send = [{1: _Sender(10 + 10 * c), 2: _Sender(5)} for c in range(3)]
    recv = [{3: _Receiver(4_500, 0.05 * (c + 1))} for c in range(3)]
    consumed = [{3: 2}, {3: 0}, {}]
    done = run_flows(0, cmd, send, recv, consumed)
    assert [(m.flow, m.channel, m.peer, m.size_bytes) for m in done.sent] == [
        (0, 0, 1, 3334), (0, 1, 1, 3334), (0, 2, 1, 3333), (1, 0, 2, 500)]
    assert [len(send[c][1].messages) for c in range(3)] == [1, 1, 1] and len(send[1][2].messages) == 0
    (r,) = done.received
    assert r.flow == 2 and r.rx_bytes[-1] == 9_000 and r.rx_bytes == sorted(r.rx_bytes)
    # the flow is in only when its slower QP (0.1 s) is: the first sample that sees all of it
    assert r.t_done_ns - start >= 90_000_000
    assert consumed == [{3: 3}, {3: 1}, {}]  # each QP's own message count; QP 2 of rank 3 unused
    with pytest.raises(ValueError, match=r"flow\(s\) \[0\] need more queue pairs .* 3 channel"):
        run_flows(0, RunFlows(trial=1, flows=[FlowOrder(flow=0, src=0, dst=1, size_bytes=10, start_ns=0, qps=4)],
                              start_at_ns=start, sample_period_ns=10_000_000, timeout_s=1.0), send, recv, consumed)


# -- results: messages matched to flows by their flow number, not the host pair ------------------------------------

def _msg(flow, ch, src, dst, size, post, ack):
    return FlowMessage(flow=flow, channel=ch, rank=src, peer=dst, msg_seq=0, size_bytes=size, t_post_ns=post,
                       t_acked_ns=ack)


def _run():
    flows = [Flow(0, 0, 2, 9, qps=3), Flow(1, 2, 0, 4, qps=1)]
    done = [SimpleNamespace(sent=[_msg(0, 2, 0, 2, 3, 100, 900), _msg(0, 0, 0, 2, 3, 100, 500),
                                  _msg(0, 1, 0, 2, 3, 110, 700)]),
            SimpleNamespace(sent=[_msg(1, 0, 2, 0, 4, 200, 400)])]
    return SimpleNamespace(flows=flows, ideal_fct_s={0: 0.0004, 1: 0.0001},
                           trials=[SimpleNamespace(trial=0, done=done)])


def _qps_csv():
    rows = []
    for ch, (tx, rx, port) in enumerate([(10, 10, 50001), (12, 9, 50002), (8, 8, 50003)]):
        rows += [{"trial": 0, "rank": 0, "peer": 2, "role": "requester", "channel": ch, "tx_pkts": tx,
                  "udp_sport": port},
                 {"trial": 0, "rank": 2, "peer": 0, "role": "responder", "channel": ch, "rx_pkts": rx}]
    rows += [{"trial": 0, "rank": 2, "peer": 0, "role": "requester", "channel": 0, "tx_pkts": 4, "udp_sport": 60000},
             {"trial": 0, "rank": 0, "peer": 2, "role": "responder", "channel": 0, "rx_pkts": 4}]
    return pd.DataFrame(rows)


def test_results_group_each_flows_queue_pairs():
    run = _run()
    spans = dict(sent_flows(run, run.trials[0]))
    assert (spans[0].t_post_ns, spans[0].t_acked_ns, spans[0].size_bytes) == (100, 900, 9)
    assert [m.channel for m in spans[0].messages] == [0, 1, 2]
    qps = _qps_csv()
    assert lost_pkts(qps) == {(0, 0, 2): 3, (0, 2, 0): 0}
    assert lost_pkts(qps, per_qp=True)[(0, 0, 2, 1)] == 3
    fct = fct_table(run, ["h1", "h2", "h3"], lost_pkts(qps))
    assert fct[["flow", "src", "dst", "size_bytes", "fct_us", "lost_pkts"]].values.tolist() == [
        [0, "h1", "h3", 9, 0.8, 3], [1, "h3", "h1", 4, 0.2, 0]]
    assert fct["slowdown"].tolist() == pytest.approx([0.8 / 400, 0.2 / 100])
    per = qp_table(run, ["h1", "h2", "h3"], qps)
    assert per[["flow", "channel", "udp_sport", "size_bytes", "fct_us", "lost_pkts"]].values.tolist() == [
        [0, 0, 50001, 3, 0.4, 0], [0, 1, 50002, 3, 0.59, 3], [0, 2, 50003, 3, 0.8, 0], [1, 0, 60000, 4, 0.2, 0]]
