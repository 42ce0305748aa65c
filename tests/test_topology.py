"""topology/: the shared model, its JSON file, the spine-leaf builder and networkx routing (no root)."""
from __future__ import annotations

import ipaddress
import json
from types import SimpleNamespace

import networkx as nx
import pytest

import topology
from topology import model as M
from topology import routing as R
from topology import spine_leaf

RID = "tb7e57"


def fabric(spines=2, leaves=2, hosts_per_leaf=2):
    return SimpleNamespace(spines=spines, leaves=leaves, hosts_per_leaf=hosts_per_leaf,
                           host_link_bps=20e6, fabric_link_bps=10e6, buffer_bytes=64_000)


def old_document(layout: M.Layout) -> dict:
    """The first release's topology document (controllers/topology.py format) read off a Layout."""
    hosts = []
    for h in layout.hosts:
        at = layout.attachment(h.name)
        hosts.append({"name": h.name, "ip": h.ip, "mac": h.mac, "leaf": at.node, "port": at.number})
    leaves = {s.name for s in layout.switches if s.role == "leaf"}
    links = []
    for ln in layout.links:
        if ln.a.node in leaves:
            links.append({"leaf": ln.a.node, "leaf_port": ln.a.number, "spine": ln.b.node, "spine_port": ln.b.number})
    return {
        "run_id": layout.run_id,
        "switches": [{"name": s.name, "dpid": s.dpid, "role": s.role, "index": s.index} for s in layout.switches],
        "hosts": hosts,
        "links": links,
        "leaf_subnets": {s.name: s.subnet for s in layout.switches if s.role == "leaf"},
        "fabric_prefix": layout.fabric_prefix,
        "ecmp_hash_fields": list(layout.ecmp_hash_fields),
    }


# ------------------------------------------------------------ spine-leaf builder


#: What the first release (controllers/topology.py spine_leaf_document and
#: testbed/emulation/topo.py FabricLayout, identical up to switch order) wrote for 2 x 2 x 2.
FIRST_RELEASE_2X2X2 = json.loads(
    '{"run_id": "tb7e57", "switches": [{"name": "tb7e57l1", "dpid": 4097, "role": "leaf", "index": 1}, '
    '{"name": "tb7e57l2", "dpid": 4098, "role": "leaf", "index": 2}, {"name": "tb7e57s1", "dpid": 8193, '
    '"role": "spine", "index": 1}, {"name": "tb7e57s2", "dpid": 8194, "role": "spine", "index": 2}], '
    '"hosts": [{"name": "tb7e57h1", "ip": "10.0.1.1", "mac": "02:00:00:00:01:01", "leaf": "tb7e57l1", "port": 1}, '
    '{"name": "tb7e57h2", "ip": "10.0.1.2", "mac": "02:00:00:00:01:02", "leaf": "tb7e57l1", "port": 2}, '
    '{"name": "tb7e57h3", "ip": "10.0.2.1", "mac": "02:00:00:00:02:01", "leaf": "tb7e57l2", "port": 1}, '
    '{"name": "tb7e57h4", "ip": "10.0.2.2", "mac": "02:00:00:00:02:02", "leaf": "tb7e57l2", "port": 2}], '
    '"links": [{"leaf": "tb7e57l1", "leaf_port": 3, "spine": "tb7e57s1", "spine_port": 1}, '
    '{"leaf": "tb7e57l1", "leaf_port": 4, "spine": "tb7e57s2", "spine_port": 1}, '
    '{"leaf": "tb7e57l2", "leaf_port": 3, "spine": "tb7e57s1", "spine_port": 2}, '
    '{"leaf": "tb7e57l2", "leaf_port": 4, "spine": "tb7e57s2", "spine_port": 2}], '
    '"leaf_subnets": {"tb7e57l1": "10.0.1.0/24", "tb7e57l2": "10.0.2.0/24"}, "fabric_prefix": "10.0.0.0/16", '
    '"ecmp_hash_fields": ["ipv4_src", "ipv4_dst", "ip_proto", "udp_src", "udp_dst", "tcp_src", "tcp_dst"]}')


def test_spine_leaf_matches_the_first_release_document():
    got = old_document(topology.build("spine_leaf", fabric(2, 2, 2), RID))
    key = lambda s: s["name"]  # noqa: E731 (the first release listed switches in either order)
    assert sorted(got.pop("switches"), key=key) == sorted(FIRST_RELEASE_2X2X2.pop("switches"), key=key)
    assert got == FIRST_RELEASE_2X2X2


@pytest.mark.parametrize("spines, leaves, hpl", [(1, 1, 1), (3, 4, 2), (4, 2, 8)])
def test_spine_leaf_follows_the_first_release_conventions(spines, leaves, hpl):
    layout = topology.build("spine_leaf", fabric(spines, leaves, hpl), RID)
    doc = old_document(layout)
    assert {(s["name"], s["dpid"]) for s in doc["switches"]} == (
        {(f"{RID}l{i}", 0x1000 + i) for i in range(1, leaves + 1)}
        | {(f"{RID}s{k}", 0x2000 + k) for k in range(1, spines + 1)})
    assert doc["hosts"] == [
        {"name": f"{RID}h{(i - 1) * hpl + j}", "ip": f"10.0.{i}.{j}", "mac": f"02:00:00:00:{i:02x}:{j:02x}",
         "leaf": f"{RID}l{i}", "port": j} for i in range(1, leaves + 1) for j in range(1, hpl + 1)]
    assert doc["links"] == [{"leaf": f"{RID}l{i}", "leaf_port": hpl + k, "spine": f"{RID}s{k}", "spine_port": i}
                            for i in range(1, leaves + 1) for k in range(1, spines + 1)]
    assert doc["leaf_subnets"] == {f"{RID}l{i}": f"10.0.{i}.0/24" for i in range(1, leaves + 1)}
    assert [h.rank for h in layout.hosts] == list(range(leaves * hpl))


def test_spine_leaf_links_carry_rates_buffers_and_plane():
    layout = spine_leaf.from_spec(fabric(2, 2, 2), RID)
    host_links = [ln for ln in layout.links if ln.a.node.startswith(RID + "h")]
    fabric_links = [ln for ln in layout.links if ln not in host_links]
    assert len(host_links) == 4 and len(fabric_links) == 4
    assert {ln.rate_bps for ln in host_links} == {20e6}
    assert {ln.rate_bps for ln in fabric_links} == {10e6}
    assert {ln.buffer_bytes for ln in layout.links} == {64_000}
    assert {ln.plane for ln in layout.links} == {0}
    assert host_links[0].a.intf == f"{RID}h1-eth0" and host_links[0].b.intf == f"{RID}l1-eth1"
    assert layout.hosts[0].intf == f"{RID}h1-eth0"
    assert layout.hosts_on(f"{RID}l2") == ((layout.hosts[2], 1), (layout.hosts[3], 2))


def test_builder_registry_refuses_unknown_kind():
    with pytest.raises(ValueError, match=r"fabric.kind = 'torus' is not one of "
                                         r"\['dci', 'dual_plane', 'fat_tree', 'rail_optimized', 'spine_leaf'\]"):
        topology.build("torus", fabric(), RID)
    with pytest.raises(ValueError, match=r"fabric.hosts_per_leaf = 251 is outside 1..250"):
        spine_leaf.build(RID, 1, 1, 251)


# ------------------------------------------------------------ JSON file


def test_json_round_trip(tmp_path):
    layout = spine_leaf.from_spec(fabric(2, 3, 2), RID)
    path = tmp_path / "topo.json"
    M.save(layout, path)
    back = M.load(path)
    assert back == layout
    assert M.to_dict(back) == json.loads(path.read_text())


def _doc():
    return M.to_dict(spine_leaf.from_spec(fabric(2, 2, 2), RID))


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["links"][3].update(a="x"), "topo.json: links[3].a: unknown node 'x'"),
    (lambda d: d.pop("kind"), "topo.json: kind: missing required key"),
    (lambda d: d.update(extra=1), "topo.json: extra: unknown key"),
    (lambda d: d["links"][0].update(speed=1), "topo.json: links[0].speed: unknown key"),
    (lambda d: d["switches"][1].update(dpid="4097"), "topo.json: switches[1].dpid: expected an integer, got '4097'"),
    (lambda d: d["switches"][1].update(dpid=0x2001), "topo.json: switches[1]: duplicate dpid 8193"),
    (lambda d: d["switches"][2].update(subnet="10.1.0.0/24"),
     "topo.json: switches[2].subnet: 10.1.0.0/24 is not inside fabric_prefix 10.0.0.0/16"),
    (lambda d: d["switches"][3].update(subnet="10.0.1.0/25"), "switches[3].subnet: 10.0.1.0/25 overlaps"),
    (lambda d: d["hosts"][1].update(ip="10.0.2.9"),
     f"topo.json: hosts[1].ip: 10.0.2.9 is not inside the subnet of '{RID}l1' (10.0.1.0/24)"),
    (lambda d: d["hosts"][1].update(mac="01:00:00:00:01:02"), "hosts[1].mac: '01:00:00:00:01:02' is a multicast MAC"),
    (lambda d: d["hosts"][1].update(rank=7), "topo.json: hosts[1].rank: 7 is not 1 (hosts are listed in rank order)"),
    (lambda d: d["links"][1].update(b_port=1), f"links[1].b_port: port 1 on {RID}l1 is already used by links[0]"),
    (lambda d: d["links"][4].update(a_port=0), "links[4].a_port: 0 is outside 1..4294967040"),
    (lambda d: d["links"][0].update(rate_bps=0), "links[0].rate_bps: expected a positive number, got 0"),
    (lambda d: d["links"][0].update(b=f"{RID}h2"), "links[0].b: a link between two hosts"),
    (lambda d: d["links"].pop(3), f"topo.json: hosts[3]: host '{RID}h4' has no link"),
    (lambda d: d["ecmp_hash_fields"].append("udp_sport"), "ecmp_hash_fields[7]: 'udp_sport' is not one of"),
    (lambda d: d.update(run_id="x1"), "run_id: 'x1' is not 'tb' followed by 4 lowercase hex digits"),
])
def test_bad_documents_name_the_path(mutate, message):
    doc = _doc()
    mutate(doc)
    with pytest.raises(M.TopologyError) as err:
        M.from_json(json.dumps(doc), "topo.json")
    assert message in str(err.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(M.TopologyError, match="cannot read topology file"):
        M.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(M.TopologyError, match="bad.json: not valid JSON"):
        M.load(tmp_path / "bad.json")


# ------------------------------------------------------------ routing


def three_tier() -> M.Layout:
    """2 pods x (2 ToRs + 2 aggregation switches), 2 cores, 2 hosts per ToR.

    Every ToR links to both aggregation switches of its pod; every
    aggregation switch links to both cores. ToR t: subnet 10.0.t.0/24.
    """
    sw, hosts, links = [], [], []

    def link(a, ap, b, bp):
        links.append(M.Link(M.Port(a, ap), M.Port(b, bp), 10e6, 50_000))

    for c in (1, 2):
        sw.append(M.Switch(f"{RID}c{c}", 0x3000 + c, "core", c))
    for a in range(1, 5):
        sw.append(M.Switch(f"{RID}a{a}", 0x2000 + a, "agg", a))
        for c in (1, 2):
            link(f"{RID}a{a}", 2 + c, f"{RID}c{c}", a)  # agg ports 1-2 down, 3-4 up
    for t in range(1, 5):
        tor = f"{RID}t{t}"
        sw.append(M.Switch(tor, 0x1000 + t, "tor", t, f"10.0.{t}.0/24"))
        for j in (1, 2):
            h = M.Host(f"{RID}h{2 * (t - 1) + j}", 2 * (t - 1) + j - 1, f"10.0.{t}.{j}", f"02:00:00:00:{t:02x}:{j:02x}")
            hosts.append(h)
            link(h.name, 0, tor, j)
        pod = (t - 1) // 2
        for k in (1, 2):
            agg = 2 * pod + k
            link(tor, 2 + k, f"{RID}a{agg}", 1 + (t - 1) % 2)
    layout = M.Layout(RID, "three_tier", "10.0.0.0/16", M.DEFAULT_HASH_FIELDS, tuple(sw), tuple(hosts), tuple(links))
    return M.from_json(M.to_json(layout), "three_tier")  # the validator accepts it


def full_graph(layout: M.Layout) -> nx.MultiGraph:
    g = nx.MultiGraph()
    for ln in layout.links:
        g.add_edge(ln.a.node, ln.b.node, ports={ln.a.node: ln.a.number, ln.b.node: ln.b.number})
    return g


def far_end(layout: M.Layout, node: str, port: int) -> str:
    return next(ln.peer(node).node for ln in layout.links_of(node) if (ln.a if ln.a.node == node else ln.b).number == port)


def lookup(routes: R.SwitchRoutes, ip: str) -> R.Route:
    """Longest-prefix match, as the controller's priorities make it (/32 above /24)."""
    hits = [r for r in routes.routes if ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(r.prefix)]
    assert hits, f"{routes.switch} has no route to {ip}"
    return max(hits, key=lambda r: ipaddress.IPv4Network(r.prefix).prefixlen)


def test_next_hops_are_the_first_hops_of_all_shortest_paths():
    layout = three_tier()
    g = full_graph(layout)
    hops = R.next_hop_ports(layout)
    for s in layout.switches:
        for h in layout.hosts:
            first = {p[1] for p in nx.all_shortest_paths(g, s.name, h.name)}
            ports = {g.get_edge_data(s.name, n)[k]["ports"][s.name] for n in first for k in g.get_edge_data(s.name, n)}
            assert set(hops[s.name][h.name]) == ports, (s.name, h.name)


def test_three_tier_every_host_pair_has_a_loop_free_path_on_every_branch():
    layout = three_tier()
    plan = R.plan_routes(layout)
    hosts = {h.name for h in layout.hosts}
    walked = 0
    for src in layout.hosts:
        for dst in layout.hosts:
            if src is dst:
                continue
            # follow every equal-cost choice: each branch must reach dst without revisiting a node
            frontier = [(layout.attachment(src.name).node, (src.name,))]
            while frontier:
                node, path = frontier.pop()
                assert node not in path, f"loop {path + (node,)}"
                if node == dst.name:
                    walked += 1
                    assert len(path) <= 6  # at most host, tor, agg, core, agg, tor before dst
                    continue
                assert node not in hosts, f"packet for {dst.name} delivered to {node} via {path}"
                for port in lookup(plan[node], dst.ip).ports:
                    frontier.append((far_end(layout, node, port), path + (node,)))
    # same ToR: 1 path; same pod: 2 (via each agg); other pod: 2 aggs x 2 cores x 2 aggs = 8
    assert walked == 8 * (1 * 1 + 2 * 2 + 4 * 8)


def test_three_tier_every_equal_cost_next_hop_is_used():
    layout = three_tier()
    hops = R.next_hop_ports(layout)
    plan = R.plan_routes(layout)
    for s in layout.switches:
        for h in layout.hosts:
            route = lookup(plan[s.name], h.ip)
            assert route.ports == hops[s.name][h.name]
            if len(route.ports) > 1:
                assert plan[s.name].group_id(route.ports) >= 1
        used = {p for r in plan[s.name].routes for p in r.ports}
        all_hops = {p for ports in hops[s.name].values() for p in ports}
        assert used == all_hops
    a1, c1, t1 = plan[f"{RID}a1"], plan[f"{RID}c1"], plan[f"{RID}t1"]
    assert a1.ecmp_sets == ((3, 4),)           # up to both cores
    assert c1.ecmp_sets == ((1, 2), (3, 4))    # down to both aggs of pod 1, of pod 2
    assert t1.ecmp_sets == ((3, 4),)           # up to both aggs of the pod
    assert [(r.prefix, r.ports, r.via) for r in c1.routes] == [
        ("10.0.1.0/24", (1, 2), "subnet"), ("10.0.2.0/24", (1, 2), "subnet"),
        ("10.0.3.0/24", (3, 4), "subnet"), ("10.0.4.0/24", (3, 4), "subnet")]
    assert [(r.prefix, r.ports) for r in a1.routes] == [
        ("10.0.1.0/24", (1,)), ("10.0.2.0/24", (2,)), ("10.0.3.0/24", (3, 4)), ("10.0.4.0/24", (3, 4))]
    assert [(r.prefix, r.via) for r in t1.routes][:2] == [("10.0.1.1/32", "host"), ("10.0.1.2/32", "host")]


def test_spine_leaf_routes_match_the_first_release_rules():
    layout = spine_leaf.from_spec(fabric(2, 3, 2), RID)
    plan = R.plan_routes(layout)
    leaf = plan[f"{RID}l1"]
    assert leaf.ecmp_sets == ((3, 4),) and leaf.group_id((3, 4)) == 1
    assert [(r.prefix, r.ports) for r in leaf.routes] == [
        ("10.0.1.1/32", (1,)), ("10.0.1.2/32", (2,)), ("10.0.2.0/24", (3, 4)), ("10.0.3.0/24", (3, 4))]
    spine = plan[f"{RID}s2"]
    assert spine.ecmp_sets == ()
    assert [(r.prefix, r.ports) for r in spine.routes] == [("10.0.1.0/24", (1,)), ("10.0.2.0/24", (2,)),
                                                           ("10.0.3.0/24", (3,))]


def test_hosts_without_subnet_get_host_routes_and_disconnected_layouts_are_refused():
    doc = M.to_dict(spine_leaf.from_spec(fabric(1, 2, 1), RID))
    for s in doc["switches"]:
        s["subnet"] = None
    plan = R.plan_routes(M.from_dict(doc))
    assert [(r.prefix, r.via) for r in plan[f"{RID}s1"].routes] == [("10.0.1.1/32", "host"), ("10.0.2.1/32", "host")]
    doc["links"] = [ln for ln in doc["links"] if ln["a"] != f"{RID}l2" or ln["b"] != f"{RID}s1"]
    with pytest.raises(R.RoutingError, match=f"switch '{RID}l2' has no path to host '{RID}h1'"):
        R.plan_routes(M.from_dict(doc))


def test_scenario_fabric_kind_picks_a_registered_builder():
    from testbed.spec.scenario import ScenarioError, parse_scenario

    workload = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}
    spec = parse_scenario({"name": "k", "fabric": {"spines": 1, "leaves": 2}, "workload": workload})
    assert spec.fabric.kind == "spine_leaf"
    layout = topology.build(spec.fabric.kind, spec.fabric, RID)
    assert [s.name for s in layout.switches] == [f"{RID}s1", f"{RID}l1", f"{RID}l2"]
    with pytest.raises(ScenarioError, match=r"fabric: fabric.kind = 'torus' is not one of "
                                            r"\['dci', 'dual_plane', 'fat_tree', 'rail_optimized', 'spine_leaf'\]"):
        parse_scenario({"name": "k", "fabric": {"kind": "torus"}, "workload": workload})
