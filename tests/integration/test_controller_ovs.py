"""The fabric controller against real userspace Open vSwitch (root).

2 spines x 2 leaves x 2 hosts, Mininet ``OVSSwitch(datapath='user',
protocols='OpenFlow15')``, the controller as ``python -m controllers.run``.
Checks: ready file, all-pairs ping, the OVS group really carries
``selection_method=hash,fields(...)``, UDP source ports spread over both
uplinks, proxy ARP stays silent for unknown addresses, a reconnecting switch
is resynced (a foreign flow removed, the rest left in place), SIGTERM exits with status 0.

Every object carries a fresh run id prefix (``tbXXXX``) and the run's lock is
held throughout, so a concurrent ``testbed clean`` leaves it alone; teardown
removes only this run's objects.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controllers.ofplan import plan_fabric
from controllers import contract
from testbed.emulation.controller_proc import controller_settings, write_conf
from testbed.spec.scenario import parse_scenario
from topology import model, spine_leaf
from topology.naming import new_run_id
from testbed.host.runlock import RunLock

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0
HASH_FIELDS_TEXT = "selection_method=hash,fields(ip_src,ip_dst,nw_proto,tcp_src,tcp_dst,udp_src,udp_dst)"
UDP_FLOWS = 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ofctl(*args: str) -> str:
    return subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", *args], check=True, capture_output=True,
                          text=True, timeout=20).stdout


def build_test_fabric(layout: model.Layout, controller_port: int):
    """Start a Mininet fabric of ``layout`` (the testbed's FabricTopo graph).

    Userspace OVS switches with the layout's names, dpids and port numbers, a
    RemoteController at 127.0.0.1:``controller_port``, plain veth links.
    Checksum offloads off on every veth (the userspace datapath otherwise
    breaks TCP/UDP checksums), IPv6 off in hosts and on switch ports.
    Returns the started ``Mininet``; on failure stops what it built and
    re-raises. (The project's Fabric class will replace this helper.)
    """
    from functools import partial

    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch, RemoteController

    from testbed.emulation.topo import FabricTopo

    setLogLevel("warning")
    rid = layout.run_id
    net = Mininet(topo=FabricTopo(layout=layout), switch=partial(OVSSwitch, datapath="user", protocols="OpenFlow15"),
                  build=False, controller=None, autoSetMacs=False, autoStaticArp=False)
    try:
        net.addController(f"{rid}c0", controller=RemoteController, ip="127.0.0.1", port=controller_port)
        net.build()
        net.start()
        for host in net.hosts:
            host.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
            for intf in host.intfList():
                if intf.name != "lo":
                    host.cmd(f"ethtool -K {intf.name} tx off rx off")
        for sw in net.switches:
            for intf in sw.intfList():
                if intf.name != "lo":
                    sw.cmd(f"ethtool -K {intf.name} tx off rx off")
                    sw.cmd(f"sysctl -qw net.ipv6.conf.{intf.name}.disable_ipv6=1")
        return net
    except BaseException:
        net.stop()
        raise


def _wait_ready(proc: subprocess.Popen, ready: Path, log: Path, timeout_s: float, newer_than_ns: int = 0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"controller exited with {proc.returncode}:\n{log.read_text()}"
        if ready.exists() and ready.stat().st_mtime_ns > newer_than_ns:
            doc = json.loads(ready.read_text())
            assert doc["errors"] == [], f"switches rejected messages: {doc['errors']}"
            return doc
        time.sleep(0.1)
    pytest.fail(f"no ready file within {timeout_s:.0f} s; controller log:\n{log.read_text()}")


def _group_bucket_packets(bridge: str) -> list[int]:
    """Per-bucket packet counters of the bridge's groups, once they stop moving.

    OVS pushes datapath counters into flow and group stats from its
    revalidator threads (about every 500 ms), so a single read lags.
    """
    last = None
    for _ in range(20):
        text = _ofctl("dump-group-stats", bridge)
        now = [int(n) for n in re.findall(r"bucket\d+:packet_count=(\d+)", text)]
        if now == last:
            return now
        last = now
        time.sleep(0.6)
    pytest.fail(f"group counters on {bridge} did not settle: {last}")


def _remove_leftovers(rid: str) -> None:
    """Delete bridges and root-namespace links of this run only (if any survived)."""
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split()
    for br in bridges:
        if br.startswith(rid):
            subprocess.run(["ovs-vsctl", "--if-exists", "del-br", br], check=False)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for name in re.findall(r"^\d+: ([^:@]+)", links, flags=re.M):
        if name.startswith(rid):
            subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)


def test_controller_routes_real_ovs_fabric(tmp_path: Path) -> None:
    rid = new_run_id()
    topo = spine_leaf.build(rid, spines=2, leaves=2, hosts_per_leaf=2)
    plans = plan_fabric(topo)
    topo_file = tmp_path / "topology.json"
    model.save(topo, topo_file)
    ready_file = tmp_path / "controller.ready"
    log_file = tmp_path / "controller.log"
    port = _free_port()
    conf_file = tmp_path / "controller.conf"
    spec = parse_scenario({"workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})
    settings = controller_settings(spec, rid, tmp_path)
    settings_file = tmp_path / contract.SETTINGS_FILE
    settings_file.write_text(contract.dumps(settings))
    assert Path(settings.ready_file) == ready_file
    write_conf(conf_file, run_id=rid, port=port, settings_file=settings_file, log_file=log_file)
    cmd = [sys.executable, "-m", "controllers.run", "--config-file", str(conf_file), "--testbed-run-id", rid]

    with RunLock(rid):
        proc = None
        net = None
        exit_status = None
        try:
            proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            net = build_test_fabric(topo, port)
            ready = _wait_ready(proc, ready_file, log_file, READY_TIMEOUT_S)
            assert ready["dpids"] == sorted(plans)
            assert ready["groups"] == 2
            assert ready["flows"] == sum(len(p.flows) for p in plans.values())

            # OVS decoded the NTR property into hash fields, buckets per spine.
            for leaf in (s for s in topo.switches if s.role == "leaf"):
                groups = _ofctl("dump-groups", leaf.name)
                assert HASH_FIELDS_TEXT in groups, groups
                assert groups.count("bucket=") == 2, groups
                assert "type=select" in groups, groups

            # All pairs reach each other (proxy ARP + L3 routes + ECMP).
            hosts = [net.get(h.name) for h in topo.hosts]
            failures = []
            for src in hosts:
                for dst in hosts:
                    if src is not dst:
                        out = src.cmd(f"ping -c1 -W2 {dst.IP()}")
                        if " 0% packet loss" not in out:
                            failures.append(f"{src.name} -> {dst.name}: {out.strip()[-80:]}")
            assert not failures, "\n".join(failures)

            # UDP source-port entropy spreads over both uplinks of leaf 1.
            leaf1 = f"{rid}l1"
            src, dst = hosts[0], hosts[2]
            before = _group_bucket_packets(leaf1)
            sender = tmp_path / "udp_flows.py"
            sender.write_text("import socket\n"
                              f"for p in range(40000, {40000 + UDP_FLOWS}):\n"
                              "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                              "    s.bind(('0.0.0.0', p))\n"
                              f"    s.sendto(b'x' * 64, ('{dst.IP()}', 4791))\n"
                              "    s.close()\n")
            out = src.cmd(f"{sys.executable} {sender}; echo rc=$?")
            assert "rc=0" in out, out
            after = _group_bucket_packets(leaf1)
            delta = [a - b for a, b in zip(after, before)]
            assert len(delta) == 2 and sum(delta) == UDP_FLOWS, (before, after)
            assert min(delta) > 0, f"all {UDP_FLOWS} UDP flows hashed to one uplink: {delta}"

            # Unknown addresses get no proxy ARP reply.
            out = src.cmd("ping -c1 -W1 10.0.2.99; ip neigh show 10.0.2.99")
            assert "lladdr" not in out, out

            # Reconnect: the switch is resynced (foreign flow gone, planned entries kept). Pointing the
            # bridge elsewhere and back drops the connection without OVS flushing the tables (OVS flushes
            # only when a bridge goes from no controller to some or back, e.g. del-controller).
            mtime = ready_file.stat().st_mtime_ns
            subprocess.run(["ovs-vsctl", "set-controller", leaf1, f"tcp:127.0.0.1:{_free_port()}"], check=True)
            _ofctl("add-flow", leaf1, "priority=7,cookie=0x99,dl_type=0x1234,actions=drop")
            subprocess.run(["ovs-vsctl", "set-controller", leaf1, f"tcp:127.0.0.1:{port}"], check=True)
            ready = _wait_ready(proc, ready_file, log_file, READY_TIMEOUT_S, newer_than_ns=mtime)
            # resynced, not wiped: leaf1's 8 planned flows found in place, the foreign flow removed,
            # the existing group modified (the other switches' entries are from their first install)
            assert ready["resync"]["flows_unchanged"] == 8, ready
            assert ready["resync"]["flows_removed"] == 1 and ready["resync"]["groups_modified"] == 1, ready
            assert ready["resync"]["groups_added"] == 1, ready  # leaf2's, at its first install
            flows = _ofctl("dump-flows", leaf1)
            assert "cookie=0x99" not in flows, flows
            assert HASH_FIELDS_TEXT in _ofctl("dump-groups", leaf1)
            out = src.cmd(f"ping -c1 -W2 {dst.IP()}")
            assert " 0% packet loss" in out, out
        finally:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    exit_status = proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            if net is not None:
                net.stop()
            _remove_leftovers(rid)
    assert exit_status == 0, f"controller did not exit cleanly on SIGTERM ({exit_status}):\n{log_file.read_text()}"
