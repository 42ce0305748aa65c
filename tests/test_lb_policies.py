"""The controller's load-balancing policy registry (controllers/lb) and its ``ecmp`` policy.

``ecmp`` must give exactly the group plan the controller installed before
policies existed: one bucket per equal-cost port, in port-set order, bucket ids
from 0, weight 100 each, OVS ``hash`` over the layout's ``ecmp_hash_fields``.
The golden group-mod bytes below were serialized by that earlier controller
(controllers/fabric_app.py before the split) for a 2-spine, 2-leaf fabric.
"""
from __future__ import annotations

import pytest

from controllers import lb
from controllers.lb import ecmp
from controllers.ofmsg import build_group_mod
from controllers.ofplan import BucketPlan, GroupPlan, plan_fabric
from controllers.ryu_api import ofproto_protocol, ofproto_v1_5
from test_topology import three_tier
from testbed.spec.scenario import ScenarioError, parse_scenario
from topology import routing, spine_leaf

#: OFPGroupMod (xid 1) of each leaf's one ECMP group, written by the controller before policies existed,
#: plus a watch_port property per bucket (OFPGBPT_WATCH_PORT = 1, the bucket's own port: issue 8's fast failover).
GOLDEN_LEAF_GROUP_MOD = bytes.fromhex(
    "060f00c000000001000001000000000100500000ffffffff00280010000000000000001000000003ffe5000000000000"
    "0000000800640000000100080000000300280010000000010000001000000004ffe50000000000000000000800640000"
    "0001000800000004ffff00550000154d0000000100000000686173680000000000000000000000000000000000000000"
    "80001604ffffffff80001804ffffffff80001401ff80001e02ffff80002002ffff80001a02ffff80001c02ffff000000")


def test_registry_lists_and_returns_policies():
    assert lb.names() == tuple(sorted(lb.POLICIES)) and "ecmp" in lb.names()
    assert lb.DEFAULT_POLICY in lb.POLICIES
    assert lb.get("ecmp") is ecmp.select_group


def test_unknown_policy_names_the_key_and_the_allowed_names():
    with pytest.raises(ValueError, match=r"^load_balance\.policy: unknown policy 'wcmp'; allowed: adaptive, ecmp, weighted"):
        lb.get("wcmp")
    with pytest.raises(ValueError, match="load_balance.policy"):
        plan_fabric(spine_leaf.build("tb9c01", spines=2, leaves=2, hosts_per_leaf=1), "wcmp")


def test_scenario_load_balance_section():
    base = {"workload": {"collective": "allreduce", "sizes": {"min_bytes": 1024, "max_bytes": 1024}}}
    assert parse_scenario(base).load_balance.policy == "ecmp"
    assert parse_scenario({**base, "load_balance": {"policy": "ecmp"}}).load_balance.policy == "ecmp"
    with pytest.raises(ScenarioError, match=r"load_balance\.policy: unknown policy 'spray'; allowed: adaptive, ecmp, weighted"):
        parse_scenario({**base, "load_balance": {"policy": "spray"}})
    with pytest.raises(ScenarioError, match=r"load_balance\.hash: unknown key; allowed keys here: hash_basis, hot_threshold, min_dwell_ms, policy, poll_period_ms, selection_method, weights"):
        parse_scenario({**base, "load_balance": {"hash": [1, 2]}})


def test_ecmp_gives_equal_buckets_hashing_the_layout_fields():
    layout = spine_leaf.build("tb9c01", spines=3, leaves=2, hosts_per_leaf=1)
    group = ecmp.select_group(layout, layout.switch("tb9c01l1"), (3, 4, 5))
    assert group == lb.SelectGroup(((3, 100), (4, 100), (5, 100)), "hash", tuple(layout.ecmp_hash_fields))
    assert {"udp_src", "udp_dst", "ipv4_src", "ipv4_dst", "ip_proto"} <= set(group.hash_fields)


@pytest.mark.parametrize("layout", [spine_leaf.build("tb9c01", spines=2, leaves=4, hosts_per_leaf=2), three_tier()],
                         ids=["spine-leaf", "three-tier"])
def test_ecmp_plan_is_the_plan_before_policies(layout):
    """Unchanged but for the hash basis, one per tier since fat-trees (lb.tier_basis): 0 on
    host-facing switches (every group of a spine-leaf), 1 on the three-tier's aggregation."""
    routes = routing.plan_routes(layout)
    tiers = routing.switch_tiers(layout)
    for dpid, plan in plan_fabric(layout, "ecmp").items():
        sw = layout.switch_by_dpid(dpid)
        expected = tuple(
            GroupPlan(routes[sw.name].group_id(ports),
                      tuple(BucketPlan(i, port, 100) for i, port in enumerate(ports)),
                      tuple(layout.ecmp_hash_fields), "hash", tiers[sw.name] - 1)
            for ports in routes[sw.name].ecmp_sets)
        assert plan.groups == expected
    assert plan_fabric(layout) == plan_fabric(layout, "ecmp")


def test_ecmp_group_mod_bytes_unchanged():
    layout = spine_leaf.build("tb9c01", spines=2, leaves=2, hosts_per_leaf=2)
    dp = ofproto_protocol.ProtocolDesc(ofproto_v1_5.OFP_VERSION)
    leaves = [s for s in layout.switches if s.role == "leaf"]
    for leaf in leaves:
        (group,) = plan_fabric(layout)[leaf.dpid].groups
        msg = build_group_mod(dp, group)
        msg.set_xid(1)
        msg.serialize()
        assert bytes(msg.buf) == GOLDEN_LEAF_GROUP_MOD
