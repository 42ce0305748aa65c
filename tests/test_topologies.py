"""topology/fat_tree.py and topology/rail_optimized.py: counts, ports, addresses, equal-cost
paths and routes, and the fabric spec's checks of each kind's keys (no root)."""
from __future__ import annotations

import ipaddress
from collections import Counter

import networkx as nx
import pytest

from controllers.ofplan import plan_fabric
from test_topology import far_end, full_graph, lookup
from testbed.spec.scenario import ScenarioError, parse_scenario
from topology import fat_tree, rail_optimized
from topology import model as M
from topology import routing as R

RID = "tb7e57"
WORKLOAD = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}


def ports_of(layout: M.Layout, node: str) -> list:
    return sorted((ln.a if ln.a.node == node else ln.b).number for ln in layout.links_of(node))


def walk_paths(layout: M.Layout, src: M.Host, dst: M.Host) -> int:
    """Follow every equal-cost branch of the installed routes from src to dst; count the
    paths, asserting none loops or enters a host that is not dst."""
    plan = R.plan_routes(layout)
    hosts = {h.name for h in layout.hosts}
    frontier, walked = [(layout.attachment(src.name).node, (src.name,))], 0
    while frontier:
        node, path = frontier.pop()
        assert node not in path, f"loop {path + (node,)}"
        if node == dst.name:
            walked += 1
            continue
        assert node not in hosts, f"packet for {dst.name} delivered to {node} via {path}"
        for port in lookup(plan[node], dst.ip).ports:
            frontier.append((far_end(layout, node, port), path + (node,)))
    return walked


# ------------------------------------------------------------ fat-tree


@pytest.mark.parametrize("k", [2, 4, 6])
def test_fat_tree_counts_and_ports(k):
    layout = M.from_json(M.to_json(fat_tree.build(RID, k)), "fat_tree")  # the validator accepts it
    half = k // 2
    roles = Counter(s.role for s in layout.switches)
    assert roles == {"edge": k * half, "aggregation": k * half, "core": half * half}
    assert len(layout.switches) == 5 * k * k // 4 and len(layout.hosts) == k ** 3 // 4
    assert len(layout.links) == 3 * k ** 3 // 4  # hosts, edge-aggregation, aggregation-core
    for s in layout.switches:  # every switch uses exactly ports 1..k
        assert ports_of(layout, s.name) == list(range(1, k + 1)), s.name
    assert len(set(layout.dpids)) == len(layout.switches)
    assert [h.rank for h in layout.hosts] == list(range(k ** 3 // 4))


def test_fat_tree_k4_follows_the_paper_wiring_and_addresses():
    layout = fat_tree.build(RID, 4)
    assert (len(layout.switches), len(layout.hosts)) == (20, 16)
    h7 = layout.hosts[6]  # pod 2, edge 2, host 1
    assert (h7.name, h7.ip, h7.mac) == (f"{RID}h7", "10.2.2.1", "02:00:00:02:02:01")
    assert layout.attachment(h7.name) == M.Port(f"{RID}e4", 1)
    assert layout.switch(f"{RID}e4").subnet == "10.2.2.0/24" and layout.switch(f"{RID}e4").dpid == 0x1004
    # edge e4 (pod 2, edge 2): uplinks to aggregation a3, a4 on ports 3, 4, arriving on their port 2
    assert [(far_end(layout, f"{RID}e4", p)) for p in (3, 4)] == [f"{RID}a3", f"{RID}a4"]
    # aggregation a of every pod joins cores (a-1)*k/2+1..a*k/2; core c reaches pod p on port p
    assert [far_end(layout, f"{RID}a4", p) for p in (3, 4)] == [f"{RID}c3", f"{RID}c4"]
    assert [far_end(layout, f"{RID}c3", p) for p in (1, 2, 3, 4)] == [f"{RID}a2", f"{RID}a4", f"{RID}a6", f"{RID}a8"]
    assert all(ln.rate_bps == 10e6 and ln.plane == 0 for ln in layout.links)


def test_fat_tree_k4_equal_cost_paths_and_hops():
    layout = fat_tree.build(RID, 4)
    g = full_graph(layout)
    h = {n: layout.hosts[n - 1] for n in range(1, 17)}
    for a, b, paths, length in ((1, 2, 1, 2), (1, 3, 2, 4), (1, 5, 4, 6), (1, 16, 4, 6)):
        # same edge: 1 path; same pod: one per aggregation switch (k/2); other pod: (k/2)^2 via the cores
        assert len(list(nx.all_shortest_paths(g, h[a].name, h[b].name))) == paths
        assert nx.shortest_path_length(g, h[a].name, h[b].name) == length
        assert walk_paths(layout, h[a], h[b]) == paths
    assert R.max_switch_hops(layout) == 5


def test_fat_tree_every_pair_is_reached_on_every_branch_and_every_next_hop_is_used():
    layout = fat_tree.build(RID, 4)
    total = sum(walk_paths(layout, s, d) for s in layout.hosts for d in layout.hosts if s is not d)
    # each host: 1 same-edge peer x 1 path, 2 same-pod peers x 2, 12 other-pod peers x 4
    assert total == 16 * (1 + 2 * 2 + 12 * 4)
    hops, plan = R.next_hop_ports(layout), R.plan_routes(layout)
    for s in layout.switches:
        used = {p for r in plan[s.name].routes for p in r.ports}
        assert used == {p for ports in hops[s.name].values() for p in ports}
    assert plan[f"{RID}e1"].ecmp_sets == ((3, 4),)   # up to both aggregation switches
    assert plan[f"{RID}a1"].ecmp_sets == ((3, 4),)   # up to both of its cores
    assert plan[f"{RID}c1"].ecmp_sets == ()           # one port down to each pod
    # a core routes each edge subnet down its pod's port: 8 subnet routes, no host routes
    assert [(r.prefix, r.ports) for r in plan[f"{RID}c1"].routes][:3] == [
        ("10.1.1.0/24", (1,)), ("10.1.2.0/24", (1,)), ("10.2.1.0/24", (2,))]
    assert {r.via for r in plan[f"{RID}c1"].routes} == {"subnet"}


def test_switch_tiers():
    assert set(R.switch_tiers(fat_tree.build(RID, 4)).items()) == (
        {(f"{RID}e{n}", 1) for n in range(1, 9)} | {(f"{RID}a{n}", 2) for n in range(1, 9)}
        | {(f"{RID}c{n}", 3) for n in range(1, 5)})
    assert R.switch_tiers(rail_optimized.build(RID, 2, 2, 1)) == {f"{RID}s1": 2, f"{RID}r1": 1, f"{RID}r2": 1}


def test_hash_basis_reaches_the_group_mod_bytes():
    from controllers.ofmsg import ntr_selection_method_property
    a, b = (ntr_selection_method_property(("ipv4_src",), "hash", basis) for basis in (0, 1))
    assert a[:32] == b[:32] and a[32:40] == bytes(8) and b[32:40] == (1).to_bytes(8, "big")


def test_controller_plans_every_fat_tree_switch():
    layout = fat_tree.build(RID, 4)
    plans = plan_fabric(layout)
    assert sorted(plans) == list(layout.dpids) and len(plans) == 20
    for p in plans.values():
        groups = {g.group_id: sorted(b.port for b in g.buckets) for g in p.groups}
        assert groups == ({1: [3, 4]} if p.role in ("edge", "aggregation") else {}), p.name
        # a different hash basis per tier: an aggregation switch must not repeat its edge's choice
        assert {g.hash_basis for g in p.groups} <= {{"edge": 0, "aggregation": 1}.get(p.role)}, p.name
        for f in p.flows:  # every flow's output port exists on that switch
            outs = [a[1] for a in f.actions if a[0] == "output"]
            assert set(outs) <= set(ports_of(layout, p.name)), (p.name, f)


# ------------------------------------------------------------ rail-optimized


def test_rail_2x4_counts_ranks_and_rails():
    layout = M.from_json(M.to_json(rail_optimized.build(RID, 2, 4, 2)), "rail")
    assert Counter(s.role for s in layout.switches) == {"rail": 4, "spine": 2}
    assert len(layout.hosts) == 8 and len(layout.links) == 8 + 4 * 2
    for i in range(1, 5):  # rail leaf i holds GPU i of both servers (ranks i-1 and 4+i-1)
        rail = f"{RID}r{i}"
        assert [h.rank for h, _ in layout.hosts_on(rail)] == [i - 1, 4 + i - 1]
        assert ports_of(layout, rail) == [1, 2, 3, 4]
        assert layout.switch(rail).subnet == f"10.0.{i}.0/24"
    assert [h.ip for h in layout.hosts] == [f"10.0.{i}.{s}" for s in (1, 2) for i in (1, 2, 3, 4)]
    assert ports_of(layout, f"{RID}s1") == [1, 2, 3, 4]
    assert R.max_switch_hops(layout) == 3


def test_rail_paths_same_rail_stay_on_the_leaf_other_rails_cross_every_spine():
    layout = rail_optimized.build(RID, 2, 4, 3)
    h = layout.hosts
    assert walk_paths(layout, h[0], h[4]) == 1      # GPU 1 of server 1 -> GPU 1 of server 2: one rail leaf
    assert walk_paths(layout, h[0], h[1]) == 3      # GPU 1 -> GPU 2: via each of the 3 spines
    plan = R.plan_routes(layout)
    assert plan[f"{RID}r1"].ecmp_sets == ((3, 4, 5),)
    total = sum(walk_paths(layout, s, d) for s in h for d in h if s is not d)
    assert total == 8 * (1 * 1 + 6 * 3)


# ------------------------------------------------------------ the fabric spec


def fabric_of(**fabric):
    return parse_scenario({"name": "t", "fabric": fabric, "workload": WORKLOAD}).fabric


def test_spec_builds_each_kind_and_derives_the_uplink_rate():
    f = fabric_of(kind="fat_tree", k=4, host_link_bps="10M", oversubscription=2)
    assert (f.n_hosts, f.n_switch_ports, f.ranks_per_switch, f.max_switch_hops) == (16, 80, 2, 5)
    assert f.fabric_link_bps == 5e6 and f.oversubscription_ratio == 2
    assert f.describe() == "fat_tree (k 4): 20 switches, oversubscription 2:1"
    r = fabric_of(kind="rail_optimized", servers=4, gpus_per_server=2, spines=1)  # non-blocking by default
    assert (r.n_hosts, r.ranks_per_switch, r.fabric_link_bps) == (8, 1, 40e6)  # 4 host ports, 1 uplink
    r = fabric_of(kind="rail_optimized", fabric_link_bps="20M", spines=1)
    assert r.fabric_link_bps == 20e6 and r.oversubscription_ratio == 1
    sl = fabric_of(spines=1, leaves=4, hosts_per_leaf=4, oversubscription=4, host_link_bps="20M")
    assert sl.fabric_link_bps == 20e6 and sl.n_switch_ports == 4 * 5 + 4
    assert fabric_of().fabric_link_bps == 10e6  # spine_leaf keeps its default rate
    # the manifest's dump holds only the kind's keys and validates back to the same section
    dumped = f.model_dump(mode="json")
    assert "spines" not in dumped and "servers" not in dumped and dumped["k"] == 4
    assert fabric_of(**dumped) == f


@pytest.mark.parametrize("fabric, words", [
    ({"kind": "fat_tree", "k": 5}, "fabric.k = 5: allowed an even number of ports per switch in 2..8"),
    ({"kind": "fat_tree", "k": 10}, "fabric.k = 10: allowed an even number"),
    ({"kind": "fat_tree", "k": 8, "ports_per_switch": 6}, "fabric.k = 8 ports per switch, more than "
                                                          "fabric.ports_per_switch = 6"),
    ({"kind": "fat_tree", "spines": 2}, "fabric.spines does not apply to fabric.kind = 'fat_tree' (its keys: k;"),
    ({"k": 4}, "fabric.k does not apply to fabric.kind = 'spine_leaf' (its keys: spines, leaves, hosts_per_leaf, "
               "links_per_spine; k belongs to fat_tree)"),
    ({"kind": "rail_optimized", "leaves": 2}, "fabric.leaves does not apply to fabric.kind = 'rail_optimized' "
                                              "(its keys: servers, gpus_per_server, spines;"),
    ({"kind": "rail_optimized", "servers": 30, "spines": 4}, "fabric.servers + fabric.spines = 34 ports per "
                                                             "rail leaf, more than fabric.ports_per_switch = 32"),
    ({"kind": "rail_optimized", "servers": 1, "gpus_per_server": 1}, "at least 2 hosts"),
    ({"kind": "fat_tree", "oversubscription": 2, "fabric_link_bps": "10M"},
     "fabric.oversubscription = 2 (fabric links of 5e+06 bit/s) and fabric.fabric_link_bps = 1e+07 both set"),
    ({"kind": "fat_tree", "oversubscription": 0}, "fabric.oversubscription"),
    ({"kind": "fat_tree", "host_link_bps": "200k", "oversubscription": 4},
     "fabric.oversubscription = 4 makes fabric links of 50000 bit/s"),
    ({"kind": "rail_optimized", "servers": 30, "spines": 1, "host_link_bps": "10G"},  # the default ratio 1
     "fabric.oversubscription = 1 makes fabric links of 3e+11 bit/s"),
])
def test_spec_refuses_bad_kind_keys_naming_them(fabric, words):
    with pytest.raises(ScenarioError) as info:
        fabric_of(**fabric)
    assert words in str(info.value)


def test_addresses_are_inside_each_edge_subnet():
    layout = fat_tree.build(RID, 6)
    for h in layout.hosts:
        sw = layout.switch(layout.attachment(h.name).node)
        assert ipaddress.IPv4Address(h.ip) in ipaddress.IPv4Network(sw.subnet)
