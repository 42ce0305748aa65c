"""Parallel links between a leaf and a spine (``fabric.links_per_spine``) and the select groups' hashing
(``load_balance.hash_basis``, ``load_balance.selection_method``): layout, routes, groups, spec checks."""
from __future__ import annotations

import pytest

from controllers import lb
from controllers.contract import LoadBalanceSettings, decode, encode
from controllers.ofmsg import ntr_selection_method_property
from controllers.ofplan import plan_fabric
from testbed.emulation import controller_proc
from testbed.emulation.faults import fault_links
from testbed.workloads.pattern.results import _uplinks
from testbed.spec.faults import FaultSpec, check_faults
from testbed.spec.scenario import ScenarioError, parse_scenario
from topology import model, spine_leaf
from topology.routing import next_hop_ports, plan_routes, without_links

RID = "tb9c0d"
WORKLOAD = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}


def _layout(links=2, spines=2, leaves=2, hosts_per_leaf=1):
    return spine_leaf.build(RID, spines, leaves, hosts_per_leaf, links_per_spine=links)


def _pairs(layout):
    return sorted((ln.a.intf, ln.b.intf) for ln in layout.links if ln.a.node.startswith(RID + "l")
                  and ln.b.node.startswith(RID + "s"))


def test_every_parallel_link_has_its_own_ports_link_by_link():
    layout = _layout()
    assert _pairs(layout) == [
        (f"{RID}l1-eth2", f"{RID}s1-eth1"), (f"{RID}l1-eth3", f"{RID}s2-eth1"),  # link 1 to each spine
        (f"{RID}l1-eth4", f"{RID}s1-eth3"), (f"{RID}l1-eth5", f"{RID}s2-eth3"),  # link 2 to each spine
        (f"{RID}l2-eth2", f"{RID}s1-eth2"), (f"{RID}l2-eth3", f"{RID}s2-eth2"),
        (f"{RID}l2-eth4", f"{RID}s1-eth4"), (f"{RID}l2-eth5", f"{RID}s2-eth4")]
    assert model.from_json(model.to_json(layout)) == layout  # the controller reads the same layout back
    one = _layout(links=1)
    assert _pairs(one) == [p for p in _pairs(layout) if p[1].rsplit("eth", 1)[1] in ("1", "2")]  # L=1 unchanged


def test_next_hops_are_every_parallel_link():
    hops = next_hop_ports(_layout())
    assert hops[RID + "l1"][RID + "h2"] == (2, 3, 4, 5)  # 2 spines x 2 links: four equal-cost next hops
    assert hops[RID + "s1"][RID + "h2"] == (2, 4)  # both links of s1 to l2
    assert hops[RID + "s2"][RID + "h1"] == (1, 3)
    routes = plan_routes(_layout())
    assert routes[RID + "s1"].ecmp_sets == ((1, 3), (2, 4))  # a select group per leaf on the spine


@pytest.mark.parametrize("basis,method,want", [
    ("per_tier", "hash", {"l1": 0, "s1": 1, "s2": 1}),
    ("same", "hash", {"l1": 0, "s1": 0, "s2": 0}),
    ("per_switch", "hash", {"l1": 0x1001, "s1": 0x2001, "s2": 0x2002}),
    ("same", "dp_hash", {"l1": 0, "s1": 0, "s2": 0}),
    ("per_switch", "dp_hash", {"l1": 0x1001, "s1": 0x2001, "s2": 0x2002}),
])
def test_groups_span_the_parallel_links_with_the_chosen_basis(basis, method, want):
    layout = _layout()
    plans = plan_fabric(layout, "ecmp", {}, hashing=lb.Hashing(basis, method))
    for name, param in want.items():
        groups = plans[layout.switch(RID + name).dpid].groups
        assert {g.hash_basis for g in groups} == {param}, name  # OVS_HASH_ALG_L4 = 0 in the high 32 bits
        assert {g.selection_method for g in groups} == {method}
        assert all(g.hash_fields == (() if method == "dp_hash" else layout.ecmp_hash_fields) for g in groups)
        ntr_selection_method_property(groups[0].hash_fields, method, groups[0].hash_basis)  # OVS accepts the shape
    leaf = plans[layout.switch(RID + "l1").dpid].groups
    assert [[b.port for b in g.buckets] for g in leaf] == [[2, 3, 4, 5]]


def test_the_default_hashing_is_unchanged():
    layout = spine_leaf.build(RID, 2, 2, 2)
    assert plan_fabric(layout) == plan_fabric(layout, "ecmp", {}, hashing=lb.Hashing("per_tier", "hash"))
    assert [g.hash_basis for g in plan_fabric(layout)[layout.switch(RID + "l1").dpid].groups] == [0]


def test_hashing_travels_to_the_controller():
    spec = parse_scenario({"name": "x", "fabric": {"links_per_spine": 2}, "workload": WORKLOAD,
                           "load_balance": {"hash_basis": "same", "selection_method": "dp_hash"}})
    settings = controller_proc.controller_settings(spec, RID, "/tmp").load_balance
    assert (settings.hash_basis, settings.selection_method) == ("same", "dp_hash")
    assert decode(LoadBalanceSettings, encode(settings), "lb") == settings
    assert controller_proc.preflight.__doc__ and spec.load_balance.hashing == lb.Hashing("same", "dp_hash")


@pytest.mark.parametrize("scenario,message", [
    ({"fabric": {"kind": "fat_tree", "links_per_spine": 2}},
     "fabric.links_per_spine does not apply to fabric.kind = 'fat_tree'"),
    ({"fabric": {"kind": "dual_plane", "links_per_spine": 2}},
     "fabric.links_per_spine does not apply to fabric.kind = 'dual_plane'"),
    ({"fabric": {"links_per_spine": 9}}, "links_per_spine"),
    ({"fabric": {"spines": 4, "hosts_per_leaf": 4, "links_per_spine": 8, "ports_per_switch": 32}},
     r"fabric.hosts_per_leaf \+ fabric.spines x fabric.links_per_spine = 36 ports per leaf"),
    ({"fabric": {"spines": 16, "leaves": 20, "hosts_per_leaf": 32, "links_per_spine": 8, "ports_per_switch": 254}},
     "interface names of 16 characters"),
    ({"load_balance": {"hash_basis": "random"}}, "load_balance.hash_basis"),
    ({"load_balance": {"policy": "adaptive", "selection_method": "dp_hash"}},
     "dp_hash: policy 'adaptive' is not supported with it; allowed with: ecmp, weighted"),
    ({"load_balance": {"selection_method": "dp_hash"}, "transport": {"entropy": "spray"}},
     "load_balance.selection_method: dp_hash cannot run with transport.entropy = spray"),
])
def test_refused_before_anything_is_built(scenario, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario({"name": "x", "workload": WORKLOAD, **scenario})


def test_oversubscription_counts_every_parallel_uplink():
    spec = parse_scenario({"name": "x", "workload": WORKLOAD, "fabric": {
        "spines": 2, "leaves": 2, "hosts_per_leaf": 4, "links_per_spine": 2, "oversubscription": 2}})
    assert spec.fabric.fabric_link_bps == pytest.approx(10e6 * 4 / (4 * 2))  # 4 uplinks per leaf
    assert spec.fabric.n_switch_ports == 2 * (4 + 4) + 2 * 4


def test_a_link_fault_hits_the_whole_bundle_and_results_list_each_member():
    layout = _layout()
    fault = FaultSpec(at_s=1.0, link=("l1", "s1"), action="down")
    check_faults(spine_leaf.build("", 2, 2, 1, links_per_spine=2), [fault])
    assert sorted(ln.a.intf for ln in fault_links(layout, fault)) == [f"{RID}l1-eth2", f"{RID}l1-eth4"]
    rest = without_links(layout, [(RID + "l1", RID + "s1")])
    assert next_hop_ports(rest)[RID + "l1"][RID + "h2"] == (3, 5)  # both links of s2 still used
    up = _uplinks(layout)[RID + "l1"]
    assert [(intf, peer) for intf, peer, _ in up] == [(f"{RID}l1-eth{p}", f"{RID}s{s}")
                                                      for p, s in ((2, 1), (3, 2), (4, 1), (5, 2))]


def test_parallel_links_table_and_figures_from_port_samples():
    import pandas as pd
    from types import SimpleNamespace
    from testbed.workloads.pattern.results import bundles, parallel_figures, parallel_link_table

    layout = _layout()
    assert sorted(bundles(layout)[(RID + "s1", RID + "l2")]) == [f"{RID}s1-eth2", f"{RID}s1-eth4"]
    assert bundles(_layout(links=1)) == {}
    sent = [(0, SimpleNamespace(flow=0, channel=0, rank=0, peer=1, msg_seq=0, size_bytes=1, t_post_ns=100, t_acked_ns=900))]
    run = SimpleNamespace(fab=SimpleNamespace(layout=layout), flows=[SimpleNamespace(flow=0, src=0, dst=1)],
                          trials=[SimpleNamespace(trial=0, done=[SimpleNamespace(sent=[s for _, s in sent])])])
    rows = []
    for intf in {i for intfs in bundles(layout).values() for i in intfs}:
        moved = {f"{RID}s1-eth2": 4000, f"{RID}s1-eth4": 0, f"{RID}l1-eth2": 1000}.get(intf, 1000)
        rows += [{"time_ns": 0, "port": intf, "tx_bytes": 0}, {"time_ns": 1000, "port": intf, "tx_bytes": moved}]
    table = parallel_link_table(run, pd.DataFrame(rows))
    s1 = table[(table["switch"] == "s1") & (table["peer"] == "l2")].set_index("port")["share"]
    assert s1.to_dict() == {f"{RID}s1-eth2": 1.0, f"{RID}s1-eth4": 0.0}  # a polarized bundle
    figures = parallel_figures(table)
    assert figures["parallel_min_share"] == 0.0
    assert figures["parallel_balance_index"] == pytest.approx((7 * 1.0 + 0.5) / 8)  # 8 bundles, one at 1/2


def test_a_capture_by_link_name_is_refused_on_a_bundle_naming_its_members():
    from testbed.spec.pcap import resolve_ports

    layout = _layout()
    with pytest.raises(ValueError, match=r"output.pcap.ports.0: 'l1-s1' names 2 parallel links \(fabric.links_per_spine"
                                         r"\); name each interface instead: l1-eth2, l1-eth4"):
        resolve_ports(layout, ["l1-s1"])
    assert [p.port for p in resolve_ports(layout, ["l1-eth4"])] == ["l1-eth4"]
    assert [p.port for p in resolve_ports(_layout(links=1), ["l1-s1"])] == ["l1-eth2"]
