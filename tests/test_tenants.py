"""Tenants without a fabric (no root): scenario validation, the tenant map and its allowed pairs, the
controller's isolation drops and proxy ARP, the probe frames, the drop-flow counters and the summary block."""
from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether

from controllers import contract
from controllers import ofplan
from controllers.tenants import (PRIO_TENANT_ADMIT, PRIO_TENANT_DROP, PRIO_TENANT_SPOOF_DROP, TenantFilter, allowed,
                                 allowed_pairs, filter_from_settings)
from testbed.emulation.controller_proc import controller_settings
from testbed.measure.verdict import FidelityVerdict
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.spec.tenants import tenant_map
from testbed.tenants import results as R
from testbed.tenants.drop_counters import parse_dump, per_tenant_pair, read_drop_flows
from testbed.tenants.probe_agent import MAGIC, arp_request, is_arp_reply_for, udp_frame
from testbed.tenants.probes import plan_probes
from topology import build

RID = "tb7e01"
#: 2 spines, 3 leaves, 2 hosts each: h1 h2 on leaf 1, h3 h4 on leaf 2, h5 h6 on leaf 3
BASE = {"fabric": {"spines": 2, "leaves": 3, "hosts_per_leaf": 2},
        "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}}
TWO = {"tenants": {"alpha": {"hosts": ["h1", "h2", "h3", "h4"]}, "beta": {"hosts": ["h5"]}}, "shared_hosts": ["h6"]}


def spec(**keys):
    return parse_scenario({**BASE, **keys})


# -- validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize("keys, message", [
    ({"tenants": {"a": {"hosts": ["h1", "h9"]}}, "b": None},
     r"tenants\.a\.hosts\.1: 'h9' is not a host of this fabric; allowed: h1, h2, h3, h4, h5, h6"),
    ({"tenants": {"a": {"hosts": ["h1", "h2", "h3"]}, "b": {"hosts": ["h3", "h4", "h5", "h6"]}}},
     r"tenants\.b\.hosts\.0: h3 is already in tenant 'a'"),
    ({"tenants": {"a": {"hosts": ["h1", "h2", "h3", "h4", "h5"]}}, "shared_hosts": ["h5", "h6"]},
     r"shared_hosts\.0: h5 is in tenant 'a'; a shared host belongs to no tenant"),
    ({"tenants": {"a": {"hosts": ["h1", "h2", "h3", "h4", "h5"]}}, "shared_hosts": ["h7"]},
     r"shared_hosts\.0: 'h7' is not a host of this fabric"),
    ({"tenants": {"a": {"hosts": ["h1", "h2"]}, "b": {"hosts": ["h3"]}}},
     r"tenants: with isolation on every host must be in a tenant or in shared_hosts; h4, h5, h6 are in neither"),
    ({"shared_hosts": ["h1"]}, r"shared_hosts: shared hosts are shared among tenants"),
    ({"isolation": "on"}, r"isolation: isolation needs tenants"),
    ({"tenants": {"a": {"hosts": []}}}, r"tenants\.a\.hosts: .*at least 1 item"),
    ({"tenants": {"a": {"hosts": ["h1"], "vlan": 3}}}, r"tenants\.a\.vlan: unknown key; allowed keys here: hosts"),
    ({"tenants": {"shared": {"hosts": ["h1"]}}, "isolation": "off"}, r"tenants\.shared: 'shared' is reserved"),
    ({**TWO, "isolation": "maybe"}, r"isolation: Input should be 'on' or 'off'"),
])
def test_bad_tenants_are_refused_naming_the_key(keys, message):
    keys = {k: v for k, v in keys.items() if v is not None}
    with pytest.raises(ScenarioError, match=message):
        spec(**keys)


def test_isolation_defaults_on_with_tenants_and_off_leaves_hosts_unplaced():
    assert tenant_map(spec(**TWO)).isolation is True
    assert tenant_map(spec()).isolation is False
    m = tenant_map(spec(tenants={"a": {"hosts": ["h1"]}}, isolation="off"))  # unplaced hosts fine without isolation
    assert not m.isolation and m.label("h2") == "none" and m.allows("h1", "h2")
    assert tenant_map(spec(**TWO, isolation=False)).isolation is False


# -- the map and its pairs -----------------------------------------------------------------------

def test_allowed_pairs_are_within_a_tenant_and_to_or_from_shared_hosts():
    m = tenant_map(spec(**TWO))
    assert m.host_tenant == {"h1": "alpha", "h2": "alpha", "h3": "alpha", "h4": "alpha", "h5": "beta"}
    assert m.tenants == {"alpha": ("h1", "h2", "h3", "h4"), "beta": ("h5",)}
    pairs = m.allowed_pairs()
    alpha = {(a, b) for a in ("h1", "h2", "h3", "h4") for b in ("h1", "h2", "h3", "h4") if a != b}
    shared = {(h, "h6") for h in ("h1", "h2", "h3", "h4", "h5")} | {("h6", h) for h in ("h1", "h2", "h3", "h4", "h5")}
    assert pairs == alpha | shared
    assert not m.allows("h1", "h5") and not m.allows("h5", "h4") and m.allows("h5", "h6") and m.allows("h6", "h5")
    assert [m.label(h) for h in ("h1", "h5", "h6")] == ["alpha", "beta", "shared"]


def test_pure_rule_and_hosts_in_no_tenant():
    ht = {"a": "x", "b": "x", "c": "y"}
    assert allowed(ht, [], "a", "b") and not allowed(ht, [], "a", "c") and not allowed(ht, [], "a", "a")
    assert not allowed(ht, [], "d", "e") and not allowed(ht, [], "d", "a")  # no tenant: only shared hosts
    assert allowed(ht, ["s"], "d", "s") and allowed(ht, ["s"], "s", "d") and allowed(ht, ["s", "t"], "s", "t")
    assert allowed_pairs(["a", "b", "c"], ht, []) == {("a", "b"), ("b", "a")}


def test_extra_assignments_from_a_jobs_placement():
    s = spec(tenants={"alpha": {"hosts": ["h1"]}, "beta": {"hosts": ["h5"]}}, shared_hosts=["h6"], isolation="off")
    s = s.model_copy(update={"isolation": "on"})  # as a jobs scenario leaves the rest to its placement
    with pytest.raises(ScenarioError, match="h2, h3, h4 are in neither"):
        tenant_map(s)
    m = tenant_map(s, extra={"h2": "alpha", "h3": "alpha", "h4": "beta"})
    assert m.tenants == {"alpha": ("h1", "h2", "h3"), "beta": ("h4", "h5")} and m.allows("h4", "h5")
    assert not m.allows("h3", "h4")
    for extra, message in [({"h2": "gamma"}, r"extra\.h2: tenant 'gamma' is not declared; allowed: alpha, beta"),
                           ({"h6": "alpha"}, r"extra\.h6: h6 is a shared host"),
                           ({"h1": "beta"}, r"extra\.h1: h1 is in tenant 'alpha'"),
                           ({"h9": "beta"}, r"extra\.h9: 'h9' is not a host")]:
        with pytest.raises(ScenarioError, match=message):
            tenant_map(s, extra=extra, require_all_placed=False)
    assert tenant_map(s, extra={"h1": "alpha"}, require_all_placed=False).host_tenant["h1"] == "alpha"


# -- controller: settings, drops, proxy ARP ------------------------------------------------------

def _filter_and_layout():
    s = spec(**TWO)
    settings = controller_settings(s, RID, "/tmp")
    return s, settings, build(s.fabric.kind, s.fabric, RID)


def test_settings_carry_the_map_and_decode_strictly(tmp_path):
    s, settings, _ = _filter_and_layout()
    assert settings.tenants == contract.TenantSettings(
        {"h1": "alpha", "h2": "alpha", "h3": "alpha", "h4": "alpha", "h5": "beta"}, ["h6"])
    f = tmp_path / "s.json"
    f.write_text(contract.dumps(settings))
    assert contract.read_json(f, contract.ControllerSettings) == settings
    assert controller_settings(spec(**TWO, isolation="off"), RID, "/tmp").tenants is None
    assert controller_settings(spec(), RID, "/tmp").tenants is None
    f.write_text(f.read_text().replace('"shared_hosts"', '"shared"'))
    with pytest.raises(contract.ContractError, match=r"tenants\.shared: unknown field"):
        contract.read_json(f, contract.ControllerSettings)


def test_plan_drops_every_forbidden_destination_at_the_ingress_leaf_only():
    _, settings, layout = _filter_and_layout()
    flt = filter_from_settings(RID, settings.tenants)
    plans = {p.name[len(RID):]: p for p in ofplan.plan_fabric(layout, tenants=flt).values()}
    plain = {p.name[len(RID):]: p for p in ofplan.plan_fabric(layout).values()}
    drops = {n: {f.purpose: f for f in p.flows if f.priority == PRIO_TENANT_DROP} for n, p in plans.items()}
    assert set(drops["l1"]) == {"tenant-drop-h1-h5", "tenant-drop-h2-h5"}
    assert set(drops["l3"]) == {f"tenant-drop-h5-h{i}" for i in (1, 2, 3, 4)}  # h6 (shared) reaches all
    assert not drops["s1"] and not drops["s2"]
    f = drops["l1"]["tenant-drop-h2-h5"]
    h2, h5 = layout.host_by_ip("10.0.1.2"), layout.host_by_ip("10.0.3.1")
    assert f.is_drop and dict(f.match) == {"in_port": layout.attachment(h2.name).number, "eth_type": 0x0800,
                                           "ipv4_dst": h5.ip}
    assert PRIO_TENANT_DROP > ofplan.PRIO_HOST_ROUTE and PRIO_TENANT_DROP < ofplan.PRIO_ARP_TO_CONTROLLER
    guards = (PRIO_TENANT_DROP, PRIO_TENANT_ADMIT, PRIO_TENANT_SPOOF_DROP)
    for n in plans:  # everything else as without tenants, but ARP (tests below: only from the host's own addresses)
        own = [x for x in plans[n].flows if x.priority not in guards and not x.purpose.startswith("arp-from-")]
        assert own == [x for x in plain[n].flows if not x.purpose.startswith("arp-from-")]
        assert plans[n].groups == plain[n].groups


def test_a_host_port_admits_only_the_hosts_own_addresses_to_allowed_destinations():
    """Issue 31 item 3: a packet forged with another host's MAC or IP never leaves its ingress leaf."""
    _, settings, layout = _filter_and_layout()
    flt = filter_from_settings(RID, settings.tenants)
    plans = {p.name[len(RID):]: p for p in ofplan.plan_fabric(layout, tenants=flt).values()}
    h = {x.name[len(RID):]: x for x in layout.hosts}
    port = {n: layout.attachment(x.name).number for n, x in h.items()}
    l1 = plans["l1"].flows
    arp = {f.purpose: dict(f.match) for f in l1 if f.purpose.startswith("arp-from-")}
    assert arp["arp-from-" + RID + "h1"] == {
        "in_port": port["h1"], "eth_type": 0x0806, "eth_src": h["h1"].mac, "arp_spa": h["h1"].ip}
    admit = {f.purpose: f for f in l1 if f.priority == PRIO_TENANT_ADMIT}
    # h1 and h2 (alpha, leaf 1) each reach alpha's 3 other hosts and the shared h6: 8 admit flows, none to h5
    assert sorted(admit) == sorted(f"tenant-admit-{a}-{b}" for a in ("h1", "h2") for b in ("h1", "h2", "h3", "h4", "h6")
                                   if a != b)
    f = admit["tenant-admit-h1-h6"]
    assert dict(f.match) == {"in_port": port["h1"], "eth_src": h["h1"].mac, "eth_type": 0x0800, "ipv4_src": h["h1"].ip,
                             "ipv4_dst": h["h6"].ip}
    route = {g.purpose: g for g in l1}
    assert f.actions == route["route-" + RID + "l3"].actions  # h6 sits on leaf 3: the route to leaf 3's subnet
    assert admit["tenant-admit-h1-h2"].actions == route["host-" + RID + "h2"].actions
    spoof = {f.purpose: dict(f.match) for f in l1 if f.priority == PRIO_TENANT_SPOOF_DROP and f.is_drop}
    assert spoof == {"tenant-spoof-drop-h1": {"in_port": port["h1"], "eth_type": 0x0800},
                     "tenant-spoof-drop-h2": {"in_port": port["h2"], "eth_type": 0x0800}}
    assert PRIO_TENANT_ADMIT > PRIO_TENANT_DROP > PRIO_TENANT_SPOOF_DROP > ofplan.PRIO_HOST_ROUTE
    assert not [f for f in plans["s1"].flows if f.priority in (PRIO_TENANT_ADMIT, PRIO_TENANT_SPOOF_DROP)]
    # without tenants: ARP from any source on the port, as before
    plain = {p.name[len(RID):]: p for p in ofplan.plan_fabric(layout).values()}
    assert {dict(f.match).get("eth_src") for f in plain["l1"].flows if f.purpose.startswith("arp-from-")} == {None}


def test_proxy_arp_answers_only_allowed_pairs():
    _, settings, layout = _filter_and_layout()
    flt = filter_from_settings(RID, settings.tenants)
    l1, l3 = layout.switch(RID + "l1"), layout.switch(RID + "l3")
    ip = {h.name[len(RID):]: h.ip for h in layout.hosts}
    mac = {h.name[len(RID):]: h.mac for h in layout.hosts}
    port = {h.name[len(RID):]: layout.attachment(h.name).number for h in layout.hosts}
    ask = lambda sw, src, dst, f=flt: ofplan.proxy_arp_mac(layout, sw.dpid, port[src], ip[src], ip[dst], f)
    assert ask(l1, "h1", "h4") == mac["h4"] and ask(l1, "h1", "h6") == mac["h6"]
    assert ask(l1, "h1", "h5") is None and ask(l3, "h5", "h1") is None
    assert ask(l3, "h5", "h6") == mac["h6"] and ask(l3, "h6", "h5") == mac["h5"] and ask(l3, "h6", "h1") == mac["h1"]
    assert ask(l1, "h1", "h5", None) == mac["h5"]  # no isolation: as before


def test_tenant_filter_short_names():
    f = TenantFilter(RID, {"h1": "a"}, frozenset({"h2"}))
    assert f.short(RID + "h1") == "h1" and f.allows(RID + "h1", "h2") and f.tenant_of(RID + "h1") == "a"


# -- probes --------------------------------------------------------------------------------------

def test_probe_frames_are_valid_udp_and_arp():
    frame = udp_frame("02:00:00:00:01:01", "02:00:00:00:03:01", "10.0.1.1", "10.0.3.1", 9999, MAGIC + b"h1-h5", 7)
    pkt = Ether(frame)
    assert pkt.dst == "02:00:00:00:03:01" and pkt[IP].dst == "10.0.3.1" and pkt[UDP].dport == 9999
    assert bytes(pkt[UDP].payload) == MAGIC + b"h1-h5" and pkt[IP].flags == "DF" and pkt[IP].ttl == 64
    chk = pkt[IP].chksum
    del pkt[IP].chksum
    assert Ether(bytes(pkt))[IP].chksum == chk  # scapy recomputes the same header checksum
    req = Ether(arp_request("02:00:00:00:01:01", "10.0.1.1", "10.0.3.1"))
    assert req.dst == "ff:ff:ff:ff:ff:ff" and req[ARP].op == 1 and req[ARP].pdst == "10.0.3.1"
    reply = bytes(Ether(dst="02:00:00:00:01:01", src="02:00:00:00:03:01") /
                  ARP(op=2, psrc="10.0.3.1", hwsrc="02:00:00:00:03:01", pdst="10.0.1.1"))
    assert is_arp_reply_for(reply, "10.0.3.1") and not is_arp_reply_for(reply, "10.0.3.2")
    assert not is_arp_reply_for(bytes(req), "10.0.3.1")


def test_probe_plan_covers_every_tenant_pair_shared_host_and_a_control():
    probes = plan_probes(tenant_map(spec(**TWO)))
    got = [(p.kind, p.src, p.dst, p.expect_delivered) for p in probes]
    assert got == [("cross", "h1", "h5", False), ("cross", "h5", "h1", False), ("shared", "h1", "h6", True),
                   ("shared", "h5", "h6", True), ("own", "h1", "h4", True)]
    assert plan_probes(tenant_map(spec(**TWO, isolation="off"))) == []


# -- counters and the summary block --------------------------------------------------------------

DUMP = """\
 cookie=0x7462, duration=3.1s, table=0, n_packets=0, n_bytes=0, priority=200,ip,nw_dst=10.0.3.1 actions=group:1
 cookie=0x7462, duration=3.1s, table=0, n_packets=20, n_bytes=1260, priority=250,ip,in_port=1,nw_dst=10.0.3.1 actions=drop
 cookie=0x7462, duration=3.1s, table=0, n_packets=3, n_bytes=99, priority=250,ip,in_port=2,nw_dst=10.0.3.1 actions=drop
 cookie=0x7462, duration=3.1s, table=0, n_packets=5, n_bytes=0, priority=0 actions=drop
"""


def test_drop_flow_counters_per_tenant_pair():
    assert parse_dump(DUMP) == {(1, "10.0.3.1"): (20, 1260), (2, "10.0.3.1"): (3, 99)}
    s, _, layout = _filter_and_layout()
    m = tenant_map(s)
    rows = read_drop_flows(layout, m, dump=lambda br: DUMP if br.endswith("l1") else "")
    by = {(r["src"], r["dst"]): r for r in rows}
    assert len(rows) == 8 and by[("h1", "h5")]["packets"] == 20 and by[("h2", "h5")]["bytes"] == 99
    assert not by[("h5", "h1")]["installed"] and by[("h1", "h5")]["installed"]
    pairs = per_tenant_pair(rows, list(m.tenants))
    assert pairs == [{"src_tenant": "alpha", "dst_tenant": "beta", "dropped_pkts": 23, "dropped_bytes": 1359},
                     {"src_tenant": "beta", "dst_tenant": "alpha", "dropped_pkts": 0, "dropped_bytes": 0}]


def _probe_row(kind, expected, delivered, arp, passed):
    return {"id": "x", "kind": kind, "src": "h1", "dst": "h5", "src_tenant": "alpha", "dst_tenant": "beta",
            "expected": expected, "sent_pkts": 20, "delivered_pkts": delivered, "arp_replied": arp, "passed": passed}


def test_a_delivered_cross_tenant_probe_fails_the_isolation_check(tmp_path):
    m = tenant_map(spec(**TWO))
    rows = [{"switch": "l1", "in_port": 1, "src": "h1", "dst": "h5", "src_tenant": "alpha", "dst_tenant": "beta",
             "installed": True, "packets": 20, "bytes": 1260}]
    good = R.TenantRecord(m, [_probe_row("cross", "blocked", 0, False, True)], rows)
    v = FidelityVerdict(True, [], {})
    summary: dict = {}
    R.add_results(good, summary, v, tmp_path)
    assert v.checks["isolation"]["status"] == "passed" and summary["tenants"]["proven"] is True
    assert summary["tenants"]["drop_flows"] == {"planned": 1, "installed": 1}
    assert (tmp_path / "tenant_drops.csv").is_file()
    assert any("alpha->beta 20 pkts 1260 B" in ln for ln in R.lines(summary))
    bad = R.TenantRecord(m, [_probe_row("cross", "blocked", 3, True, False)], rows)
    v = FidelityVerdict(True, [], {})
    R.add_results(bad, {}, v, tmp_path)
    assert v.checks["isolation"]["status"] == "failed" and not v.faithful
    assert "probe h1 (alpha) -> h5 (beta) delivered 3 of 20 packets, ARP answered" in v.violations[0]


def test_a_workload_across_tenants_is_refused_before_the_run():
    from testbed.spec.tenants import check_peers
    from testbed.workloads import workload_for

    def peers(s):
        w = workload_for(s)
        return w.peers(w.plan().ops)

    s = spec(**TWO, workload={"ranks": 4, "sizes": {"min_bytes": 65536, "max_bytes": 65536}})
    check_peers(tenant_map(s), peers(s))  # h1-h4: all alpha
    wide = spec(**TWO)  # every host: alpha's ring reaches beta's h5
    with pytest.raises(ScenarioError, match=r"workload: ranks 3 \(h4, tenant alpha\) and 4 \(h5, tenant beta\) "
                                            r"exchange traffic, which isolation drops"):
        check_peers(tenant_map(wide), peers(wide))
    check_peers(tenant_map(spec(**TWO, isolation="off")), peers(wide))


def test_isolation_drops_are_taken_off_the_pipeline_drop_counter(tmp_path):
    from testbed.pipeline.judge import discount_kick_frames

    key = "ovs_coverage_drop_action_of_pipeline_pkts"
    assert discount_kick_frames({key: 39, "other": 2}, tmp_path, 40) == {key: 0, "other": 2}
    assert discount_kick_frames({key: 45}, tmp_path, 40) == {key: 5}  # other pipeline drops stay to judge
    assert discount_kick_frames({key: 45}, tmp_path) == {key: 45}
