"""Traffic patterns (workload.pattern): spec, flows on a layout, ideal fabric, messages, result figures."""
from types import SimpleNamespace

import pytest

from testbed.workloads.pattern.ideal import ideal_fct_s, ideal_rates
from testbed.spec.hosts import host_infos
from testbed.workloads.pattern.plan import pattern_flows, pattern_peers
from testbed.workloads.pattern.results import jain_index, throughput_ratio
from testbed.spec.scenario import ScenarioError, parse_scenario
from topology import build
from traffic import protocol
from traffic.protocol import FlowMessage, FlowOrder, FlowReceived, FlowsDone, RunFlows

FABRIC = {"spines": 2, "leaves": 4, "hosts_per_leaf": 2, "host_link_bps": "10M", "fabric_link_bps": "10M"}


def spec(pattern, fabric=None):
    return parse_scenario({"name": "p", "fabric": fabric or FABRIC, "workload": {"pattern": pattern}})


def flows_of(pattern, fabric=None):
    s = spec(pattern, fabric)
    lay = build(s.fabric.kind, s.fabric, "tb0000")
    return s, lay, pattern_flows(s, lay)


def test_incast_picks_senders_off_the_receivers_leaf_first():
    _, lay, flows = flows_of({"kind": "incast", "senders": 4, "receiver": "h1", "size_bytes": "1MiB"})
    assert [f.dst for f in flows] == [0] * 4
    assert [f.src for f in flows] == [2, 3, 4, 5]   # h3..h6 on leaves 2 and 3, not h2 (leaf 1)
    _, _, listed = flows_of({"kind": "incast", "senders": ["h2", 7], "receiver": 3, "size_bytes": 1000})
    assert [(f.src, f.dst) for f in listed] == [(1, 3), (7, 3)]


def test_explicit_flows_keep_names_sizes_and_start_times():
    _, _, flows = flows_of({"kind": "flows", "flows": [
        {"src": "h3", "dst": "h1", "size_bytes": "2MiB"},
        {"src": "h5", "dst": "h2", "size_bytes": "2MiB"},
        {"src": "h7", "dst": "h1", "size_bytes": "256KiB", "start_s": 0.5}]})
    assert [(f.src, f.dst, f.size_bytes, f.start_s) for f in flows] == [
        (2, 0, 2 << 20, 0.0), (4, 1, 2 << 20, 0.0), (6, 0, 256 << 10, 0.5)]
    assert pattern_peers(flows) == {0: [2, 6], 1: [4], 2: [0], 4: [1], 6: [0]}


def test_permutation_sends_every_host_to_another_leaf_once():
    s, lay, flows = flows_of({"kind": "permutation", "size_bytes": "1MiB"})
    leaf = {h.rank: h.switch for h in host_infos(lay)}
    assert sorted(f.src for f in flows) == sorted(f.dst for f in flows) == list(range(8))
    assert all(leaf[f.src] != leaf[f.dst] for f in flows)
    assert flows == pattern_flows(s, lay)  # seeded: the same every time


def test_alltoall_and_kflows():
    _, _, a2a = flows_of({"kind": "alltoall", "size_bytes": 1000})
    assert len(a2a) == 8 * 7 and len({(f.src, f.dst) for f in a2a}) == 56
    fab = {"spines": 4, "leaves": 2, "hosts_per_leaf": 4}
    _, _, k = flows_of({"kind": "kflows", "size_bytes": "1MiB"}, fab)
    assert [(f.src, f.dst) for f in k] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    _, _, k2 = flows_of({"kind": "kflows", "k": 2, "size_bytes": "1MiB"}, fab)
    assert len(k2) == 2


@pytest.mark.parametrize("pattern, words", [
    ({"kind": "incast", "size_bytes": 1000, "receiver": "h9"}, ["workload.pattern.receiver", "h9", "h1 .. h8"]),
    ({"kind": "incast", "size_bytes": 1000, "senders": 8}, ["workload.pattern.senders", "7 hosts"]),
    ({"kind": "kflows", "size_bytes": 1000, "k": 3}, ["workload.pattern.k", "1..2"]),
    ({"kind": "kflows", "size_bytes": 1000, "senders": 2}, ["workload.pattern.senders", "does not apply"]),
    ({"kind": "permutation"}, ["workload.pattern.size_bytes", "required"]),
    ({"kind": "flows", "flows": []}, ["workload.pattern.flows"]),
    ({"kind": "flows", "flows": [{"src": "h1", "dst": "h1", "size_bytes": 10}]}, ["same host"]),
    ({"kind": "flows", "flows": [{"src": "h1", "dst": "h2", "size_bytes": 10},
                                 {"src": "h1", "dst": "h2", "size_bytes": 10, "start_s": 1}]}, ["repeats flow 0"]),
    ({"kind": "ring", "size_bytes": 10}, ["workload.pattern.kind"]),
    ({"kind": "incast", "size_bytes": 10, "trials": 0}, ["workload.pattern.trials"]),
])
def test_bad_patterns_are_refused_naming_the_key(pattern, words):
    with pytest.raises(ScenarioError) as e:
        spec(pattern)
    for w in words:
        assert w in str(e.value)


def test_pattern_excludes_sizes_and_collective():
    with pytest.raises(ScenarioError, match="exactly one of workload.sizes, workload.simai, workload.pattern, workload.chakra, workload.perftest or workload.open_loop"):
        parse_scenario({"workload": {"pattern": {"kind": "alltoall", "size_bytes": 10},
                                     "sizes": {"min_bytes": 10, "max_bytes": 10}}})
    with pytest.raises(ScenarioError, match="workload.collective"):
        parse_scenario({"workload": {"pattern": {"kind": "alltoall", "size_bytes": 10}, "collective": "allreduce"}})


def test_ideal_incast_shares_the_receiver_link_and_kflows_use_every_path():
    s, lay, flows = flows_of({"kind": "incast", "senders": 4, "size_bytes": 1_000_000})
    assert ideal_rates(flows, lay) == {i: 2.5e6 for i in range(4)}
    fct = ideal_fct_s(flows, lay, 1.0)
    assert fct == pytest.approx({i: 4 * 8e6 / 10e6 for i in range(4)})
    _, lay4, k = flows_of({"kind": "kflows", "size_bytes": 1_000_000}, {"spines": 4, "leaves": 2, "hosts_per_leaf": 4})
    assert ideal_rates(k, lay4) == {i: 10e6 for i in range(4)}


def test_ideal_fluid_model_reallocates_when_flows_start_and_end():
    # h3 -> h1 alone for 0.5 s at 10 Mbit/s, then shares h1's link with h7's short flow
    _, lay, flows = flows_of({"kind": "flows", "flows": [
        {"src": "h3", "dst": "h1", "size_bytes": 1_250_000},
        {"src": "h7", "dst": "h1", "size_bytes": 125_000, "start_s": 0.5}]})
    fct = ideal_fct_s(flows, lay, 1.0)
    # flow 1: 1 Mbit at 5 Mbit/s = 0.2 s; flow 0: 5 Mbit by 0.5 s, 1 Mbit in 0.2 s, 4 Mbit at 10 -> 1.1 s
    assert fct[1] == pytest.approx(0.2) and fct[0] == pytest.approx(1.1)


def test_flow_messages_round_trip_strictly():
    cmd = RunFlows(trial=2, flows=[FlowOrder(flow=0, src=1, dst=0, size_bytes=10, start_ns=5)], start_at_ns=7,
                   sample_period_ns=10_000_000, timeout_s=3.0)
    assert protocol.decode(protocol.encode(cmd)) == cmd
    done = FlowsDone(trial=2, rank=0, sent=[FlowMessage(flow=0, channel=0, rank=0, peer=1, msg_seq=0, size_bytes=10,
                                                        t_post_ns=1, t_acked_ns=2)],
                     received=[FlowReceived(flow=1, time_ns=[1, 2], rx_bytes=[0, 10], t_done_ns=2)])
    assert protocol.decode(protocol.encode(done)) == done
    with pytest.raises(protocol.ProtocolError, match="flows_done.received"):
        protocol.decode('{"type":"flows_done","trial":0,"rank":0,"sent":[],"received":[{"flow":1}],"op_id":null}')


def test_jain_index():
    assert jain_index([5, 5]) == 1.0 and jain_index([10, 0]) == 0.5 and jain_index([1, 0, 0, 0]) == 0.25


def test_throughput_ratio_counts_bytes_while_every_flow_sends():
    # two flows of ideal 10 Mbit/s each; flow 1 got half its rate: ratio 0.75 in the common window
    ms = 1_000_000
    run = SimpleNamespace(ideal_fct_s={0: 1.0, 1: 1.0}, ideal_rates={0: 10e6, 1: 10e6},
                          pattern=SimpleNamespace(rate_bin_ms=10.0))
    times = [0, 1000 * ms]
    done = [SimpleNamespace(sent=[SimpleNamespace(t_post_ns=0, t_acked_ns=1000 * ms)],
                            received=[SimpleNamespace(time_ns=times, rx_bytes=[0, 1_250_000], t_done_ns=1000 * ms)]),
            SimpleNamespace(sent=[SimpleNamespace(t_post_ns=0, t_acked_ns=2000 * ms)],
                            received=[SimpleNamespace(time_ns=times, rx_bytes=[0, 625_000], t_done_ns=2000 * ms)])]
    tr = SimpleNamespace(done=done)
    assert throughput_ratio(run, tr, 1.0) == pytest.approx(0.75)


class _FakeSender:
    """A requester QP whose messages are acknowledged 20 ms after they are posted."""

    def __init__(self):
        self.messages = []

    def post_send(self, size_bytes):
        from traffic.clock import unix_ns
        now = unix_ns()
        self.messages.append(SimpleNamespace(t_post_ns=now, t_acked_ns=now + 20_000_000, size=size_bytes))
        return len(self.messages) - 1

    def wait_acked(self, seq, timeout_s):
        return True


class _FakeReceiver:
    """A responder QP that delivers ``size`` bytes evenly over ``dur_s`` from the first look at it."""

    def __init__(self, size, dur_s):
        import time
        self.size, self.dur_s, self.t0 = size, dur_s, None
        self._time = time.monotonic

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


def test_executor_posts_at_start_times_and_samples_the_receivers_bytes():
    from traffic.clock import unix_ns
    from traffic.patterns.executor import run_flows
    start = unix_ns() + 50_000_000
    cmd = RunFlows(trial=0, flows=[FlowOrder(flow=0, src=0, dst=1, size_bytes=1000, start_ns=0),
                                   FlowOrder(flow=1, src=0, dst=2, size_bytes=500, start_ns=100_000_000),
                                   FlowOrder(flow=2, src=3, dst=0, size_bytes=40_000, start_ns=0)],
                   start_at_ns=start, sample_period_ns=10_000_000, timeout_s=5.0)
    rx = {3: _FakeReceiver(40_000, 0.1)}
    rx_consumed = {}
    done = run_flows(0, cmd, [{1: _FakeSender(), 2: _FakeSender()}], [rx], [rx_consumed])
    assert [(m.peer, m.size_bytes) for m in done.sent] == [(1, 1000), (2, 500)]
    assert done.sent[0].t_post_ns >= start and done.sent[1].t_post_ns >= start + 100_000_000
    (r,) = done.received
    assert r.flow == 2 and r.rx_bytes[-1] == 40_000 and r.rx_bytes == sorted(r.rx_bytes)
    assert len(r.time_ns) >= 5 and r.time_ns[0] >= start and r.t_done_ns <= r.time_ns[-1]
    assert rx_consumed == {3: 1}
    with pytest.raises(ValueError, match=r"no queue pair with rank\(s\) \[5\]"):
        run_flows(0, RunFlows(trial=1, flows=[FlowOrder(flow=0, src=0, dst=5, size_bytes=1, start_ns=0)],
                              start_at_ns=start, sample_period_ns=10_000_000, timeout_s=1.0), [{}], [{}], [{}])


def test_cpu_is_judged_only_in_the_seconds_of_a_trials_traffic():
    import pandas as pd
    from testbed.workloads.pattern.driver import PatternRun
    s = 1_000_000_000
    run = PatternRun.__new__(PatternRun)
    sent = [SimpleNamespace(t_acked_ns=12 * s + s // 2)]
    run.trials = [SimpleNamespace(start_at_ns=10 * s + s // 2, done=[SimpleNamespace(sent=sent)])]
    cpu = pd.DataFrame({"time_ns": [k * s for k in range(8, 16)], "idle_pct": range(8)})
    assert list(run.during_traffic(cpu)["time_ns"] // s) == [11, 12, 13]
