"""Bad input to the cluster pieces is refused before anything touches the kernel or ssh."""
import pytest

from testbed.cluster.clean import clean_servers
from testbed.cluster.engine import ClusterFabric
from topology.placement import place
from testbed.cluster.probe import ping_stats
from testbed.cluster.servers import LocalServers
from topology import spine_leaf


@pytest.mark.parametrize("count", [0, 9, True, 1.5])
def test_lab_size_is_checked(count):
    with pytest.raises(ValueError, match="count"):
        LocalServers(count)


def test_clean_needs_valid_run_ids_before_any_ssh():
    with pytest.raises(ValueError, match="run_ids is empty"):
        clean_servers(["srv1"], [])
    with pytest.raises(ValueError, match="'tbXYZ'"):
        clean_servers(["srv1"], ["tbXYZ"])


def test_engine_checks_datapath_rate_and_placement_before_building():
    lay = spine_leaf.build("tb0010", spines=1, leaves=2, hosts_per_leaf=1)
    p = place(lay, ["srv1", "srv2"])
    with pytest.raises(ValueError, match="datapath = 'dpdk'"):
        ClusterFabric(lay, p, datapath="dpdk")
    with pytest.raises(ValueError, match="link_bps = 10"):
        ClusterFabric(lay, p, link_bps=10)
    other = spine_leaf.build("tb0011", spines=1, leaves=2, hosts_per_leaf=1)
    with pytest.raises(ValueError, match="no server for"):
        ClusterFabric(other, p)


def test_ping_summary_parsing():
    out = ("--- 10.0.2.1 ping statistics ---\n20 packets transmitted, 19 received, 5% packet loss, time 400ms\n"
           "rtt min/avg/max/mdev = 0.411/0.782/2.120/0.555 ms\n")
    assert ping_stats(out) == {"sent": 20, "received": 19, "avg_us": 782.0, "mdev_us": 555.0}
    assert ping_stats("3 packets transmitted, 0 received, 100% packet loss")["avg_us"] is None
    with pytest.raises(ValueError, match="no ping summary"):
        ping_stats("connect: Network is unreachable")
