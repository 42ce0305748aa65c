"""The controller supervisor's report (controllers.supervisor_report): summary.json's controller block round-trips
through its records, and the testbed's readers (the controller check, the printed line) refuse a block with a
wrong field, naming it."""
from __future__ import annotations

import json

import pytest

from controllers import contract
from controller_fixtures import ECMP_SETTINGS
from controllers.supervisor_report import ControllerReport, Death, Restarted, RestartFailed, decode_report
from testbed.emulation.controller_supervisor import verdict_line, violations

SETTINGS = ECMP_SETTINGS
ERROR = contract.OpenFlowError(dpid=4097, switch="tb0000l1", xid=7, request="group-add-1", type=4, code=8,
                               type_name="OFPET_BAD_MATCH", code_name="OFPBMC_BAD_MASK(8)", data_hex="0506")


def _death(t_s: float, restart) -> Death:
    return Death(pid=7, signal="SIGKILL", exit_code=None, time_ns=int(t_s * 1e9), utc="2027-01-15T08:00:00.000+00:00",
                 after_start_s=t_s, restart=restart)


REPORT = ControllerReport(
    framework="os_ken", conf={"DEFAULT": {"ofp_tcp_listen_port": "6653"}}, settings=SETTINGS, restart=True,
    deaths=3, restarts=1, switches=3, reconnect_target_s=5.0,
    events=[_death(8.214, Restarted(pid=8, reconnect_s=1.25, outage_s=1.5, switches=3,
                                    resync={"flows_unchanged": 20, "flows_added": 2})),
            _death(12.0, RestartFailed(failed="no switch back", pid=9)),
            _death(14.0, None)],
    openflow_errors=1, errors=[ERROR], log="/x/controller.log", violations=[])


def test_the_block_round_trips_and_keeps_its_json_shape():
    block = json.loads(json.dumps(contract.encode(REPORT)))
    assert decode_report(block) == REPORT
    assert list(block) == ["framework", "conf", "settings", "restart", "deaths", "restarts", "switches",
                           "reconnect_target_s", "events", "openflow_errors", "errors", "log", "violations"]
    assert [e["restart"] for e in block["events"]][1:] == [{"failed": "no switch back", "pid": 9}, None]
    assert list(block["events"][0]["restart"]) == ["pid", "reconnect_s", "outage_s", "switches", "resync"]


def test_the_readers_judge_and_print_the_typed_block():
    block = contract.encode(REPORT)
    failed, later = violations(block, until_ns=int(10e9))
    assert failed == ["controller: 1 OpenFlow error message(s) from the switches (see /x/controller.log)"]
    assert len(later) == 2 and later[0].startswith("controller: died (SIGKILL) at 12.000 s, after every")
    line = verdict_line(block)
    assert line.startswith("controller: died (SIGKILL) at 8.214 s [2027-01-15T08:00:00.000+00:00], restarted: 3/3 "
                           "switches reconnected and resynced in 1.250 s (20 flows in place, 2 flow/group entries")
    assert "restart FAILED: no switch back" in line and line.endswith("; 1 OpenFlow errors")


def test_a_block_with_a_wrong_field_name_is_refused_naming_it():
    block = contract.encode(REPORT)
    block["openflow_error_count"] = block.pop("openflow_errors")
    for read in (violations, verdict_line):
        with pytest.raises(contract.ContractError,
                           match=r"controller\.openflow_error_count: unknown field of ControllerReport; allowed: "):
            read(block)


def test_a_restart_of_neither_shape_is_refused_naming_both():
    block = contract.encode(REPORT)
    block["events"][0]["restart"] = {"pid": 8, "reconnect_s": 1.25}
    with pytest.raises(contract.ContractError) as e:
        decode_report(block)
    msg = str(e.value)
    assert msg.startswith("controller.events[0].restart: fields pid, reconnect_s are those of none of Restarted or "
                          "RestartFailed (Restarted: pid, reconnect_s, outage_s, switches, resync; RestartFailed: "
                          "failed, pid)"), msg


@pytest.mark.parametrize("path, value, expected", [
    (["deaths"], "3", r"controller\.deaths: expected int, got str '3'"),
    (["events", 0, "after_start_s"], None, r"controller\.events\[0\]\.after_start_s: expected float, got NoneType"),
    (["events", 1, "restart"], "failed", r"controller\.events\[1\]\.restart: expected an object \(Restarted or "
                                         r"RestartFailed\), got str"),
    (["settings", "stats_period_ms"], 0.5, r"controller\.settings\.stats_period_ms: expected int, got float 0\.5"),
])
def test_a_block_with_a_wrong_type_is_refused_naming_field_and_value(path, value, expected):
    block = contract.encode(REPORT)
    at = block
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    with pytest.raises(contract.ContractError, match=expected):
        violations(block)
