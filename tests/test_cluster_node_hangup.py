"""A remote node's ssh ends at Mininet's SIGHUP even when the driver ignores SIGHUP (nohup, a CI runner).

Mininet ends a node by a SIGHUP to the process group of its ssh, then waits for it (Node.terminate, Node.cleanup);
a SIGHUP ignored in the driver is inherited across exec, so with Mininet's own preexec (os.setpgrp) the teardown of a
run over several servers waited forever (testbed.cluster.engine.own_group_hangup_ends). A ``sleep`` stands in for the
ssh: it keeps a SIGHUP ignored at its start, as ssh does.
"""
import os
import signal
import subprocess

import pytest

from testbed.cluster.engine import ClusterHost, ClusterOVSSwitch, own_group_hangup_ends


@pytest.fixture
def hangup_ignored():
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, old)


def _ends_at_hangup(preexec) -> bool:
    p = subprocess.Popen(["sleep", "30"], preexec_fn=preexec)
    try:
        os.killpg(p.pid, signal.SIGHUP)
        p.wait(timeout=5)
        return p.returncode == -signal.SIGHUP
    except subprocess.TimeoutExpired:
        return False
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_node_process_ends_at_sighup_in_a_driver_that_ignores_it(hangup_ignored):
    assert _ends_at_hangup(own_group_hangup_ends)


def test_with_mininets_own_preexec_it_would_not(hangup_ignored):
    assert not _ends_at_hangup(os.setpgrp)  # the hang this guards against


def test_every_cluster_node_class_spawns_with_it():
    assert ClusterHost._ignoreSignal is own_group_hangup_ends
    assert ClusterOVSSwitch._ignoreSignal is own_group_hangup_ends
