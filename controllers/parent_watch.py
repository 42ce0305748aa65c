"""End the controller when the testbed that started it dies.

The controller runs in its own session (a Ctrl-C at the terminal reaches the testbed, which stops it in
order), so a SIGKILL of ``testbed run`` left it running with nobody to stop it. A daemon thread notes the
parent pid at start and checks once a second: when the parent is gone (the process was re-parented,
``os.getppid()`` changed), it stops the congestion loop (which undoes its kernel state) and exits with
:data:`ORPHAN_EXIT_CODE`. Polling rather than ``PR_SET_PDEATHSIG``: that signal fires when the parent
*thread* that forked exits, and the testbed restarts a dead controller from a supervisor thread.

The parent to watch is the one the process had when it started (:func:`note_parent`, the first thing
``python -m controllers.run`` does), not the one it has when the app starts: a testbed SIGKILLed while
the controller was still loading (seconds on a slow machine) had already re-parented it, and a watch
that noted the new parent (pid 1) then never fired.
"""
from __future__ import annotations

import logging
import os
import threading
import time

LOG = logging.getLogger(__name__)
#: seconds between checks of the parent
PERIOD_S = 1.0
#: exit code of a controller whose testbed died
ORPHAN_EXIT_CODE = 3
#: the parent pid noted at process start (:func:`note_parent`); None: not noted
_started_by: int | None = None


def note_parent() -> int:
    """Note this process's parent pid now, as the one :func:`watch_parent` watches; returns it."""
    global _started_by
    _started_by = os.getppid()
    return _started_by


def watch_parent(on_orphan=None, period_s: float = PERIOD_S) -> threading.Thread:
    """Start the daemon thread; ``on_orphan()`` runs (errors logged) before ``os._exit(ORPHAN_EXIT_CODE)``.
    The parent watched is the one :func:`note_parent` noted, else the current one; when it is already gone
    the thread exits at its first check."""
    parent = _started_by if _started_by is not None else os.getppid()

    def run() -> None:
        while os.getppid() == parent:
            time.sleep(period_s)
        LOG.warning("the testbed (pid %d) that started this controller is gone: exiting", parent)
        if on_orphan is not None:
            try:
                on_orphan()
            except Exception:
                LOG.exception("cleanup before exit failed")
        os._exit(ORPHAN_EXIT_CODE)

    t = threading.Thread(target=run, name="parent-watch", daemon=True)
    t.start()
    return t
