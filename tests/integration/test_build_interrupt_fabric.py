"""A run answers SIGTERM while a large fabric is being built (seen: a 960-host spine-leaf ignored SIGTERM and
SIGINT for over 5 minutes, Mininet's build loop running with the signals held back). 128 hosts take some
25-30 s to build here; SIGTERM a few seconds in must end the run within 10 s, exit code 143, nothing left."""
import re
import signal
import subprocess
import sys
import threading
import time

from conftest import run_cli
from test_c06_cleanup import run_leftovers

# 128 hosts: above this machine's faithful capacity (hence --over-capacity), never run: the build is the point
BIG = """
name: bigbuild
fabric: {spines: 2, leaves: 16, hosts_per_leaf: 8}
workload: {sizes: {min_bytes: 32KiB, max_bytes: 32KiB}, iterations: 1, warmup_iterations: 0}
"""
ANSWER_S = 10.0


def _run_links(rid: str) -> int:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if re.search(rf"\d+: {rid}", line))


def test_sigterm_during_a_large_build_ends_the_run_within_seconds(tmp_path):
    scen = tmp_path / "big.yaml"
    scen.write_text(BIG)
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(scen), "--results", str(tmp_path / "res"),
                             "--over-capacity"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        rid, deadline = None, time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            rid = rid or next((m.group(1) for m in map(re.compile(r"run (tb[0-9a-f]{4}): ").match, list(err))
                               if m), None)  # not "removed run tbXXXX: ..." of a dead run
            if rid and _run_links(rid) >= 20:  # the build is under way: some hosts and their links exist
                break
            time.sleep(0.2)
        assert rid and proc.poll() is None, "".join(err)
        links_at_signal = _run_links(rid)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        answered_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    text = "".join(err)
    print(f"SIGTERM with {links_at_signal} links of {rid} up: exit {proc.returncode} after {answered_s:.1f} s")
    assert proc.returncode == 128 + signal.SIGTERM, text
    assert answered_s < ANSWER_S, text
    assert "fabric up" not in text  # stopped during the build, not after it
    assert "testbed: SIGTERM received: stopping" in text  # said at once, before the teardown
    assert "interrupted; the fabric and everything else this run created were removed" in text
    assert run_leftovers(rid) == {"links": [], "bridges": [], "netns": [], "procs": []}
    clean = run_cli("clean", rid, timeout=60)
    assert clean.returncode == 0 and clean.stdout.strip() == "nothing to clean", clean.stdout + clean.stderr
