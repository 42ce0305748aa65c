"""workload.perftest (Soft-RoCE verbs traffic): the scenario keys, the refusal where rdma_rxe or perftest is
absent, perftest's report parsed from output captured in the scripts/vm guest, and the rxe bridge's names
and GID lookup. The runs themselves: tests/vm/test_guest_perftest.py (the guest tier)."""
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.emulation import perftest as pair
from testbed.emulation.rxe import names, roce_v2_ipv4_gid_index, RxeError
from testbed.results.perftest import PerftestOutputError, bw_bps, cpu_mhz, parse_report, roce_pkts_min
from testbed.spec import perftest as spec_perftest
from testbed.spec.scenario import parse_scenario
from testbed.spec.yaml_loader import ScenarioError

DATA = Path(__file__).parent / "data" / "perftest"
REPO = Path(__file__).resolve().parents[1]


def _scenario(runs, **workload):
    return {"name": "rxe", "fabric": {"spines": 1, "leaves": 1, "hosts_per_leaf": 2},
            "workload": {"perftest": runs, **workload}}


LAT = {"test": "ib_send_lat", "src": "h1", "dst": "h2", "size_bytes": 64, "iterations": 200}
BW = {"test": "ib_write_bw", "src": 0, "dst": 1, "size_bytes": "4KiB", "iterations": 100}


# -- the scenario keys -------------------------------------------------------------------------------------
def test_perftest_workload_parses_and_resolves_hosts():
    spec = parse_scenario(_scenario([LAT, BW]))
    runs = spec_perftest.check_runs(spec.workload.perftest, ["h1", "h2"])
    assert runs == [{"name": "ib_send_lat0", "test": "ib_send_lat", "src": 0, "dst": 1, "size_bytes": 64,
                     "iterations": 200},
                    {"name": "ib_write_bw1", "test": "ib_write_bw", "src": 0, "dst": 1, "size_bytes": 4096,
                     "iterations": 100}]


@pytest.mark.parametrize("runs, workload, key, allowed", [
    ([{**LAT, "test": "ib_foo"}], {}, "workload.perftest.0.test", "'ib_send_lat', 'ib_write_lat'"),
    ([{**LAT, "dst": "h9"}], {}, "workload.perftest.0.dst", "allowed h1 .. h2"),
    ([{**LAT, "dst": "h1"}], {}, "workload.perftest.0.dst", "perftest needs two hosts"),
    ([LAT, {**BW, "name": "ib_send_lat0"}], {}, "workload.perftest.1.name", "names are unique"),
    ([], {}, "workload.perftest", "a non-empty list"),
    ([LAT], {"collective": "allgather"}, "workload.collective", "leave it out"),
])
def test_bad_perftest_keys_are_refused_by_name(runs, workload, key, allowed):
    with pytest.raises(Exception) as e:
        parse_scenario(_scenario(runs, **workload))
    assert key in str(e.value) and allowed in str(e.value), str(e.value)


@pytest.mark.parametrize("field, value", [("size_bytes", 0), ("size_bytes", "2MiB"), ("iterations", 0),
                                          ("iterations", 100_001)])
def test_perftest_limits(field, value):
    with pytest.raises(Exception) as e:
        parse_scenario(_scenario([{**LAT, field: value}]))
    assert f"workload.perftest.0.{field}" in str(e.value)


def test_perftest_is_one_workload_mode_among_the_others():
    with pytest.raises(Exception) as e:
        parse_scenario(_scenario([LAT], sizes={"min_bytes": 1024, "max_bytes": 1024}))
    assert "workload.perftest" in str(e.value) and "exactly one of" in str(e.value)


# -- refused where the machine cannot run it ------------------------------------------------------------
def test_refusal_names_the_key_what_is_missing_and_the_fix():
    runs = parse_scenario(_scenario([LAT, BW])).workload.perftest
    with pytest.raises(ValueError) as e:
        spec_perftest.check_machine(runs, rxe=False, which=lambda prog: None)
    msg = str(e.value)
    assert msg.startswith("workload.perftest: this machine lacks the kernel module rdma_rxe")
    assert "perftest's ib_send_lat, ib_write_bw (Debian package perftest)" in msg and "the rdma tool" in msg
    assert "scripts/vm" in msg and "scripts/install --vm" in msg
    spec_perftest.check_machine(runs, rxe=True, which=lambda prog: "/usr/bin/" + prog)  # all there: no error
    with pytest.raises(ValueError, match="lacks perftest's ib_write_bw"):
        spec_perftest.check_machine(runs, rxe=True, which=lambda p: None if p == "ib_write_bw" else "/usr/bin/" + p)


def test_plan_refuses_before_anything_is_built(monkeypatch):
    from testbed.workloads import workload_for
    monkeypatch.setattr(spec_perftest, "rxe_available", lambda: False)
    with pytest.raises(ScenarioError, match="workload.perftest: this machine lacks the kernel module rdma_rxe"):
        workload_for(parse_scenario(_scenario([LAT]))).check_machine()


@pytest.mark.skipif(spec_perftest.rxe_available(), reason="this kernel has rdma_rxe: nothing to refuse")
def test_testbed_run_refuses_on_this_machine_and_builds_nothing(tmp_path):
    scenario = tmp_path / "rxe.yaml"
    scenario.write_text("name: rxe\nfabric: {spines: 1, leaves: 1, hosts_per_leaf: 2}\n"
                        "workload:\n  perftest:\n    - {test: ib_send_lat, src: h1, dst: h2}\n")
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scenario), "--results", str(tmp_path / "r")],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "workload.perftest: this machine lacks the kernel module rdma_rxe" in res.stderr
    assert "scripts/vm" in res.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


# -- perftest's report, as captured in the scripts/vm guest ------------------------------------------------
def test_latency_report_parsed_from_real_output():
    got = parse_report((DATA / "ib_send_lat.client.txt").read_text())
    assert set(got) == {"size_bytes", "iterations", "mtu_bytes", "t_min_us", "t_max_us", "t_typical_us",
                        "t_avg_us", "t_stdev_us", "t_p99_us", "t_p999_us"}
    assert got["size_bytes"] == 64 and got["mtu_bytes"] == 1024
    assert 0 < got["t_min_us"] <= got["t_typical_us"] <= got["t_p99_us"] <= got["t_p999_us"] <= got["t_max_us"]


def test_bandwidth_report_parsed_from_real_output():
    got = parse_report((DATA / "ib_write_bw.client.txt").read_text())
    assert set(got) == {"size_bytes", "iterations", "mtu_bytes", "bw_peak_mib_s", "bw_avg_mib_s", "msg_rate_mpps"}
    assert got["size_bytes"] == 4096 and got["mtu_bytes"] == 1024
    assert 0 < got["bw_avg_mib_s"] <= got["bw_peak_mib_s"]
    # perftest's MB is 2^20 bytes; its message rate x size is its average bandwidth
    assert got["msg_rate_mpps"] * 1e6 * 4096 == pytest.approx(got["bw_avg_mib_s"] * 2 ** 20, rel=0.02)


def test_a_failed_run_has_no_report():
    text = (DATA / "failed.client.txt").read_text()
    with pytest.raises(PerftestOutputError, match="last lines: Completion with error at client \\| Failed status 2"):
        parse_report(text)
    with pytest.raises(PerftestOutputError, match="last lines: none"):
        parse_report("")


def test_packet_bounds_and_units():
    assert roce_pkts_min("ib_send_lat", 64, 200, 1024) == 400       # ping and pong, one packet each
    assert roce_pkts_min("ib_write_bw", 4096, 100, 1024) == 400     # 4 packets per message, one way
    assert roce_pkts_min("ib_write_bw", 4096, 100, None) == 100     # path MTU unknown: 4096, a lower bound
    assert roce_pkts_min("ib_read_bw", 2048, 10, 1024) == 30        # a request and 2 response packets
    assert bw_bps(1.0) == 8 * 2 ** 20 and bw_bps(None) is None


def test_perftest_command_lines():
    server = pair.perftest_args("ib_write_bw", "tb0001h2rxe", 1, 4096, 100, 18516)
    assert server == ["ib_write_bw", "-d", "tb0001h2rxe", "-x", "1", "-s", "4096", "-n", "100", "-p", "18516"]
    client = pair.perftest_args("ib_write_bw", "tb0001h1rxe", 1, 4096, 100, 18516, "10.0.0.2")
    assert client[-1] == "10.0.0.2" and client[:-1] == [a.replace("h2", "h1") for a in server]
    # latency tests report in cycles (-C): perftest's own MHz sample fails under software emulation
    assert pair.perftest_args("ib_send_lat", "tb0001h1rxe", 1, 64, 200, 18516)[-1] == "-C"


def test_a_cycles_report_is_converted_with_the_cpus_mhz():
    """ib_send_lat -C: perftest 4.5 prints cycles under its [usec] header; divided by /proc/cpuinfo's MHz."""
    text = (DATA / "ib_send_lat.client.txt").read_text()
    us = parse_report(text)
    cycles = parse_report(text, cycles_per_us=2000.0)
    assert {k: v * 2000.0 for k, v in cycles.items() if k.startswith("t_")} == \
        pytest.approx({k: v for k, v in us.items() if k.startswith("t_")})
    assert cycles["size_bytes"] == 64 and cycles["mtu_bytes"] == 1024
    named = text.replace("[usec]", "[cycles]")  # a perftest that names the unit
    assert parse_report(named, cycles_per_us=2000.0) == cycles
    with pytest.raises(PerftestOutputError, match="cycles per us are unknown"):
        parse_report(named)
    bw = parse_report((DATA / "ib_write_bw.client.txt").read_text(), cycles_per_us=2000.0)  # no latencies
    assert bw == parse_report((DATA / "ib_write_bw.client.txt").read_text())


def test_cpu_mhz_from_cpuinfo():
    assert cpu_mhz("processor\t: 0\ncpu MHz\t\t: 2445.406\ncache size\t: 512 KB\n") == 2445.406
    assert cpu_mhz("processor\t: 0\n") is None and cpu_mhz("cpu MHz\t\t: 0.000\n") is None
    assert cpu_mhz() is None or cpu_mhz() > 0  # this machine's


def test_a_cycles_report_from_the_guest_has_finite_latencies_and_no_deviation():
    """ib_send_lat -C in the software-emulated guest (2026-12-03): cycles under [usec], stdev -nan."""
    import math
    got = parse_report((DATA / "ib_send_lat_C_tcg.client.txt").read_text(), cycles_per_us=2445.406)
    assert got["t_typical_us"] == pytest.approx(134355.0 / 2445.406) and math.isnan(got["t_stdev_us"])
    assert 0 < got["t_min_us"] <= got["t_typical_us"] <= got["t_p99_us"] <= got["t_max_us"]


def test_perftests_failed_frequency_sample_prints_inf_without_cycles():
    """Without -C in the guest (2026-12-03) perftest's MHz sample failed (r^2 0.80 < 0.9): every latency inf."""
    import math
    got = parse_report((DATA / "ib_send_lat_tcg_r2.client.txt").read_text())
    assert math.isinf(got["t_typical_us"]) and got["iterations"] == 200


# -- the rxe bridge -------------------------------------------------------------------------------------
def test_bridge_names_carry_the_run_id_and_fit_interface_names():
    outer, inner, device = names("tb3fa1h9999")
    assert (outer, inner, device) == ("tb3fa1h9999-rxe", "tb3fa1h9999-rxp", "tb3fa1h9999rxe")
    assert max(len(outer), len(inner)) <= 15  # IFNAMSIZ - 1
    from topology.naming import run_id_of
    assert run_id_of(outer) == "tb3fa1"  # testbed clean finds a dead run's machine-side veth


def test_gid_index_of_the_hosts_ipv4_address(tmp_path):
    """The sysfs layout seen in the guest: GID 0 the link-local one from the MAC, 1 the IPv4-mapped address,
    empty slots whose type cannot be read."""
    port = tmp_path / "tb0001h1rxe" / "ports" / "1"
    (port / "gids").mkdir(parents=True)
    (port / "gid_attrs" / "types").mkdir(parents=True)
    gids = ["fe80:0000:0000:0000:74f2:8eff:fe96:edf3", "0000:0000:0000:0000:0000:ffff:0a09:0001",
            "0000:0000:0000:0000:0000:0000:0000:0000"]
    for i, g in enumerate(gids):
        (port / "gids" / str(i)).write_text(g + "\n")
    for i in (0, 1):
        (port / "gid_attrs" / "types" / str(i)).write_text("RoCE v2\n")
    assert roce_v2_ipv4_gid_index("tb0001h1rxe", "10.9.0.1", sysfs=tmp_path) == 1
    with pytest.raises(RxeError, match="no RoCE v2 GID for 10.9.0.2"):
        roce_v2_ipv4_gid_index("tb0001h1rxe", "10.9.0.2", sysfs=tmp_path)


def test_non_finite_latencies_are_parsed_as_such():
    """perftest 4.5 with -F under software emulation printed ``inf`` for every latency (and stdev ``-nan``):
    the parser keeps them non-finite, and testbed.emulation.perftest.run_pair marks such a run failed."""
    import math
    got = parse_report((DATA / "ib_send_lat_F_tcg.client.txt").read_text())
    assert math.isinf(got["t_typical_us"]) and math.isnan(got["t_stdev_us"]) and got["iterations"] == 200
