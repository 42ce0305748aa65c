"""Unit tests of testbed.fidelity on synthetic frames (no root, no OVS)."""
import time

import numpy as np
import pandas as pd
import pytest

from testbed import fidelity
from testbed.fidelity import DropSnapshot, FidelityThresholds, evaluate

RATE_BPS = 10e6
PERIOD_NS = 10_000_000  # 10 ms
PORT = "tb12abl1-eth3"


def cpu_frame(idle, min_cpu=None):
    idle = np.asarray(idle, dtype=float)
    df = pd.DataFrame({"time_ns": np.arange(1, len(idle) + 1, dtype=np.int64) * 10**9, "idle_pct": idle})
    if min_cpu is not None:
        df["min_cpu_idle_pct"] = min_cpu
    return df


def port_frame(port, n, delivered_ratio, backlog_bytes=20_000, rate_bps=RATE_BPS, period_ns=PERIOD_NS):
    """n samples of a port delivering delivered_ratio * rate while holding backlog_bytes."""
    t = np.arange(n, dtype=np.int64) * period_ns
    per_interval = rate_bps * delivered_ratio * period_ns / 1e9 / 8
    tx = np.round(np.arange(n) * per_interval).astype(np.int64)
    backlog = np.full(n, backlog_bytes, dtype=np.int64)
    return pd.DataFrame({"time_ns": t, "port": port, "tx_bytes": tx, "tx_pkts": tx // 1000,
                         "drops_pkts": 0, "backlog_bytes": backlog, "backlog_pkts": backlog // 1000})


def healthy(**over):
    args = dict(cpu=cpu_frame([40.0] * 40), drops={"softnet_dropped_pkts": 0, "ovs_dpctl_lost_pkts": 0},
                port_samples=port_frame(PORT, 200, 1.0), port_rate_bps={PORT: RATE_BPS}, host_tx=None,
                thresholds=FidelityThresholds(), extra_lost_pkts=0)
    args.update(over)
    return evaluate(**args)


def test_faithful_run_has_no_violations_and_reports_figures():
    v = healthy()
    assert v.faithful and v.violations == []
    assert v.figures["cpu"]["seconds"] == 40 and v.figures["cpu"]["saturated_s"] == 0
    assert v.figures["drops"]["unexplained_drops_pkts"] == 0
    link = v.figures["links"][PORT]
    assert link["backlogged_intervals"] == 199
    assert link["ratio"] == pytest.approx(1.0, abs=1e-3)
    assert link["delivered_bps"] == pytest.approx(RATE_BPS, rel=1e-3)


@pytest.mark.parametrize("n_s,saturated,violation", [
    (40, 2, False),   # 5% of 40 s = 2 s allowed
    (40, 3, True),
    (10, 1, False),   # short runs always tolerate one second
    (10, 2, True),
])
def test_cpu_saturation_allowance(n_s, saturated, violation):
    idle = [40.0] * (n_s - saturated) + [1.0] * saturated
    v = healthy(cpu=cpu_frame(idle))
    assert v.faithful is not violation
    assert v.figures["cpu"]["saturated_s"] == saturated


def test_cpu_violation_sentence_names_the_figures():
    idle = [50.0] * 28 + [0.0] * 12
    v = healthy(cpu=cpu_frame(idle, min_cpu=0.0))
    assert not v.faithful
    assert v.violations == ["CPU saturated: idle < 5% in 12 of 40 s (min 0.0%, allowed 2 s)"]
    assert v.figures["cpu"]["min_single_cpu_idle_pct"] == 0.0


def test_missing_cpu_samples_cannot_be_faithful():
    v = healthy(cpu=cpu_frame([]))
    assert not v.faithful and "not sampled" in v.violations[0]


def test_non_emulated_drops_are_named_with_values():
    drops = {"ovs_dpctl_lost_pkts": 30, "udp_rcvbuf_errors_pkts[tb12abh3]": 7, "softnet_dropped_pkts": 0}
    v = healthy(drops=drops)
    assert not v.faithful
    (msg,) = v.violations
    assert msg.startswith("37 packets dropped outside the emulated switch queues (allowed 0)")
    assert "ovs_dpctl_lost_pkts=30" in msg and "udp_rcvbuf_errors_pkts[tb12abh3]=7" in msg
    assert "softnet" not in msg
    assert v.figures["drops"]["nonzero"] == {"ovs_dpctl_lost_pkts": 30, "udp_rcvbuf_errors_pkts[tb12abh3]": 7}
    assert healthy(drops=drops, thresholds=FidelityThresholds(max_unexplained_drops=37)).faithful


def test_ignored_drop_counters_are_reported_not_judged():
    drops = {"ovs_coverage_drop_action_of_pipeline_pkts": 5}
    th = FidelityThresholds(ignored_drop_counters=("ovs_coverage_drop_action_of_pipeline",))
    v = healthy(drops=drops, thresholds=th)
    assert v.faithful
    assert v.figures["drops"]["ignored_nonzero"] == drops
    assert not healthy(drops=drops).faithful


def test_counter_reset_is_a_violation():
    v = healthy(drops={"ovs_dpctl_lost_pkts": -4})
    assert not v.faithful and "ovs_dpctl_lost_pkts=-4" in v.violations[0]


@pytest.mark.parametrize("extra,violation", [(None, False), (2, False), (3, True), (-5, False)])
def test_extra_lost_packets_tolerance(extra, violation):
    v = healthy(extra_lost_pkts=extra)
    assert v.faithful is not violation
    if violation:
        assert v.violations == ["transport lost 3 packets more than the switch queues dropped (tolerance 2)"]


def test_slow_link_while_backlogged_is_a_violation():
    v = healthy(port_samples=port_frame(PORT, 200, 0.61))
    assert not v.faithful
    (msg,) = v.violations
    assert msg.startswith(f"link {PORT} delivered 6.1 Mbit/s = 61% of 10.0 Mbit/s while backlogged")
    assert v.figures["links"][PORT]["ratio"] == pytest.approx(0.61, abs=2e-3)


def test_ratio_counts_only_intervals_backlogged_at_both_ends():
    # Busy at full rate for 100 intervals, then idle (empty queue) and nothing sent:
    # the idle part must not drag the ratio down.
    busy = port_frame(PORT, 101, 1.0)
    idle = busy.iloc[[-1] * 100].copy()
    idle["time_ns"] = busy["time_ns"].iloc[-1] + np.arange(1, 101) * PERIOD_NS
    idle["backlog_bytes"] = 0
    frame = pd.concat([busy, idle], ignore_index=True)
    v = healthy(port_samples=frame)
    assert v.faithful, v.violations
    assert v.figures["links"][PORT]["backlogged_intervals"] == 100
    # One backlogged end only: the interval leaving the busy period is excluded.
    frame.loc[101, "backlog_bytes"] = 0
    assert healthy(port_samples=frame).figures["links"][PORT]["backlogged_intervals"] == 100


def test_ratio_is_time_weighted_over_uneven_intervals():
    # 1 s at full rate in one interval + 10 x 10 ms at half rate: weighted ratio = (1 + 0.05) / 1.1.
    rows, t, tx = [], 0, 0
    for dt_ns, ratio in [(0, 0)] + [(10**9, 1.0)] + [(PERIOD_NS, 0.5)] * 10:
        t += dt_ns
        tx += int(RATE_BPS * ratio * dt_ns / 1e9 / 8)
        rows.append({"time_ns": t, "port": PORT, "tx_bytes": tx, "backlog_bytes": 5000})
    th = FidelityThresholds(min_backlogged_intervals=5)
    fig = healthy(port_samples=pd.DataFrame(rows), thresholds=th).figures["links"][PORT]
    assert fig["ratio"] == pytest.approx(1.05 / 1.1, rel=1e-6)


def test_too_few_backlogged_intervals_are_not_judged():
    v = healthy(port_samples=port_frame(PORT, 5, 0.3))
    assert v.faithful
    assert "ratio" not in v.figures["links"][PORT]


def test_sampled_port_without_rate_is_a_caller_error():
    with pytest.raises(ValueError, match="tb12abl1-eth3"):
        healthy(port_rate_bps={})


def test_host_nic_rate():
    host_tx = pd.DataFrame({"host": ["tb12abh1", "tb12abh2", "tb12abh3"],
                            "tx_wire_bytes": [12_500_000, 6_250_000, 100],
                            "tx_busy_s": [10.0, 10.0, 0.01],
                            "link_bps": [RATE_BPS] * 3})
    v = healthy(host_tx=host_tx, port_samples=port_frame(PORT, 50, 1.0, backlog_bytes=0))
    assert v.violations == ["host tb12abh2 NIC sent 5.0 Mbit/s = 50% of 10.0 Mbit/s while it had data "
                            "unacknowledged (10.00 s; minimum 90%) while the switch queues were empty: "
                            "the CPU, not the network, limited it"]
    assert v.figures["hosts"]["tb12abh1"]["ratio"] == pytest.approx(1.0)
    assert "ratio" not in v.figures["hosts"]["tb12abh3"]  # 10 ms busy < min_host_busy_s


def test_slow_host_behind_congested_fabric_is_not_judged():
    host_tx = pd.DataFrame({"host": ["tb12abh2"], "tx_wire_bytes": [6_250_000], "tx_busy_s": [10.0],
                            "link_bps": [RATE_BPS]})
    v = healthy(host_tx=host_tx, port_samples=port_frame(PORT, 50, 1.0, backlog_bytes=20_000))
    assert v.faithful, v.violations
    assert v.figures["hosts"]["fabric_congested_fraction"] == pytest.approx(1.0)
    assert v.figures["hosts"]["tb12abh2"]["ratio"] == pytest.approx(0.5)


def test_host_rate_from_port_rate_bps_or_error():
    host_tx = pd.DataFrame({"host": ["tb12abh1"], "tx_wire_bytes": [11_000_000], "tx_busy_s": [10.0]})
    v = healthy(host_tx=host_tx, port_rate_bps={PORT: RATE_BPS, "tb12abh1": RATE_BPS},
                port_samples=port_frame(PORT, 50, 1.0, backlog_bytes=0))
    assert v.figures["hosts"]["tb12abh1"]["ratio"] == pytest.approx(0.88)
    assert not v.faithful
    with pytest.raises(ValueError, match="tb12abh1"):
        healthy(host_tx=host_tx)


def test_all_violation_kinds_together():
    v = healthy(cpu=cpu_frame([0.0] * 10), drops={"softnet_dropped_pkts": 1},
                port_samples=port_frame(PORT, 50, 0.5), extra_lost_pkts=10)
    assert not v.faithful and len(v.violations) == 4


@pytest.mark.parametrize("field,value", [
    ("min_cpu_idle_pct", -1), ("min_cpu_idle_pct", 101), ("max_saturated_fraction", 1.5),
    ("max_unexplained_drops", -1), ("max_unexplained_drops", 0.5), ("max_extra_lost_pkts", -1),
    ("min_link_rate_ratio", 0), ("min_link_rate_ratio", 1.2), ("min_backlogged_intervals", 0),
    ("min_host_busy_s", 0), ("ignored_drop_counters", ["x"]),
])
def test_thresholds_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"FidelityThresholds.{field}="):
        FidelityThresholds(**{field: value})


def test_delta_treats_absent_keys_as_zero_and_keeps_resets():
    before = DropSnapshot(0.0, {"a_pkts": 5, "b_pkts": 7})
    after = DropSnapshot(1.0, {"a_pkts": 9, "b_pkts": 3, "ovs_coverage_x_pkts": 4})
    assert fidelity.delta(before, after) == {"a_pkts": 4, "b_pkts": -4, "ovs_coverage_x_pkts": 4}


def test_proc_parsers_read_this_process_netns():
    snmp = fidelity._read_snmp("/proc/self/net/snmp")
    assert {"RcvbufErrors", "SndbufErrors", "InErrors"} <= set(snmp["Udp"])
    assert "lo" in fidelity._read_net_dev("/proc/self/net/dev")
    assert isinstance(fidelity._read_softnet_dropped(), int)


def test_softnet_dropped_sums_the_second_hex_column(monkeypatch, tmp_path):
    stat = tmp_path / "softnet_stat"  # two CPUs: processed, dropped, time_squeeze, ... (hex)
    stat.write_text("0000a1b2 00000003 00000000 00000000\n0001ffff 0000001f 00000002 00000000\n")
    real_open = open
    monkeypatch.setattr(fidelity, "open", lambda path, *a: real_open(stat if "softnet" in str(path) else path, *a),
                        raising=False)
    assert fidelity._read_softnet_dropped() == 3 + 0x1F


def test_ovs_drop_coverage_names():
    match = fidelity.OVS_DROP_COVERAGE_RE.match
    for name in ("datapath_drop_upcall_error", "drop_action_of_pipeline", "netdev_send_prepare_drops",
                 "netdev_push_header_drops"):
        assert match(name), name
    for name in ("netdev_sent", "dpif_flow_del", "drop_action", "hmap_expand"):
        assert not match(name), name


def test_cpu_idle_monitor_samples():
    with fidelity.CpuIdleMonitor(period_s=0.05) as mon:
        t_end = time.monotonic() + 0.4
        while time.monotonic() < t_end:  # keep one core busy
            pass
    df = mon.samples()
    assert list(df.columns) == ["time_ns", "idle_pct", "min_cpu_idle_pct"]
    assert 4 <= len(df) <= 9
    assert df["idle_pct"].between(0, 100).all()
    assert (df["min_cpu_idle_pct"] <= df["idle_pct"] + 1e-9).all()
    assert df["time_ns"].is_monotonic_increasing
    # the one clock of every table: Unix-epoch ns, one sample per 0.05 s period
    assert abs(df["time_ns"].iloc[-1] - time.time_ns()) < 1e9
    span_ns = df["time_ns"].iloc[-1] - df["time_ns"].iloc[0]
    assert np.diff(df["time_ns"].to_numpy()).min() > 0 and 0.1e9 <= span_ns <= 2e9  # ns, not s
    with pytest.raises(ValueError, match="period_s"):
        fidelity.CpuIdleMonitor(period_s=0)
