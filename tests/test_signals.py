"""The run's interrupt handler (testbed.process.signals): a SIGINT while the final measurements or the results are being
written waits for them; otherwise it unwinds at once (no fabric needed)."""
import os
import signal
import threading

import pytest

from testbed.process import signals


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


def test_first_signal_is_announced_at_once(handler_state, capfd):
    with pytest.raises(KeyboardInterrupt):
        signals.handler(signal.SIGTERM, None)
    signals.handler(signal.SIGINT, None)  # ignored while unwinding: said once
    assert capfd.readouterr().err == ("testbed: SIGTERM received: stopping; removing what this run made "
                                      "(further signals are ignored until that is done)\n")


def test_signal_held_back_during_a_start_is_acted_on_by_the_loop_that_checks(handler_state, capfd):
    """A start-up holds SIGINT/SIGTERM back (testbed.process.lifecycle); its loops' raise_if_interrupted gives up at
    the pending signal, records and announces it, and the delivery after the teardown raises nothing more."""
    from testbed.process.lifecycle import StartStop, raise_if_interrupted

    class Build(StartStop):
        built, stopped = 0, False

        def start(self):
            for _ in range(1000):  # a node per round, as Mininet's build loop (testbed.emulation.fabric)
                raise_if_interrupted()
                self.built += 1
                if self.built == 3:
                    # to this (main) thread, where it is held back: pending (a signal to the process could
                    # go to another thread of the test session's, unmasked)
                    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)

        def stop(self):
            self.stopped = True

    old = signal.signal(signal.SIGTERM, signals.handler)
    b = Build()
    try:
        with pytest.raises(KeyboardInterrupt, match="interrupted while starting"):
            with b:
                pass
    finally:
        signal.signal(signal.SIGTERM, old)
    assert b.built == 3 and b.stopped
    assert signals.received() == signal.SIGTERM
    assert capfd.readouterr().err.count("SIGTERM received: stopping") == 1
