"""The adaptive load-balancing policy without a switch: buckets, the greedy moves, the rebalancer on
synthetic counters (hot detection, waiting for bucket counters, dwell), settings and the summary block."""
import pytest

from controllers.lb import adaptive as A
from controllers.ofplan import plan_fabric
from controllers.contract import AdaptiveMoved, AdaptiveSettings, BucketMove, LinkDown
from testbed.emulation.controller_proc import controller_settings
from testbed.results.adaptive import adaptive_block
from testbed.spec.scenario import ScenarioError, parse_scenario
from topology import spine_leaf

M = 1e6
RATE = 20 * M
BASE = {"workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}}
MS = 1_000_000


def test_groups_get_sixteen_equal_buckets_per_port_interleaved():
    lay = spine_leaf.build("tb9c01", spines=2, leaves=2, hosts_per_leaf=1)
    plans = plan_fabric(lay, "adaptive")
    leaf = next(p for p in plans.values() if p.groups)
    (g,) = leaf.groups
    ports = sorted({b.port for b in g.buckets})
    assert len(g.buckets) == 2 * A.BUCKETS_PER_PORT == 32
    assert [b.port for b in g.buckets[:4]] == ports * 2 and {b.weight for b in g.buckets} == {A.BUCKET_WEIGHT}
    assert [b.bucket_id for b in g.buckets] == list(range(32))
    ecmp = next(p for p in plan_fabric(lay, "ecmp").values() if p.groups).groups[0]
    assert (g.hash_fields, g.selection_method, g.hash_basis) == (ecmp.hash_fields, ecmp.selection_method,
                                                                  ecmp.hash_basis)


def test_two_elephants_on_one_of_two_ports_one_moves():
    moves = A.plan_moves({1: 20 * M, 2: 0.0}, {1: RATE, 2: RATE}, {0: (1, 10 * M), 2: (1, 10 * M), 1: (2, 0.0)})
    assert moves == [(0, 1, 2, 10 * M)]


def test_one_elephant_alone_never_moves_to_an_idle_port():
    assert A.plan_moves({1: 20 * M, 2: 0.0}, {1: RATE, 2: RATE}, {0: (1, 20 * M), 1: (2, 0.0)}) == []


def test_four_on_one_of_four_spread_one_per_port_in_one_decision():
    loads = {1: 20 * M, 2: 0.0, 3: 0.0, 4: 0.0}
    buckets = {b: (1, 5 * M) for b in (0, 4, 8, 12)}
    moves = A.plan_moves(loads, dict.fromkeys(loads, RATE), buckets)
    assert len(moves) == 3 and {m[2] for m in moves} == {2, 3, 4} and {m[1] for m in moves} == {1}


def test_two_and_two_on_four_ports_move_one_from_each():
    loads = {1: 20 * M, 2: 20 * M, 3: 0.0, 4: 0.0}
    buckets = {0: (1, 10 * M), 4: (1, 10 * M), 1: (2, 10 * M), 5: (2, 10 * M)}
    moves = A.plan_moves(loads, dict.fromkeys(loads, RATE), buckets)
    assert sorted((m[1], m[2]) for m in moves) == [(1, 4), (2, 3)] or sorted((m[1], m[2]) for m in moves) == [(1, 3), (2, 4)]


def test_a_gain_below_min_gain_is_not_worth_a_move():
    # 18 vs 16 Mbit/s: moving the 2 Mbit/s mouse only swaps the loads (no gain)
    assert A.plan_moves({1: 18 * M, 2: 16 * M}, {1: RATE, 2: RATE}, {0: (1, 16 * M), 2: (1, 2 * M)}) == []


def _reb(dwell_ms=500):
    # two ports, interleaved buckets as the policy makes them: even ids on port 1, odd on port 2
    groups = {1: {b: (1 if b % 2 == 0 else 2) for b in range(32)}}
    return A.Rebalancer(groups, {1: RATE, 2: RATE, 9: 10 * M}, A.AdaptiveParams(0.8, dwell_ms * MS))


def _poll(reb, t_ms, tx_port1, tx_port2, buckets):
    """One poll: group stats then port stats, as the app sends them; buckets: {bucket id: bytes}."""
    reb.bucket_bytes(t_ms * MS, {(1, b): v for b, v in buckets.items()})
    return reb.port_stats(t_ms * MS, {1: tx_port1, 2: tx_port2, 9: 0})


def test_rebalancer_moves_one_colliding_flow_and_then_dwells():
    reb = _reb()
    assert _poll(reb, 0, 0, 0, {}) == []
    step = int(20 * M / 8 / 10)  # 100 ms of 20 Mbit/s
    d = _poll(reb, 100, step, 0, {0: 60_000, 2: 60_000})
    assert len(d) == 1 and len(d[0].moves) == 1
    (m,) = d[0].moves
    assert (m.from_port, m.to_port) == (1, 2) and m.bucket_id in (0, 2)
    assert m.rate_bps == pytest.approx(10 * M, rel=0.01)
    assert d[0].seen_ns == d[0].decided_ns == 100 * MS
    # pending until the barrier: still hot, nothing new
    assert _poll(reb, 200, 2 * step, 0, {0: 120_000, 2: 120_000}) == []
    reb.applied(1, 210 * MS)
    assert reb.groups[1].buckets[m.bucket_id] == 2
    # within the dwell nothing moves, however it looks
    assert _poll(reb, 300, 3 * step, 0, {0: 180_000, 2: 180_000}) == []
    assert _poll(reb, 700, 7 * step, 4 * step, {0: 200_000, 2: 240_000}) == []
    # after the dwell, balanced: nothing
    assert _poll(reb, 800, 8 * step, 5 * step, {0: 230_000, 2: 270_000}) == []


def test_rebalancer_waits_for_bucket_counters_and_times_from_the_first_hot_poll():
    reb = _reb()
    step = int(20 * M / 8 / 10)
    _poll(reb, 0, 0, 0, {})
    assert _poll(reb, 100, step, 0, {}) == []  # hot, but no bucket has counted a byte yet
    assert _poll(reb, 200, 2 * step, 0, {}) == []
    d = _poll(reb, 300, 3 * step, 0, {0: 1000, 4: 1000})
    assert len(d) == 1 and d[0].seen_ns == 100 * MS and d[0].decided_ns == 300 * MS


def test_rebalancer_ignores_a_port_below_the_threshold_and_forgets_a_passing_imbalance():
    reb = _reb()
    step = int(20 * M / 8 / 10)
    _poll(reb, 0, 0, 0, {})
    assert _poll(reb, 100, int(0.7 * step), 0, {0: 5000, 2: 5000}) == []  # 70% < 80%
    assert reb.groups[1].seen_ns is None
    assert _poll(reb, 200, int(0.7 * step) + step, 0, {}) == []  # hot, counters restarted below: waits
    assert reb.groups[1].seen_ns == 200 * MS
    assert _poll(reb, 300, int(0.7 * step) + step + step // 2, step // 2, {}) == []  # 50/50: not hot
    assert reb.groups[1].seen_ns is None


def test_a_bucket_counter_going_backwards_restarts_the_window():
    reb = _reb()
    reb.bucket_bytes(0, {(1, 0): 5000})
    reb.bucket_bytes(100 * MS, {(1, 0): 10})
    assert len(reb._buckets) == 1


def test_settings_and_refusals():
    s = parse_scenario({**BASE, "load_balance": {"policy": "adaptive", "poll_period_ms": 50}})
    assert s.load_balance.adaptive == {"poll_period_ms": 50, "hot_threshold": 0.8, "min_dwell_ms": 500}
    assert parse_scenario(BASE).load_balance.adaptive is None
    conf = controller_settings(s, "tb0001", "/tmp")
    assert (conf.stats_period_ms, conf.failover.gray_detect, conf.load_balance.adaptive) == (
        50, False, AdaptiveSettings(hot_threshold=0.8, min_dwell_ms=500))
    assert controller_settings(parse_scenario(BASE), "tb0001", "/tmp").stats_period_ms == 0
    bad = [({"policy": "ecmp", "hot_threshold": 0.5}, "hot_threshold: only for policy adaptive, not 'ecmp'"),
           ({"policy": "adaptive", "hot_threshold": 0}, r"load_balance\.hot_threshold: Input should be greater than 0"),
           ({"policy": "adaptive", "hot_threshold": 1.5}, r"load_balance\.hot_threshold: Input should be less"),
           ({"policy": "adaptive", "poll_period_ms": 5}, r"load_balance\.poll_period_ms: Input should be greater"),
           ({"policy": "adaptive", "min_dwell_ms": 100}, "min_dwell_ms = 100 must hold at least two polls of "
                                                         "poll_period_ms = 100"),
           ({"policy": "adaptive", "weights": {"s1": 2}}, "does not use weights")]
    for lbx, msg in bad:
        with pytest.raises(ScenarioError, match=msg):
            parse_scenario({**BASE, "load_balance": lbx})


def test_summary_block_counts_moves_and_reaction_percentiles():
    move = BucketMove(bucket=1, from_port=3, to_port=4, from_node="s1", to_node="s2", rate_bps=1)
    ev = [AdaptiveMoved(switch="l1", group=1, moves=[move] * n, loads_bps={}, seen_ns=0, decided_ns=0, sent_ns=0,
                        barrier_ns=0, reaction_ms=r, hot_since_ns=None, since_hot_ms=r, time_ns=t)
          for r, t, n in ((5.0, 30, 1), (1.0, 10, 2), (300.0, 20, 1))]
    down = LinkDown(link=["l1", "s1"], cause="port_status", switch="l1", port=3, seq=1, lost_pkts=None,
                    tx_pkts=None, loss=None, window_ms=None, time_ns=1)
    b = adaptive_block(ev + [down])
    assert (b["changes"], b["moves"], b["reaction_ms_p50"], b["reaction_ms_max"], b["first_change_ns"]) == \
        (3, 4, 5.0, 300.0, 10)
    assert b["list"][0] == {"switch": "l1", "group": 1, "buckets": 2, "from": ["s1"], "to": ["s2"],
                            "reaction_ms": 1.0, "time_ns": 10}
    assert (b["since_hot_ms_p50"], b["since_hot_ms_max"]) == (5.0, 300.0)
    assert adaptive_block([])["reaction_ms_p50"] is None


def test_buckets_of_finished_flows_do_not_look_hot():
    """Bucket 0's flow ended; its bytes were pushed in an older refresh. The latest refresh shows the new
    flows of buckets 2 and 4 (their first packets), so one of those moves, not bucket 0."""
    reb = _reb()
    step = int(20 * M / 8 / 10)
    _poll(reb, 0, 0, 0, {0: 1_000_000})
    _poll(reb, 100, 0, 0, {0: 2_000_000})
    d = _poll(reb, 200, step, 0, {0: 2_000_000, 2: 1082, 4: 1082})
    assert len(d) == 1 and [m.bucket_id for m in d[0].moves] in ([2], [4])


def test_hot_since_keeps_the_first_imbalanced_poll_when_counters_first_show_one_flow():
    """The latest refresh first shows only bucket 2's first packet (bucket 0's came a refresh earlier):
    no useful move yet, so seen_ns restarts; hot_since_ns keeps the first hot poll."""
    reb = _reb()
    step = int(20 * M / 8 / 10)
    _poll(reb, 0, 0, 0, {})
    assert _poll(reb, 100, step, 0, {0: 1082}) == []  # only bucket 0 so far: one flow alone, nothing to move
    assert _poll(reb, 200, 2 * step, 0, {0: 1082, 2: 1082}) == []  # latest refresh: bucket 2 alone
    d = _poll(reb, 300, 3 * step, 0, {0: 100_000, 2: 100_000})
    assert len(d) == 1 and d[0].hot_since_ns == 100 * MS and d[0].seen_ns == 300 * MS
