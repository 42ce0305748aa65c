"""C10: the controller dies mid-run (SIGKILL). Installed paths lose nothing; the death is reported;
with restarting on, the controller comes back, reconnects every switch within 5 s and resyncs
without an OpenFlow error or a changed entry; with restarting off, the fabric keeps forwarding."""
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from conftest import raise_if_run_disturbed, running_scenario

from testbed.emulation.controller_supervisor import RECONNECT_TARGET_S
from testbed.emulation.fabric import Fabric
from testbed.results.rundir import RunDir
from topology.naming import new_run_id
from testbed.host.runlock import RunLock
from testbed.spec.scenario import parse_scenario
from traffic.clock import unix_ns

# 8 hosts at 10 Mbit/s, path MTU 4096 like the quickstart (faithful under the per-core CPU rule), 14 all-reduces of 1 MiB: about 22 s of traffic, so a kill
# 6 s in leaves the restart and resync well inside the run.
SCENARIO = """
name: c10
fabric: {spines: 2, leaves: 4, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: 100KB,
         mtu_bytes: 4200}
transport: {payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}
workload: {sizes: {min_bytes: 1MiB, max_bytes: 1MiB}, iterations: 14, warmup_iterations: 0}
"""
KILL_AFTER_READY_S = 6.0


def _controller_pid(run_dir: Path) -> int:
    """The pid of the run's controller process (its settings file, controller.conf, is on its command line)."""
    conf = str(run_dir / "controller.conf")
    pids = [p.pid for p in psutil.process_iter(["cmdline"])
            if "controllers.run" in (p.info["cmdline"] or []) and conf in (p.info["cmdline"] or [])]
    assert len(pids) == 1, pids
    return pids[0]


def test_controller_killed_mid_run_is_restarted_and_loses_nothing(tmp_path):
    with running_scenario(tmp_path, SCENARIO, "c10") as (run, run_dir):
        pid = _controller_pid(run_dir)
        time.sleep(KILL_AFTER_READY_S)
        assert run.poll() is None, "the run ended before the controller was killed"
        kill_ns = unix_ns()  # the run's one clock (traffic.clock), shared by every process
        os.kill(pid, signal.SIGKILL)
        out, err = run.communicate(timeout=240)
    print(out)
    raise_if_run_disturbed(run, run_dir.parent)
    assert run.returncode == 0, f"testbed run failed ({run.returncode}):\n{out}\n{err}"
    run_files = RunDir.open(run_dir)
    s = run_files.summary

    c = s["controller"]
    assert (c["restart"], c["deaths"], c["restarts"], c["switches"]) == (True, 1, 1, 6)
    (death,) = c["events"]
    assert (death["pid"], death["signal"], death["exit_code"]) == (pid, "SIGKILL", None)
    assert abs(death["time_ns"] - kill_ns) < 0.5e9, "death noticed more than 0.5 s after the kill"
    assert death["after_start_s"] > KILL_AFTER_READY_S
    restart = death["restart"]
    assert restart["pid"] != pid and restart["switches"] == 6
    assert restart["reconnect_s"] < RECONNECT_TARGET_S, restart
    # Idempotent resync: every planned flow found in place, nothing added, replaced or removed.
    final_ready = run_files.read_json("controller.ready")
    assert final_ready["dpids"] and final_ready["errors"] == []
    assert restart["resync"] == {"flows_unchanged": final_ready["flows"], "flows_added": 0, "flows_replaced": 0,
                                 "flows_removed": 0, "groups_added": 0, "groups_modified": final_ready["groups"],
                                 "groups_removed": 0}
    log = (run_dir / "controller.log").read_text()
    assert log.count("controller for run") == 2, "expected the first and the restarted controller in the log"
    assert "OFPT_ERROR" not in log and c["openflow_errors"] == 0 and c["violations"] == []

    # Traffic crossed the fabric while the controller was dead and lost nothing.
    ops = run_files.rank_ops
    assert ops["t_start_ns"].min() < kill_ns < ops["t_end_ns"].max()
    t = s["transport"]
    assert t["retx_pkts"] == 0 and t["timeouts"] == 0 and t["naks"] == 0, t
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] > 0
    assert s["faithful"] is True, s["violations"]
    assert "# controller: died (SIGKILL) at" in out and "6/6 switches reconnected and resynced" in out
    assert "# fidelity: faithful" in out
    # the supervisor's warning once, on a line of its own (Mininet's logger class printed it twice, glued)
    died = [ln for ln in err.splitlines() if f"controller pid {pid} died" in ln]
    assert died == [f"WARNING testbed.emulation.controller_supervisor: controller pid {pid} died at "
                    f"{death['after_start_s']:.3f} s (SIGKILL)"], died


def test_without_restart_the_fabric_keeps_forwarding_and_the_death_is_reported(tmp_path, datapath):
    spec = parse_scenario({"name": "c10off", "controller": {"restart": False},
                           "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1},
                           "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})
    rid = new_run_id()
    run_dir = tmp_path / rid
    run_dir.mkdir()
    with RunLock(rid), Fabric(spec, rid, run_dir, datapath) as fab:
        bridges = [sw.name for sw in fab.layout.switches]
        for br in bridges:
            fail_mode = subprocess.run(["ovs-vsctl", "get-fail-mode", br], capture_output=True, text=True).stdout
            assert fail_mode.strip() == "secure", br
            backoff = subprocess.run(["ovs-vsctl", "get", "controller", br, "max_backoff"], capture_output=True,
                                     text=True).stdout
            assert backoff.strip() == "1000", br
        flows_before = {br: _flow_count(br) for br in bridges}
        h1, h2 = fab.hosts
        pid = fab.controller.proc.pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not fab.supervisor.deaths:
            assert time.monotonic() < deadline, "the supervisor did not notice the death within 5 s"
            time.sleep(0.05)
        time.sleep(2.5)  # past two OVS reconnect attempts
        out = h1.cmd(f"ping -c 20 -i 0.05 -W 1 {h2.IP()}")
        assert " 0% packet loss" in out, out
        assert {br: _flow_count(br) for br in bridges} == flows_before
        assert fab.controller.proc.poll() is not None, "restart is off, yet a controller runs"
    report = fab.controller_report
    (death,) = report["events"]
    assert (report["restart"], report["deaths"], report["restarts"]) == (False, 1, 0)
    assert (death["pid"], death["signal"], death["restart"]) == (pid, "SIGKILL", None)
    assert report["violations"] == [], "a death that cost no packet keeps the run faithful"


def _flow_count(bridge: str) -> int:
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-flows", bridge], capture_output=True, text=True,
                         check=True).stdout
    return sum("priority=" in line for line in out.splitlines())
