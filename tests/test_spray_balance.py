"""Balanced packet spraying (issue 8): the ports of a QP are split evenly over the fabric's paths and
sent round robin (traffic.transport.entropy), the pools come from tracing each candidate port hop by
hop (testbed.emulation.entropy_paths), and the agents get them in their start configuration."""
import hashlib
import random
from collections import Counter

import pytest

from testbed.emulation.entropy_paths import host_port, path_pools, trace_path
from topology import dual_plane, fat_tree, spine_leaf
from topology.routing import next_hop_ports
from traffic.protocol import AgentConfig, PathPorts, RankAddress, decode, encode
from traffic.transport import TransportParams
from traffic.transport.entropy import Spray, balanced_ports

RID = "tb5a5a"


def test_balanced_ports_take_as_many_ports_from_every_path_interleaved():
    pools = [list(range(1000, 1020)), list(range(2000, 2017)), list(range(3000, 3030))]
    ports = balanced_ports(pools, 64, random.Random(1))
    path_of = {p: i for i, pool in enumerate(pools) for p in pool}
    # 64 // 3 = 21 per path, but the shortest pool has 17: 17 from each, every port distinct
    assert len(ports) == 51 and len(set(ports)) == 51
    assert Counter(path_of[p] for p in ports) == {0: 17, 1: 17, 2: 17}
    # consecutive ports take different paths: every window of 3 holds each path once
    for i in range(0, 51, 3):
        assert {path_of[p] for p in ports[i:i + 3]} == {0, 1, 2}
    assert ports == balanced_ports(pools, 64, random.Random(1))  # seeded
    assert ports != balanced_ports(pools, 64, random.Random(2))
    # fewer ports wanted than paths: still one per path (an even split needs every path)
    assert len(balanced_ports(pools, 2, random.Random(1))) == 3
    with pytest.raises(ValueError, match="every path needs at least one port"):
        balanced_ports([[1], []], 8, random.Random(1))
    with pytest.raises(ValueError, match="every path needs at least one port"):
        balanced_ports([], 8, random.Random(1))


def test_spray_with_traced_paths_sends_each_path_exactly_its_share():
    pools = [[50000 + 10 * j + i for i in range(10)] for j in range(4)]  # 4 paths, 10 ports each
    path_of = {p: j for j, pool in enumerate(pools) for p in pool}
    policy = Spray(5, 0, ports_per_qp=16, path_ports={("10.0.1.1", "10.0.2.1"): pools})
    qe = policy.for_qp(49999, "10.0.1.1", "10.0.2.1")
    assert len(qe.ports) == 16 and Counter(path_of[p] for p in qe.ports) == {0: 4, 1: 4, 2: 4, 3: 4}
    paths = [path_of[qe.ports[qe.port_index(i)]] for i in range(1000)]
    for i in range(0, 1000 - 4):  # round robin: any 4 packets in a row take the 4 paths
        assert len(set(paths[i:i + 4])) == 4
    assert Counter(paths) == {0: 250, 1: 250, 2: 250, 3: 250}
    fresh = [Spray(5, 0, 16, path_ports={("10.0.1.1", "10.0.2.1"): pools}).for_qp(49999, "10.0.1.1", "10.0.2.1")
             for _ in range(2)]
    assert fresh[0].ports == qe.ports  # seeded: the same ports and the same cycle
    assert [fresh[0].port_index(i) for i in range(100)] == [fresh[1].port_index(i) for i in range(100)]
    # another pair (no traced paths): the seeded random set, still round robin
    other = policy.for_qp(49999, "10.0.1.1", "10.0.3.1")
    assert other.ports[0] == 49999 and len(set(other.ports)) == 16
    assert Counter(other.port_index(i) for i in range(1600)) == {i: 100 for i in range(16)}


def test_path_ports_reach_the_agent_in_its_config():
    cfg = AgentConfig(rank=0, ranks=[RankAddress(0, "10.0.1.1", "h1")], peers=[], seed=1,
                      transport=TransportParams(entropy="spray", entropy_ports=8),
                      path_ports=[PathPorts("10.0.1.1", "10.0.2.1", [[50000, 50002], [50001]])])
    assert decode(encode(cfg)) == cfg


def test_host_port_finds_the_switch_port_of_every_host_address():
    layout = spine_leaf.build(RID, 2, 4, 2)
    assert host_port(layout, "10.0.1.2") == (f"{RID}l1", 2, f"{RID}h2")
    planes = dual_plane.build(RID, 2, 2, 2)
    for nic in planes.nics:
        sw, port, host = host_port(planes, nic.ip)
        assert host == nic.host
        assert next(ln for ln in planes.links_of(sw) if ln.peer(sw).node == nic.host
                    and (ln.a.number if ln.a.node == sw else ln.b.number) == port)
    with pytest.raises(KeyError, match="10.9.9.9"):
        host_port(layout, "10.9.9.9")


class HashingSwitches:
    """Stands in for ovs-vswitchd's ``ofproto/trace`` in these unit tests: every switch sends a packet
    out of one of the controller's equal-cost ports for its destination (topology.routing), chosen by
    a SHA-256 of (switch, addresses, source port) (not a CRC: CRCs of names that differ in a fixed way
    are affine, so one switch would repeat another's choice). The fabric tests trace the real switches."""

    def __init__(self, layout):
        self.layout, self.hops, self.traces = layout, next_hop_ports(layout), 0

    def egress(self, bridge, in_port, src_ip, dst_ip, sport, src_mac):
        # the packet traced carries its host's MAC: with tenant isolation a host port admits only its own host's
        # MAC and address (a trace without dl_src fell to the spoof drop: 0 output ports, lab 6's spread_spray)
        assert src_mac == self.layout.host_by_ip(src_ip).mac, (src_ip, src_mac)
        self.traces += 1
        ports = self.hops[bridge][self.layout.host_by_ip(dst_ip).name]
        digest = hashlib.sha256(f"{bridge} {src_ip} {dst_ip} {sport}".encode()).digest()
        return ports[int.from_bytes(digest[:4], "big") % len(ports)]


@pytest.mark.parametrize("layout, src, dst, paths", [
    (spine_leaf.build(RID, 3, 2, 3), "10.0.1.1", "10.0.2.3", 3),  # 3 spines: k not a power of two
    (spine_leaf.build(RID, 3, 2, 3), "10.0.1.1", "10.0.1.2", 1),  # same leaf: one path
    (fat_tree.build(RID, 4), None, None, 4),                      # across pods: 2 aggregations x 2 cores
])
def test_path_pools_split_traced_ports_by_the_whole_path(layout, src, dst, paths):
    src = src or layout.hosts[0].ip
    dst = dst or layout.hosts[-1].ip
    switches = HashingSwitches(layout)
    pools = path_pools(layout, switches, src, dst, 64)
    assert len(pools) == paths and all(len(p) >= 64 // paths for p in pools)
    # with the routing table only the switches with a choice are traced: the same pools, fewer traces
    fewer = HashingSwitches(layout)
    assert path_pools(layout, fewer, src, dst, 64, next_hop_ports(layout)) == pools
    assert fewer.traces < switches.traces
    assert len({p for pool in pools for p in pool}) == sum(map(len, pools))  # a port is on one path
    for pool in pools:  # every port of a pool takes the same hops, ending at the destination's switch
        hops = {trace_path(layout, switches, src, dst, p) for p in pool}
        assert len(hops) == 1
        last_switch, out = hops.pop()[-1]
        assert (last_switch, out) == host_port(layout, dst)[:2]
    assert pools == path_pools(layout, HashingSwitches(layout), src, dst, 64)  # candidates are seeded
