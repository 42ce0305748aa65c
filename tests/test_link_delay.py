"""Propagation delay (``fabric.link_delay_us``): the netem stage's plan, its refusal without netem, and the
figures that account for it (RTT, window-limited goodput, the automatic timeout). The delay itself is
measured in the guest tier (tests/vm/test_guest_tier.py: ping RTT and a window-limited QP)."""
import pytest

from dataplane import queues
from dataplane.queues import delay
from dataplane.queues.base import QueueConfig, ShapedLink
from testbed.measure import link_model
from testbed.spec.rto import rto_basis
from testbed.spec.scenario import ScenarioError, parse_scenario

ROOT = 0xFFFFFFFF


def _spec(**fabric):
    return parse_scenario({"fabric": fabric, "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})


@pytest.mark.parametrize("name", sorted(queues.BACKENDS))
def test_every_backend_hangs_under_the_netem_root_unchanged(name):
    plain, delayed = queues.get(name), queues.get(name, delay_us=5000)
    cfg = QueueConfig.single(10e6, 100_000) if plain.max_classes < 3 else QueueConfig(10e6, 1500, _three_classes())
    reqs = delayed.full_plan(7, cfg)
    assert reqs[0] == ("add", "netem", {"index": 7, "handle": 0xD0000, "parent": ROOT, "delay": 5000,
                                        "limit": delay.NETEM_LIMIT_PKTS})
    own = plain.full_plan(7, cfg)
    assert plain.full_plan(7, cfg) == plain.plan(7, cfg)  # no delay: the backend's plan alone
    assert len(reqs) == len(own) + 1
    for (c1, k1, a1), (c2, k2, a2) in zip(own, reqs[1:]):
        # the same requests; only the backend's root moves from the egress root to netem's child slot d:1
        assert (c1, k1) == (c2, k2)
        assert a2 == ({**a1, "parent": delay.CHILD_PARENT} if a1["parent"] == ROOT else a1)
    assert sum(a["parent"] == delay.CHILD_PARENT for _c, _k, a in reqs) == 1
    # the sampler reads the backend's root, not netem (whose frames are in flight, not in the buffer)
    assert plain.sampled_parent == ROOT and delayed.sampled_parent == delay.CHILD_PARENT == 0xD0001


def _three_classes():
    from testbed.spec.congestion import CongestionSpec
    return CongestionSpec().traffic_classes(100_000, 1514)


def test_negative_delay_is_refused_naming_it():
    with pytest.raises(ValueError, match="delay_us=-1 must be >= 0"):
        queues.get("htb_bfifo", delay_us=-1)


def test_delay_self_check_names_the_interface_off_by_more_than_a_tick():
    link = dict(rate_bps=10_000_000, ceil_bps=10_000_000, buffer_bytes=100_000, quantum_bytes=1514, burst_bytes=4542)
    good, bad = ShapedLink(**link, delay_us=5001), ShapedLink(**link, delay_us=0)
    assert queues.delay_check({"p1": 5000}, {"p1": good}) == []
    assert queues.delay_check({"p1": 5000, "p2": 5000}, {"p1": good, "p2": bad}) == \
        ["p2: configured delay 5000 us, kernel 0 us"]
    assert queues.delay_check({"p1": 5000, "p2": 0}, {"p1": good, "p2": bad}) == []  # a link's own delay, 0


def test_delay_is_refused_without_netem_and_allowed_with_it():
    spec = _spec(link_delay_us=500)
    with pytest.raises(ScenarioError, match="fabric.link_delay_us = 500: this kernel has no sch_netem.*scripts/vm"):
        link_model.check_delay_backend(spec, "none")
    link_model.check_delay_backend(spec, "netem")
    model = link_model.link_model(spec, "netem")
    assert model["propagation_delay_us"] == 500 and model["delay_backend"].startswith("netem")
    assert link_model.link_model(_spec(), "none")["delay_backend"] == "none"


def test_rtt_and_window_limited_goodput_worked_values():
    # 2 links x 20 ms each way = 80 ms, + a 1082-byte data frame and a 62-byte ACK at 2 Mbit/s (4.576 ms)
    rtt_us = link_model.path_rtt_us(2, 20_000, 2e6, 1082, 62)
    assert rtt_us == pytest.approx(84_576)
    # 8 packets of 1024 B per round trip
    assert link_model.window_limited_goodput_bps(8, 1024, rtt_us) == pytest.approx(8 * 1024 * 8 / 0.084576)


def test_auto_timeout_covers_the_round_trip_propagation():
    plain, delayed = rto_basis(_spec()), rto_basis(_spec(link_delay_us=20_000))
    links = plain["hops"] + 1
    assert delayed["derived_us"] - plain["derived_us"] == pytest.approx(2 * links * 20_000, abs=1)
