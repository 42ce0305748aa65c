"""The runner's interrupt handler: a SIGINT while the final measurements or the results are being
written waits for them; otherwise it unwinds at once (no fabric needed)."""
import os
import signal

import pytest

from testbed import runner


@pytest.fixture
def handler_state(monkeypatch):
    monkeypatch.setattr(runner, "_MAIN_PID", os.getpid())
    monkeypatch.setattr(runner, "_INTERRUPTED", 0)
    monkeypatch.setattr(runner, "_DEFER_DEPTH", 0)
    monkeypatch.setattr(runner, "_PENDING", 0)


def test_interrupt_unwinds_at_once(handler_state):
    with pytest.raises(KeyboardInterrupt):
        runner._interrupt(signal.SIGINT, None)
    assert runner._INTERRUPTED == signal.SIGINT


def test_interrupt_waits_for_deferred_work_nested(handler_state):
    runner._defer_signals()
    runner._defer_signals()              # writing results inside the final measurements
    runner._interrupt(signal.SIGTERM, None)  # held: no exception
    runner._interrupt(signal.SIGINT, None)   # a second signal changes nothing
    assert runner._release_signals() == 0    # inner release: still held
    assert runner._release_signals() == signal.SIGTERM
    assert runner._release_signals() == 0    # reported once
    assert runner._INTERRUPTED == signal.SIGTERM
