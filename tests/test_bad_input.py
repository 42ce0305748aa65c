"""Malformed scenarios: one clear error naming the key path, exit code 2, nothing created."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.spec import ScenarioError, parse_scenario

OK_WORKLOAD = "workload: {sizes: {min_bytes: 64KiB, max_bytes: 64KiB}}\n"

# (scenario text, words the error must contain)
BAD = {
    "unknown_top_key": ("fabrik: {spines: 2}\n" + OK_WORKLOAD, ["fabrik", "unknown key", "fabric"]),
    "unknown_nested_key": ("fabric: {spine: 2}\n" + OK_WORKLOAD, ["fabric.spine", "unknown key", "spines"]),
    "zero_spines": ("fabric: {spines: 0}\n" + OK_WORKLOAD, ["fabric.spines", "greater than or equal to 1"]),
    "negative_rate": ("fabric: {host_link_bps: -10}\n" + OK_WORKLOAD, ["fabric.host_link_bps", "greater than or equal to 100000"]),
    "rate_garbage": ("fabric: {fabric_link_bps: fast}\n" + OK_WORKLOAD, ["fabric.fabric_link_bps", "'10M'"]),
    "more_hosts_than_ports": ("fabric: {hosts_per_leaf: 30, spines: 4, ports_per_switch: 32}\n" + OK_WORKLOAD,
                              ["fabric.hosts_per_leaf", "ports_per_switch"]),
    "wrong_type": ("fabric: {leaves: two}\n" + OK_WORKLOAD, ["fabric.leaves", "valid integer"]),
    "bad_mtu": ("transport: {payload_bytes: 1000}\n" + OK_WORKLOAD, ["transport.payload_bytes", "1024"]),
    "no_workload_source": ("workload: {iterations: 3}\n", ["workload", "exactly one of"]),
    "sizes_reversed": ("workload: {sizes: {min_bytes: 1MiB, max_bytes: 64KiB}}\n",
                       ["workload.sizes", "below min_bytes"]),
    "single_host": ("fabric: {leaves: 1, hosts_per_leaf: 1}\n" + OK_WORKLOAD, ["at least 2 hosts"]),
    "not_a_mapping": ("- just\n- a list\n", ["top level must be a mapping"]),
    "bad_yaml": ("fabric: {spines: [\n", ["not valid YAML"]),
    "missing_simai_file": ("workload: {simai: {path: nowhere.txt}}\n", ["workload.simai.path", "no such file"]),
    "bad_buffer": ("fabric: {buffer_bytes: 10 apples}\n" + OK_WORKLOAD, ["fabric.buffer_bytes", "not a size"]),
    "buffer_below_one_frame": ("fabric: {buffer_bytes: 10B}\n" + OK_WORKLOAD, ["fabric.buffer_bytes", ">= 1514"]),
    "rate_too_low": ("fabric: {host_link_bps: 1}\n" + OK_WORKLOAD, ["fabric.host_link_bps", "100000"]),
    "boolean_count": ("fabric: {spines: true}\n" + OK_WORKLOAD, ["fabric.spines", "boolean"]),
    "duplicate_key": ("fabric: {spines: 2}\nfabric: {spines: 1}\n" + OK_WORKLOAD, ["appears twice"]),
    "ack_beyond_window": ("transport: {window_pkts: 8, ack_every_pkts: 16}\n" + OK_WORKLOAD,
                          ["transport.ack_every_pkts", "window_pkts"]),
    "reference_slower_than_link": ("reference_link_bps: 1M\n" + OK_WORKLOAD, ["reference_link_bps", "below"]),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_parse_error_names_key(name, tmp_path):
    text, words = BAD[name]
    from testbed.spec import load_scenario
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    with pytest.raises(ScenarioError) as ei:
        load_scenario(p)
    msg = str(ei.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_valid_units_parse():
    s = parse_scenario({"fabric": {"host_link_bps": "10Mbit", "fabric_link_bps": 2e7, "buffer_bytes": "64KiB"},
                        "workload": {"sizes": {"min_bytes": "64KiB", "max_bytes": "4MiB", "factor": 4}}})
    assert s.fabric.host_link_bps == 10e6 and s.fabric.fabric_link_bps == 20e6
    assert s.fabric.buffer_bytes == 65536
    assert s.workload.sizes.sizes() == [65536, 262144, 1048576, 4194304]
    assert s.scale_factor == pytest.approx(400e9 / 10e6)
    with pytest.raises(Exception):
        s.fabric.spines = 3  # frozen


def _kernel_snapshot():
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
    br = subprocess.run(["ovs-vsctl", "--timeout=3", "list-br"], capture_output=True, text=True).stdout
    netns = sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else []
    state = sorted(os.listdir("/run/aifabric")) if os.path.isdir("/run/aifabric") else []
    return {"links": names, "bridges": br.split(), "netns": netns, "state": state}


@pytest.mark.skipif(os.geteuid() != 0, reason="the CLI run path needs root")
@pytest.mark.parametrize("name", sorted(BAD))
def test_cli_rejects_before_touching_kernel(name, tmp_path):
    text, words = BAD[name]
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    before = _kernel_snapshot()
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(p), "--results", str(tmp_path / "res")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert "error" in res.stderr and words[0] in res.stderr
    after = _kernel_snapshot()
    created = {kind: sorted(set(after[kind]) - set(before[kind])) for kind in before}
    assert not any(created.values()), created
    assert not (tmp_path / "res").exists()


def test_not_a_scenario_file(tmp_path):
    from testbed.spec import load_scenario
    for path, words in ((Path("/dev/zero"), "not a regular file"), (tmp_path, "not a regular file")):
        with pytest.raises(ScenarioError, match=words):
            load_scenario(path)
    garbage = tmp_path / "garbage.yaml"
    garbage.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(ScenarioError, match="not UTF-8"):
        load_scenario(garbage)
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(ScenarioError, match=str(deep)):
        load_scenario(deep)
    big = tmp_path / "big.yaml"
    big.write_text("#" * (2 << 20))
    with pytest.raises(ScenarioError, match="at most"):
        load_scenario(big)


def test_shipped_scenarios_are_valid():
    from testbed.spec import load_scenario
    scenarios = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))
    assert len(scenarios) >= 2
    for p in scenarios:
        load_scenario(p)
