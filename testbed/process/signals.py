"""SIGINT/SIGTERM for ``testbed run``: unwind the main process so context managers tear down, except
while the final measurements or the results are being written (:func:`defer` ... :func:`release`).

:func:`install` sets the handler. The first signal raises KeyboardInterrupt in the main thread (or,
while deferred, is recorded and returned by the outermost :func:`release`, whose caller raises it);
later signals are ignored so a second Ctrl-C cannot cut the teardown short. :func:`received` is the
first signal's number (0: none), for the exit code 128 + signal.

Deferring is a flag, not a signal mask: a mask on the main thread does not stop the kernel from
delivering the signal to another thread (the samplers), whose arrival Python then handles in the
main thread anyway.
"""
from __future__ import annotations

import os
import signal

_MAIN_PID = os.getpid()
_RECEIVED = 0
_DEFER_DEPTH = 0
_PENDING = 0


def install() -> None:
    """Route SIGINT and SIGTERM of this (main) process to :func:`handler`."""
    global _MAIN_PID
    _MAIN_PID = os.getpid()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def received() -> int:
    """The first SIGINT/SIGTERM received (its number), else 0."""
    return _RECEIVED


def received_name() -> str:
    """``interrupted by SIGINT`` (or SIGTERM), or ``interrupted`` when no signal was seen."""
    return f"interrupted by {signal.Signals(_RECEIVED).name}" if _RECEIVED else "interrupted"


def defer() -> None:
    """Hold SIGINT/SIGTERM back (the handler records them) until the matching :func:`release`."""
    global _DEFER_DEPTH
    _DEFER_DEPTH += 1


def release() -> int:
    """End one :func:`defer`; at the outermost, return the signal that arrived meanwhile (else 0)."""
    global _DEFER_DEPTH, _PENDING
    _DEFER_DEPTH = max(0, _DEFER_DEPTH - 1)
    if _DEFER_DEPTH:
        return 0
    pending, _PENDING = _PENDING, 0
    return pending


def note_held(signum: int) -> None:
    """A signal held back during a start-up (testbed.process.lifecycle) is acted on now: record and announce it as
    :func:`handler` does for the first signal, so its delivery after the teardown changes nothing."""
    global _RECEIVED
    if os.getpid() == _MAIN_PID and not _RECEIVED:
        _RECEIVED = signum
        _announce(signum)


def _announce(signum: int) -> None:
    """``testbed: SIGTERM received: stopping ...`` on stderr at once: a long teardown is not a hang."""
    os.write(2, f"testbed: {signal.Signals(signum).name} received: stopping; removing what this run made "
                f"(further signals are ignored until that is done)\n".encode())


def handler(signum, frame):
    """SIGINT/SIGTERM: unwind the main process (context managers tear down); end forked children.

    pyroute2 forks short-lived children to open sockets in host namespaces and
    stops them with SIGTERM; a terminal's Ctrl-C reaches them too. A child
    must exit at once, never unwind its copy of our stack (that would tear
    down the parent's fabric).
    """
    global _RECEIVED, _PENDING
    if os.getpid() != _MAIN_PID:
        os._exit(128 + signum)
    if _RECEIVED:  # already unwinding: a second Ctrl-C must not cut the teardown short
        return
    _RECEIVED = signum
    _announce(signum)
    if _DEFER_DEPTH:  # finishing the measurements or writing results: raise once that is done
        _PENDING = signum
        return
    raise KeyboardInterrupt(f"signal {signum}")
