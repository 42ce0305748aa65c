"""Fixtures for integration tests: real Mininet fabrics with real OVS and a real controller (root)."""
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.emulation.fabric import Fabric
from topology.naming import new_run_id
from testbed.host.runlock import RunLock
from testbed.results.rundir import RunDir
from testbed.spec.scenario import parse_scenario

from rerun_policy import (PACING_CHECKS, RERUN_MARK, MachineDisturbed, assert_faithful,  # noqa: F401
                          pytest_terminal_summary, raise_if_disturbed)

REPO = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            # re-run only a run whose own verdict says the machine disturbed it (rerun_policy.py)
            item.add_marker(RERUN_MARK)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason="integration tests build real fabrics: run as root"))


@pytest.fixture(autouse=True)
def _no_report(request, monkeypatch):
    """The runs of a test write no report.html (``TESTBED_REPORT=off``: 1-2 s of matplotlib a run, about
    four minutes of the suite), unless its module is marked ``writes_report`` (the tests that read the
    report). A module-scoped fixture runs before this one, so its runs write theirs."""
    if request.node.get_closest_marker("writes_report") is None:
        monkeypatch.setenv("TESTBED_REPORT", "off")


@pytest.fixture(scope="session")
def datapath():
    from testbed.host.capabilities import probe
    return probe().datapath


@pytest.fixture
def make_fabric(tmp_path, datapath):
    """``make_fabric(load_balance=None, **fabric_keys)`` -> a started Fabric; torn down after the test."""
    started = []

    def _make(load_balance=None, **fabric):
        spec = parse_scenario({"name": "itest", "fabric": fabric, "load_balance": load_balance or {},
                               "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})
        rid = new_run_id()
        run_dir = tmp_path / rid
        run_dir.mkdir()
        lock = RunLock(rid).__enter__()
        fab = Fabric(spec, rid, run_dir, datapath)
        started.append((fab, lock))
        fab.__enter__()
        return fab

    yield _make
    for fab, lock in reversed(started):
        fab.stop()
        lock.__exit__(None, None, None)


def run_cli(*args, timeout=600, **kw):
    """Run the ``testbed`` command of this Python environment."""
    return subprocess.run([sys.executable, "-m", "testbed.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, **kw)


#: ``testbed run`` exit codes (testbed.process.exitcodes): faithful, completed but not faithful, completed but not
#: judged
EXIT_FAITHFUL, EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED = 0, 3, 6


def raise_if_run_disturbed(res: subprocess.CompletedProcess, results: Path) -> None:
    """Raise :class:`MachineDisturbed` when ``testbed run`` ended NOT faithful (exit 3) and the one
    summary.json under ``results`` failed only on pacing checks, or (``--solo``) a solo or pair run its
    slowdowns rest on did (summary.json ``jobs.solo_baseline.runs`` with a ``problem``): the test runs again;
    else nothing."""
    summaries = list(Path(results).glob("*/summary.json"))
    if res.returncode == EXIT_NOT_FAITHFUL and len(summaries) == 1:
        summary = RunDir(summaries[0].parent).summary
        raise_if_disturbed(summary)
        for run in ((summary.get("jobs") or {}).get("solo_baseline") or {}).get("runs") or ():
            if run.get("problem"):
                raise_if_disturbed(RunDir(run["run_dir"]).summary)


def run_scenario_file(tmp_path, text: str, timeout=600, expect_rc=EXIT_FAITHFUL, name="scenario"
                      ) -> tuple[subprocess.CompletedProcess, dict]:
    """Write a scenario, run it with ``testbed run``, check the exit code, return (process, summary.json).

    ``expect_rc``: the exit code the run must end with (None: 0, 3 or 6, i.e. completed). A run expected
    faithful that failed only on pacing checks raises :class:`MachineDisturbed` (the test runs again)."""
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    res = run_cli("run", p, "--results", tmp_path / name, timeout=timeout)
    summaries = list((tmp_path / name).glob("*/summary.json"))
    if expect_rc == EXIT_FAITHFUL:
        raise_if_run_disturbed(res, tmp_path / name)
    ok = res.returncode in (EXIT_FAITHFUL, EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED) if expect_rc is None \
        else res.returncode == expect_rc
    assert ok, f"testbed run exited {res.returncode}, expected {expect_rc}:\n{res.stdout}\n{res.stderr}"
    assert len(summaries) == 1, res.stderr
    return res, RunDir(summaries[0].parent).summary


@contextlib.contextmanager
def running_scenario(tmp_path, text: str, name: str = "scenario", ready_timeout_s: float = 120):
    """Start ``testbed run`` on a scenario in the background and yield ``(process, run_dir)`` once the
    controller confirmed every switch (its ready file exists); stdout/stderr are pipes (use
    ``process.communicate``). A run still going on the way out is stopped with SIGINT."""
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(text)
    results = tmp_path / name
    run = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(scenario), "--results", str(results)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + ready_timeout_s
        while not list(results.glob("*/controller.ready")):
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, f"the fabric did not come up within {ready_timeout_s:g} s"
            time.sleep(0.1)
        yield run, next(results.glob("*/controller.ready")).parent
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
            run.communicate(timeout=60)


def assert_losses_accounted(summary: dict, elsewhere_allowed: int = 0) -> dict:
    """The loss identity of a run holds (testbed.measure.accounting; issue 16 item 1): every packet the
    agents sent was received, tail-dropped by an emulated queue, taken by the PFC watchdog or a fault, or
    dropped somewhere named, each event counted once, and nothing is unexplained. At most
    ``elsewhere_allowed`` packets may have been dropped outside the emulation. Returns the identity."""
    i = summary["fidelity"]["transport_loss"]
    assert i.get("identity", "").startswith("sent = received"), f"no loss identity in summary.json: {i}"
    terms = (i["received_pkts"] + i["switch_queue_drops_pkts"] + i["watchdog_drops_pkts"]
             + i["lost_to_faults_pkts"] + i["elsewhere_pkts"] + i["unexplained_pkts"])
    assert i["sent_pkts"] == terms, f"the identity's terms do not add up: {i}"
    assert i["elsewhere_pkts"] == sum(v for v in i["elsewhere"].values() if v > 0), i
    assert i["unexplained_pkts"] == 0, f"packets no counter saw: {i}"
    assert i["elsewhere_pkts"] <= elsewhere_allowed, f"dropped outside the emulation: {i['elsewhere']}"
    assert summary["transport"]["unexplained_lost_pkts"] == 0
    return i


def assert_faithful_or_only_pacing_failed(res: subprocess.CompletedProcess, summary: dict) -> None:
    """The run is faithful (exit 0), or NOT faithful (exit 3) with only :data:`PACING_CHECKS` failed and every
    accounting check (drops, transport_loss, bytes, spurious_retx) passed. For tests whose subject is the
    accounting, not the machine's speed; the figures the test asserts are checked by the test itself."""
    failed = {k for k, c in summary["checks"].items() if c["status"] == "failed"}
    if res.returncode == EXIT_FAITHFUL:
        assert summary["faithful"] and not failed, summary["violations"]
        return
    assert res.returncode == EXIT_NOT_FAITHFUL and failed and failed <= PACING_CHECKS, \
        (res.returncode, failed, summary["violations"])
    print(f"NOT faithful only on pacing ({sorted(failed)}): {summary['violations']}")
