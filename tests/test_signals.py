"""The run's interrupt handler (testbed.signals): a SIGINT while the final measurements or the results are being
written waits for them; otherwise it unwinds at once (no fabric needed)."""
import os
import signal

import pytest

from testbed import signals


@pytest.fixture
def handler_state(monkeypatch):
    monkeypatch.setattr(signals, "_MAIN_PID", os.getpid())
    monkeypatch.setattr(signals, "_RECEIVED", 0)
    monkeypatch.setattr(signals, "_DEFER_DEPTH", 0)
    monkeypatch.setattr(signals, "_PENDING", 0)


def test_interrupt_unwinds_at_once(handler_state):
    with pytest.raises(KeyboardInterrupt):
        signals.handler(signal.SIGINT, None)
    assert signals.received() == signal.SIGINT


def test_interrupt_waits_for_deferred_work_nested(handler_state):
    signals.defer()
    signals.defer()              # writing results inside the final measurements
    signals.handler(signal.SIGTERM, None)  # held: no exception
    signals.handler(signal.SIGINT, None)   # a second signal changes nothing
    assert signals.release() == 0    # inner release: still held
    assert signals.release() == signal.SIGTERM
    assert signals.release() == 0    # reported once
    assert signals.received() == signal.SIGTERM and signals.received_name() == "interrupted by SIGTERM"
