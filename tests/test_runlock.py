"""RunLock: lock + state files, liveness, known runs (no root needed: uses tmp dirs)."""
import json
import os
import signal
import subprocess
import sys

import pytest

from testbed.host import runlock
from topology.naming import new_run_id
from testbed.host.runlock import RunLock, RunLockError, is_live, known_runs, read_state


def test_lock_lifecycle(tmp_path):
    rid = new_run_id()
    assert not is_live(rid, tmp_path)
    with RunLock(rid, tmp_path) as lock:
        assert (tmp_path / f"{rid}.lock").exists()
        state = json.loads((tmp_path / f"{rid}.json").read_text())
        assert state["pid"] == os.getpid() and state["run_id"] == rid
        assert is_live(rid, tmp_path)
        assert known_runs(tmp_path) == [rid]
        lock.record("bridge", f"{rid}l1")
        lock.record("bridge", f"{rid}l1")  # recorded once
        assert read_state(rid, tmp_path)["objects"] == {"bridge": [f"{rid}l1"]}
    assert not (tmp_path / f"{rid}.lock").exists()
    assert not (tmp_path / f"{rid}.json").exists()
    assert not is_live(rid, tmp_path)
    assert known_runs(tmp_path) == []


def test_second_holder_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(RunLock, "RETRY_S", 0.05)
    rid = new_run_id()
    with RunLock(rid, tmp_path):
        with pytest.raises(RunLockError, match=f"run {rid} is already live"):
            RunLock(rid, tmp_path).__enter__()
        assert is_live(rid, tmp_path)  # the failed attempt did not drop the lock


def test_bad_run_id_rejected(tmp_path):
    with pytest.raises(ValueError, match="'tb12' is not 'tb' followed by 4 hex digits"):
        RunLock("tb12", tmp_path)


def test_stale_lock_is_not_live_and_can_be_taken(tmp_path):
    rid = new_run_id()
    (tmp_path / f"{rid}.lock").write_text("12345\n")
    (tmp_path / f"{rid}.json").write_text("{}")
    (tmp_path / "notarun.lock").write_text("")
    (tmp_path / f"{rid}.json.tmp").write_text("")
    assert known_runs(tmp_path) == [rid]
    assert not is_live(rid, tmp_path)
    with RunLock(rid, tmp_path):
        assert is_live(rid, tmp_path)


def test_lock_held_by_other_process_then_killed(tmp_path):
    rid = new_run_id()
    code = (
        "import sys, time\n"
        "from testbed.host.runlock import RunLock\n"
        f"with RunLock({rid!r}, {str(tmp_path)!r}):\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert is_live(rid, tmp_path)
        assert read_state(rid, tmp_path)["pid"] == proc.pid
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        # the kernel dropped the flock; the files stay behind as leftovers
        assert not is_live(rid, tmp_path)
        assert known_runs(tmp_path) == [rid]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_state_dir_follows_naming(monkeypatch, tmp_path):
    monkeypatch.setattr("testbed.host.runlock.STATE_DIR", tmp_path)
    assert runlock.state_dir() == tmp_path
    assert known_runs() == []
