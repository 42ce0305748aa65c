"""Start/stop objects as context managers whose start and stop Ctrl-C cannot cut in half.

``start()`` and ``stop()`` run with SIGINT and SIGTERM held back (blocked in the
main thread): a signal arriving meanwhile stays pending. Long waits inside
``start()`` call :func:`raise_if_interrupted` to give up early. If a signal
arrived during ``start()``, ``stop()`` removes what was created before the
signal is let through (it then raises KeyboardInterrupt from the runner's
handler). So a run interrupted at any moment leaves nothing behind.
"""
from __future__ import annotations

import signal
import threading

_TEARDOWN_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _block():
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, _TEARDOWN_SIGNALS)


def _restore(old) -> None:
    if old is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def interrupt_pending() -> bool:
    """True when SIGINT or SIGTERM is waiting (held back) for this process."""
    return bool(signal.sigpending() & _TEARDOWN_SIGNALS)


def raise_if_interrupted() -> None:
    """Call in long waits and loops while signals are held back: give up when the user asked to stop
    (the signal recorded and announced at once, testbed.process.signals.note_held). Raises KeyboardInterrupt."""
    pending = signal.sigpending() & _TEARDOWN_SIGNALS
    if pending:
        from testbed.process import signals

        signals.note_held(signal.SIGTERM if signal.SIGTERM in pending else signal.SIGINT)
        raise KeyboardInterrupt("interrupted while starting")


class StartStop:
    """``with obj:`` runs ``start()``; ``stop()`` runs on exit and also when ``start()`` fails or
    is interrupted half-way. ``stop()`` must cope with a partial start and be safe to call twice."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        old = _block()
        try:
            try:
                self.start()
                raise_if_interrupted()
            except BaseException:
                self.stop()
                raise
        finally:
            _restore(old)  # a held-back signal is delivered here, after stop() if it was needed
        return self

    def __exit__(self, *exc) -> None:
        old = _block()
        try:
            self.stop()
        finally:
            _restore(old)
