"""The ``weighted`` load-balancing policy: weights -> equal-weight buckets; its settings path."""
from __future__ import annotations

import configparser

import pytest

from controllers import lb
from controllers import contract
from controllers.lb import weighted
from controllers.ofplan import plan_fabric
from testbed.emulation import controller_proc
from testbed.spec.scenario import ScenarioError, parse_scenario
from topology import spine_leaf

RID = "tb9c03"
WORKLOAD = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}


def _leaf_buckets(layout, weights, leaf="l1"):
    (group,) = plan_fabric(layout, "weighted", weights)[layout.switch(RID + leaf).dpid].groups
    return [(b.port, b.weight) for b in group.buckets], group


def test_weights_become_equal_weight_buckets_per_next_hop():
    layout = spine_leaf.build(RID, spines=2, leaves=2, hosts_per_leaf=1)  # leaf ports: 1 host, 2 -> s1, 3 -> s2
    buckets, group = _leaf_buckets(layout, {"s1": 1, "s2": 3})
    assert buckets == [(2, 100), (3, 100), (3, 100), (3, 100)]
    assert [b.bucket_id for b in group.buckets] == [0, 1, 2, 3]
    assert group.selection_method == "hash" and "udp_src" in group.hash_fields
    assert _leaf_buckets(layout, {"s1": 20, "s2": 60})[0] == buckets  # reduced by the common divisor
    assert _leaf_buckets(layout, {"s2": 2})[0] == [(2, 100), (3, 100), (3, 100)]  # unnamed switch: weight 1
    assert _leaf_buckets(layout, {})[0] == [(2, 100), (3, 100)]  # no weights: ECMP's equal buckets


@pytest.mark.parametrize("weights,share_s1", [((1, 3), 0.25), ((2, 3), 0.4), ((5, 5), 0.5), ((1, 7), 0.125)])
def test_bucket_counts_give_each_port_its_weighted_share(weights, share_s1):
    counts = weighted.bucket_counts(weights)
    assert counts[0] / sum(counts) == pytest.approx(share_s1)


def test_bucket_counts_refuse_zero_and_too_many_buckets():
    with pytest.raises(ValueError, match=r"load_balance.weights: every weight must be >= 1, got \[0, 3\]"):
        weighted.bucket_counts((0, 3))
    with pytest.raises(ValueError, match=r"need 300 buckets in one group; at most 256"):
        weighted.bucket_counts((1, 299))


@pytest.mark.parametrize("lb_section,message", [
    ({"policy": "ecmp", "weights": {"s1": 2}},
     "load_balance.weights: policy 'ecmp' does not use weights; the policies that do: weighted"),
    ({"policy": "weighted", "weights": {"s9": 2}},
     "load_balance.weights: 's9' is not a switch of this fabric; allowed: l1, l2, s1, s2"),
    ({"policy": "weighted", "weights": {"s1": 0}}, "load_balance.weights.s1: 0 is not a whole number from 1 to 65535"),
    ({"policy": "weighted", "weights": {"s1": 70000}}, "load_balance.weights.s1: 70000 is not a whole number"),
    ({"policy": "weighted", "weights": {"s1": "3"}}, "load_balance.weights.s1: Input should be a valid integer"),
    # fresh-user review 2026-12-01: these built a fabric and then failed in the controller
    ({"policy": "weighted", "weights": {"s1": 1, "s2": 1000}},
     "load_balance.weights: weights [1, 1000] need 1001 buckets in one group; at most 256"),
    ({"policy": "weighted", "weights": {"s1": 1, "l1": 3}},
     "load_balance.weights: 'l1' is never one of several equal-cost next hops on this fabric, so its weight would "
     "change nothing; switches that are: s1, s2"),
])
def test_scenario_refuses_bad_weights_naming_the_key(lb_section, message):
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 1}, "load_balance": lb_section,
                        "workload": WORKLOAD})
    assert message in str(info.value)


def test_weights_travel_in_the_controller_settings_and_back(tmp_path):
    spec = parse_scenario({"load_balance": {"policy": "weighted", "weights": {"s2": 3, "s1": 1}},
                           "workload": WORKLOAD})
    proc = controller_proc.ControllerProcess(tmp_path, controller_proc.controller_settings(spec, RID, tmp_path),
                                             port=40124)
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(proc.conf_path)
    settings = contract.read_json(ini["testbed"]["settings_file"], contract.ControllerSettings)
    assert settings.load_balance == contract.LoadBalanceSettings("weighted", {"s1": 1, "s2": 3}, None)
    assert controller_proc.preflight(spec)["lb_weights"] == {"s1": 1, "s2": 3}


def test_registry_has_weighted():
    assert lb.get("weighted") is weighted.select_group and "weighted" in lb.WEIGHTED_POLICIES
