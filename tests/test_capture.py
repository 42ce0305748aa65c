"""output.pcap (issue 10 item 3) without a fabric: names checked against the layout before anything is built,
the tcpdump command, packet counting, the manifest block; and the --cli parsers of ovs-ofctl output."""
import json

import pytest

from testbed.results.rundir import RunDir
from testbed.spec.pcap import PcapSpec, resolve_ports
from testbed.spec.scenario import ScenarioError, parse_scenario
from topology import build


def _spec(pcap, **fabric):
    return parse_scenario({"fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, **fabric},
                           "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}},
                           "output": {"pcap": pcap}})


def _layout(spec):
    return build(spec.fabric.kind, spec.fabric, "tb12ab")


def test_host_switch_port_and_link_names_resolve_to_interfaces():
    spec = _spec({"ports": ["l1-s2", "h3", "s1-eth2", "l2-h4"], "snaplen_bytes": 96, "max_bytes": "10MB"})
    assert spec.output.pcap.max_bytes == 10_000_000 and spec.output.pcap.snaplen_bytes == 96
    got = [(p.port, p.asked, p.intf, p.host) for p in resolve_ports(_layout(spec), spec.output.pcap.ports)]
    assert got == [("h3-eth0", "h3", "tb12abh3-eth0", "tb12abh3"), ("l1-eth4", "l1-s2", "tb12abl1-eth4", None),
                   ("l2-eth2", "l2-h4", "tb12abl2-eth2", None), ("s1-eth2", "s1-eth2", "tb12abs1-eth2", None)]


def test_all_is_every_host_nic_and_switch_port_once():
    spec = _spec({"ports": ["all", "h1"]})
    ports = resolve_ports(_layout(spec), spec.output.pcap.ports)
    assert len(ports) == 4 + 2 * 4 + 2 * 2 and len({p.intf for p in ports}) == len(ports)
    assert ports[0].port == "h1-eth0" and ports[0].asked == "h1"  # named explicitly as well
    assert sum(p.host is not None for p in ports) == 4


@pytest.mark.parametrize("pcap, message", [
    ({"ports": ["h9"]}, "output.pcap.ports.0: 'h9' is not a port of this fabric; allowed: all, a host (h1, h2, h3, h4)"),
    ({"ports": ["h1", "l1-s3"]}, "output.pcap.ports.1: 'l1-s3' is not a port"),
    ({"ports": ["l1-eth9"]}, "'l1-eth9' is not a port of this fabric"),
    ({"ports": []}, "output.pcap.ports"),
    ({"ports": ["h1", "h1"]}, "named more than once: h1"),
    ({"ports": ["h1"], "snaplen_bytes": 20}, "output.pcap.snaplen_bytes"),
    ({"ports": ["h1"], "max_bytes": "1KB"}, "output.pcap.max_bytes"),
    ({"ports": ["h1"], "size": 1}, "output.pcap.size: unknown key; allowed keys here: max_bytes, ports, snaplen_bytes"),
])
def test_bad_pcap_settings_are_refused_naming_the_key(pcap, message):
    with pytest.raises(ScenarioError) as e:
        _spec(pcap)
    assert message in str(e.value)


def test_tcpdump_runs_in_the_hosts_namespace_for_a_host_nic(tmp_path):
    from testbed.measure.capture import tcpdump_argv

    spec = _spec({"ports": ["h1", "l1-h1"]})
    host, switch = resolve_ports(_layout(spec), spec.output.pcap.ports)
    argv = tcpdump_argv(host, 4242, tmp_path / "h1-eth0.pcap", 128)
    assert argv[:3] == ["nsenter", "--net=/proc/4242/ns/net", "--"]
    assert argv[3:9] == ["tcpdump", "-i", "tb12abh1-eth0", "-s", "128", "-w"] and "-Z" in argv
    assert tcpdump_argv(switch, None, tmp_path / "l1-eth1.pcap", 64)[:3] == ["tcpdump", "-i", "tb12abl1-eth1"]


def test_packets_are_counted_and_listed_in_the_manifest(tmp_path):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    from testbed.measure.capture import add_to_manifest, count_packets, format_report

    wrpcap(str(tmp_path / "a.pcap"), [Ether() / IP() / UDP(dport=4791) / bytes(100)] * 7)
    assert count_packets(tmp_path / "a.pcap") == 7 and count_packets(tmp_path / "missing.pcap") == 0
    (tmp_path / "manifest.json").write_text(json.dumps({"run_id": "tb12ab"}))
    block = {"files": [{"file": "pcap/a.pcap", "packets": 7, "capped": True}]}
    add_to_manifest(tmp_path, block)
    assert RunDir(tmp_path).manifest == {"run_id": "tb12ab", "pcap": block}
    assert format_report(block) == "pcap: 1 files, 7 packets (pcap/a.pcap 7 (capped))"


def test_pcap_spec_defaults():
    s = PcapSpec(ports=["all"])
    assert (s.snaplen_bytes, s.max_bytes) == (128, 50_000_000)


def test_cli_parses_ovs_ofctl_groups_and_bucket_stats():
    from testbed.pipeline.interactive import parse_group_stats, parse_groups

    desc = (" group_id=1,type=select,selection_method=hash,fields(ip_src,ip_dst,udp_src),bucket=bucket_id:0,"
            "weight:3,actions=output:3,bucket=bucket_id:1,actions=output:4\n")
    stats = (" group_id=1,duration=0.017s,ref_count=0,packet_count=12,byte_count=0,bucket0:packet_count=5,"
             "byte_count=0,bucket1:packet_count=7,byte_count=0\n")
    assert parse_groups("OFPST_GROUP_DESC reply (OF1.5) (xid=0x2):\n" + desc) == {1: ["output:3", "output:4"]}
    assert parse_group_stats(stats) == {1: [5, 7]}


def test_cli_names_htb_classes_leaves_and_reads_a_paused_rate():
    from dataplane.queues.htb_classes import leaf_handle
    from testbed.pipeline.interactive import CLASS_BY_LEAF, PAUSED_RATE_BPS, leaf_class_name, tbf_rate_bps

    assert [f"{leaf_handle(i) >> 16:x}:" for i in range(3)] == list(CLASS_BY_LEAF)
    assert leaf_class_name({"kind": "tbf", "handle": "20:"}) == "lossless"
    assert leaf_class_name({"kind": "bfifo", "handle": "10:"}) == "bfifo"  # htb_bfifo's one fifo
    assert tbf_rate_bps({"options": {"rate": 1}}) == PAUSED_RATE_BPS  # iproute2 -j: bytes/s
    assert tbf_rate_bps({"options": {"rate": "8bit"}}) == PAUSED_RATE_BPS
    assert tbf_rate_bps({"options": {"rate": 1250000}}) == 10e6
