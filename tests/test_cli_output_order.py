"""Issue 31 item 9: in ``--cli`` with output into a pipe, Mininet's output (its logger: stderr, flushed at once)
and the testbed's (stdout: block-buffered on a pipe) came out of order: ``help`` printed Mininet's half before
the testbed's list. No fabric: the CLI on an empty network, its input and output piped, Python's stdout
buffered as in a user's shell (no PYTHONUNBUFFERED)."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = """
from types import SimpleNamespace
from testbed.pipeline import interactive

class Net(dict):
    hosts = []

fab = SimpleNamespace(net=Net(), run_id="tb0a31", switch_ports=[])
with interactive.stdin_kept_for_the_cli():
    interactive.run_cli(SimpleNamespace(), fab)
print("after the CLI")
"""


def test_piped_cli_output_comes_in_the_order_it_was_written():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    r = subprocess.run([sys.executable, "-c", SCRIPT], input="help\nqueues\nnodes\n", stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env, timeout=60)
    assert r.returncode == 0, r.stdout
    at = [r.stdout.find(s) for s in (
        "testbed commands:", "Documented commands",  # help: the testbed's list, then cmd's (stdout)
        "You may also send a command",  # then Mininet's own help text (its logger: stderr)
        "no such switch port",  # queues (stdout)
        "available nodes are",  # nodes (Mininet's logger)
        "left the CLI", "after the CLI")]
    assert -1 not in at and at == sorted(at), (at, r.stdout)  # main: Mininet's help text came first
