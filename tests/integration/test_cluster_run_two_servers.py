"""``testbed run --servers``: the quickstart split over two servers by pod (issue 21's acceptance).

The servers are testbed.cluster.servers.LocalServers: two network + mount namespaces, each with its own sshd and its
own ovsdb-server/ovs-vswitchd, on a lab LAN; ``testbed run`` runs in the lab's console and reaches them by ssh only
(Mininet's cluster engine, testbed.cluster.remote for the kernel steps). Run under ``flock /tmp/fabric.lock``.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from conftest import raise_if_disturbed
from testbed.cluster.servers import LocalServers
from testbed.host.timeout_scale import startup_s

REPO = Path(__file__).resolve().parents[2]
EMPTY = {"bridges": [], "interfaces": [], "netns": [], "processes": []}
#: the quickstart (scenarios/quickstart.yaml) at its largest size only, whose band it is judged in, with fewer
#: iterations (the suite's time)
QUICKSTART_SPLIT = (REPO / "scenarios" / "quickstart.yaml").read_text().replace(
    "sizes: {min_bytes: 64KiB, max_bytes: 4MiB, factor: 2}", "sizes: {min_bytes: 4MiB, max_bytes: 4MiB, factor: 2}"
).replace("iterations: 5", "iterations: 2")
#: the whole `testbed run` of QUICKSTART_SPLIT (build, traffic, teardown over both servers): about 60 s on the
#: development machines, so 3x that (x TESTBED_TIMEOUT_SCALE): a teardown that hangs fails here in minutes
RUN_TIMEOUT_S = startup_s(180)
#: the single-server band of the quickstart at 4 MiB (tests/integration/test_end_to_end.py)
SINGLE_SERVER_MIN_BUSBW_RATIO = 0.95


def _testbed(lab, *args, **kw):
    env = lab.console_env()
    env["PYTHONPATH"] = str(REPO)
    return lab.console_argv([sys.executable, "-m", "testbed.cli", *args]), env


def test_quickstart_over_two_servers_by_pod_is_faithful_within_the_single_server_band(tmp_path):
    assert "sizes: {min_bytes: 4MiB, max_bytes: 4MiB" in QUICKSTART_SPLIT and "iterations: 2" in QUICKSTART_SPLIT
    scenario = tmp_path / "quickstart_split.yaml"
    scenario.write_text(QUICKSTART_SPLIT)
    with LocalServers(2) as lab:
        argv, env = _testbed(lab, "run", str(scenario), "--results", str(tmp_path / "results"),
                             "--servers", "srv1,srv2", "--placement", "pod")
        res = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        print(res.stdout[-3000:], res.stderr[-3000:])
        run_dir = next((tmp_path / "results").iterdir())
        summary = json.loads((run_dir / "summary.json").read_text())
        raise_if_disturbed(summary)  # the test asserts the run faithful
        assert res.returncode == 0, res.stderr[-2000:]
        left = {srv.name: lab.server_leftovers(srv) for srv in lab.servers}
    assert left == {"srv1": EMPTY, "srv2": EMPTY}, left
    assert lab.leftovers() == {"netns": [], "processes": [], "dirs": []}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    placed = manifest["cluster"]
    assert placed["policy"] == "pod" and set(placed["servers"]) == {"srv1", "srv2"}
    # 2 spines, 4 leaves: 2 pods a server, the spines beside them; only leaf-spine uplinks cross
    assert len(placed["crossing_links"]) == 4
    assert summary["faithful"] is True, summary["violations"]
    servers = summary["fidelity"]["servers"]
    assert {s: v["verdict"] for s, v in servers.items()} == {"srv1": "faithful", "srv2": "faithful"}
    assert summary["checks"]["servers"]["status"] == "passed"
    largest = max(summary["sizes"], key=lambda r: r["size_bytes"])
    assert largest["size_bytes"] == 4 * 1024 * 1024
    assert largest["busbw_ratio"] >= SINGLE_SERVER_MIN_BUSBW_RATIO, largest
    t = summary["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] and t["order_errors"] == 0
    # the telemetry of both servers is in the one run directory: every shaped switch port sampled, the tunnel
    # ends (switch ports of crossing links) among them
    ports = pd.read_csv(run_dir / "ports.csv")
    crossing = {n for ab in placed["crossing_links"] for n in ab}
    assert any(p.split("-")[0] in crossing for p in ports["port"].unique())
    cpu = pd.read_csv(run_dir / "cpu.csv")
    assert set(cpu["server"]) == {"srv1", "srv2"}
    assert {f"agent-{r}.log" for r in range(8)} <= {p.name for p in run_dir.iterdir()}


def test_after_a_sigkill_of_the_runner_testbed_clean_leaves_nothing_on_either_server(tmp_path):
    scenario = tmp_path / "long.yaml"
    scenario.write_text(QUICKSTART_SPLIT.replace("iterations: 2", "iterations: 50"))
    results = tmp_path / "results"
    with LocalServers(2) as lab:
        argv, env = _testbed(lab, "run", str(scenario), "--results", str(results), "--servers", "srv1,srv2",
                             "--max-duration", "2h")
        runner = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            lines = []
            for line in runner.stdout:  # traffic under way: the fabric is up on both servers
                lines.append(line)
                if "fabric up" in line or time.monotonic() > deadline:
                    break
            assert any("fabric up" in ln for ln in lines), "".join(lines)[-3000:]
            time.sleep(3)
        finally:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait(timeout=30)
        run_dir = next(results.iterdir())
        rid = run_dir.name.rsplit("-", 1)[1]
        left = {srv.name: lab.server_leftovers(srv) for srv in lab.servers}
        assert all(left[s]["bridges"] for s in left), left  # the runner had no chance to tear down
        argv, env = _testbed(lab, "clean", "--servers", "srv1,srv2", rid)
        res = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        after = {srv.name: lab.server_leftovers(srv) for srv in lab.servers}
        assert after == {"srv1": EMPTY, "srv2": EMPTY}, after
        assert (run_dir / "INCOMPLETE").exists()
    assert lab.leftovers() == {"netns": [], "processes": [], "dirs": []}
