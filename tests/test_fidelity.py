"""Unit tests of testbed.measure.cpu, drops, thresholds and verdict on synthetic frames (no root, no OVS)."""
import time

import numpy as np
import pandas as pd
import pytest

from testbed.measure.cpu import CpuIdleMonitor
from testbed.measure.drops import (OVS_DROP_COVERAGE_RE, DropSnapshot, PacketSocket, read_net_dev, read_snmp,
                                   read_softnet_dropped, ovs_send_errors_by_interface, delta, queue_drops_delta)
from testbed.measure.send_buffer import required_send_buffer_bytes
from testbed.measure.thresholds import FidelityThresholds
from testbed.measure.fidelity_checks import FAILED
from testbed.measure.transport_totals import spurious_retx_pkts
from testbed.measure.verdict import CHECKS, evaluate

RATE_BPS = 10e6
PERIOD_NS = 10_000_000  # 10 ms
PORT = "tb12abl1-eth3"


def cpu_frame(idle, min_cpu=None, cores=None):
    idle = np.asarray(idle, dtype=float)
    df = pd.DataFrame({"time_ns": (np.arange(1, len(idle) + 1, dtype=np.int64) + 1000) * 10**9, "idle_pct": idle})
    if min_cpu is not None:
        df["min_cpu_idle_pct"] = min_cpu
    for i, col in enumerate(cores or []):
        df[f"cpu{i}_idle_pct"] = np.asarray(col, dtype=float)
    return df


TRANSPORT_OK = {"sent_pkts": 1000, "received_pkts": 990, "switch_drops_pkts": 10, "spurious_retx_pkts": 0,
                "retx_pkts": 10, "posted_bytes": 4096, "acked_bytes": 4096, "delivered_bytes": 4096}


def port_frame(port, n, delivered_ratio, backlog_bytes=20_000, rate_bps=RATE_BPS, period_ns=PERIOD_NS):
    """n samples of a port delivering delivered_ratio * rate while holding backlog_bytes."""
    t = np.arange(n, dtype=np.int64) * period_ns
    per_interval = rate_bps * delivered_ratio * period_ns / 1e9 / 8
    tx = np.round(np.arange(n) * per_interval).astype(np.int64)
    backlog = np.full(n, backlog_bytes, dtype=np.int64)
    return pd.DataFrame({"time_ns": t, "port": port, "tx_bytes": tx, "tx_pkts": tx // 1000,
                         "drops_pkts": 0, "backlog_bytes": backlog, "backlog_pkts": backlog // 1000})


def mostly_idle_port_frame():
    """200 samples at full rate; queue backlogged in the first 20 only (10%: host rates still judged)."""
    f = port_frame(PORT, 200, 1.0)
    f.loc[20:, ["backlog_bytes", "backlog_pkts"]] = 0
    return f


HOST_OK = pd.DataFrame({"host": ["tb12abh1"], "tx_wire_bytes": [12_500_000], "tx_busy_s": [10.0], "link_bps": [RATE_BPS]})


def healthy(**over):
    args = dict(cpu=cpu_frame([40.0] * 40), drops={"softnet_dropped_pkts": 0, "ovs_dpctl_lost_pkts": 0},
                port_samples=mostly_idle_port_frame(), port_rate_bps={PORT: RATE_BPS}, host_tx=HOST_OK,
                thresholds=FidelityThresholds(), transport=TRANSPORT_OK)
    args.update(over)
    return evaluate(**args)


def test_faithful_run_has_no_violations_and_reports_figures():
    v = healthy()
    # healthy() passes no departure capture and no sizes: packet timing (testbed.measure.packet_timing) and
    # throughput are the checks not judged
    no_sizes = "throughput: no collective sizes (patterns and replays are judged by the other checks)"
    assert v.faithful and v.violations == [] and v.not_judged == [no_sizes, "packet_timing: no departures captured"]
    assert v.checks["cpu"] == {"status": "passed", "reason": ""}
    assert set(v.checks) == set(CHECKS)
    assert v.lines() == ["# fidelity: faithful (7 of 9 checks judged)", f"#   not judged: {no_sizes}",
                         "#   not judged: packet_timing: no departures captured"]
    assert v.figures["cpu"]["seconds"] == 40 and v.figures["cpu"]["saturated_s"] == 0
    assert v.figures["drops"]["unexplained_drops_pkts"] == 0
    link = v.figures["links"][PORT]
    assert link["backlogged_intervals"] == 19
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
    v = healthy(cpu=cpu_frame(idle, min_cpu=[min(x, 40.0) for x in idle]))
    assert not v.faithful
    assert v.violations == ["CPU saturated: idle < 5% in 12 of 40 s (allowed 2 s; machine min 0.0%): "
                            "a core s 29-40; machine average s 29-40"]
    assert v.figures["cpu"]["min_single_cpu_idle_pct"] == 0.0
    assert v.checks["cpu"]["status"] == "failed"


def test_one_pegged_core_is_saturation_even_when_the_average_is_idle():
    # C13: 2 cores, cpu1 busy for 10 s (seconds 6-15) while the machine average stays at 50% idle
    cpu1 = [60.0] * 5 + [0.0] * 10 + [60.0] * 25
    cpu0 = [100.0 if x == 0.0 else 60.0 for x in cpu1]
    idle = [(a + b) / 2 for a, b in zip(cpu0, cpu1)]
    assert min(idle) >= 50.0
    v = healthy(cpu=cpu_frame(idle, min_cpu=np.minimum(cpu0, cpu1), cores=[cpu0, cpu1]))
    assert not v.faithful
    assert v.violations == ["CPU saturated: idle < 5% in 10 of 40 s (allowed 2 s; machine min 50.0%): cpu1 s 6-15"]
    assert v.figures["cpu"]["saturated_by_core_s"] == {"cpu1": 10}
    # two pegged seconds fit the allowance
    short = [60.0] * 5 + [0.0] * 2 + [60.0] * 33
    assert healthy(cpu=cpu_frame([60.0] * 40, cores=[[60.0] * 40, short])).faithful


def test_missing_cpu_samples_are_not_judged():
    v = healthy(cpu=cpu_frame([]))
    assert v.faithful and v.checks["cpu"]["status"] == "not_judged"
    assert v.not_judged == ["cpu: CPU idle was not sampled (run shorter than one sample)", "throughput: no collective sizes (patterns and replays are judged by the other checks)",
                            "packet_timing: no departures captured"]
    assert "#   not judged: cpu: CPU idle was not sampled" in "\n".join(v.lines())


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


def transport(**over):
    return {**TRANSPORT_OK, **over}


def test_one_unexplained_transport_loss_is_a_violation():
    v = healthy(transport=transport(received_pkts=989))
    assert not v.faithful and v.checks["transport_loss"]["status"] == "failed"
    assert v.violations == ["transport lost 1 packets that no emulated switch queue dropped (sent 1000, received "
                            "989, switch queue drops 10; allowed 0)"]
    assert v.figures["transport_loss"]["unexplained_lost_pkts"] == 1
    # the scenario's one limit governs it: max_unexplained_drops_pkts
    assert healthy(transport=transport(received_pkts=989), thresholds=FidelityThresholds(max_unexplained_drops=1)).faithful


def test_negative_balance_is_a_named_counter_mismatch():
    v = healthy(transport=transport(switch_drops_pkts=15))
    assert not v.faithful
    (msg,) = v.violations
    assert msg.startswith("counter mismatch: the switch queues dropped 5 packets more than the transport lost")
    # never absorbed by a tolerance
    assert not healthy(transport=transport(switch_drops_pkts=15),
                       thresholds=FidelityThresholds(max_unexplained_drops=100)).faithful


def test_spurious_retransmissions_fail_unless_allowed():
    v = healthy(transport=transport(spurious_retx_pkts=7))
    assert not v.faithful and v.checks["spurious_retx"]["status"] == "failed"
    assert v.violations[0].startswith("7 spurious retransmissions")
    assert "fidelity.max_spurious_retx_pkts" in v.violations[0]
    assert healthy(transport=transport(spurious_retx_pkts=7), thresholds=FidelityThresholds(max_spurious_retx_pkts=7)).faithful


def qp_rows(pairs):
    """qps.csv rows for ring pairs r -> q: (tx, rx, dup, acks_tx, acks_rx)."""
    rows = []
    for (r, q), (tx, rx, dup, acks_tx, acks_rx) in pairs.items():
        rows.append({"rank": r, "peer": q, "role": "requester", "tx_pkts": tx, "acks_rx": acks_rx, "naks_rx": 0})
        rows.append({"rank": q, "peer": r, "role": "responder", "rx_pkts": rx, "dup_pkts": dup,
                     "acks_tx": acks_tx, "naks_tx": 0})
    return pd.DataFrame(rows).convert_dtypes()


def test_spurious_retx_definition():
    # no loss: every duplicate is spurious
    assert spurious_retx_pkts(qp_rows({(0, 1): (110, 110, 10, 14, 14)}), window_pkts=8) == 10
    # one lost ACK explains up to one window of duplicates on that pair only
    assert spurious_retx_pkts(qp_rows({(0, 1): (110, 110, 8, 14, 13)}), window_pkts=8) == 0
    assert spurious_retx_pkts(qp_rows({(0, 1): (110, 110, 9, 14, 13)}), window_pkts=8) == 1
    # a lost data packet explains duplicates of its own pair, not another pair's
    pairs = {(0, 1): (111, 110, 5, 14, 14), (1, 0): (100, 100, 3, 13, 13)}
    assert spurious_retx_pkts(qp_rows(pairs), window_pkts=8) == 3
    assert spurious_retx_pkts(pd.DataFrame(), window_pkts=8) == 0


def test_byte_mismatch_fails():
    v = healthy(transport=transport(delivered_bytes=4095))
    assert not v.faithful and v.checks["bytes"]["status"] == "failed"
    assert v.violations == ["byte mismatch: posted 4096, acknowledged 4096, delivered 4095 bytes"]


def test_no_transport_counters_are_not_judged():
    v = healthy(transport=None)
    assert v.faithful
    assert {k for k, c in v.checks.items() if c["status"] == "not_judged"} == {"transport_loss", "spurious_retx", "bytes",
                                                                                     "throughput", "packet_timing"}


def test_added_check_and_printed_lines():
    v = healthy()
    v.add("ovs_send_buffer", FAILED, "Open vSwitch's send socket holds 212992 bytes")
    assert not v.faithful and v.lines() == ["# fidelity: NOT faithful: (8 of 10 checks judged)",
                                            "#   - Open vSwitch's send socket holds 212992 bytes",
                                            "#   not judged: " + "throughput: no collective sizes (patterns and replays are judged by the other checks)",
                                            "#   not judged: packet_timing: no departures captured"]
    with pytest.raises(ValueError, match="allowed passed"):
        v.add("x", "ok")


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
    fig = healthy(port_samples=pd.DataFrame(rows), thresholds=th, host_tx=None).figures["links"][PORT]
    assert fig["ratio"] == pytest.approx(1.05 / 1.1, rel=1e-6)


def test_too_few_backlogged_intervals_are_not_judged():
    v = healthy(port_samples=port_frame(PORT, 5, 0.3))
    assert v.faithful
    assert "ratio" not in v.figures["links"][PORT]
    assert v.checks["links"]["status"] == "not_judged"
    assert "no switch port was backlogged for 10 sampling intervals" in v.checks["links"]["reason"]


def test_sampled_port_without_rate_is_a_caller_error():
    with pytest.raises(ValueError, match="tb12abl1-eth3"):
        healthy(port_rate_bps={})


def test_host_nic_rate():
    host_tx = pd.DataFrame({"host": ["tb12abh1", "tb12abh2", "tb12abh3"],
                            "tx_wire_bytes": [12_500_000, 6_250_000, 100],
                            "tx_busy_s": [10.0, 10.0, 0.01],
                            "link_bps": [RATE_BPS] * 3})
    v = healthy(host_tx=host_tx, port_samples=port_frame(PORT, 50, 1.0, backlog_bytes=0))
    assert v.violations == ["host tb12abh2 NIC was fed 5.0 Mbit/s = 50% of 10.0 Mbit/s while its QPs had packets "
                            "ready to send (10.00 s; minimum 90%): the CPU, not the network, limited it"]
    assert v.figures["hosts"]["tb12abh1"]["ratio"] == pytest.approx(1.0)
    assert "ratio" not in v.figures["hosts"]["tb12abh3"]  # 10 ms busy < min_host_busy_s


def test_slow_host_is_judged_behind_a_congested_fabric_too():
    # busy time is time with packets ready and the window open: a fabric that holds a sender back closes its
    # window (not busy), so a host fed at half its rate while ready is the CPU's doing in every regime
    host_tx = pd.DataFrame({"host": ["tb12abh2"], "tx_wire_bytes": [6_250_000], "tx_busy_s": [10.0],
                            "link_bps": [RATE_BPS]})
    v = healthy(host_tx=host_tx, port_samples=port_frame(PORT, 50, 1.0, backlog_bytes=20_000))
    assert not v.faithful and v.checks["hosts"]["status"] == "failed"
    assert v.figures["hosts"]["fabric_congested_fraction"] == pytest.approx(1.0)
    assert v.figures["hosts"]["tb12abh2"]["ratio"] == pytest.approx(0.5)


def _sizes(ratio, size=4 * 2**20):
    return pd.DataFrame({"size_bytes": [65536, size], "busbw_ratio": [0.2, ratio], "busbw_factor": [1.5, 1.5]})


def test_a_slow_collective_on_an_uncontended_fabric_fails_throughput():
    # the 500 Mbit/s ring of issue 16: busbw/link 0.12-0.17, no queue, no drop
    idle = port_frame(PORT, 50, 1.0, backlog_bytes=0)
    no_drop = transport(received_pkts=1000, switch_drops_pkts=0)
    v = healthy(sizes=_sizes(0.15), frame_bytes=4154, port_samples=idle, transport=no_drop)
    assert v.checks["throughput"]["status"] == "failed" and not v.faithful
    (msg,) = [x for x in v.violations if x.startswith("the largest collective")]
    assert "busbw/link 0.150" in msg and "did not keep up" in msg
    assert healthy(sizes=_sizes(0.95), frame_bytes=4154, port_samples=idle,
                   transport=no_drop).checks["throughput"]["status"] == "passed"
    assert healthy(sizes=_sizes(0.15), frame_bytes=4154, port_samples=idle).checks["throughput"]["status"] == \
        "not_judged"  # TRANSPORT_OK's 10 switch-queue drops: contended
    busy = port_frame(PORT, 50, 1.0, backlog_bytes=20_000)
    assert healthy(sizes=_sizes(0.15), port_samples=busy).checks["throughput"]["status"] == "not_judged"
    tiny = healthy(sizes=_sizes(0.15, size=8192), frame_bytes=4154, port_samples=idle, transport=no_drop)
    assert tiny.checks["throughput"]["status"] == "not_judged"
    assert "frames per rank" in tiny.checks["throughput"]["reason"]


def test_no_rate_judged_is_not_judged_not_faithful():
    # the 500 Mbit/s case of issue 16: no queue built up (links not judged) and no host had 0.1 s of packets
    # ready (hosts not judged): nothing measured the rate, so the run is not called faithful
    host_tx = pd.DataFrame({"host": ["tb12abh1"], "tx_wire_bytes": [1000], "tx_busy_s": [0.05],
                            "link_bps": [RATE_BPS]})
    v = healthy(host_tx=host_tx, port_samples=port_frame(PORT, 50, 1.0, backlog_bytes=0))
    assert v.checks["links"]["status"] == "not_judged" and v.checks["hosts"]["status"] == "not_judged"
    assert v.status == "not_judged" and not v.faithful and v.violations == []
    assert v.lines()[0].startswith("# fidelity: NOT JUDGED")
    from testbed.process.exitcodes import EXIT_NOT_JUDGED, exit_code
    assert exit_code({"complete": True, "faithful": False, "verdict": v.status, "checks": v.checks}) == EXIT_NOT_JUDGED


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
                port_samples=port_frame(PORT, 50, 0.5),
                transport=transport(received_pkts=980, spurious_retx_pkts=1, acked_bytes=0))
    assert not v.faithful and len(v.violations) == 6
    assert all(c["status"] == "failed" for k, c in v.checks.items()
               if k not in ("hosts", "throughput", "packet_timing"))


@pytest.mark.parametrize("field,value", [
    ("min_cpu_idle_pct", -1), ("min_cpu_idle_pct", 101), ("max_saturated_fraction", 1.5),
    ("max_unexplained_drops", -1), ("max_unexplained_drops", 0.5), ("max_spurious_retx_pkts", -1), ("max_spurious_retx_pkts", True),
    ("min_link_rate_ratio", 0), ("min_link_rate_ratio", 1.2), ("min_backlogged_intervals", 0),
    ("min_host_busy_s", 0), ("ignored_drop_counters", ["x"]),
])
def test_thresholds_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"FidelityThresholds.{field}="):
        FidelityThresholds(**{field: value})


def test_delta_treats_absent_keys_as_zero_and_keeps_resets():
    before = DropSnapshot(0.0, {"a_pkts": 5, "b_pkts": 7})
    after = DropSnapshot(1.0, {"a_pkts": 9, "b_pkts": 3, "ovs_coverage_x_pkts": 4})
    assert delta(before, after) == {"a_pkts": 4, "b_pkts": -4, "ovs_coverage_x_pkts": 4}


def test_proc_parsers_read_this_process_netns():
    snmp = read_snmp("/proc/self/net/snmp")
    assert {"RcvbufErrors", "SndbufErrors", "InErrors"} <= set(snmp["Udp"])
    assert "lo" in read_net_dev("/proc/self/net/dev")
    assert isinstance(read_softnet_dropped(), int)


def test_softnet_dropped_sums_the_second_hex_column(monkeypatch, tmp_path):
    stat = tmp_path / "softnet_stat"  # two CPUs: processed, dropped, time_squeeze, ... (hex)
    stat.write_text("0000a1b2 00000003 00000000 00000000\n0001ffff 0000001f 00000002 00000000\n")
    real_open = open
    from testbed.measure import drops
    monkeypatch.setattr(drops, "open", lambda path, *a: real_open(stat if "softnet" in str(path) else path, *a),
                        raising=False)
    assert read_softnet_dropped() == 3 + 0x1F


def test_ovs_drop_coverage_names():
    match = OVS_DROP_COVERAGE_RE.match
    for name in ("datapath_drop_upcall_error", "drop_action_of_pipeline", "netdev_send_prepare_drops",
                 "netdev_push_header_drops"):
        assert match(name), name
    for name in ("netdev_sent", "dpif_flow_del", "drop_action", "hmap_expand"):
        assert not match(name), name


def test_cpu_idle_monitor_samples():
    with CpuIdleMonitor(period_s=0.05) as mon:
        t_end = time.monotonic() + 0.4
        while time.monotonic() < t_end:  # keep one core busy
            pass
    df = mon.samples()
    cores = [f"cpu{i}_idle_pct" for i in range(mon.n_cpus)]
    assert list(df.columns) == ["time_ns", "idle_pct", "min_cpu_idle_pct"] + cores
    assert (df["min_cpu_idle_pct"] == df[cores].min(axis=1)).all()
    assert 4 <= len(df) <= 9
    assert df["idle_pct"].between(0, 100).all()
    assert (df["min_cpu_idle_pct"] <= df["idle_pct"] + 1e-9).all()
    assert df["time_ns"].is_monotonic_increasing
    # the one clock of every table: Unix-epoch ns, one sample per 0.05 s period
    assert abs(df["time_ns"].iloc[-1] - time.time_ns()) < 1e9
    span_ns = df["time_ns"].iloc[-1] - df["time_ns"].iloc[0]
    assert np.diff(df["time_ns"].to_numpy()).min() > 0 and 0.1e9 <= span_ns <= 2e9  # ns, not s
    with pytest.raises(ValueError, match="period_s"):
        CpuIdleMonitor(period_s=0)


def test_ovs_send_error_lines_are_counted_between_offsets(tmp_path):
    log = tmp_path / "ovs-vswitchd.log"
    line = b"2026-11-30T10:00:00.000Z|00042|netdev_linux|WARN|error sending Ethernet packet on tb12abl1-eth3: " \
           b"Resource temporarily unavailable\n"
    log.write_bytes(b"x|INFO|boot\n" + line)
    start = log.stat().st_size
    other = line.replace(b"l1-eth3", b"s2-eth1")
    log.write_bytes(log.read_bytes() + line * 3 + other + b"y|INFO|other\n")
    end = log.stat().st_size
    assert ovs_send_errors_by_interface(str(log), start, end) == {"tb12abl1-eth3": 3, "tb12abs2-eth1": 1}
    assert ovs_send_errors_by_interface(str(log), 0, end) == {"tb12abl1-eth3": 4, "tb12abs2-eth1": 1}
    assert ovs_send_errors_by_interface(str(log), 10**6, end)["tb12abl1-eth3"] == 4  # rotated: from the start
    assert ovs_send_errors_by_interface(str(tmp_path / "missing.log"), 0, 10) == {}


def test_queue_drops_delta_and_required_send_buffer():
    before = DropSnapshot(0.0, {}, queue_drops={"p1": 5, "p2": 0})
    after = DropSnapshot(1.0, {}, queue_drops={"p1": 9, "p2": 3})
    assert queue_drops_delta(before, after) == 7
    with pytest.raises(ValueError, match="p1"):
        queue_drops_delta(after, before)
    # 12 ports x 100 KB x 2.5 + 1 MiB headroom; the default 212,992 B cannot hold it (C14)
    assert required_send_buffer_bytes(12, 100_000) == 3_000_000 + (1 << 20)
    # deep buffers (C15: 100 MB) hold at most what the transport has in flight
    assert required_send_buffer_bytes(12, 100_000_000, in_flight_bytes=600_000) == 1_500_000 + (1 << 20)


def test_send_buffer_check_names_the_limit_and_the_fix(monkeypatch):
    from testbed.measure import send_buffer
    monkeypatch.setattr(send_buffer, "ovs_send_socket", lambda: PacketSocket(0, 212_992, 0, 0))
    fig = send_buffer.send_buffer_check(12, 100_000)
    assert not fig["ok"] and fig["source"] == "socket" and fig["sndbuf_bytes"] == 212_992
    assert "212992 bytes" in fig["message"] and "fabric.buffer_bytes = 100000" in fig["message"]
    assert "scripts/start-ovs --restart" in fig["message"]
    monkeypatch.setattr(send_buffer, "ovs_send_socket", lambda: PacketSocket(0, 64 << 20, 0, 0))
    assert send_buffer.send_buffer_check(12, 100_000)["ok"]
    # no socket yet: judged on net.core.wmem_default, which the socket will get
    monkeypatch.setattr(send_buffer, "ovs_send_socket", lambda: None)
    monkeypatch.setattr(send_buffer, "_read_wmem_default", lambda: 212_992)
    fig = send_buffer.send_buffer_check(12, 100_000)
    assert not fig["ok"] and fig["source"] == "wmem_default"


def test_link_ratio_allows_one_frame_per_backlogged_run():
    # 2.5 Mbit/s, 10 ms samples: a 1514-byte frame lasts 4.8 ms, so ten separate 1-interval backlogged runs
    # that each lose one frame at their edge show 52% while the link was in fact at its rate
    rate, period = 2.5e6, 10_000_000
    per_interval = rate * period / 1e9 / 8  # 3125 B
    rows = []
    for k in range(10):  # runs of one backlogged interval, separated by idle samples
        t0 = k * 3 * period
        tx0 = int(k * 3 * per_interval)
        rows += [(t0, tx0, 3000), (t0 + period, tx0 + int(per_interval) - 1514, 3000), (t0 + 2 * period, tx0, 0)]
    samples = pd.DataFrame({"time_ns": [r[0] for r in rows], "port": PORT, "tx_bytes": [r[1] for r in rows],
                            "tx_pkts": 0, "drops_pkts": 0, "backlog_bytes": [r[2] for r in rows],
                            "backlog_pkts": [r[2] // 1000 for r in rows]})
    samples["tx_bytes"] = samples["tx_bytes"].cummax()
    v = healthy(port_samples=samples, port_rate_bps={PORT: rate})
    fig = v.figures["links"][PORT]
    assert fig["backlogged_intervals"] == 10 and fig["backlogged_runs"] == 10
    assert fig["ratio"] == pytest.approx((3125 - 1514) / 3125, abs=0.01)  # 0.52
    assert fig["ratio_error_bound"] == pytest.approx(1514 / 3125, abs=0.01)  # one frame per run
    assert not any(m.startswith("link") for m in v.violations)
    # a long single run at 61% stays a violation: one frame of slack over 2 s is 0.3%
    assert not healthy(port_samples=port_frame(PORT, 200, 0.61)).faithful
