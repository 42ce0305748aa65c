"""End the controller when the testbed that started it dies.

The controller runs in its own session (a Ctrl-C at the terminal reaches the testbed, which stops it in
order), so a SIGKILL of ``testbed run`` left it running with nobody to stop it. A daemon thread notes the
parent pid at start and checks once a second: when the parent is gone (the process was re-parented,
``os.getppid()`` changed), it stops the congestion loop (which undoes its kernel state) and exits with
:data:`ORPHAN_EXIT_CODE`. Polling rather than ``PR_SET_PDEATHSIG``: that signal fires when the parent
*thread* that forked exits, and the testbed restarts a dead controller from a supervisor thread.
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


def watch_parent(on_orphan=None, period_s: float = PERIOD_S) -> threading.Thread:
    """Start the daemon thread; ``on_orphan()`` runs (errors logged) before ``os._exit(ORPHAN_EXIT_CODE)``."""
    parent = os.getppid()

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
