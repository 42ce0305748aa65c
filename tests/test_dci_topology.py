"""topology/dci.py (sites joined by long-haul links) and per-link delay (topology.model.Link.delay_us): counts,
ports, names, addresses, equal-cost paths across sites, the delay's accounting (netem plan, path delay,
BDP, timeout, PFC headroom, manifest) and the fabric spec's refusals naming the key (no root)."""
from __future__ import annotations

from collections import Counter

import pytest

from controllers.congestion.pfc import headroom_bytes, upstreams, worst_case_bytes
from controllers.ofplan import plan_fabric
from dataplane import queues
from dataplane.queues import delay
from dataplane.queues.base import QueueConfig
from test_topologies import ports_of, walk_paths
from test_topology import far_end
from testbed.measure import link_model
from testbed.spec.congestion import bdp_basis
from testbed.spec.rto import rto_basis
from testbed.spec.scenario import ScenarioError, parse_scenario
from topology import dci
from topology import model as M
from topology import routing as R

RID = "tb7e57"
WORKLOAD = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}


def _spec(**fabric):
    return parse_scenario({"fabric": {"kind": "dci", **fabric}, "workload": WORKLOAD})


def _three_sites(**kw):
    return dci.build(RID, sites=3, spines=2, leaves=2, hosts_per_leaf=2, dci_links=2, **kw)


def test_counts_ports_and_roles():
    layout = M.from_json(M.to_json(_three_sites(dci_delay_us=7000)), "dci")  # the validator accepts it
    assert Counter(s.role for s in layout.switches) == {"leaf": 6, "spine": 6, "border": 3}
    assert len(layout.hosts) == 12 and [h.rank for h in layout.hosts] == list(range(12))
    # hosts 12, leaf-spine 3 x 2 x 2, spine-border 3 x 2, DCI 3 site pairs x 2 links
    assert len(layout.links) == 12 + 12 + 6 + 6
    assert len(set(layout.dpids)) == 15
    for s in layout.switches:  # leaf: 2 hosts + 2 spines; spine: 2 leaves + border; border: 2 spines + 2 x 2 DCI
        assert ports_of(layout, s.name) == list(range(1, {"leaf": 4, "spine": 3, "border": 6}[s.role] + 1)), s.name
    dci_links = [ln for ln in layout.links if ln.delay_us is not None]
    assert len(dci_links) == 6 and all(ln.delay_us == 7000 for ln in dci_links)
    assert all({layout.node(ln.a.node).role, layout.node(ln.b.node).role} == {"border"} for ln in dci_links)


def test_names_addresses_and_wiring_follow_the_conventions():
    layout = _three_sites(fabric_link_bps=20e6, dci_link_bps=5e6)
    h7 = layout.hosts[6]  # site 2, leaf 2, host 1
    assert (h7.name, h7.ip, h7.mac) == (f"{RID}h7", "10.2.2.1", "02:00:00:02:02:01")
    assert layout.attachment(h7.name) == M.Port(f"{RID}l4", 1)
    leaf = layout.switch(f"{RID}l4")
    assert (leaf.dpid, leaf.subnet) == (0x1004, "10.2.2.0/24")
    assert layout.switch(f"{RID}s3").dpid == 0x2003 and layout.switch(f"{RID}b2").dpid == 0x4002
    assert [far_end(layout, f"{RID}l4", p) for p in (3, 4)] == [f"{RID}s3", f"{RID}s4"]  # its site's spines
    assert far_end(layout, f"{RID}s3", 3) == f"{RID}b2"                                   # spine -> border
    # border 2: spines 3, 4 on ports 1, 2; site 1 (its 0th other site) on 3, 4; site 3 on 5, 6
    assert [far_end(layout, f"{RID}b2", p) for p in range(1, 7)] == \
        [f"{RID}s3", f"{RID}s4", f"{RID}b1", f"{RID}b1", f"{RID}b3", f"{RID}b3"]
    rates = {(layout.node(ln.a.node).role if ln.a.node in {s.name for s in layout.switches} else "host",
              layout.node(ln.b.node).role): ln.rate_bps for ln in layout.links}
    assert rates == {("host", "leaf"): 10e6, ("leaf", "spine"): 20e6, ("spine", "border"): 20e6,
                     ("border", "border"): 5e6}


def test_paths_cross_sites_over_every_spine_and_dci_link():
    layout = dci.build(RID, sites=2, spines=2, leaves=2, hosts_per_leaf=1, dci_links=2)
    h1, h2, h3 = layout.hosts[0], layout.hosts[1], layout.hosts[2]  # h1, h2 in site 1; h3 in site 2
    assert walk_paths(layout, h1, h2) == 2                 # within a site: over either spine
    assert walk_paths(layout, h1, h3) == 2 * 2 * 2         # 2 spines x 2 DCI links x 2 spines
    hops = R.next_hop_ports(layout)
    assert hops[f"{RID}b1"][h3.name] == (3, 4)             # both DCI links, an ECMP set
    assert hops[f"{RID}s1"][h3.name] == (3,)               # to its border
    assert R.max_switch_hops(layout) == 6
    plans = plan_fabric(layout)                            # the controller's flows and groups
    groups = {p.name[len(RID):]: len(p.groups) for p in plans.values()}
    assert groups == {"l1": 1, "l2": 1, "l3": 1, "l4": 1, "s1": 0, "s2": 0, "s3": 0, "s4": 0, "b1": 2, "b2": 2}


def test_three_sites_take_the_direct_dci_link():
    layout = _three_sites()
    to_site3 = layout.hosts[-1]
    assert R.next_hop_ports(layout)[f"{RID}b1"][to_site3.name] == (5, 6)  # b1 -> b3 directly, not via b2
    assert walk_paths(layout, layout.hosts[0], to_site3) == 2 * 2 * 2


def test_path_delay_sums_each_links_own_delay():
    layout = dci.build(RID, sites=2, spines=1, leaves=1, hosts_per_leaf=1, dci_delay_us=50_000)
    assert R.max_path_delay_us(layout, 5_000) == 6 * 5_000 + 50_000  # h-l-s-b =DCI= b-s-l-h
    assert R.max_path_delay_us(layout, 0) == 50_000
    spec = _spec(sites=2, spines=1, leaves=1, hosts_per_leaf=1, link_delay_us=5_000, dci_delay_us=50_000)
    assert spec.fabric.path_delay_us == 80_000
    assert spec.fabric.delays_us == {"link_delay_us": 5_000, "dci_delay_us": 50_000}
    flat = _spec(sites=2, spines=1, leaves=1, hosts_per_leaf=1)
    assert bdp_basis(spec.fabric)["base_rtt_us"] - bdp_basis(flat.fabric)["base_rtt_us"] == pytest.approx(160_000)
    assert rto_basis(spec)["derived_us"] - rto_basis(flat)["derived_us"] == pytest.approx(160_000, abs=1)
    model = link_model.link_model(spec, "netem")
    assert model["delays_us"] == spec.fabric.delays_us and model["path_delay_us"] == 80_000
    assert model["delay_backend"].startswith("netem")


def test_pfc_headroom_grows_with_the_dci_links_delay():
    near = dci.build(RID, sites=2, spines=1, leaves=1, hosts_per_leaf=2, dci_delay_us=0)
    far = dci.build(RID, sites=2, spines=1, leaves=1, hosts_per_leaf=2, dci_delay_us=20_000)
    up = upstreams(far)
    dci_ingress = next(i for i, u in up.items() if i.startswith(f"{RID}b1") and u.node == f"{RID}b2")
    assert up[dci_ingress].delay_us == 20_000
    near_total, _, _ = worst_case_bytes(near, 10_000, 0.001, 1514)
    far_total, egress, n = worst_case_bytes(far, 10_000, 0.001, 1514)
    # the worst egress is now the one the DCI link feeds: its headroom holds the link's round trip in flight,
    # 10 Mbit/s x 2 x 20 ms = 50,000 bytes more than without the delay (IEEE 802.1Qbb Annex O)
    assert egress.startswith(f"{RID}b") and n == 1
    assert far_total == 10_000 + headroom_bytes(10e6, 0.003, 1514, 0.02)
    assert headroom_bytes(10e6, 0.003, 1514, 0.02) - headroom_bytes(10e6, 0.003, 1514) == 50_001
    assert near_total < far_total - 40_000


def test_link_delay_travels_in_the_topology_file_and_is_validated():
    layout = dci.build(RID, sites=2, spines=1, leaves=1, hosts_per_leaf=1, dci_delay_us=1234)
    doc = M.to_dict(layout)
    assert [ln.get("delay_us") for ln in doc["links"]].count(1234) == 1
    assert all("delay_us" not in ln for ln in doc["links"] if ln.get("delay_us") != 1234)  # None: not written
    assert M.from_dict(doc) == layout
    doc["links"][-1]["delay_us"] = -1
    with pytest.raises(M.TopologyError, match=r"links\[6\]\.delay_us: -1 is outside 0..1000000"):
        M.from_dict(doc)
    assert M.Link(M.Port("a", 1), M.Port("b", 1), 1e6, 1514).delay_or(300) == 300
    assert M.Link(M.Port("a", 1), M.Port("b", 1), 1e6, 1514, delay_us=0).delay_or(300) == 0


def test_a_netem_stage_of_zero_on_links_without_delay():
    backend = queues.get("htb_bfifo", delay_us=0, netem=True)  # a fabric whose DCI links have a delay
    cfg = QueueConfig.single(10e6, 100_000)
    plain, dci_link = backend.full_plan(7, cfg), backend.full_plan(7, cfg, delay_us=20_000)
    assert plain[0][1] == dci_link[0][1] == "netem"
    assert (plain[0][2]["delay"], dci_link[0][2]["delay"]) == (0, 20_000)
    assert backend.sampled_parent == delay.CHILD_PARENT          # the same tree on every egress
    with pytest.raises(ValueError, match="without the netem stage"):
        queues.get("htb_bfifo").full_plan(7, cfg, delay_us=5)


def test_delay_is_refused_without_netem_naming_the_key_unless_zero():
    with pytest.raises(ScenarioError, match=r"fabric.dci_delay_us = 20000: this kernel has no sch_netem.*"
                                            r"allowed here: 0.*scripts/vm"):
        link_model.check_delay_backend(_spec(dci_delay_us=20_000), "none")
    link_model.check_delay_backend(_spec(dci_delay_us=0), "none")     # 0 given explicitly: runs anywhere
    link_model.check_delay_backend(_spec(dci_delay_us=20_000), "netem")
    assert link_model.link_model(_spec(), "none")["delay_backend"] == "none"


@pytest.mark.parametrize("fabric, match", [
    ({"kind": "dci", "sites": 1}, r"fabric\.sites"),
    ({"kind": "dci", "sites": 9}, r"fabric\.sites"),
    ({"kind": "dci", "dci_links": 0}, r"fabric\.dci_links"),
    ({"kind": "dci", "dci_delay_us": -5}, r"fabric\.dci_delay_us"),
    ({"kind": "dci", "dci_delay_us": 2_000_000}, r"fabric\.dci_delay_us"),
    ({"kind": "dci", "dci_link_bps": "fast"}, r"fabric\.dci_link_bps"),
    ({"kind": "spine_leaf", "sites": 2}, r"fabric\.sites does not apply to fabric\.kind = 'spine_leaf'.*"
                                         r"sites belongs to dci"),
    ({"kind": "fat_tree", "dci_delay_us": 5}, r"fabric\.dci_delay_us does not apply"),
    ({"kind": "dci", "sites": 8, "dci_links": 8, "spines": 4}, r"fabric\.spines \+ \(fabric\.sites - 1\) x "
                                                                r"fabric\.dci_links = 60 ports per border switch, "
                                                                r"more than fabric\.ports_per_switch = 32"),
    ({"kind": "dci", "sites": 8, "leaves": 31, "hosts_per_leaf": 30}, r"interface names of 16 characters"),
])
def test_bad_keys_are_refused_with_their_name(fabric, match):
    with pytest.raises(ScenarioError, match=match):
        parse_scenario({"fabric": fabric, "workload": WORKLOAD})


def test_spec_defaults_and_dump():
    spec = _spec()
    f = spec.fabric
    assert (f.sites, f.spines, f.leaves, f.hosts_per_leaf, f.dci_links, f.dci_delay_us) == (2, 2, 2, 2, 1, 0)
    assert f.n_hosts == 8 and f.max_switch_hops == 6
    assert f.fabric_link_bps == 10e6 and f.dci_link_bps == f.fabric_link_bps  # non-blocking leaves; DCI as fabric
    dumped = spec.model_dump()["fabric"]
    assert "planes" not in dumped and dumped["sites"] == 2
    assert parse_scenario({"fabric": dumped, "workload": WORKLOAD}).fabric == f


def test_slow_dci_links_set_the_timeouts_queueing_rate():
    slow = _spec(sites=2, spines=1, leaves=1, hosts_per_leaf=1, dci_link_bps="1M")
    assert slow.fabric.slowest_link_bps == 1e6 and rto_basis(slow)["slow_bps"] == 1e6
    assert _spec().fabric.slowest_link_bps == 10e6
    assert parse_scenario({"workload": WORKLOAD}).fabric.slowest_link_bps == 10e6  # other kinds: no dci rate
