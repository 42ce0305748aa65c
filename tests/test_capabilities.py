"""Capability probe: report wording (unit) and real probing leaving nothing behind (root)."""
import json
import os
import subprocess

import pytest

from testbed.host.capabilities import QDISCS, TOOLS, Capabilities, Feature, format_report, probe
from topology.naming import new_run_id


def _caps(**overrides) -> Capabilities:
    feats = {
        "ovs": Feature(True, "running, ovs_version 3.1.0"),
        "ovs_kernel_datapath": Feature(False, "no openvswitch kernel module"),
        "ovs_userspace_datapath": Feature(True, "bridge works"),
        **{f"qdisc_{k}": Feature(k in ("htb", "tbf", "clsact"), "works") for k in QDISCS},
        "nft_egress": Feature(True, "netdev egress hook"),
        "ethtool": Feature(True, "checksum offload can be turned off"),
        **{t: Feature(True, f"/usr/bin/{t}") for t in TOOLS},
        "mininet_module": Feature(True, "/usr/lib/python3/dist-packages/mininet"),
    }
    feats["qdisc_red"] = Feature(False, "kernel has no sch_red")
    feats["qdisc_netem"] = Feature(False, "kernel has no sch_netem")
    kw = dict(run_id="tb0001", kernel="6.1.0", features=feats, datapath="user",
              ecn_marker="nftables", delay="none", ovs_version="3.1.0")
    kw.update(overrides)
    return Capabilities(**kw)


def test_report_names_backends():
    text = format_report(_caps())
    assert "ovs datapath ...... userspace (netdev): no openvswitch kernel module" in text
    assert "sch_red ........... absent -> ECN marking uses nftables fallback marker" in text
    assert "sch_netem ......... absent" in text
    assert "sch_htb ........... present" in text
    assert "backends: datapath=user ecn_marker=nftables delay=none" in text


def test_report_kernel_datapath_and_red():
    feats = dict(_caps().features)
    feats["ovs_kernel_datapath"] = Feature(True, "openvswitch kernel module loaded")
    feats["qdisc_red"] = Feature(True, "works with ecn")
    text = format_report(_caps(features=feats, datapath="kernel", ecn_marker="red"))
    assert "ovs datapath ...... kernel (system): openvswitch kernel module loaded" in text
    assert "sch_red ........... present" in text


def test_as_dict_is_json_and_has_backends():
    d = json.loads(json.dumps(_caps().as_dict()))
    assert d["backends"] == {"datapath": "user", "ecn_marker": "nftables", "delay": "none"}
    assert d["features"]["qdisc_red"] == {"available": False, "detail": "kernel has no sch_red"}


def test_has_unknown_feature_names_known_ones():
    caps = _caps()
    assert caps.has_qdisc("htb") and not caps.has_qdisc("red")
    with pytest.raises(KeyError, match="unknown feature 'qdisc_foo'; known: ovs, "):
        caps.has("qdisc_foo")


def test_probe_rejects_bad_run_id():
    with pytest.raises(ValueError, match="'TB0001'"):
        probe("TB0001")


def _leftovers(rid: str) -> list[str]:
    from pyroute2 import IPRoute, netns

    with IPRoute() as ipr:
        names = [link.get("ifname") for link in ipr.get_links()]
    names += netns.listnetns()
    br = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True)
    names += br.stdout.split()
    return [n for n in names if n.startswith(rid)]


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_probe_really_tries_and_leaves_nothing():
    rid = new_run_id()
    caps = probe(rid)
    assert caps.run_id == rid
    assert _leftovers(rid) == []
    assert caps.datapath in ("kernel", "user")  # scripts/test starts OVS
    assert caps.has_qdisc("htb"), "HTB shapes every link; the testbed cannot run without it"
    assert caps.ecn_marker == ("red" if caps.has_qdisc("red") else
                               "nftables" if caps.has("nft_egress") else "none")
    assert caps.delay == ("netem" if caps.has_qdisc("netem") else "none")
    kernel_module = os.path.isdir("/sys/module/openvswitch")
    if not kernel_module:
        assert caps.datapath == "user"


def test_ovs_probe_waits_scale_with_the_machine(monkeypatch):
    """A loaded guest under software emulation took more than 5 s to add the probe's bridge (2026-12-02)."""
    from testbed.host import capabilities as caps
    seen = []
    monkeypatch.setattr(caps, "_run", lambda argv, timeout=10: seen.append((argv[1], timeout)) or (0, "", ""))
    monkeypatch.delenv("TESTBED_TIMEOUT_SCALE", raising=False)
    caps._ovs_vsctl("show")
    monkeypatch.setenv("TESTBED_TIMEOUT_SCALE", "8")
    caps._ovs_vsctl("show")
    caps._ovs_vsctl("show", timeout=2)
    assert seen == [("--timeout=5", 10), ("--timeout=40", 45), ("--timeout=16", 21)]


def test_report_names_the_acceleration():
    feats = dict(_caps().features)
    feats["acceleration"] = Feature(False, "guest of testbed vm, software emulation (QEMU TCG): slow")
    assert "acceleration ...... guest of testbed vm, software emulation (QEMU TCG): slow" in \
        format_report(_caps(features=feats))
