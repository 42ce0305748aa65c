"""Traffic patterns on a real fabric (issue 8 items 3-4, issue 7's incast): the load_balance block agrees
with the switch counters, and a 4:1 incast delivers every byte."""
import numpy as np
import pandas as pd

from conftest import assert_losses_accounted, run_scenario_file
from testbed.results.rundir import RunDir

def scenario(name: str, shape: str, buffer: str, pattern: str) -> str:
    """A scenario at 10 Mbit/s with path MTU 4096 and no congestion control: ``shape`` the spine-leaf
    keys, ``pattern`` the workload.pattern flow mapping."""
    return (f"name: {name}\nseed: 5\nreference_link_bps: 400G\n"
            f"fabric: {{{shape}, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: {buffer}, mtu_bytes: 4200}}\n"
            "transport: {payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}\n"
            f"workload:\n  pattern: {{{pattern}}}\n")


KFLOWS = scenario("kflows", "spines: 2, leaves: 2, hosts_per_leaf: 2", "200KB",
                  "kind: kflows, size_bytes: 512KiB, trials: 4")
INCAST = scenario("incast4", "spines: 2, leaves: 4, hosts_per_leaf: 2", "100KB",
                  "kind: incast, senders: 4, receiver: h1, size_bytes: 256KiB")


def _uplink_bytes(ports: pd.DataFrame, port: str, t0: int, t1: int) -> float:
    p = ports[ports["port"] == port].sort_values("time_ns")
    before = p[p["time_ns"] <= t0]["tx_bytes"]
    after = p[p["time_ns"] >= t1]["tx_bytes"]
    return float(after.iloc[0] - (before.iloc[-1] if len(before) else p["tx_bytes"].iloc[0]))


def test_kflows_load_balance_block_matches_the_uplink_counters(tmp_path):
    _, s = run_scenario_file(tmp_path, KFLOWS, timeout=240, expect_rc=None)
    run = RunDir.open(s["run_dir"])
    lb = s["load_balance"]
    assert s["complete"] and lb["pattern"] == "kflows" and lb["trials"] == 4 and lb["policy"] == "ecmp"
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] == 4 * 2 * 512 * 1024
    fct, up, ports = run.fct, run.uplinks, run.ports
    assert len(fct) == 8 and (fct["slowdown"] > 0.9).all()
    jains = []
    for trial, rows in up.groupby("trial"):
        f = fct[fct["trial"] == trial]
        t0, t1 = int(f["start_ns"].min()), int(f["end_ns"].max())
        assert list(rows["switch"]) == ["l1", "l1"]  # leaf 1 sends, over its two spine uplinks
        mine = [_uplink_bytes(ports, p, t0, t1) for p in rows["port"]]
        np.testing.assert_allclose(rows["tx_bytes"], mine, rtol=0, atol=1)
        # every payload byte of both flows crossed leaf 1's uplinks (plus headers)
        assert 2 * 512 * 1024 <= sum(mine) <= 2 * 512 * 1024 / 0.97 + 20_000
        x = np.array(mine)
        jains.append(x.sum() ** 2 / (2 * (x ** 2).sum()))
        # one spine (index 0.5) halves the throughput of two flows; both spines (1.0) carry it all
        hot = max(mine) / sum(mine)
        assert hot < 0.6 or hot > 0.95, rows
    assert lb["balance_index"] == np.mean(jains) or abs(lb["balance_index"] - np.mean(jains)) < 1e-9
    expected_ratio = np.mean([1.0 if j > 0.9 else 0.5 for j in jains])
    assert abs(lb["throughput_ratio_mean"] - expected_ratio) < 0.1, (lb, jains)
    assert lb["idle_capacity_fraction"] is not None
    assert abs(lb["idle_capacity_fraction"] - (1 - expected_ratio)) < 0.15, (lb, jains)
    assert lb["fct_p50_us"] > 0 and lb["fct_p99_us"] >= lb["fct_p50_us"]
    rates = run.flow_rates
    assert (rates.groupby(["trial", "flow"])["rx_bytes"].sum().round() == 512 * 1024).all()
    print(f"kflows k=2 x4: throughput {lb['throughput_ratio_mean']:.3f}, idle {lb['idle_capacity_fraction']:.3f}, "
          f"balance {lb['balance_index']:.3f}, jains {[round(j, 2) for j in jains]}")


def test_incast_4_to_1_completes_with_every_byte_delivered(tmp_path):
    _, s = run_scenario_file(tmp_path, INCAST, timeout=240, expect_rc=None)
    run = RunDir.open(s["run_dir"])
    t = s["transport"]
    assert s["complete"] and t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] == 4 * 256 * 1024
    assert t["order_errors"] == 0
    assert t["switch_drops_pkts"] > 0 and assert_losses_accounted(s)  # the receiver's port drops: counted once
    fct = run.fct
    assert sorted(fct["src"]) == ["h3", "h4", "h5", "h6"] and set(fct["dst"]) == {"h1"}
    rates = run.flow_rates
    assert (rates.groupby("flow")["rx_bytes"].sum().round() == 256 * 1024).all()
    lb = s["load_balance"]
    # no congestion control and 100 KB buffers: the receiver's port drops and go-back-N resends, so the
    # four flows deliver at most the receiver's link rate, and the last ends no earlier than it allows
    assert 0 < lb["throughput_ratio_mean"] <= 1.1, lb
    assert max(fct["fct_us"]) >= 0.95 * max(fct["ideal_fct_us"])
    assert lb["idle_capacity_fraction"] is None  # the uplinks are never the bottleneck of an incast
    print(f"incast 4:1: throughput {lb['throughput_ratio_mean']:.3f}, completion {lb['completion_ratio_mean']:.3f}, "
          f"fct p50 {lb['fct_p50_us']:.0f} us p99 {lb['fct_p99_us']:.0f} us, retx {t['retx_pkts']}")
