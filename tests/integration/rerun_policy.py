"""When an integration test runs again: only when its run's own verdict says the machine disturbed it.

Real-time emulation on a shared 2-core machine: a neighbour's burst of CPU (or the hypervisor's steal) can
make a run NOT faithful on the checks that judge the machine's pacing (:data:`PACING_CHECKS`) while every
figure of the emulated network is still counted exactly. Such a run says so itself; the helpers that read
a run's verdict (conftest's ``run_scenario_file``, :func:`assert_faithful`) then raise
:class:`MachineDisturbed`, and only that exception makes pytest-rerunfailures run the test again
(:data:`RERUN_MARK`: at most :data:`RERUNS` times, :data:`RERUN_DELAY_S` apart). Any other failure, a
wrong figure above all, fails the first time. :func:`rerun_lines` is what the suite's end prints: how
many tests re-ran, each with the check that failed (docs/development.md, "Tests").
"""
from __future__ import annotations

import pytest

#: PACING_CHECKS: the checks that judge the machine's pacing, not the emulated network, and disturbed_checks
#: (a summary's failed checks when all are pacing checks): the product's one rule (testbed.measure.verdict),
#: which ``testbed run --solo`` also follows for its solo runs. Seen in CI on 2026-12-07: a solo run's ``links``
#: check at 67 % of 10 Mbit/s while backlogged, CPU idle 64 %+ and packet timing not judged.
from testbed.measure.verdict import PACING_CHECKS, disturbed_checks  # noqa: F401  (re-exported)
#: re-runs of one test, and the pause before each (s): in one CI run (2026-12-03) a burst lasted through a
#: test and its one immediate re-run (packet timing 88-94 % against 95 % on two ports)
RERUNS, RERUN_DELAY_S = 2, 10


class MachineDisturbed(Exception):
    """The run's own verdict failed only on :data:`PACING_CHECKS`; ``checks``: check name -> the verdict's
    sentence (its figure and threshold)."""

    def __init__(self, checks: dict[str, str]):
        self.checks = dict(checks)
        super().__init__("the machine disturbed the run: "
                         + "; ".join(f"{name}: {reason}" for name, reason in sorted(self.checks.items())))


def raise_if_disturbed(summary: dict) -> None:
    """Raise :class:`MachineDisturbed` when summary.json ``summary`` failed only on pacing checks."""
    checks = disturbed_checks(summary)
    if checks:
        raise MachineDisturbed(checks)


def assert_faithful(summary: dict) -> None:
    """The run of summary.json ``summary`` is faithful; raises :class:`MachineDisturbed` when only pacing
    checks failed (the test runs again), AssertionError naming the violations otherwise."""
    raise_if_disturbed(summary)
    assert summary["faithful"] is True, summary["violations"]


#: the mark every integration test carries: re-run only on :class:`MachineDisturbed`
RERUN_MARK = pytest.mark.flaky(reruns=RERUNS, reruns_delay=RERUN_DELAY_S, only_rerun=[MachineDisturbed])


def rerun_lines(reports) -> list[str]:
    """The suite's closing lines from pytest-rerunfailures' ``rerun`` reports (one per re-run): how many
    tests re-ran and, per re-run, its test id and why (the exception's message, one line)."""
    lines = []
    for r in reports:
        crash = getattr(r.longrepr, "reprcrash", None)
        why = crash.message if crash is not None else str(r.longrepr)
        lines.append(f"  {r.nodeid}: {why.splitlines()[0] if why else 'no message'}")
    tests = len({r.nodeid for r in reports})
    return [f"re-runs: {tests} test(s) re-ran {len(reports)} time(s), only when the machine disturbed the run"] \
        + lines


def pytest_terminal_summary(terminalreporter):
    """Print :func:`rerun_lines` at the end of every session that collected integration tests."""
    if not terminalreporter.config.pluginmanager.hasplugin("rerunfailures"):
        return
    terminalreporter.write_sep("-", "re-runs (tests/integration/rerun_policy.py)")
    for line in rerun_lines(terminalreporter.stats.get("rerun", [])):
        terminalreporter.write_line(line)
