"""Results before the teardown (issue 16, item 6), without a fabric: the controller check judged on the
report at the end of the measurement and again on the final one (a death in the teardown is named, an
OpenFlow error fails), summary.json updated after the teardown, and the controller's congestion loop
stopping on the testbed's request (once, saying so with a file)."""
import json
import threading
import time
from types import SimpleNamespace

import pytest

from controllers import contract
from controller_fixtures import ECMP_SETTINGS
from controllers.congestion import loop as cloop
from controllers.supervisor_report import ControllerReport, Death, Restarted, RestartFailed
from testbed.emulation import congestion_conf
from testbed.emulation.controller_supervisor import violations
from testbed.pipeline.judge import judge_controller
from testbed.measure.fidelity_checks import FAILED, PASSED
from testbed.measure.verdict import FidelityVerdict
from testbed.pipeline import summary as results_summary
from testbed.pipeline.summary import Written
from testbed.results.congestion import stable_congestion
from testbed.results.rundir import RunDir
from testbed.results.shape import stable_summary

T_MEASURED_NS = 1_800_000_000 * 10**9


SETTINGS = ECMP_SETTINGS


def _report(events=(), errors=0, switches=3) -> dict:
    """summary.json's controller block as the supervisor writes it."""
    return contract.encode(ControllerReport(
        framework="os_ken", conf={"DEFAULT": {"ofp_tcp_listen_port": "6653"}}, settings=SETTINGS, restart=True,
        deaths=len(events), restarts=0, switches=switches, reconnect_target_s=5.0, events=list(events),
        openflow_errors=errors, errors=[], log="/x/controller.log", violations=[]))


def _death(dt_s: float, restart) -> Death:
    return Death(pid=7, signal="SIGKILL", exit_code=None, time_ns=T_MEASURED_NS + int(dt_s * 1e9),
                 utc="2027-01-15T08:00:00.000+00:00", after_start_s=20.0 + dt_s, restart=restart)


def test_a_failed_restart_while_measuring_fails_one_in_the_teardown_is_named():
    while_measuring = _death(-5.0, RestartFailed(failed="no switch back", pid=8))
    in_teardown = _death(+1.5, RestartFailed(failed="the run ended 0.2 s after the death, before every switch was "
                                                    "back", pid=9))
    report = _report([while_measuring, in_teardown])
    failed, later = violations(report, T_MEASURED_NS)
    assert failed == ["controller: restart after the death at 15.000 s failed: no switch back"]
    assert later == ["controller: died (SIGKILL) at 21.500 s, after every measurement was in (not judged: no "
                     "figure was measured after it)"]
    failed_all, later_all = violations(report)  # no measurement end given: every death is judged
    assert len(failed_all) == 2 and later_all == []


def test_openflow_errors_fail_whenever_logged_and_partial_restarts_fail():
    partial = _death(-1.0, Restarted(pid=8, reconnect_s=1.0, outage_s=1.2, switches=2, resync={}))
    failed, later = violations(_report([partial], errors=2), T_MEASURED_NS)
    assert failed == ["controller: 2 OpenFlow error message(s) from the switches (see /x/controller.log)",
                      "controller: restart reconnected 2 of 3 switches"] and later == []


def test_verdict_replace_takes_back_the_earlier_outcome():
    v = FidelityVerdict(faithful=True, violations=[], figures={})
    v.add("cpu", FAILED, "cpu: saturated")
    v.add("controller", FAILED, "controller: 1 OpenFlow error\ncontroller: restart failed")
    v.replace("controller", PASSED, "")
    assert v.violations == ["cpu: saturated"] and not v.faithful
    v.replace("cpu", PASSED)
    assert v.faithful and v.violations == [] and v.checks["cpu"] == {"status": PASSED, "reason": ""}


def test_judge_controller_on_the_final_report():
    v = FidelityVerdict(faithful=True, violations=[], figures={})
    judge_controller(v, _report(), T_MEASURED_NS)           # at the end of the measurement: all well
    assert v.faithful and v.checks["controller"]["status"] == PASSED
    judge_controller(v, _report([_death(+2.0, None)]), T_MEASURED_NS)   # died in the teardown
    assert v.faithful and "after every measurement was in" in v.checks["controller"]["reason"]
    judge_controller(v, _report(errors=1), T_MEASURED_NS)   # an OpenFlow error logged in the teardown
    assert not v.faithful and v.violations == [
        "controller: 1 OpenFlow error message(s) from the switches (see /x/controller.log)"]


def _written(tmp_path, snapshot: dict) -> tuple:
    v = FidelityVerdict(faithful=True, violations=[], figures={})
    judge_controller(v, snapshot, T_MEASURED_NS)
    summary = stable_summary({
        "run_id": "tb0000", "run_dir": str(tmp_path), "scenario": "s", "n_ranks": 2, "status": "complete",
        "complete": True, "interrupted": None, "teardown": "pending", "faithful": v.faithful,
        "verdict": v.status, "violations": v.violations, "not_judged": v.not_judged, "checks": v.checks,
        "fidelity": v.figures, "controller": snapshot, "sizes": [{"size_bytes": 65536}],
        "congestion": stable_congestion(None)})
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    return Written(summary, None, {}, v, None), summary


@pytest.mark.parametrize("final_errors, faithful", [(0, True), (3, False)])
def test_finish_updates_summary_json_with_the_final_controller_report(tmp_path, monkeypatch, final_errors,
                                                                      faithful):
    printed = []
    monkeypatch.setattr(results_summary, "_print_results", lambda ctx, rec, w: printed.append(w.summary))
    monkeypatch.setattr(results_summary.report_command, "after_run", lambda run_dir: "# report: (not made here)")
    w, before = _written(tmp_path, _report())
    final = _report(errors=final_errors)
    rec = SimpleNamespace(results=w, fab=SimpleNamespace(controller_report=final), controller=before["controller"],
                          t_measured_ns=T_MEASURED_NS)
    out = results_summary.finish(SimpleNamespace(run_dir=tmp_path, print_results=True), rec, note=None)
    on_disk = RunDir(tmp_path).summary
    assert on_disk == out == printed[0]
    assert on_disk["teardown"] == "done" and on_disk["controller"]["openflow_errors"] == final_errors
    assert on_disk["faithful"] is faithful and on_disk["complete"] is True and on_disk["sizes"] == before["sizes"]
    assert on_disk["checks"]["controller"]["status"] == (PASSED if faithful else FAILED)
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]   # replaced atomically: no temp file left


def test_finish_without_a_final_report_keeps_the_one_of_the_measurement(tmp_path, monkeypatch):
    monkeypatch.setattr(results_summary, "_print_results", lambda ctx, rec, w: None)
    monkeypatch.setattr(results_summary.report_command, "after_run", lambda run_dir: "# report: (not made here)")
    w, before = _written(tmp_path, _report())
    rec = SimpleNamespace(results=w, fab=SimpleNamespace(controller_report=None), controller=before["controller"],
                          t_measured_ns=T_MEASURED_NS)
    note = "interrupted by SIGINT during the teardown, after every measurement was in; results complete"
    out = results_summary.finish(SimpleNamespace(run_dir=tmp_path, print_results=True), rec, note=note)
    assert out["interrupted"] == note and out["controller"] == before["controller"] and out["faithful"] is True
    assert out["teardown"].startswith("done, without the controller's final report")


@pytest.mark.parametrize("print_results", [True, False])
def test_finish_prints_nothing_on_stdout_for_a_quiet_script_but_makes_the_report(tmp_path, monkeypatch, capsys,
                                                                                   print_results):
    """testbed.api.run(quiet=True): no table, verdict or report line on stdout (was 12 lines per run); the
    report is made all the same; ``testbed run`` (print_results) prints them."""
    made = []
    monkeypatch.setattr(results_summary, "_print_results", lambda ctx, rec, w: print("# the table and the verdict"))
    monkeypatch.setattr(results_summary.report_command, "after_run",
                        lambda run_dir: made.append(run_dir) or f"# report: {run_dir}/report.html (0.1 s)")
    w, before = _written(tmp_path, _report())
    rec = SimpleNamespace(results=w, fab=SimpleNamespace(controller_report=_report()),
                          controller=before["controller"], t_measured_ns=T_MEASURED_NS)
    results_summary.finish(SimpleNamespace(run_dir=tmp_path, print_results=print_results), rec)
    out = capsys.readouterr()
    assert made == [tmp_path]
    if print_results:
        assert out.out == f"# the table and the verdict\n# report: {tmp_path}/report.html (0.1 s)\n"
    else:
        assert out.out == "" and out.err == ""


# -- the controller's congestion loop ---------------------------------------------------------------------------
def _bare_loop(tmp_path, stop_now):
    loop = cloop.CongestionLoop.__new__(cloop.CongestionLoop)  # no sampler, no fabric: only the stop logic
    loop.results_dir, loop._stop_lock, loop._stopped = tmp_path, threading.Lock(), False
    loop._stop_now = stop_now
    return loop


def test_the_loop_stops_once_and_says_so_even_when_stopping_fails(tmp_path):
    calls = []
    loop = _bare_loop(tmp_path, lambda: calls.append(1))
    loop.stop()
    loop.stop()                                     # SIGTERM after the testbed's request: nothing more
    assert calls == [1] and (tmp_path / contract.LOOP_STOPPED_FILE).exists()
    (tmp_path / contract.LOOP_STOPPED_FILE).unlink()

    def broken():
        raise OSError("netlink gone")
    with pytest.raises(OSError):
        _bare_loop(tmp_path, broken).stop()
    assert (tmp_path / contract.LOOP_STOPPED_FILE).exists()  # the testbed does not wait for a timeout


def test_the_starter_thread_stops_the_loop_when_the_testbed_asks(tmp_path, monkeypatch):
    stopped = threading.Event()

    class FakeLoop:
        def __init__(self, conf, layout):
            self.results_dir = tmp_path

        def start(self):
            cloop._RUNNING.append(self)
            return self

        def stop(self):
            cloop._RUNNING.remove(self)
            stopped.set()

    monkeypatch.setattr(cloop, "CongestionLoop", FakeLoop)
    conf = tmp_path / "conf.json"
    conf.write_text(contract.dumps(contract.LoopSettings(
        run_id="tb0001", results_dir=str(tmp_path), period_s=0.001, sampled_parent=0x10001, mtu_bytes=4200,
        lossless_buffer_bytes=100_000, host_queue_bytes=65536, host_pids={}, ecn=None, pfc=None, clock_wander=0.0)))
    thread = cloop.start_when_configured(str(conf), layout=None)
    time.sleep(3 * cloop.STOP_POLL_S)
    assert not stopped.is_set() and thread.is_alive()
    (tmp_path / contract.LOOP_STOP_REQUEST_FILE).write_text("")
    assert stopped.wait(2) and (thread.join(2) or not thread.is_alive())


def _fab(tmp_path, alive=True):
    spec = SimpleNamespace(congestion=SimpleNamespace(ecn=object(), pfc_on=False))
    proc = SimpleNamespace(poll=lambda: None if alive else -9)
    return SimpleNamespace(run_dir=tmp_path, spec=spec, controller=SimpleNamespace(proc=proc))


def test_stop_loop_asks_and_waits_for_the_tables(tmp_path):
    (tmp_path / contract.LOOP_STARTED_FILE).write_text("{}")

    def loop_side():  # the controller's loop: sees the request, writes its tables, then the stopped file
        while not (tmp_path / contract.LOOP_STOP_REQUEST_FILE).exists():
            time.sleep(0.01)
        (tmp_path / contract.LOOP_RESULT_FILE).write_text("{}")
        (tmp_path / contract.LOOP_STOPPED_FILE).write_text("{}")
    threading.Thread(target=loop_side, daemon=True).start()
    assert congestion_conf.stop_loop(_fab(tmp_path), timeout_s=5) is None
    assert (tmp_path / contract.LOOP_RESULT_FILE).exists()
    assert congestion_conf.stop_loop(_fab(tmp_path), timeout_s=5) is None   # already stopped: no wait


def test_stop_loop_gives_up_when_nobody_answers(tmp_path):
    assert congestion_conf.stop_loop(_fab(tmp_path), timeout_s=0.1) is None     # the loop never started
    (tmp_path / contract.LOOP_STARTED_FILE).write_text("{}")
    assert "not running" in congestion_conf.stop_loop(_fab(tmp_path, alive=False), timeout_s=5)
    t0 = time.monotonic()
    assert "did not stop within 0 s" in congestion_conf.stop_loop(_fab(tmp_path), timeout_s=0.2)
    assert time.monotonic() - t0 < 2
