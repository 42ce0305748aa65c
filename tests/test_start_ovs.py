"""scripts/start-ovs: a warm-up that fails leaves net.core.wmem_default as it was.

The warm-up (`warm_send_socket`) raises the system-wide net.core.wmem_default so
that ovs-vswitchd's AF_PACKET send socket is created large, then restores it.
Its EXIT trap used to read the function's `local old` after the function's frame
was gone, so under `set -u` the trap died before the restore and the sysctl
stayed raised for the whole machine.

The test drives the real script and the real sysctl; only the commands that
would touch the host's Open vSwitch or its interfaces are replaced by stubs on
PATH: `ovs-vsctl`/`ovs-appctl` answer "running", `ss` shows no send socket yet
(so the warm-up runs), and `ip link add` fails, which makes the warm-up die
under `set -e` right after it raised the sysctl. The value asked for is the
current one + 4096 bytes, so the brief change is harmless to other runs.
"""
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
START_OVS = REPO / "scripts" / "start-ovs"
WMEM = Path("/proc/sys/net/core/wmem_default")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not WMEM.exists(),
                                reason="needs root and /proc/sys/net/core/wmem_default")


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def test_failing_warm_up_restores_wmem_default(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "wmem_seen_by_ip"
    _stub(bin_dir, "ovs-vsctl", "exit 0")
    _stub(bin_dir, "ovs-appctl", "exit 0")
    _stub(bin_dir, "ss", "exit 0")  # no ovs-vswitchd packet socket: the warm-up runs
    _stub(bin_dir, "ip",
          f'[ "$1 $2" = "link add" ] || exit 0\n'
          f'cat {WMEM} > {seen}\n'
          'echo "ip: stub: warm-up forced to fail" >&2; exit 1')
    before = int(WMEM.read_text())
    asked = before + 4096
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    try:
        proc = subprocess.run(["bash", str(START_OVS), "--wmem-bytes", str(asked)],
                              env=env, capture_output=True, text=True, timeout=60)
    finally:
        after = int(WMEM.read_text())
        if after != before:  # never leave the machine changed, even when the fix regresses
            WMEM.write_text(str(before))
    assert seen.exists(), f"the warm-up did not reach `ip link add`: {proc.stdout}{proc.stderr}"
    assert int(seen.read_text()) == asked, "the warm-up did not raise wmem_default before failing"
    assert proc.returncode != 0, "start-ovs reported success although its warm-up failed"
    assert "unbound variable" not in proc.stderr, proc.stderr
    assert after == before, (f"net.core.wmem_default left at {after} after a failed warm-up "
                             f"(was {before}); stderr: {proc.stderr}")
