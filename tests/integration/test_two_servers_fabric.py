"""One fabric over two servers with Mininet's cluster engine (issue 21's foundation).

The servers are testbed.cluster.servers.LocalServers: two network + mount namespaces, each with
its own sshd and its own ovsdb-server/ovs-vswitchd (userspace datapath), on a lab LAN. The
driver (testbed.cluster.probe: MininetCluster, RemoteOVSSwitch, RemoteHost, RemoteSSHLink)
runs in the lab's console and reaches them by ssh only. Run under ``flock /tmp/fabric.lock``.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.cluster.servers import LocalServers

REPO = Path(__file__).resolve().parents[2]
EMPTY = {"bridges": [], "interfaces": [], "netns": [], "processes": []}


def _main_ovs_bridges():
    p = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True)
    return p.stdout.split() if p.returncode == 0 else None


def _driver(lab, *args, timeout=300):
    env = lab.console_env()
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(lab.console_argv([sys.executable, "-m", "testbed.cluster.probe", *args]),
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)


def test_fabric_over_two_servers_pings_and_carries_a_flow_through_the_ssh_tunnel(tmp_path):
    main_bridges = _main_ovs_bridges()
    out = tmp_path / "probe.json"
    with LocalServers(2) as lab:
        res = _driver(lab, "--servers", "srv1,srv2", "--pings", "20", "--seconds", "2", "--udp-bps", "10e6",
                      "--out", str(out))
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
        got = json.loads(out.read_text())
        placed = got["placement"]["servers"]
        far, near = got["far_host"], got["near_host"]
        # by pod: spine and leaf 1 with hosts 1-2 on srv1, leaf 2 with hosts 3-4 on srv2
        assert far in placed["srv2"] and near in placed["srv1"]
        assert len(got["placement"]["crossing_links"]) == 1
        assert {t[2] for t in got["tunnels"]} == {"srv1", "srv2"}
        assert got["rtt_far_us"]["received"] == got["rtt_far_us"]["sent"] == 20
        assert got["rtt_near_us"]["received"] == 20
        udp = got["udp"]
        assert udp["lost_packets"] <= 0.01 * udp["packets"]
        assert 0.95 * udp["offered_bps"] <= udp["received_bps"] <= 1.05 * udp["offered_bps"]
        udp_bytes = udp["packets"] * 1000
        for end, moved in got["tunnel_bytes"].items():  # the flows crossed the tunnel, both ends saw them
            assert max(moved["tx_bytes"], moved["rx_bytes"]) >= udp_bytes, (end, moved)
        assert got["tcp_bps"] > 10e6
        for srv in lab.servers:  # Mininet's stop removed its bridges, tunnels, hosts, shells everywhere
            assert lab.server_leftovers(srv) == EMPTY, srv.name
    assert lab.leftovers() == {"netns": [], "processes": [], "dirs": []}
    if main_bridges is not None:  # the machine's own Open vSwitch never saw the lab
        assert not [b for b in _main_ovs_bridges() if b.startswith(got["placement"]["servers"]["srv1"][0][:6])]


def test_lab_removes_everything_even_when_the_test_fails():
    with pytest.raises(RuntimeError, match="boom"):
        with LocalServers(2) as lab:
            srv1 = lab.servers[0]
            lab.on_server(srv1, ["ovs-vsctl", "add-br", lab.tag + "br", "--", "set", "bridge", lab.tag + "br",
                                 "datapath_type=netdev"])
            sleeper = subprocess.Popen(lab.console_argv(["ssh", "-n", "srv2", "sleep", "600"]),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            assert lab.tag + "br" in lab.server_leftovers(srv1)["bridges"]
            main = _main_ovs_bridges()
            assert main is None or lab.tag + "br" not in main  # a server's OVS is not the machine's
            raise RuntimeError("boom")
    sleeper.wait(timeout=10)
    assert lab.leftovers() == {"netns": [], "processes": [], "dirs": []}
    assert not os.path.exists(lab.dir)


def test_after_the_driver_is_killed_testbed_clean_on_each_server_removes_exactly_the_run(tmp_path):
    ready = tmp_path / "ready"
    with LocalServers(2) as lab:
        env = lab.console_env()
        env["PYTHONPATH"] = str(REPO)
        driver = subprocess.Popen(lab.console_argv([sys.executable, "-m", "testbed.cluster.probe", "--servers",
                                                    "srv1,srv2", "--pings", "1000", "--ready-file", str(ready)]),
                                  env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  start_new_session=True)
        try:
            for _ in range(600):
                if ready.exists() and ready.read_text().strip() or driver.poll() is not None:
                    break
                subprocess.run(["sleep", "0.1"])
            assert driver.poll() is None, driver.stderr.read().decode()[-2000:]
            rid = ready.read_text().strip()
        finally:
            os.killpg(driver.pid, 9)
            driver.wait(timeout=10)
        left = {srv.name: lab.server_leftovers(srv) for srv in lab.servers}
        assert all(left[s]["bridges"] for s in left), left  # Mininet had no chance to stop
        # a bystander on srv2 that is not of this run: clean must leave it alone
        lab.on_server(lab.servers[1], ["ovs-vsctl", "add-br", "tbffffl1", "--", "set", "bridge", "tbffffl1",
                                       "datapath_type=netdev"])
        res = subprocess.run(lab.console_argv([sys.executable, "-m", "testbed.cluster.clean", "srv1,srv2", rid]),
                             env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        assert lab.server_leftovers(lab.servers[0]) == EMPTY
        after2 = lab.server_leftovers(lab.servers[1])
        assert after2 == {**EMPTY, "bridges": ["tbffffl1"], "interfaces": ["tbffffl1"]}, after2  # its own port
    assert lab.leftovers() == {"netns": [], "processes": [], "dirs": []}
