"""Dual-plane layouts, the scale-up domain, per-plane routing views and the QP address choice."""
import ipaddress

import pytest

import topology
from controllers.ofplan import plan_fabric, proxy_arp_mac
from topology import dual_plane, model, planes, scale_up
from topology.model import SCALE_UP_PLANE
from topology.routing import plan_routes
from traffic.protocol import RankAddress
from traffic.transport.planes import plane_of, qp_addresses

RID = "tb12ab"


def _spec(fabric):
    from testbed.spec.scenario import parse_scenario
    return parse_scenario({"name": "p", "fabric": fabric, "workload": {"sizes": {"min_bytes": 65536,
                                                                                 "max_bytes": 65536}}})


def test_dual_plane_gives_every_host_one_nic_per_plane():
    lay = dual_plane.build(RID, spines=2, leaves=2, hosts_per_leaf=2, planes=2)
    assert len(lay.switches) == 8 and len(lay.hosts) == 4 and len(lay.nics) == 4
    for h in lay.hosts:
        links = lay.links_of(h.name)
        assert [(ln.a.number, ln.plane) for ln in links] == [(0, 0), (1, 1)]
        assert lay.attachment(h.name).node.startswith(f"{RID}0l")           # eth0 stays first
        p0, p1 = lay.plane_ips(h.name)
        assert p0 == h.ip and p1 == "10.1." + h.ip.split(".", 2)[2]
    assert model.from_json(model.to_json(lay)) == lay
    no_nic = model.to_dict(dual_plane.build(RID, 1, 1, 1, 2))
    assert "nics" in no_nic and "nics" not in model.to_dict(topology.spine_leaf.build(RID, 1, 1, 1))


def test_plane_views_route_each_plane_alone_with_its_own_addresses():
    lay = dual_plane.build(RID, spines=2, leaves=2, hosts_per_leaf=2, planes=2)
    views = planes.views(lay)
    assert [sorted(s.name for s in v.switches) for v in views] == [
        [f"{RID}0l1", f"{RID}0l2", f"{RID}0s1", f"{RID}0s2"], [f"{RID}1l1", f"{RID}1l2", f"{RID}1s1", f"{RID}1s2"]]
    for p, v in enumerate(views):
        assert {ln.plane for ln in v.links} == {p}
        assert all(ipaddress.IPv4Address(h.ip) in ipaddress.IPv4Network(f"10.{p}.0.0/16") for h in v.hosts)
        for routes in plan_routes(v).values():     # only this plane's addresses are routed here
            assert all(ipaddress.IPv4Network(r.prefix).subnet_of(ipaddress.IPv4Network(f"10.{p}.0.0/16"))
                       for r in routes.routes)
    plans = plan_fabric(lay)
    assert len(plans) == 8 and sum(len(p.groups) for p in plans.values()) == 4   # one ECMP group per leaf
    leaf1 = lay.switch(f"{RID}1l1")
    assert proxy_arp_mac(lay, leaf1.dpid, 1, "10.1.1.1", "10.1.2.2") == "02:01:00:00:02:02"
    assert proxy_arp_mac(lay, leaf1.dpid, 1, "10.1.1.1", "10.0.2.2") is None   # not an address of plane 1


def test_one_plane_layouts_are_their_own_view():
    lay = topology.spine_leaf.build(RID, 2, 2, 2)
    assert planes.views(lay) == [lay] and lay.servers() == tuple((h,) for h in lay.hosts)


def test_dual_plane_spec_keys_and_interface_name_limit():
    spec = _spec({"kind": "dual_plane", "spines": 2, "leaves": 2, "hosts_per_leaf": 4})
    assert spec.fabric.planes == 2 and spec.fabric.n_hosts == 8 and spec.fabric.fabric_link_bps == 20e6
    from testbed.spec.scenario import ScenarioError
    with pytest.raises(ScenarioError, match="fabric.planes does not apply to fabric.kind = 'spine_leaf'"):
        _spec({"kind": "spine_leaf", "planes": 2})
    with pytest.raises(ScenarioError, match="interface names of 16 characters"):
        _spec({"kind": "dual_plane", "spines": 2, "leaves": 10, "hosts_per_leaf": 8})


def test_scale_up_adds_one_fast_switch_per_server():
    spec = _spec({"kind": "spine_leaf", "spines": 2, "leaves": 2, "hosts_per_leaf": 4, "host_link_bps": "5M",
                  "scale_up": {"gpus_per_server": 4, "rate_multiple": 4}})
    lay = topology.build("spine_leaf", spec.fabric, RID)
    assert spec.fabric.describe().endswith("6 switches, oversubscription 1:1, scale-up 4 GPUs per server at 4 x "
                                           "the host link")
    ups = [s for s in lay.switches if s.role == "scaleup"]
    assert [s.name for s in ups] == [f"{RID}u1", f"{RID}u2"]
    assert [[h.rank for h in server] for server in lay.servers()] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    up_links = [ln for ln in lay.links if ln.plane == SCALE_UP_PLANE]
    assert len(up_links) == 8 and {ln.rate_bps for ln in up_links} == {20e6}
    nic = lay.scale_up_nic(f"{RID}h6")
    assert (nic.port, nic.ip, nic.prefix) == (1, "10.255.2.2", "10.255.2.0/24")
    assert lay.plane_ips(f"{RID}h6") == ("10.0.2.2",)                       # scale-up is no scale-out plane
    routes = plan_routes(planes.view_of(lay, f"{RID}u2"))[f"{RID}u2"]
    assert sorted(r.prefix for r in routes.routes) == [f"10.255.2.{g}/32" for g in range(1, 5)]
    assert model.from_json(model.to_json(lay)) == lay
    dual = topology.build("dual_plane", _spec({"kind": "dual_plane", "leaves": 2, "hosts_per_leaf": 2,
                                               "scale_up": {"gpus_per_server": 2}}).fabric, RID)
    assert [n.port for n in dual.nics_of(f"{RID}h1")] == [1, 2] and len(planes.views(dual)) == 4


@pytest.mark.parametrize("fabric, words", [
    ({"kind": "spine_leaf", "leaves": 2, "hosts_per_leaf": 3, "scale_up": {"gpus_per_server": 4}},
     "gpus_per_server = 4 does not divide the fabric's 6 hosts"),
    ({"kind": "rail_optimized", "servers": 2, "gpus_per_server": 4, "scale_up": {"gpus_per_server": 2}},
     "differs from fabric.gpus_per_server = 4"),
    ({"kind": "spine_leaf", "scale_up": {"gpus_per_server": 2, "rate_multiple": 32}}, "rate_multiple"),
    ({"kind": "spine_leaf", "scale_up": {"gpus_per_server": 2, "nvlink": 1}}, "nvlink"),
])
def test_scale_up_refusals_name_the_key(fabric, words):
    from testbed.spec.scenario import ScenarioError
    with pytest.raises(ScenarioError, match=words):
        _spec(fabric)


def test_qp_addresses_take_the_scale_up_domain_inside_a_server_else_plane_c_mod_p():
    a = RankAddress(0, "10.0.1.1", "h1", ["10.0.1.1", "10.1.1.1"], 0, "10.255.1.1")
    b = RankAddress(1, "10.0.1.2", "h2", ["10.0.1.2", "10.1.1.2"], 0, "10.255.1.2")
    c = RankAddress(2, "10.0.2.1", "h3", ["10.0.2.1", "10.1.2.1"], 1, "10.255.2.1")
    assert qp_addresses(a, b, 0) == qp_addresses(a, b, 1) == ("10.255.1.1", "10.255.1.2")
    assert qp_addresses(a, c, 0) == ("10.0.1.1", "10.0.2.1") and qp_addresses(a, c, 3) == ("10.1.1.1", "10.1.2.1")
    one = RankAddress(3, "10.0.3.1", "h4")
    assert qp_addresses(one, RankAddress(4, "10.0.3.2", "h5"), 5) == ("10.0.3.1", "10.0.3.2")
    assert [plane_of(c, 2) for c in range(4)] == [0, 1, 0, 1]
    with pytest.raises(ValueError, match="rank 3 has 1 planes, rank 0 2"):
        qp_addresses(one, a, 0)


def test_nic_validation_names_the_bad_key():
    doc = model.to_dict(dual_plane.build(RID, 1, 1, 2, 2))
    doc["nics"][0]["ip"] = "10.2.1.1"
    with pytest.raises(model.TopologyError, match=r"nics\[0\].ip: 10.2.1.1 is not inside its prefix 10.1.0.0/16"):
        model.from_dict(doc)
    doc = model.to_dict(dual_plane.build(RID, 1, 1, 2, 2))
    doc["nics"][0]["port"] = 3
    with pytest.raises(model.TopologyError, match=r"nics\[0\].port: tb12abh1 port 3 has no link of plane 1"):
        model.from_dict(doc)
    doc = model.to_dict(dual_plane.build(RID, 1, 1, 2, 2))
    doc["nics"][1]["mac"] = doc["nics"][0]["mac"]
    with pytest.raises(model.TopologyError, match="duplicate address or MAC"):
        model.from_dict(doc)
