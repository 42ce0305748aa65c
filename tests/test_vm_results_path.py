"""scripts/vm refuses, before booting anything, a command whose ``--results`` the host will not see.

The guest sees this machine's root filesystem read-only and has its own tmpfs on /tmp, /var, /etc; the
one folder it shares writable is scripts/vm's ``--results DIR`` (docs/vm.md). The script runs as an
unprivileged user here, so nothing could boot even if the check were missing: without the check the
script stops at its root check instead.
"""
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "vm"


def _vm(*args: str, cwd: str = "/") -> subprocess.CompletedProcess:
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, "bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30,
                          cwd=cwd)


def test_results_in_the_guests_own_tmp_refused_before_boot():
    got = _vm("--", "testbed", "run", "scenarios/quickstart.yaml", "--results", "/tmp/out")
    assert got.returncode == 2, got
    assert "--results /tmp/out" in got.stderr and "scripts/vm --results" in got.stderr, got.stderr
    assert "booting" not in got.stderr and "acceleration" not in got.stderr


def test_results_outside_the_shared_folder_refused(tmp_path):
    shared = tmp_path / "shared"
    got = _vm("--results", str(shared), "--", "testbed", "run", "x.yaml", f"--results={tmp_path / 'elsewhere'}")
    assert got.returncode == 2, got
    assert f"--results {tmp_path / 'elsewhere'}" in got.stderr and "scripts/vm --results" in got.stderr
    assert not shared.exists()


def test_results_inside_the_shared_folder_passes_the_check(tmp_path):
    # relative to the current directory, as the guest resolves it (scripts/vm keeps the directory)
    got = _vm("--results", str(tmp_path / "out"), "--", "testbed", "run", "x.yaml", "--results", "out/runs",
              cwd=str(tmp_path))
    assert "--results out/runs" not in got.stderr, got.stderr
    if os.geteuid() == 0:  # ran unprivileged: the next check stops it, before anything boots
        assert got.returncode == 2 and "must run as root" in got.stderr, got.stderr
