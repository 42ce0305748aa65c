"""Tenant isolation against a misbehaving host (issue 31 item 3), on a real fabric of 4 hosts (1 spine, 2 leaves,
10 Mbit/s): alpha h1 (leaf 1), h3 (leaf 2); beta h2 (leaf 1); shared h4 (leaf 2).

A host's neighbour table holds only the hosts it may reach (its tenant's and the shared ones), and an
attacker in alpha's h1 (scapy) gets nothing through to beta's h2: no ARP answer, no ping, no RoCE packet
to h2's queue pair, and no packet forged with h2's MAC and IP reaches even the hosts h1 may reach.
Inside alpha, ARP, ping and a TCP transfer still work."""
import subprocess
import sys
import time

from testbed.emulation.fabric import Fabric
from testbed.host.runlock import RunLock
from testbed.spec.scenario import parse_scenario
from testbed.spec.tenants import tenant_map
from testbed.tenants.security_probes import COUNT, run_security_probes, security_probes, table
from topology.naming import new_run_id

SCENARIO = {"name": "tenant_security", "seed": 1,
            "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2, "host_link_bps": "10M",
                       "fabric_link_bps": "10M", "buffer_bytes": "100KB"},
            "tenants": {"alpha": {"hosts": ["h1", "h3"]}, "beta": {"hosts": ["h2"]}},
            "shared_hosts": ["h4"],
            "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}}
TRANSFER_BYTES = 256 * 1024
SINK = ("import socket,sys;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
        "s.bind(('0.0.0.0',5201));s.listen(1);print('ready',flush=True);c,_=s.accept();n=0\n"
        "while True:\n b=c.recv(65536)\n if not b: break\n n+=len(b)\nprint(n,flush=True)")
SOURCE = "import socket,sys;s=socket.create_connection((sys.argv[1],5201),timeout=10);s.sendall(bytes({n}));s.close()"


def _neighbours(node, intf: str) -> set[str]:
    return {line.split()[0] for line in node.cmd(f"ip -4 neigh show dev {intf}").splitlines() if line.strip()}


def test_a_tenant_host_learns_and_reaches_nothing_of_another_tenant(tmp_path, datapath):
    spec = parse_scenario(SCENARIO)
    tmap = tenant_map(spec)
    rid = new_run_id()
    with RunLock(rid), Fabric(spec, rid, tmp_path, datapath) as fab:
        h = {x.name[len(rid):]: x for x in fab.layout.hosts}
        node = {k: fab.net.get(v.name) for k, v in h.items()}
        seen = {k: _neighbours(node[k], h[k].intf) for k in ("h1", "h2", "h4")}
        print("neighbours:", seen)
        assert seen["h1"] == {h["h3"].ip, h["h4"].ip}  # own tenant and the shared host, not beta's h2
        assert seen["h2"] == {h["h4"].ip}
        assert seen["h4"] == {h["h1"].ip, h["h2"].ip, h["h3"].ip}  # the shared host answers everyone

        t0 = time.monotonic()
        rows = run_security_probes(fab, security_probes(tmap, "alpha", "beta"))
        print(f"security probes ({time.monotonic() - t0:.1f} s):\n" + table(rows))
        by = {r["probe"]: r for r in rows}
        assert set(by) == {"arp-h1-h2", "ping-h1-h2", "roce-h1-h2", "spoof-h1-h3-as-h2", "spoof-h1-h4-as-h2",
                           "arp-h1-h3", "ping-h1-h3"}
        for r in rows:
            assert r["sent"] == COUNT, r
            if r["expected"] == "fail":  # nothing answered, nothing delivered
                assert r["answered"] == 0 and r["delivered"] in (None, 0), r
            else:  # the control inside alpha: every packet
                assert r["answered"] == COUNT and r["delivered"] in (None, COUNT), r
            assert r["passed"], r

        ping = node["h1"].cmd(f"ping -c 3 -i 0.2 -W 1 {h['h3'].ip}")
        assert " 3 received" in ping, ping
        sink = node["h3"].popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
        try:
            assert sink.stdout.readline().strip() == "ready"
            src = node["h1"].popen([sys.executable, "-c", SOURCE.format(n=TRANSFER_BYTES), h["h3"].ip])
            assert src.wait(timeout=15) == 0
            assert int(sink.stdout.readline()) == TRANSFER_BYTES
        finally:
            if sink.poll() is None:
                sink.kill()
            sink.wait()
        print(f"inside alpha: ping 3/3, TCP {TRANSFER_BYTES} B h1 -> h3")
