"""controllers.parent_watch: a controller whose testbed was SIGKILLed ends itself."""
import os
import signal
import subprocess
import sys
import time

import psutil

# A parent that starts a watched child, prints the child's pid, then waits to be killed.
PARENT = r"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True)
print(child.pid, flush=True)
time.sleep(60)
"""
CHILD = r"""
import os, time
from controllers.parent_watch import watch_parent
watch_parent(on_orphan=lambda: open(os.environ["ORPHAN_MARK"], "w").write("cleaned"), period_s=0.2)
time.sleep(60)
"""


def test_the_child_exits_with_the_orphan_code_after_cleaning_once_its_parent_is_killed(tmp_path):
    mark = tmp_path / "mark"
    env = dict(os.environ, ORPHAN_MARK=str(mark), PYTHONPATH=os.getcwd())
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD], stdout=subprocess.PIPE, text=True, env=env)
    child = psutil.Process(int(parent.stdout.readline()))
    time.sleep(0.5)
    assert child.is_running() and not mark.exists()  # alive while its parent is
    t0 = time.monotonic()
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=5)
    _, alive = psutil.wait_procs([child], timeout=5)
    assert not alive and time.monotonic() - t0 < 3
    assert mark.read_text() == "cleaned"


# A child whose parent dies while it is still starting (as a controller still loading its settings): the
# watch started after that watches the parent noted at start, so it still fires.
LATE_CHILD = r"""
import os, time
from controllers.parent_watch import note_parent, watch_parent
started_by = note_parent()
while os.getppid() == started_by:
    time.sleep(0.05)
watch_parent(on_orphan=lambda: open(os.environ["ORPHAN_MARK"], "w").write("cleaned"), period_s=0.2)
time.sleep(60)
"""


def test_a_parent_killed_before_the_watch_starts_is_still_noticed(tmp_path):
    mark = tmp_path / "mark"
    env = dict(os.environ, ORPHAN_MARK=str(mark), PYTHONPATH=os.getcwd())
    parent = subprocess.Popen([sys.executable, "-c", PARENT, LATE_CHILD], stdout=subprocess.PIPE, text=True,
                              env=env)
    child = psutil.Process(int(parent.stdout.readline()))
    time.sleep(0.5)
    assert child.is_running() and not mark.exists()
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=5)
    _, alive = psutil.wait_procs([child], timeout=5)
    assert not alive, "the watch started after the parent died watched the new parent"
    assert mark.read_text() == "cleaned"
