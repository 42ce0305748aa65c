"""Start/stop objects as context managers that clean up after a failed start too."""
from __future__ import annotations

import signal
import threading

_TEARDOWN_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _stop_uninterrupted(obj) -> None:
    """Run ``obj.stop()`` with SIGINT/SIGTERM held back (in the main thread).

    A second Ctrl-C must not cut a teardown short and leave half a fabric
    behind; the held signal is delivered when stop() returns.
    """
    if threading.current_thread() is not threading.main_thread():
        obj.stop()
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _TEARDOWN_SIGNALS)
    try:
        obj.stop()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class StartStop:
    """``with obj:`` calls ``start()``; ``stop()`` runs on exit and also when ``start()`` fails
    half-way (KeyboardInterrupt included), so whatever was created is removed.
    ``stop()`` must therefore cope with a partial start and be safe to call twice;
    it runs with SIGINT/SIGTERM held back."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            _stop_uninterrupted(self)
            raise
        return self

    def __exit__(self, *exc) -> None:
        _stop_uninterrupted(self)
