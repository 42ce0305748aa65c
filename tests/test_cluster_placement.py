"""Placement of a layout's nodes on servers (topology.placement): pure, no root."""
from collections import Counter

import pytest

from topology.placement import POLICIES, place
from topology import fat_tree, spine_leaf

A, B = "srv1", "srv2"


def _host_links_cross(layout, placement):
    hosts = {h.name for h in layout.hosts}
    return [ab for ab in placement.crossing_links(layout) if set(ab) & hosts]


def test_spine_leaf_leaves_split_hosts_follow_their_leaf():
    lay = spine_leaf.build("tb0001", spines=1, leaves=2, hosts_per_leaf=2)
    p = place(lay, [A, B])
    assert p.server_of["tb0001l1"] == A and p.server_of["tb0001l2"] == B
    assert [p.server_of[f"tb0001h{n}"] for n in (1, 2, 3, 4)] == [A, A, B, B]
    assert p.crossing_links(lay) == (("tb0001l2", "tb0001s1"),)
    assert set(p.server_of) == {s.name for s in lay.switches} | {h.name for h in lay.hosts}


def test_spine_leaf_two_spines_spread_and_only_uplinks_cross():
    lay = spine_leaf.build("tb0002", spines=2, leaves=4, hosts_per_leaf=2)
    p = place(lay, [A, B])
    assert [p.server_of[f"tb0002l{i}"] for i in (1, 2, 3, 4)] == [A, A, B, B]
    assert {p.server_of["tb0002s1"], p.server_of["tb0002s2"]} == {A, B}
    assert len(p.crossing_links(lay)) == 4  # each spine to the two leaves on the other server
    assert not _host_links_cross(lay, p)


def test_fat_tree_by_pod_keeps_pods_whole_and_beats_mininets_switch_bin_placer():
    lay = fat_tree.build("tb0003", k=4)
    p = place(lay, [A, B], "pod")
    for pod in range(4):  # edge and aggregation switches n = 2*pod+1, 2*pod+2 form pod+1
        servers = {p.server_of[f"tb0003{kind}{2 * pod + i}"] for kind in "ea" for i in (1, 2)}
        assert servers == ({A} if pod < 2 else {B}), pod
    crossing = p.crossing_links(lay)
    assert all(any(n.startswith("tb0003c") for n in ab) for ab in crossing)  # only core links cross
    assert len(crossing) == 8  # 4 cores, 2 per server, each with 2 of its 4 pod links remote
    assert Counter(p.server_of.values()) == Counter({A: 18, B: 18})
    cluster = pytest.importorskip("mininet.examples.cluster")
    switches = [s.name for s in lay.switches]
    hosts = [h.name for h in lay.hosts]
    links = [(ln.a.node, ln.b.node) for ln in lay.links]
    mn = cluster.SwitchBinPlacer(servers=[A, B], nodes=switches + hosts, hosts=hosts, switches=switches,
                                 links=links)
    mn_crossing = [ab for ab in links if mn.place(ab[0]) != mn.place(ab[1])]
    assert len(crossing) < len(mn_crossing)


def test_leaf_policy_is_never_better_than_pod_on_a_fat_tree():
    lay = fat_tree.build("tb0004", k=4)
    by_pod = place(lay, [A, B], "pod").crossing_links(lay)
    by_leaf = place(lay, [A, B], "leaf")
    assert not _host_links_cross(lay, by_leaf)
    assert len(by_pod) <= len(by_leaf.crossing_links(lay))


def test_one_server_has_no_crossing_and_more_servers_than_units_still_places_all():
    lay = spine_leaf.build("tb0005", spines=1, leaves=2, hosts_per_leaf=1)
    assert place(lay, [A]).crossing_links(lay) == ()
    p = place(lay, [A, B, "srv3", "srv4"])
    assert set(p.server_of) == {s.name for s in lay.switches} | {h.name for h in lay.hosts}
    assert not _host_links_cross(lay, p)


def test_summary_names_policy_servers_and_crossings():
    lay = spine_leaf.build("tb0006", spines=1, leaves=2, hosts_per_leaf=1)
    s = place(lay, [A, B]).summary(lay)
    assert s["policy"] == "pod"
    assert s["servers"] == {A: ["tb0006s1", "tb0006l1", "tb0006h1"], B: ["tb0006l2", "tb0006h2"]}
    assert s["crossing_links"] == [["tb0006l2", "tb0006s1"]]


@pytest.mark.parametrize("servers, policy, needle", [
    ([A, B], "random", "'random' is not one of"),
    ([], "pod", "servers = []"),
    ([A, A], "pod", "distinct"),
    ([A, ""], "pod", "non-empty"),
])
def test_bad_input_names_the_value(servers, policy, needle):
    lay = spine_leaf.build("tb0007", spines=1, leaves=2, hosts_per_leaf=1)
    with pytest.raises(ValueError, match=None) as e:
        place(lay, servers, policy)
    assert needle in str(e.value)
    assert set(POLICIES) == {"pod", "leaf"}


def test_batched_switch_start_up_fits_an_ssh_pty_line():
    """ClusterOVSSwitch.batchStartup types ``ovs-vsctl`` batches into each server's shell over an ssh pty (4095
    bytes a line at most): 10 switches with 4 ports each (a fat-tree k=4's half, 4929 bytes in one batch with
    Mininet's 128000) go in several lines, none over the limit, every switch's commands sent once."""
    from types import SimpleNamespace

    from mininet.node import OVSSwitch

    from testbed.cluster.engine import ClusterOVSSwitch

    typed = []

    def switch(name, server):
        cmds = [f"-- --if-exists del-br {name} -- add-br {name} -- set bridge {name} controller=[] "
                f"other_config:datapath-id=00000000000{len(typed):05d} fail_mode=standalone "
                "other-config:disable-in-band=true"] + \
               [f"-- add-port {name} {name}-eth{p} -- set Interface {name}-eth{p} ofport_request={p}" for p in range(1, 5)]
        return SimpleNamespace(name=name, server=server, commands=cmds, isOldOVS=lambda: False, intfs={},
                               cmd=lambda c, shell=True: typed.append((server, c)) or "")

    switches = [switch(f"s{i}", "srv1" if i < 10 else "srv2") for i in range(20)]
    wanted = {c.strip() for s in switches for c in s.commands}
    assert sum(len(c) + 1 for s in switches[:10] for c in s.commands) > 4095  # one Mininet batch would be cut
    ClusterOVSSwitch.batchStartup(switches)
    assert OVSSwitch.argmax == 128000  # restored for other users of Mininet in this process
    assert all(len(c) < 4095 for _, c in typed), [len(c) for _, c in typed]
    assert len(typed) > 2 and {srv for srv, _ in typed} == {"srv1", "srv2"}
    joined = " ".join(c for _, c in typed)
    assert all(joined.count(w) == 1 for w in wanted)  # each command whole, once
