"""Controller supervision without a fabric (no root): a real controller process that listens on
127.0.0.1 with no switch connected, killed for real; the resync plan against parsed OpenFlow."""
from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from controllers import ofplan as T
from topology import model, spine_leaf
from controllers.resync import SeenFlow, normalize_match, plan_sync
from controllers.ryu_api import ofproto_v1_5_parser
from testbed.emulation.controller_proc import ControllerProcess, controller_settings
from testbed.spec.scenario import parse_scenario
from testbed.emulation.controller_supervisor import ControllerSupervisor, exit_status, verdict_line
from traffic.clock import unix_ns

RID = "tb5c10"
#: The one select group of a spine-leaf leaf (its spine uplinks), as topology.routing numbers it.
ECMP_GROUP_ID = 1


@pytest.fixture
def controller(tmp_path):
    topo = tmp_path / "topology.json"
    model.save(spine_leaf.build(RID, spines=1, leaves=2, hosts_per_leaf=1), topo)
    spec = parse_scenario({"workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})
    proc = ControllerProcess(tmp_path, controller_settings(spec, RID, tmp_path)).start()
    yield proc
    proc.stop()


def _wait_for(cond, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_exit_status_names_the_signal_or_the_code():
    assert exit_status(-9) == {"signal": "SIGKILL", "exit_code": None}
    assert exit_status(-15) == {"signal": "SIGTERM", "exit_code": None}
    assert exit_status(1) == {"signal": None, "exit_code": 1}
    assert exit_status(0) == {"signal": None, "exit_code": 0}


def test_death_without_restart_is_recorded_with_its_time_and_signal(controller):
    t0 = unix_ns()
    sup = ControllerSupervisor(controller, restart=False, dpids=[0x1001, 0x1002, 0x2001], t0_ns=t0).start()
    pid = controller.proc.pid
    time.sleep(0.3)
    kill_ns = unix_ns()
    os.kill(pid, signal.SIGKILL)
    _wait_for(lambda: sup.deaths)
    time.sleep(0.3)
    assert controller.proc.poll() is not None and controller.proc.pid == pid, "restart is off: nothing restarted"
    report = sup.stop()
    (death,) = report["events"]
    assert (death["pid"], death["signal"], death["exit_code"], death["restart"]) == (pid, "SIGKILL", None, None)
    assert 0 <= death["time_ns"] - kill_ns < 0.3e9
    assert abs(death["after_start_s"] - (death["time_ns"] - t0) / 1e9) < 1e-3
    assert (report["deaths"], report["restarts"], report["switches"], report["violations"]) == (1, 0, 3, [])
    line = verdict_line(report)
    assert line.startswith("controller: died (SIGKILL) at ") and "not restarted" in line
    assert report is sup.stop(), "stop() twice returns the same report"


def test_restart_uses_the_same_port_and_a_run_ending_first_is_a_failed_restart(controller):
    """No switch ever connects here, so the restarted controller cannot become ready: stopping the
    supervisor meanwhile must end the wait and count as a failed restart (a violation)."""
    sup = ControllerSupervisor(controller, restart=True, dpids=[0x1001, 0x1002, 0x2001],
                               t0_ns=unix_ns()).start()
    first = controller.proc.pid
    os.kill(first, signal.SIGKILL)
    _wait_for(lambda: controller.proc.pid != first and controller.read_ready() is None)
    # the new process listens on the same port
    _wait_for(lambda: any(c.laddr.port == controller.port and c.status == "LISTEN"
                          for c in psutil.Process(controller.proc.pid).net_connections()))
    t_stop = time.monotonic()
    report = sup.stop()
    assert time.monotonic() - t_stop < 2, "stop() must not wait out the restart timeout"
    (death,) = report["events"]
    assert death["signal"] == "SIGKILL" and "failed" in death["restart"]
    assert death["restart"]["pid"] == controller.proc.pid != first
    assert report["restarts"] == 0
    assert any("restart after the death" in v for v in report["violations"])
    assert "restart FAILED" in verdict_line(report)


def test_openflow_errors_in_the_log_make_a_violation(controller):
    sup = ControllerSupervisor(controller, restart=True, dpids=[1], t0_ns=unix_ns()).start()
    with open(controller.log_path, "a") as log:
        log.write("2026-11-30 10:00:00,000 ERROR controllers.app: OFPT_ERROR from l1 (dpid 0x1001) ...\n")
    report = sup.stop()
    assert report["deaths"] == 0 and report["openflow_errors"] == 1
    assert report["violations"] and "1 OpenFlow error" in report["violations"][0]
    assert verdict_line(report) == "controller: ran throughout; 1 OpenFlow errors"


def _seen(flow: T.FlowPlan, table_id: int = 0, cookie: int = T.FLOW_COOKIE, actions=None) -> SeenFlow:
    """A planned flow as the switch reports it: the match serialized and parsed back by os-ken."""
    buf = bytearray()
    ofproto_v1_5_parser.OFPMatch(**dict(flow.match)).serialize(buf, 0)
    match = ofproto_v1_5_parser.OFPMatch.parser(bytes(buf), 0)
    return SeenFlow(table_id, flow.priority, cookie, match, tuple(flow.actions) if actions is None else actions)


def test_resync_plan_keeps_what_is_in_place_and_fixes_the_rest():
    topo = spine_leaf.build(RID, spines=2, leaves=2, hosts_per_leaf=2)
    plan = T.plan_fabric(topo)[topo.switch(f"{RID}l1").dpid]
    in_place = plan_sync(plan, [_seen(f) for f in plan.flows], {ECMP_GROUP_ID})
    assert (in_place.flows_add, in_place.flows_delete, in_place.groups_add, in_place.groups_delete) == ([], [], [], [])
    assert [g.group_id for g in in_place.groups_modify] == [ECMP_GROUP_ID]
    assert in_place.counts["flows_unchanged"] == len(plan.flows) == 8

    ecmp, host = plan.flows[-1], plan.flows[4]
    seen = [_seen(f) for f in plan.flows if f not in (ecmp, host)]
    seen.append(_seen(host, cookie=0x99))                 # foreign cookie: replaced
    seen.append(_seen(ecmp, table_id=1))                  # same rule in another table: removed
    empty = plan_sync(plan, seen, {7})
    assert [f.purpose for f in empty.flows_add] == [host.purpose, ecmp.purpose]
    assert [(f.table_id, f.priority) for f in empty.flows_delete] == [(1, ecmp.priority)]
    assert [g.group_id for g in empty.groups_add] == [ECMP_GROUP_ID] and empty.groups_delete == [7]
    assert empty.counts == {"flows_unchanged": 6, "flows_added": 1, "flows_replaced": 1, "flows_removed": 1,
                            "groups_added": 1, "groups_modified": 0, "groups_removed": 1}


def test_match_normalization_ignores_order_and_all_ones_masks():
    assert normalize_match([("ipv4_dst", "10.0.1.1"), ("eth_type", 0x800)]) == \
        normalize_match([("eth_type", 0x800), ("ipv4_dst", ("10.0.1.1", "255.255.255.255"))])
    assert normalize_match([("ipv4_dst", ("10.0.1.0", "255.255.255.0"))]) != normalize_match([("ipv4_dst", "10.0.1.0")])


def test_scenario_controller_section():
    from testbed.spec.scenario import ScenarioError, parse_scenario
    base = {"workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}}
    assert parse_scenario(base).controller.restart is True
    assert parse_scenario({**base, "controller": {"restart": False}}).controller.restart is False
    with pytest.raises(ScenarioError, match=r"controller\.restart: Input should be a valid boolean \(got 'yes'\)"):
        parse_scenario({**base, "controller": {"restart": "yes"}})
    with pytest.raises(ScenarioError, match=r"controller\.restarts: unknown key \(did you mean restart\?\); allowed keys here: framework, restart"):
        parse_scenario({**base, "controller": {"restarts": 1}})
    assert parse_scenario(base).controller.framework == "os_ken"
    assert parse_scenario({**base, "controller": {"framework": "ryu"}}).controller.framework == "ryu"
    with pytest.raises(ScenarioError, match=r"controller\.framework: Input should be 'os_ken' or 'ryu' \(got 'pox'\)"):
        parse_scenario({**base, "controller": {"framework": "pox"}})


def test_a_stop_by_the_testbed_is_not_a_death(controller):
    sup = ControllerSupervisor(controller, restart=True, dpids=[1], t0_ns=unix_ns()).start()
    pid = controller.proc.pid
    controller.stop()
    time.sleep(0.5)
    report = sup.stop()
    assert report["deaths"] == 0 and controller.proc.pid == pid and controller.proc.poll() is not None
