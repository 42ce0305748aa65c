"""Importing Mininet made our loggers print every warning twice, the first copy without a newline
(testbed.host.mininet_logging)."""
import subprocess
import sys

SCRIPT = """
import logging, sys
import mininet.log  # sets MininetLogger as the logger class
from testbed.host.mininet_logging import restore_logging
log = logging.getLogger("testbed.emulation.controller_supervisor")
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
if sys.argv[1] == "fixed":
    print(restore_logging(), file=sys.stderr)
log.warning("controller pid 7 died at 1.000 s (SIGKILL)")
print("next line", file=sys.stderr)
"""


def _stderr(mode: str) -> str:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True,
                          timeout=60).stderr


def test_without_the_fix_mininet_prints_the_warning_twice_and_glued():
    err = _stderr("plain")
    assert err.count("controller pid 7 died") == 2
    assert "(SIGKILL)WARNING" in err


def test_restored_logging_prints_each_warning_once_on_its_own_line():
    err = _stderr("fixed")
    lines = err.splitlines()
    assert lines[0] == "['testbed.emulation.controller_supervisor']"
    assert lines[1:] == ["WARNING testbed.emulation.controller_supervisor: controller pid 7 died at 1.000 s (SIGKILL)",
                         "next line"]
