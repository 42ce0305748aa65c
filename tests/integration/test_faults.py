"""Issue 8, failures: a link fails in the middle of an all-reduce (the collective completes, nothing is
lost for good, detection and reroute times are reported), and a gray link dropping 1% of frames is found
by the controller's counters detector and the flows leave it (its tx counters stop).

Seed 1 on this fabric hashes leaf l1's cross-leaf flows onto spine s2 (both directions), so the faults hit
l1-s2; each test first checks that the link carried data before the fault, so a changed hash fails loudly
instead of testing an idle link."""
import json

from conftest import assert_losses_accounted, run_scenario_file
from testbed.results.rundir import RunDir

FABRIC = """
seed: 1
fabric: {spines: 2, leaves: 4, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: 100KB,
         mtu_bytes: 4200}
transport: {payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}
"""


def _bytes_on(run_dir, port_suffix: str, t_from_ns: float, t_to_ns: float) -> int:
    """Bytes the switch port ``<run id><port_suffix>`` sent between two times (the queue sampler's ports.csv)."""
    p = RunDir.open(run_dir).ports
    g = p[p["port"].str.endswith(port_suffix) & (p["time_ns"] >= t_from_ns) & (p["time_ns"] <= t_to_ns)]
    assert len(g) > 1, f"no samples of {port_suffix}"
    return int(g["tx_bytes"].max() - g["tx_bytes"].min())


def _loss_free(s: dict) -> None:
    t = s["transport"]
    assert t["posted_bytes"] == t["acked_bytes"] == t["delivered_bytes"] > 0
    assert t["order_errors"] == 0
    assert s["checks"]["bytes"]["status"] == "passed"
    assert s["checks"]["transport_loss"]["status"] == "passed", s["violations"]
    assert t["unexplained_lost_pkts"] == 0
    assert_losses_accounted(s)
    assert s["ops_done"] == s["ops_planned"]


def test_link_down_mid_allreduce_completes_and_reports_reroute(tmp_path):
    text = "name: linkfail\n" + FABRIC + """
workload: {sizes: {min_bytes: 2MiB, max_bytes: 2MiB}, iterations: 2, warmup_iterations: 0}
faults:
  - {at_s: 1.5, link: [l1, s2], action: down}
  - {at_s: 4.0, link: [l1, s2], action: up}
"""
    _, s = run_scenario_file(tmp_path, text, expect_rc=None, name="linkfail")  # CPU may be short on 2 cores
    run_dir = tmp_path / "linkfail" / s["run_dir"].rsplit("/", 1)[1]
    _loss_free(s)
    down, up = s["faults"]["list"]
    assert s["faults"]["injected"] == 2 and not s["faults"]["errors"]
    assert down["detected_by"] == "port_status" and 0 < down["detect_ms"] < 500, down
    assert down["detect_ms"] <= down["reroute_ms"] < 1000, down
    assert up["detected_by"] == "port_status" and up["reroute_ms"] < 1000, up
    # the link carried data before, nothing while it was down, and the fault's losses are counted
    assert _bytes_on(run_dir, "l1-eth4", down["applied_ns"] - 1.4e9, down["applied_ns"]) > 100_000
    assert _bytes_on(run_dir, "l1-eth4", down["applied_ns"] + 0.1e9, up["applied_ns"]) == 0
    assert _bytes_on(run_dir, "l1-eth3", down["applied_ns"] + 0.1e9, up["applied_ns"]) > 100_000
    assert s["transport"]["lost_to_faults_pkts"] <= s["faults"]["down_loss_bound_pkts"]
    print(json.dumps({k: down[k] for k in ("detect_ms", "reroute_ms")}), s["transport"])


def test_gray_link_is_detected_and_flows_leave_it(tmp_path):
    text = "name: gray\n" + FABRIC + """
workload: {sizes: {min_bytes: 4MiB, max_bytes: 4MiB}, iterations: 2, warmup_iterations: 0}
faults:
  - {at_s: 0.5, link: [l1, s2], action: gray, loss: 0.01}
"""
    _, s = run_scenario_file(tmp_path, text, expect_rc=None, name="gray")
    run_dir = tmp_path / "gray" / s["run_dir"].rsplit("/", 1)[1]
    _loss_free(s)
    (gray,) = s["faults"]["list"]
    assert gray["detected_by"] == "gray", s["faults"]
    assert 0.005 < gray["measured_loss"] < 0.05, gray
    assert gray["detect_ms"] <= gray["reroute_ms"], gray
    assert s["faults"]["gray_drops_pkts"] > 0
    assert s["transport"]["lost_to_faults_pkts"] >= s["faults"]["gray_drops_pkts"]
    assert s["transport"]["retx_pkts"] > 0  # go-back-N recovered the dropped frames
    t_rerouted = gray["applied_ns"] + gray["reroute_ms"] * 1e6
    assert _bytes_on(run_dir, "l1-eth4", gray["applied_ns"] - 0.4e9, gray["applied_ns"] + 1e9) > 100_000
    assert _bytes_on(run_dir, "l1-eth4", t_rerouted + 0.2e9, t_rerouted + 3e9) < 10_000  # at most stray ACKs
    assert _bytes_on(run_dir, "l1-eth3", t_rerouted + 0.2e9, t_rerouted + 3e9) > 100_000
    print(json.dumps({k: gray[k] for k in ("detect_ms", "reroute_ms", "measured_loss")}), s["transport"])
