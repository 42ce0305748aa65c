"""Weighted load balancing: the delivered shares of flows match the weights (issue 8).

Open vSwitch's select group scores bucket i as ``hash(i, flow) & 0xffff`` times
its weight and takes the highest, so weights 1:3 in two buckets give the light
bucket about 1/6 of the flows, not 1/4 (checked here on the same fabric as a
control). The ``weighted`` policy gives each next hop as many equal-weight
buckets as its weight instead: 1:3 becomes 1 + 3 buckets, 25% of the flows on
the light spine. 2000 flows (one datagram per UDP source port): the binomial
standard deviation of a 25% share is 1 percentage point, so the +-5 point band
of the issue is five of them.
"""
import subprocess

from benchmarks.instruments.flow_shares import raw_weight_group, uplink_flow_shares

FLOWS = 2000


def test_weighted_buckets_deliver_the_weights_and_raw_ovs_weights_do_not(make_fabric):
    weights = {"s1": 1, "s2": 3}
    fab = make_fabric(spines=2, leaves=2, hosts_per_leaf=1, host_link_bps=20e6, fabric_link_bps=20e6,
                      load_balance={"policy": "weighted", "weights": weights})
    shares = uplink_flow_shares(fab, FLOWS)
    print(f"weighted 1:3 ({FLOWS} flows): share of flows on s1 {shares['s1']:.3f}, s2 {shares['s2']:.3f}")
    assert 0.20 <= shares["s1"] <= 0.30, shares

    # control: the same 1:3 as two buckets with OVS weights 1 and 3 on the leaf's uplink group (group 1)
    leaf = fab.layout.attachment(fab.layout.hosts[0].name).node
    dump = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-groups", leaf], capture_output=True, text=True)
    assert "group_id=1," in dump.stdout, dump.stdout
    subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "mod-group", leaf, raw_weight_group(fab.layout, weights)],
                   check=True)
    raw = uplink_flow_shares(fab, FLOWS)
    print(f"raw OVS bucket weights 1:3 ({FLOWS} flows): share on s1 {raw['s1']:.3f} (1/6 = 0.167 by OVS's rule)")
    assert 0.12 <= raw["s1"] <= 0.21, raw
