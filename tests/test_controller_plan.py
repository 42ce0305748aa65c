"""Controller plan and wire format without a switch (no root).

Fabric under test: 2 spines x 2 leaves x 2 hosts from the shared spine-leaf
builder (topology.spine_leaf: leaf i: dpid 0x1000+i, hosts on ports 1..2,
uplink to spine k on port 2+k; spine k: port i to leaf i), and a three-tier
layout (tests/test_topology.py) that is not leaf/spine.
"""
from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from controllers import ofmsg as W
from controllers import ofplan as T
from test_topology import three_tier
from topology import model as M
from topology import routing as R
from topology import spine_leaf
from testbed.emulation.controller_proc import write_conf
from controllers import contract
from controllers.app import CONF_GROUP, FabricRoutingApp
from controllers.contract import ControllerSettings, FailoverSettings, LoadBalanceSettings
from dataplane.atomic_files import write_json
from controllers.ofmsg import build_flow_mod, build_group_mod
from controllers.ryu_api import (
    DEAD_DISPATCHER,
    FRAMEWORK,
    cfg,
    arp,
    ethernet,
    ofproto_protocol,
    ofproto_v1_5,
    ofproto_v1_5_parser,
    packet,
)

REPO = Path(__file__).resolve().parents[1]
RID = "tb9c01"


def write_settings(tmp_path: Path, topo: Path, run_id: str = RID, lb_policy: str = "ecmp",
                   ready: str = "ready.json") -> Path:
    """controller.settings.json as the testbed writes it (controllers.contract.ControllerSettings)."""
    path = tmp_path / contract.SETTINGS_FILE
    path.write_text(contract.dumps(ControllerSettings(
        run_id=run_id, topology_file=str(topo), ready_file=str(tmp_path / ready),
        events_file=str(tmp_path / contract.EVENTS_FILE), stats_file=str(tmp_path / contract.STATS_FILE),
        stats_period_ms=0, load_balance=LoadBalanceSettings(lb_policy, {}, None),
        failover=FailoverSettings(True, 0.005, 10000, 25), loop_settings_file=None)))
    return path


@contextlib.contextmanager
def conf_overrides(**settings):
    """Set ``[testbed]`` options of the framework's CONF (as controller.conf would) for a block."""
    for key, value in settings.items():
        cfg.CONF.set_override(key, value, group=CONF_GROUP)
    try:
        yield
    finally:
        for key in settings:
            cfg.CONF.clear_override(key, group=CONF_GROUP)

@pytest.fixture
def doc() -> dict:
    return M.to_dict(spine_leaf.build(RID, spines=2, leaves=2, hosts_per_leaf=2))


@pytest.fixture
def topo(doc) -> M.Layout:
    return M.from_dict(doc)


@pytest.fixture
def dp():
    return ofproto_protocol.ProtocolDesc(ofproto_v1_5.OFP_VERSION)


def by_purpose(plan: T.SwitchPlan) -> dict:
    return {f.purpose: f for f in plan.flows}


def plan_of(topo: M.Layout, name: str) -> T.SwitchPlan:
    return T.plan_fabric(topo)[topo.switch(name).dpid]


# ----------------------------------------------------------------- topology


def test_document_follows_addressing_convention(doc):
    assert [s["dpid"] for s in doc["switches"]] == [0x2001, 0x2002, 0x1001, 0x1002]
    assert doc["hosts"][3] == {"name": "tb9c01h4", "rank": 3, "ip": "10.0.2.2", "mac": "02:00:00:00:02:02"}
    links = [(ln["a"], ln["a_port"], ln["b"], ln["b_port"]) for ln in doc["links"]]
    assert ("tb9c01h4", 0, "tb9c01l2", 2) in links
    assert ("tb9c01l2", 4, "tb9c01s2", 2) in links


def test_hash_fields_the_model_allows_are_the_ones_the_plan_can_encode():
    assert set(M.HASH_FIELD_NAMES) == set(W.OXM_HASHABLE_FIELDS)


# --------------------------------------------------------------------- plan


def test_leaf_plan_ports_and_rules(topo):
    plan = plan_of(topo, "tb9c01l1")
    assert plan.dpid == 0x1001 and plan.role == "leaf"
    flows = by_purpose(plan)
    assert set(flows) == {
        "table-miss-drop", "lldp-drop", "arp-from-tb9c01h1", "arp-from-tb9c01h2", "host-tb9c01h1",
        "host-tb9c01h2", "local-subnet-unknown-drop", "route-tb9c01l2",
    }
    miss = flows["table-miss-drop"]
    assert (miss.priority, miss.match, miss.is_drop) == (0, (), True)
    lldp = flows["lldp-drop"]
    assert lldp.match == (("eth_type", 0x88CC),) and lldp.is_drop
    # ARP only from host ports 1 and 2, never from uplinks 3 and 4.
    arp_rules = [f for f in plan.flows if ("eth_type", 0x0806) in f.match]
    assert sorted(dict(f.match)["in_port"] for f in arp_rules) == [1, 2]
    assert all(f.actions == (("controller", 0xFFFF),) for f in arp_rules)
    assert flows["host-tb9c01h2"].match == (("eth_type", 0x0800), ("ipv4_dst", "10.0.1.2"))
    assert flows["host-tb9c01h2"].actions == (("output", 2),)
    local = flows["local-subnet-unknown-drop"]
    assert local.match == (("eth_type", 0x0800), ("ipv4_dst", ("10.0.1.0", "255.255.255.0"))) and local.is_drop
    ecmp = flows["route-tb9c01l2"]  # the other leaf's subnet over both spines
    assert ecmp.match == (("eth_type", 0x0800), ("ipv4_dst", ("10.0.2.0", "255.255.255.0")))
    assert ecmp.actions == (("group", 1),)
    # Host /32 beats the local-subnet drop, which beats the ECMP rule; LLDP drop beats ARP.
    assert flows["host-tb9c01h1"].priority > local.priority > ecmp.priority > miss.priority
    assert lldp.priority > arp_rules[0].priority
    # No flood or normal forwarding anywhere.
    assert all(kind in ("output", "group", "controller") for f in plan.flows for kind, _ in f.actions)


def test_leaf_group_has_one_equal_bucket_per_spine(topo):
    (group,) = plan_of(topo, "tb9c01l2").groups
    assert group.group_id == 1
    assert [(b.bucket_id, b.port) for b in group.buckets] == [(0, 3), (1, 4)]
    assert len({b.weight for b in group.buckets}) == 1
    assert group.hash_fields == M.DEFAULT_HASH_FIELDS


def test_spine_plan_routes_each_leaf_subnet(topo):
    plan = plan_of(topo, "tb9c01s2")
    assert plan.groups == ()
    routes = {dict(f.match)["ipv4_dst"]: f.actions for f in plan.flows if f.purpose.startswith("route-")}
    assert routes == {("10.0.1.0", "255.255.255.0"): (("output", 1),), ("10.0.2.0", "255.255.255.0"): (("output", 2),)}
    assert by_purpose(plan)["table-miss-drop"].is_drop
    assert not any(("eth_type", 0x0806) in f.match for f in plan.flows)


def test_plan_fabric_covers_every_switch(topo):
    plans = T.plan_fabric(topo)
    assert sorted(plans) == [0x1001, 0x1002, 0x2001, 0x2002]
    assert sum(len(p.groups) for p in plans.values()) == 2


def test_three_tier_plan_routes_by_the_shared_model(dp):
    layout = three_tier()
    plans = T.plan_fabric(layout)
    routes = R.plan_routes(layout)
    assert sorted(plans) == list(layout.dpids)
    for sw in layout.switches:
        plan = plans[sw.dpid]
        assert [[b.port for b in g.buckets] for g in plan.groups] == [list(ports) for ports in routes[sw.name].ecmp_sets]
        assert {g.group_id for g in plan.groups} == set(range(1, len(plan.groups) + 1))
        group_ids = {g.group_id for g in plan.groups}
        for flow in plan.flows:
            for kind, arg in flow.actions:
                assert kind != "group" or arg in group_ids
            build_flow_mod(dp, flow).serialize()
        for group in plan.groups:
            build_group_mod(dp, group).serialize()
    core = by_purpose(plans[layout.switch("tb7e57c1").dpid])
    assert core["route-tb7e57t1"].actions == (("group", 1),) and core["route-tb7e57t3"].actions == (("group", 2),)
    agg = by_purpose(plans[layout.switch("tb7e57a1").dpid])
    assert agg["route-tb7e57t2"].actions == (("output", 2),) and agg["route-tb7e57t4"].actions == (("group", 1),)
    assert "arp-from-tb7e57h1" not in agg and "arp-from-tb7e57h1" in by_purpose(plans[layout.switch("tb7e57t1").dpid])


def test_proxy_arp_answers_known_hosts_only(topo):
    assert T.proxy_arp_mac(topo, 0x1001, 1, "10.0.1.1", "10.0.2.2") == "02:00:00:00:02:02"
    assert T.proxy_arp_mac(topo, 0x1001, 1, "10.0.1.1", "10.0.1.2") == "02:00:00:00:01:02"
    assert T.proxy_arp_mac(topo, 0x1001, 1, "10.0.1.1", "10.0.2.99") is None  # unknown IP
    assert T.proxy_arp_mac(topo, 0x1001, 1, "0.0.0.0", "10.0.1.1") is None  # probe for own address
    assert T.proxy_arp_mac(topo, 0x1001, 2, "10.0.1.2", "10.0.1.2") is None  # gratuitous ARP
    assert T.proxy_arp_mac(topo, 0x1001, 3, "10.0.2.1", "10.0.1.1") is None  # from an uplink
    assert T.proxy_arp_mac(topo, 0x2001, 1, "10.0.1.1", "10.0.2.1") is None  # on a spine
    assert T.proxy_arp_mac(topo, 0x3001, 1, "10.0.1.1", "10.0.2.1") is None  # unknown switch


def test_ready_file_written_atomically(tmp_path):
    path = tmp_path / "ready.json"
    write_json(str(path), {"dpids": [1], "flows": 3, "groups": 0, "errors": []})
    assert json.loads(path.read_text()) == {"dpids": [1], "flows": 3, "groups": 0, "errors": []}
    assert [p.name for p in tmp_path.iterdir()] == ["ready.json"]


def test_framework_is_os_ken():
    assert FRAMEWORK == "os_ken"


# ------------------------------------------------------- app logic, fake switch


class FakeDatapath:
    """Stands in for an os-ken Datapath: records messages, numbers xids."""

    def __init__(self, dpid: int):
        self.id = dpid
        self.ofproto = ofproto_v1_5
        self.ofproto_parser = ofproto_v1_5_parser
        self.sent = []
        self._next_xid = 100

    def send_msg(self, msg):
        if msg.xid is None:
            self._next_xid += 1
            msg.set_xid(self._next_xid)
        msg.serialize()
        self.sent.append(msg)


@pytest.fixture
def app(tmp_path, doc, monkeypatch):
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps(doc))
    with conf_overrides(settings_file=str(write_settings(tmp_path, topo))):
        yield FabricRoutingApp()


def _connect(app, dpid):
    dp = FakeDatapath(dpid)
    app._on_switch_features(SimpleNamespace(msg=SimpleNamespace(datapath=dp)))
    return dp


def _on_the_wire(dp, msg):
    """``msg`` as the switch sees it: serialized, then parsed back by os-ken."""
    from os_ken.ofproto import ofproto_parser
    buf = bytes(msg.buf)
    return ofproto_parser.msg(dp, *ofproto_parser.header(buf), buf)


def _switch_holds(dp, msgs):
    """(flow descriptions, group ids) a switch holds after applying the flow and group adds in ``msgs``."""
    flows, groups = [], set()
    for m in msgs:
        if isinstance(m, ofproto_v1_5_parser.OFPFlowMod) and m.command == ofproto_v1_5.OFPFC_ADD:
            w = _on_the_wire(dp, m)
            flows.append(ofproto_v1_5_parser.OFPFlowDesc(table_id=w.table_id, priority=w.priority, cookie=w.cookie,
                                                         match=w.match, instructions=w.instructions))
        elif isinstance(m, ofproto_v1_5_parser.OFPGroupMod) and m.command == ofproto_v1_5.OFPGC_ADD:
            groups.add(m.group_id)
    return flows, groups


def _answer_dumps(app, dp, flows=(), groups=(), split=False):
    """Reply to the app's flow-description and group-stats requests (the last two messages sent)."""
    flow_req, group_req = dp.sent[-2:]
    assert isinstance(flow_req, ofproto_v1_5_parser.OFPFlowDescStatsRequest)
    assert isinstance(group_req, ofproto_v1_5_parser.OFPGroupStatsRequest)
    assert flow_req.table_id == ofproto_v1_5.OFPTT_ALL and group_req.group_id == ofproto_v1_5.OFPG_ALL
    flows = list(flows)
    parts = [flows[:1], flows[1:]] if split else [flows]
    for k, part in enumerate(parts):
        more = ofproto_v1_5.OFPMPF_REPLY_MORE if k + 1 < len(parts) else 0
        app._on_flow_desc(SimpleNamespace(msg=SimpleNamespace(datapath=dp, xid=flow_req.xid, flags=more, body=part)))
    body = [SimpleNamespace(group_id=g) for g in groups]
    app._on_group_stats(SimpleNamespace(msg=SimpleNamespace(datapath=dp, xid=group_req.xid, flags=0, body=body)))


def _barrier_reply(app, dp):
    barrier = dp.sent[-1]
    assert isinstance(barrier, ofproto_v1_5_parser.OFPBarrierRequest)
    app._on_barrier_reply(SimpleNamespace(msg=SimpleNamespace(datapath=dp, xid=barrier.xid)))


def _install(app, dpid):
    """Connect an empty switch, answer its dumps, confirm the barrier; return the datapath."""
    dp = _connect(app, dpid)
    _answer_dumps(app, dp)
    _barrier_reply(app, dp)
    return dp


def test_app_installs_in_order_and_writes_ready_file_last(app, tmp_path):
    ready = tmp_path / "ready.json"
    dps = {}
    for dpid in (0x1001, 0x1002, 0x2001, 0x2002):
        dps[dpid] = _connect(app, dpid)
        assert [type(m).__name__ for m in dps[dpid].sent] == ["OFPFlowDescStatsRequest", "OFPGroupStatsRequest"]
        _answer_dumps(app, dps[dpid])
        assert not ready.exists()
    kinds = [type(m).__name__ for m in dps[0x1001].sent[2:]]
    # an empty switch: the ECMP group, 8 flows, barrier; nothing deleted
    assert kinds == ["OFPGroupMod"] + ["OFPFlowMod"] * 8 + ["OFPBarrierRequest"]
    assert dps[0x1001].sent[2].command == ofproto_v1_5.OFPGC_ADD
    assert {m.command for m in dps[0x1001].sent[3:11]} == {ofproto_v1_5.OFPFC_ADD}
    for dpid in (0x1001, 0x1002, 0x2001):
        _barrier_reply(app, dps[dpid])
        assert not ready.exists()
    _barrier_reply(app, dps[0x2002])
    assert json.loads(ready.read_text()) == {
        "dpids": [0x1001, 0x1002, 0x2001, 0x2002], "flows": 24, "groups": 2, "errors": [],
        "resync": {"flows_unchanged": 0, "flows_added": 24, "flows_replaced": 0, "flows_removed": 0,
                   "groups_added": 2, "groups_modified": 0, "groups_removed": 0}}


def test_app_reports_switch_errors_at_once(app, tmp_path):
    dp = _connect(app, 0x1001)
    _answer_dumps(app, dp)
    group_mod = dp.sent[2]
    error = ofproto_v1_5_parser.OFPErrorMsg(
        dp, type_=ofproto_v1_5.OFPET_BAD_MATCH, code=ofproto_v1_5.OFPBMC_BAD_MASK, data=bytes(group_mod.buf))
    error.xid = group_mod.xid
    app._on_error(SimpleNamespace(msg=error))
    doc = json.loads((tmp_path / "ready.json").read_text())
    (err,) = doc["errors"]
    assert doc["dpids"] == []
    assert (err["dpid"], err["switch"], err["request"]) == (0x1001, "tb9c01l1", "group-add-1")
    assert err["code_name"].startswith("OFPBMC_BAD_MASK")
    assert err["data_hex"] == bytes(group_mod.buf)[:64].hex()


def test_restarted_controller_changes_nothing_on_a_switch_that_holds_the_plan(app, doc, tmp_path, monkeypatch):
    """A restarted controller (a new app) meets switches that kept every flow and group: it sends only
    a group modify and a barrier, never a delete or an add that could drop packets."""
    first = _install(app, 0x1001)
    held_flows, held_groups = _switch_holds(first, first.sent)
    assert len(held_flows) == 8 and held_groups == {1}
    restarted = FabricRoutingApp()
    dp = _connect(restarted, 0x1001)
    _answer_dumps(restarted, dp, held_flows, held_groups, split=True)
    sync = dp.sent[2:]
    assert [type(m).__name__ for m in sync] == ["OFPGroupMod", "OFPBarrierRequest"]
    assert sync[0].command == ofproto_v1_5.OFPGC_MODIFY and sync[0].group_id == 1
    assert restarted.switches[0x1001].resync == {
        "flows_unchanged": 8, "flows_added": 0, "flows_replaced": 0, "flows_removed": 0,
        "groups_added": 0, "groups_modified": 1, "groups_removed": 0}


def test_resync_replaces_changed_flows_and_removes_foreign_ones(app, topo):
    first = _install(app, 0x1001)
    held_flows, _ = _switch_holds(first, first.sent)
    # a foreign flow, and the host-h1 route turned into a drop by someone else
    foreign = ofproto_v1_5_parser.OFPFlowDesc(table_id=3, priority=7, cookie=0x99,
                                              match=ofproto_v1_5_parser.OFPMatch(eth_type=0x1234), instructions=[])
    host_route = next(f for f in held_flows if f.match.get("ipv4_dst") == "10.0.1.1")
    host_route.instructions = []
    dp = _connect(app, 0x1001)
    _answer_dumps(app, dp, held_flows + [foreign], {1, 9})
    sync = dp.sent[2:]
    kinds = [(type(m).__name__, m.command) for m in sync[:-1]]
    assert kinds == [("OFPGroupMod", ofproto_v1_5.OFPGC_MODIFY), ("OFPFlowMod", ofproto_v1_5.OFPFC_ADD),
                     ("OFPFlowMod", ofproto_v1_5.OFPFC_DELETE_STRICT), ("OFPGroupMod", ofproto_v1_5.OFPGC_DELETE)]
    assert sync[1].match["ipv4_dst"] == "10.0.1.1" and sync[1].instructions
    assert (sync[2].table_id, sync[2].priority, sync[2].match["eth_type"]) == (3, 7, 0x1234)
    assert sync[3].group_id == 9
    assert app.switches[0x1001].resync == {
        "flows_unchanged": 7, "flows_added": 0, "flows_replaced": 1, "flows_removed": 1,
        "groups_added": 0, "groups_modified": 1, "groups_removed": 1}


def test_app_resyncs_on_reconnect(app, tmp_path):
    old = _install(app, 0x2001)
    new = _connect(app, 0x2001)
    assert not app.switches[0x2001].ready
    # The old connection's death must not forget the new one; stale replies are ignored.
    app._on_state_change(SimpleNamespace(datapath=old, state=DEAD_DISPATCHER))
    assert app.switches[0x2001].datapath is new
    app._on_barrier_reply(SimpleNamespace(msg=SimpleNamespace(datapath=old, xid=old.sent[-1].xid)))
    assert not app.switches[0x2001].ready
    _answer_dumps(app, new, *_switch_holds(old, old.sent))
    _barrier_reply(app, new)
    assert app.switches[0x2001].ready
    assert app.switches[0x2001].resync["flows_unchanged"] == 4  # 2 drops + 2 leaf routes, all in place
    app._on_state_change(SimpleNamespace(datapath=new, state=DEAD_DISPATCHER))
    assert 0x2001 not in app.switches


def test_app_answers_arp_for_known_hosts_only(app):
    dp = _install(app, 0x1001)
    dp.sent.clear()

    def ask(target_ip):
        req = packet.Packet()
        req.add_protocol(ethernet.ethernet(ethertype=0x0806, dst="ff:ff:ff:ff:ff:ff", src="02:00:00:00:01:01"))
        req.add_protocol(arp.arp(opcode=arp.ARP_REQUEST, src_mac="02:00:00:00:01:01", src_ip="10.0.1.1",
                                 dst_mac="00:00:00:00:00:00", dst_ip=target_ip))
        req.serialize()
        msg = SimpleNamespace(datapath=dp, match={"in_port": 1}, data=bytes(req.data))
        app._on_packet_in(SimpleNamespace(msg=msg))

    ask("10.0.2.99")
    assert dp.sent == []
    ask("10.0.2.2")
    (out,) = dp.sent
    assert isinstance(out, ofproto_v1_5_parser.OFPPacketOut)
    assert [a.port for a in out.actions] == [1]
    assert out.match["in_port"] == ofproto_v1_5.OFPP_CONTROLLER
    reply = packet.Packet(out.data).get_protocol(arp.arp)
    assert (reply.opcode, reply.src_ip, reply.src_mac, reply.dst_ip) == (
        arp.ARP_REPLY, "10.0.2.2", "02:00:00:00:02:02", "10.0.1.1")


def test_app_needs_settings_file():
    with conf_overrides(settings_file=None):
        with pytest.raises(RuntimeError, match=r"\[testbed\] settings_file is not set"):
            FabricRoutingApp()


def test_app_refuses_another_runs_topology(tmp_path, doc):
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps(doc))
    with conf_overrides(settings_file=str(write_settings(tmp_path, topo)), run_id="tbffff"):
        with pytest.raises(ValueError, match="does not match --testbed-run-id 'tbffff'"):
            FabricRoutingApp()
    with conf_overrides(settings_file=str(write_settings(tmp_path, topo, run_id="tbeeee"))):
        with pytest.raises(ValueError, match="does not match settings 'tbeeee'"):
            FabricRoutingApp()


def test_app_refuses_a_settings_file_with_an_unknown_key(tmp_path, doc):
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps(doc))
    path = write_settings(tmp_path, topo)
    bad = json.loads(path.read_text())
    bad["load_balance"]["lb_policy"] = bad["load_balance"].pop("policy")
    path.write_text(json.dumps(bad))
    with conf_overrides(settings_file=str(path)):
        with pytest.raises(contract.ContractError, match=r"load_balance\.lb_policy: unknown field"):
            FabricRoutingApp()


# ---------------------------------------------------------------- run.py CLI


def _cli_argv(tmp_path: Path, doc: dict, run_id: str = RID, port: int = 1, lb_policy: str = "ecmp") -> list:
    """``python -m controllers.run`` with a controller.conf as the testbed writes it."""
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps(doc))
    conf = tmp_path / "controller.conf"
    write_conf(conf, run_id=RID, port=port, settings_file=write_settings(tmp_path, topo, lb_policy=lb_policy,
                                                                         ready="ready"), log_file=tmp_path / "c.log")
    return [sys.executable, "-m", "controllers.run", "--config-file", str(conf), "--testbed-run-id", run_id]


def _run_cli(tmp_path: Path, doc: dict, run_id: str = RID, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(_cli_argv(tmp_path, doc, run_id, **kw), cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_cli_rejects_invalid_topology_before_starting(tmp_path, doc):
    doc["hosts"][0].pop("mac")
    res = _run_cli(tmp_path, doc)
    assert res.returncode == 2
    assert "hosts[0].mac: missing required key" in res.stderr
    assert "hosts[0].mac" in (tmp_path / "c.log").read_text()


def test_cli_rejects_run_id_mismatch(tmp_path, doc):
    res = _run_cli(tmp_path, doc, run_id="tbffff")
    assert res.returncode == 2
    assert "does not match --testbed-run-id 'tbffff'" in res.stderr


def test_cli_rejects_unknown_lb_policy_before_starting(tmp_path, doc):
    res = _run_cli(tmp_path, doc, lb_policy="wcmp")
    assert res.returncode == 2
    assert "load_balance.policy: unknown policy 'wcmp'; allowed: adaptive, ecmp, weighted" in res.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_listens_on_loopback_and_stops_on_signal(tmp_path, doc, sig):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(_cli_argv(tmp_path, doc, port=port), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        listening = []
        while time.monotonic() < deadline and not listening:
            assert proc.poll() is None, (tmp_path / "c.log").read_text()
            listening = [c.laddr for c in psutil.Process(proc.pid).net_connections(kind="tcp")
                         if c.status == psutil.CONN_LISTEN]
            time.sleep(0.1)
        assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", port)]
        started = time.monotonic()
        proc.send_signal(sig)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 2.0
        assert f"received {sig.name}" in (tmp_path / "c.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
