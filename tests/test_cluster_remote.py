"""testbed.cluster.remote (the testbed's process on a server) with a local process instead of ssh; the merge of the
servers' drop counters; the per-server verdict (testbed.cluster.verdict)."""
import sys

import pandas as pd
import pytest

from testbed.cluster.remote import RemoteError, ServerSession
from testbed.cluster.telemetry import merge_snapshots
from testbed.cluster.verdict import judge_servers
from testbed.measure.drops import DropSnapshot
from testbed.measure.thresholds import thresholds_for
from testbed.measure.verdict import FidelityVerdict
from testbed.spec.scenario import parse_scenario

LOCAL = [sys.executable, "-m", "testbed.cluster.remote", "--run-id", "tb0c0c"]


def test_calls_objects_and_errors_come_back_from_the_server_process(tmp_path):
    with ServerSession("local", "tb0c0c", command=LOCAL) as s:
        pid = s.call("os:getpid")
        assert isinstance(pid, int) and pid != __import__("os").getpid()
        # a child process writing to stdout does not corrupt the answers
        assert s.call("subprocess:run", ["echo", "noise"]).returncode == 0
        s.call("testbed.cluster.remote:write_file", str(tmp_path / "d" / "f.txt"), "text")
        assert (tmp_path / "d" / "f.txt").read_text() == "text"
        mon = s.new("testbed.measure.cpu:CpuIdleMonitor", 0.05)
        assert mon.call("start") is None  # start() returns the object: it stays on the server
        __import__("time").sleep(0.3)
        mon.call("stop")
        assert len(mon.call("samples")) >= 1
        with pytest.raises(RemoteError, match=r"local: os:no_such failed: AttributeError"):
            s.call("os:no_such")
        with pytest.raises(RemoteError, match=r"ValueError: 'nocolon': give 'module:name'"):
            s.call("nocolon")
    with pytest.raises(RemoteError, match="the testbed's process there is gone"):
        s.call("os:getpid")


def test_the_session_names_its_run_on_both_ends():
    with pytest.raises(ValueError, match="'tbXYZ'"):
        ServerSession("srv1", "tbXYZ", command=LOCAL)
    # ssh's argv ends with the remote words, --run-id RID separate: testbed clean RID matches it here and there
    with ServerSession("no-such-server.invalid", "tb0c0c") as s:
        assert s.argv[0] == "ssh" and s.argv[-2:] == ["--run-id", "tb0c0c"]
        with pytest.raises(RemoteError, match="no-such-server.invalid"):
            s.call("os:getpid")


def test_a_server_that_cannot_start_the_process_is_named():
    with ServerSession("srvx", "tb0c0c", command=[sys.executable, "-c", "import sys; sys.exit(3)"]) as s:
        with pytest.raises(RemoteError, match=r"srvx: .*exit 3"):
            s.call("os:getpid")


def _snap(t, counters, queue):
    return DropSnapshot(time_s=t, counters=counters, queue_drops=queue)


def test_drop_counters_of_the_servers_add_up_and_queue_drops_unite():
    merged = merge_snapshots({"a": _snap(2.0, {"softnet_dropped_pkts": 1, "switch_rx_dropped_pkts[p1]": 4}, {"p1": 7}),
                              "b": _snap(1.0, {"softnet_dropped_pkts": 2}, {"p2": 3})})
    assert merged.counters == {"softnet_dropped_pkts": 3, "switch_rx_dropped_pkts[p1]": 4}
    assert merged.queue_drops == {"p1": 7, "p2": 3} and merged.time_s == 1.0 and merged.ovs_log_bytes is None


class _Telemetry:
    def __init__(self, cpu_by_server, drops_after):
        self.by_server = {s: {"cpu": c} for s, c in cpu_by_server.items()}
        self.snapshots = [{s: _snap(0, {}, {}) for s in cpu_by_server}, drops_after]


def _cpu(idle):
    return pd.DataFrame({"time_ns": [int(i * 1e9) for i in range(len(idle))], "idle_pct": idle,
                         "cpu0_idle_pct": idle, "cpu1_idle_pct": [90.0] * len(idle)})


def test_a_run_is_faithful_only_if_every_server_was():
    spec = parse_scenario({"workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})
    th = thresholds_for(spec)
    busy = [th.min_cpu_idle_pct / 2] * 10
    tel = _Telemetry({"srv1": _cpu([80.0] * 10), "srv2": _cpu(busy)},
                     {"srv1": _snap(0, {"softnet_dropped_pkts": 0}, {}),
                      "srv2": _snap(0, {"softnet_dropped_pkts": th.max_unexplained_drops + 5}, {})})
    verdict = FidelityVerdict(True, [], {})
    per = judge_servers(verdict, tel, th)
    assert per["srv1"]["verdict"] == "faithful" and per["srv1"]["violations"] == []
    assert per["srv2"]["verdict"] == "not_faithful"
    assert verdict.checks["servers"]["status"] == "failed" and not verdict.faithful
    assert any(v.startswith("server srv2: CPU saturated") for v in verdict.violations)
    assert any(v.startswith("server srv2: ") and "dropped outside the emulated switch queues" in v
               for v in verdict.violations)
    assert not any(v.startswith("server srv1") for v in verdict.violations)
    ok = FidelityVerdict(True, [], {})
    judge_servers(ok, _Telemetry({"srv1": _cpu([80.0] * 10)}, {"srv1": _snap(0, {}, {})}), th)
    assert ok.checks["servers"]["status"] == "passed"


def test_telemetry_of_two_servers_gathers_one_cpu_table_with_a_server_column():
    from testbed.cluster.telemetry import ClusterTelemetry

    sessions = {srv: ServerSession(srv, "tb0c0c", command=LOCAL) for srv in ("srv1", "srv2")}
    try:  # servers of hosts only (no switch ports): no queue sampler, no departures, the CPU sampled
        tel = ClusterTelemetry(sessions, {}, 0.01, 0x10000, {}, {})
        with tel:
            __import__("time").sleep(2.2)
    finally:
        for s in sessions.values():
            s.close()
    cpu = tel.cpu.samples()
    assert set(cpu["server"]) == {"srv1", "srv2"} and list(cpu["time_ns"]) == sorted(cpu["time_ns"])
    assert tel.sampler.to_frame() is None and tel.departures.to_frame() is None
    assert set(tel.by_server) == {"srv1", "srv2"}
