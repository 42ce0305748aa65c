"""The integration tests' re-run policy (tests/integration/rerun_policy.py): a test runs again only when its
run's own verdict says the machine disturbed it; a wrong figure fails the first time; the suite's end says
how many tests re-ran and why."""
import sys
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

INTEGRATION = Path(__file__).resolve().parent / "integration"
sys.path.insert(0, str(INTEGRATION))
from rerun_policy import (RERUN_MARK, MachineDisturbed, assert_faithful, disturbed_checks,  # noqa: E402
                          raise_if_disturbed)
sys.path.remove(str(INTEGRATION))


def _summary(**status):
    """A summary.json with the given check -> status (failed checks get a sentence with figures)."""
    checks = {name: {"status": st, "reason": f"{name} 88 % < 95 %" if st == "failed" else ""}
              for name, st in status.items()}
    failed = [c["reason"] for c in checks.values() if c["status"] == "failed"]
    return {"checks": checks, "faithful": not failed, "violations": failed}


def test_only_pacing_failures_mean_a_disturbed_machine():
    assert disturbed_checks(_summary(cpu="failed", drops="passed")) == {"cpu": "cpu 88 % < 95 %"}
    assert disturbed_checks(_summary(cpu="failed", packet_timing="failed")).keys() == {"cpu", "packet_timing"}
    # an accounting check failed too: the network is wrong, not the machine
    assert disturbed_checks(_summary(cpu="failed", bytes="failed")) == {}


def test_the_verdicts_rate_checks_are_pacing_checks_spurious_retransmissions_are_not():
    # links/hosts/throughput: did the emulated links and NICs keep their rate (testbed.measure.verdict)
    assert disturbed_checks(_summary(links="failed", cpu="passed")).keys() == {"links"}
    assert disturbed_checks(_summary(hosts="failed", throughput="failed")).keys() == {"hosts", "throughput"}
    # a duplicate no lost packet explains is the transport's or the network's figure: it fails the first time
    assert disturbed_checks(_summary(spurious_retx="failed")) == {}
    assert disturbed_checks(_summary(links="failed", spurious_retx="failed")) == {}
    assert disturbed_checks(_summary(cpu="passed", bytes="not_judged")) == {}
    assert disturbed_checks({"checks": None}) == {}


def test_assert_faithful_raises_machine_disturbed_or_assertion():
    with pytest.raises(MachineDisturbed, match=r"packet_timing: packet_timing 88 % < 95 %"):
        assert_faithful(_summary(packet_timing="failed", drops="passed"))
    with pytest.raises(AssertionError, match="drops 88"):
        assert_faithful(_summary(packet_timing="failed", drops="failed"))
    assert_faithful(_summary(cpu="passed"))
    raise_if_disturbed(_summary(drops="failed"))  # not disturbed: nothing raised here


def test_rerun_only_on_machine_disturbed_and_summary_counts(pytester):
    """Through pytest-rerunfailures: a figure assertion fails once, a MachineDisturbed test runs again and
    passes, one that stays disturbed runs 3 times in all; the summary names each re-run and its check."""
    pytester.syspathinsert(INTEGRATION)
    pytester.makeconftest("""
        import pytest
        import rerun_policy
        from rerun_policy import pytest_terminal_summary  # noqa: F401

        def pytest_collection_modifyitems(items):
            for item in items:
                item.add_marker(pytest.mark.flaky(reruns=rerun_policy.RERUNS, reruns_delay=0,
                                                  only_rerun=rerun_policy.RERUN_MARK.kwargs["only_rerun"]))
    """)
    pytester.makepyfile("""
        from rerun_policy import MachineDisturbed
        calls = {"figure": 0, "once": 0, "always": 0}

        def test_figure():
            calls["figure"] += 1
            assert calls["figure"] == 99, "busbw 0.61 outside its band 0.9-1.0"

        def test_once():
            calls["once"] += 1
            if calls["once"] == 1:
                raise MachineDisturbed({"cpu": "a core 3 % idle < 10 %"})

        def test_always():
            calls["always"] += 1
            raise MachineDisturbed({"packet_timing": "s1-eth1 paced 88 % < 95 %"})

        def test_counts():
            assert calls == {"figure": 1, "once": 2, "always": 3}
    """)
    res = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider")
    assert res.parseoutcomes() == {"passed": 2, "failed": 2, "rerun": 3}
    res.stdout.fnmatch_lines([
        "*re-runs: 2 test(s) re-ran 3 time(s), only when the machine disturbed the run*",
        "*test_once*: *MachineDisturbed: the machine disturbed the run: cpu: a core 3 % idle < 10 %*",
        "*test_always*: *packet_timing: s1-eth1 paced 88 % < 95 %*",
    ])
    section = res.outlines[next(i for i, ln in enumerate(res.outlines) if ln.startswith("re-runs: ")):]
    assert not any("test_figure" in ln for ln in section[:4]), section  # a wrong figure is not re-run


def test_the_integration_mark_reruns_only_machine_disturbed():
    assert RERUN_MARK.name == "flaky"
    assert RERUN_MARK.kwargs == {"reruns": 2, "reruns_delay": 10, "only_rerun": [MachineDisturbed]}


def test_a_servers_failure_is_pacing_only_when_every_server_failed_on_pacing_checks():
    # a run over two servers on the shared CI machine, 2026-12-08: each server's CPU saturated, every figure intact
    s = _summary(cpu="failed", servers="failed")
    s["fidelity"] = {"servers": {"srv1": {"failed_checks": ["cpu"]}, "srv2": {"failed_checks": ["cpu"]}}}
    assert disturbed_checks(s).keys() == {"cpu", "servers"}
    s["fidelity"]["servers"]["srv2"]["failed_checks"] = ["cpu", "drops"]  # unexplained drops: the network's
    assert disturbed_checks(s) == {}
    s["fidelity"]["servers"] = {"srv1": {}}  # a summary without the per-server checks: not the machine's
    assert disturbed_checks(s) == {}
