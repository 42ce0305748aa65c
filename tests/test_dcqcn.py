"""DCQCN with a synthetic clock (no root): the notification point's CNP pacing, the reaction
point's rate cut and alpha arithmetic against worked values, the fast recovery / additive /
hyper increase sequence, timer-driven increases, pacing gaps; then CE -> CNP -> cut over
loopback with real QPs."""
import socket
import time

import pytest

from traffic.transport import Endpoint, RequesterQP, ResponderQP, TransportParams
from traffic.transport.cc import Dcqcn, DcqcnSettings, cnp_interval_ns, for_transport, transport_fields
from traffic.transport.cc.base import RateChange, RateLog
from traffic.transport.cc.dcqcn import ALPHA_LOG_FLOOR
from traffic.transport.eventlog import TimeLog
from traffic.transport.cc.dcqcn_params import PUBLISHED, manifest_block, settings_for
from traffic.transport.np import CNP_TOS, NotificationPoint
from traffic.wire import TOS_DATA, ECN_CE

US = 1000  # ns


# -- notification point ---------------------------------------------------------------------------

def test_a_continuous_ce_stream_gets_one_cnp_per_interval():
    sent = []
    np_ = NotificationPoint(50 * US, lambda: sent.append(1) or True)
    times = [t * 10 * US for t in range(100)]  # a CE-marked packet every 10 us for 1 ms
    out = [t for t in times if np_.on_ce(t)]
    assert out == [t * 50 * US for t in range(20)]  # at 0, 50, 100, ... 950 us
    assert np_.cnps_tx == len(sent) == 20


def test_cnp_pacing_is_per_qp_and_restarts_after_a_quiet_gap():
    a, b = NotificationPoint(50 * US, lambda: True), NotificationPoint(50 * US, lambda: True)
    assert a.on_ce(0) and b.on_ce(1 * US)     # each QP its own interval
    assert not a.on_ce(49 * US) and a.on_ce(50 * US)
    assert not b.on_ce(50 * US) and b.on_ce(51 * US)
    assert a.on_ce(1_000 * US)                # first CE after a quiet time: a CNP at once
    with pytest.raises(ValueError, match="interval_ns=0"):
        NotificationPoint(0, lambda: True)


def test_a_cnp_that_could_not_leave_is_not_counted():
    np_ = NotificationPoint(50 * US, lambda: False)  # the QP is closing
    assert not np_.on_ce(0) and np_.cnps_tx == 0


def test_the_np_records_each_cnp_send_time_and_counts_what_its_cap_leaves_out():
    sent = []
    np_ = NotificationPoint(50 * US, lambda: sent.append(1) or len(sent) != 3, log_cap=4)  # the 3rd send fails
    for t in range(0, 1_000 * US, 10 * US):     # a CE-marked packet every 10 us for 1 ms
        np_.on_ce(t)
    times, unrecorded = np_.sent.snapshot()
    # sends at 0, 50, 100 (failed: not a CNP), 110, 160, ... 960 us: 20 CNPs, the first 4 kept
    assert times == [0, 50 * US, 110 * US, 160 * US] and unrecorded == np_.cnps_tx - 4 == 16
    assert all(b - a >= np_.interval_ns for a, b in zip(times, times[1:]))


def test_time_log_keeps_the_first_events_and_counts_the_rest():
    log = TimeLog(cap=2)
    for t in (5, 7, 9, 11):
        log.add(t)
    assert log.snapshot() == ([5, 7], 2) and len(log) == 2
    with pytest.raises(ValueError, match="cap=-1"):
        TimeLog(cap=-1)


# -- reaction point: cut, alpha, increases --------------------------------------------------------

def test_rate_log_is_columnar_bounded_and_reads_as_rate_changes():
    log = RateLog(cap=2)
    log.add(10, "cnp", 5e6, 10e6, 1.0)
    log.add(20, "timer", 7.5e6, 10e6, 1.0, "fast_recovery")
    log.add(30, "timer", 8.75e6, 10e6, 1.0, "fast_recovery")   # past the cap: counted, not kept
    assert len(log) == 2 and log.unrecorded == 1
    assert list(log) == [RateChange(10, "cnp", 5e6, 10e6, 1.0, ""), RateChange(20, "timer", 7.5e6, 10e6, 1.0,
                                                                                "fast_recovery")]
    assert log[-1].stage == "fast_recovery"
    assert log.columns() == {"time_ns": [10, 20], "event": ["cnp", "timer"], "stage": ["", "fast_recovery"],
                             "rate_bps": [5e6, 7.5e6], "target_rate_bps": [10e6, 10e6], "alpha": [1.0, 1.0],
                             "unrecorded": 1}
    with pytest.raises(ValueError, match=r"rate change \('cut', ''\): events start, cnp, alpha_timer, timer, bytes"):
        RateLog().add(0, "cut", 1.0, 1.0, 1.0)



def _rp(line=100e6, **kw):
    s = DcqcnSettings(**{"rate_timer_us": 100.0, "alpha_timer_us": 55.0, "rai_bps": 1e6, "rhai_bps": 5e6,
                         "byte_counter_bytes": 10**9, "min_rate_bps": 1e3, **kw})
    return Dcqcn(line, 1024, s, now_ns=0)


def test_rate_cut_and_alpha_worked_values():
    rp = _rp()
    assert (rp.rc, rp.rt, rp.alpha) == (100e6, 100e6, 1.0)
    rp.on_cnp(0)                        # RT <- RC; RC <- RC (1 - 1/2); alpha <- (1-g) 1 + g = 1
    assert (rp.rt, rp.rc, rp.alpha) == (100e6, 50e6, 1.0)
    rp.on_cnp(10 * US)
    assert (rp.rt, rp.rc) == (50e6, 25e6)
    # 3 alpha periods (K = 55 us) without a CNP: alpha = (255/256)^3, applied before the next cut
    t = 10 * US + 3 * 55 * US
    rp.on_cnp(t)
    a3 = (255 / 256) ** 3
    assert rp.alpha == pytest.approx((1 - 1 / 256) * a3 + 1 / 256, rel=1e-12)
    rc_before = rp.rt  # RT was set to RC before the cut; RC had risen by one timer event (FR) at 110 us
    assert rc_before == pytest.approx((50e6 + 25e6) / 2)
    assert rp.rc == pytest.approx(rc_before * (1 - a3 / 2), rel=1e-12)
    # every state change at its own time, in time order: alpha decays at 65, 120, 175 us (K after the cut at
    # 10 us), the rate timer's fast-recovery step at 110 us (T after it), the cut at 175 us (alpha first on a tie)
    assert [(r.event, r.time_ns // US, r.stage) for r in rp.rate_log] == [
        ("start", 0, ""), ("cnp", 0, ""), ("cnp", 10, ""), ("alpha_timer", 65, ""), ("timer", 110, "fast_recovery"),
        ("alpha_timer", 120, ""), ("alpha_timer", 175, ""), ("cnp", 175, "")]
    decays = [r.alpha for r in rp.rate_log if r.event == "alpha_timer"]
    assert decays == pytest.approx([(255 / 256) ** k for k in (1, 2, 3)], rel=1e-12)


def test_cuts_stop_at_the_minimum_rate():
    rp = _rp(min_rate_bps=30e6)
    rp.on_cnp(0)
    rp.on_cnp(1)
    assert rp.rc == 30e6


def test_fast_recovery_then_additive_increase_on_the_timer():
    rp = _rp()
    rp.on_cnp(0)
    rp.on_cnp(1 * US)                   # RT = 50, RC = 25 (Mbit/s); the rate timer restarts at 1 us
    rp.next_send_ns(1 * US + 7 * 100 * US)  # lazily: 7 expiries of T = 100 us, each at its own time
    timer = [r for r in rp.rate_log if r.event == "timer"]
    assert [r.time_ns for r in timer] == [1 * US + k * 100 * US for k in range(1, 8)]
    expected = [37.5e6, 43.75e6, 46.875e6, 48.4375e6, 49.21875e6,   # F = 5 fast-recovery steps toward RT = 50
                (51e6 + 49.21875e6) / 2]                                  # then RT += R_AI = 1 Mbit/s
    expected.append((52e6 + expected[-1]) / 2)
    assert [r.rate_bps for r in timer] == pytest.approx(expected, rel=1e-12)
    assert [r.target_rate_bps for r in timer] == [50e6] * 5 + [51e6, 52e6]
    assert rp.timer_stage == 7 and rp.byte_stage == 0


def test_hyper_increase_once_both_counters_pass_f():
    rp = _rp(byte_counter_bytes=1000)
    rp.on_cnp(0)
    rp.on_cnp(1)                                 # RT = 50, RC = 25
    for k in range(6):                           # 6 byte-counter events (B = 1000 bytes) at 2..7 ns
        rp.on_send(1000, 2 + k)
    assert rp.byte_stage == 6 and rp.timer_stage == 0
    assert rp.rt == 51e6                         # events 1-5 fast recovery, the 6th additive
    rp.next_send_ns(1 + 7 * 100 * US)            # 7 timer events: additive while min(t, b) <= F, then hyper
    timer = [r for r in rp.rate_log if r.event == "timer"]
    # t = 1..5: RT += R_AI; t = 6, 7: min(t, b) = 6 > F: RT += (6 - F) x R_HAI = 5 Mbit/s each
    assert [r.target_rate_bps for r in timer] == [52e6, 53e6, 54e6, 55e6, 56e6, 61e6, 66e6]
    # the rate log names each increase's cause and stage
    assert [r.stage for r in rp.rate_log if r.event == "bytes"] == ["fast_recovery"] * 5 + ["additive"]
    assert [r.stage for r in timer] == ["additive"] * 5 + ["hyper"] * 2
    times = [r.time_ns for r in rp.rate_log]
    assert times == sorted(times)               # in time order, however late the QP asked


def test_without_target_clamping_rt_moves_only_after_a_timer_increase():
    """NVIDIA's clamp_tgt_rate = 0 (with clamp_tgt_rate_after_time_inc = 1): back-to-back cuts keep RT at
    the rate before the congestion, so fast recovery heads back there; a cut after a timer increase
    sets RT <- RC as the paper does."""
    rp = _rp(clamp_target_rate=False)
    rp.on_cnp(0)
    rp.on_cnp(10 * US)
    rp.on_cnp(20 * US)                            # three cuts, no timer increase between them
    assert (rp.rt, rp.rc) == (100e6, 12.5e6)     # (paper: RT 25, RC 12.5)
    rp.next_send_ns(20 * US + 100 * US)           # one timer event: fast recovery toward RT = 100
    assert rp.rc == pytest.approx((100e6 + 12.5e6) / 2)
    rp.on_cnp(130 * US)                           # after a timer increase: RT <- RC
    alpha_used = (rp.alpha - 1 / 256) / (1 - 1 / 256)  # alpha before this cut's update
    assert rp.rt == pytest.approx(56.25e6) and rp.rc == pytest.approx(56.25e6 * (1 - alpha_used / 2))
    paper = _rp()
    for t in (0, 10 * US, 20 * US):
        paper.on_cnp(t)
    assert (paper.rt, paper.rc) == (25e6, 12.5e6)


def test_back_at_line_rate_the_timers_stop_and_pacing_ends():
    rp = _rp(line=10e6, rai_bps=5e6)
    rp.on_cnp(0)                                # RC 5, RT 10 (Mbit/s)
    rp.next_send_ns(100 * 100 * US)
    assert rp.rc == rp.rt == 10e6               # snapped at the line rate after fast recovery
    increases = [r for r in rp.rate_log if r.event in ("timer", "bytes")]
    assert increases[-1].rate_bps == 10e6 and rp.next_send_ns(10**12) == 10**12
    assert len([r for r in rp.rate_log if r.event in ("timer", "bytes")]) == len(increases)  # no more increases


def test_alpha_decays_are_logged_one_row_per_k_down_to_the_floor_then_applied_without_rows():
    rp = _rp(line=10e6, rai_bps=5e6)
    rp.on_cnp(0)                                # alpha (1 - g) 1 + g = 1; the alpha timer runs from 0
    rp.next_send_ns(10**9)                      # 1 s later: 18,181 expiries of K = 55 us
    rows = [r for r in rp.rate_log if r.event == "alpha_timer"]
    keep = 255 / 256
    n_logged = next(k for k in range(10**4) if keep ** k < ALPHA_LOG_FLOOR)  # decays that start at alpha >= floor
    assert len(rows) == n_logged == 1765
    assert [r.time_ns for r in rows[:3]] == [55 * US, 110 * US, 165 * US] and rows[-1].time_ns == 1765 * 55 * US
    assert rows[-1].alpha == pytest.approx(keep ** n_logged, rel=1e-9) and rows[-1].alpha < ALPHA_LOG_FLOOR
    assert rp.alpha == pytest.approx(keep ** (10**9 // (55 * US)), rel=1e-9)  # the rest in closed form


def test_pacing_gaps_follow_the_current_rate():
    rp = _rp(line=10e6, rate_timer_us=10_000.0)
    assert rp.next_send_ns(5) == 5                       # at line rate the host link's HTB paces
    rp.on_cnp(0)                                         # 5 Mbit/s
    rp.on_send(1066, 1_000)
    gap = 1066 * 8 / 5e6 * 1e9                           # 1.7056 ms per 1066-byte frame at 5 Mbit/s
    assert rp.next_send_ns(1_000) == 1_000 + int(gap)
    rp.on_cnp(2_000)                                     # 2.5 Mbit/s: the same packet waits twice as long
    at = 1_000 + int(1066 * 8 / 2.5e6 * 1e9)
    assert rp.next_send_ns(2_000) == at and rp.next_send_ns(at + 1) == at + 1
    rp2 = _rp(line=10e6, rate_timer_us=1_000.0)          # a rate-timer expiry before the gap ends: ask again then
    rp2.on_cnp(0)
    rp2.on_send(1066, 0)
    assert rp2.next_send_ns(10) == 1_000 * US


# -- settings: dilation and manifest ----------------------------------------------------------------

def test_settings_scale_with_dilation():
    s = settings_for(100)
    assert (s.cnp_interval_us, s.alpha_timer_us, s.rate_timer_us) == (5000.0, 5500.0, 5500.0)
    assert (s.rai_bps, s.rhai_bps, s.min_rate_bps) == (400e3, 500e3, 10e3)
    assert (s.g, s.byte_counter_bytes, s.fast_recovery_stages, s.initial_alpha) == (1 / 256, 10_000_000, 5, 1.0)
    assert settings_for(1) == DcqcnSettings()
    assert settings_for(40_000, {"cnp_interval_us": 7.0}).cnp_interval_us == 7.0
    with pytest.raises(ValueError, match="transport.dcqcn.k: unknown DCQCN setting"):
        settings_for(1, {"k": 1})
    m = manifest_block(100, {"g": 0.5})
    assert m["dilation"] == 100 and set(m["parameters"]) == set(PUBLISHED)
    assert m["parameters"]["g"] == {**m["parameters"]["g"], "value": 0.5, "published": 1 / 256, "origin": "scenario"}
    assert m["parameters"]["cnp_interval_us"]["value"] == 5000.0 and m["parameters"]["rai_bps"]["origin"] == "scaled"
    params = TransportParams(**transport_fields(Dcqcn, settings_for(100)))
    assert cnp_interval_ns(params) == 5_000_000 and isinstance(for_transport(params), Dcqcn)
    assert cnp_interval_ns(TransportParams()) is None


# -- real QPs over loopback: CE in, CNP out, rate cut -------------------------------------------------

def test_ce_marked_data_makes_the_responder_send_paced_cnps():
    a, b = "127.0.7.1", "127.0.7.2"  # addresses of this test alone (other suites bind 127.0.0.x:4791)
    params = TransportParams(payload_bytes=1024, window_pkts=32, ack_every_pkts=4, rto_us=2_000_000,
                             **transport_fields(Dcqcn, DcqcnSettings(cnp_interval_us=20_000.0, alpha_timer_us=30_000.0,
                                                                     rate_timer_us=200_000.0)))
    ep_a, ep_b = Endpoint(a, read_ecn=True), Endpoint(b, read_ecn=True)
    req = RequesterQP(0x10001, 0x20000, a, b, 0, params)
    resp = ResponderQP(0x20000, 0x10001, b, a, 0, params)
    ep_a.requesters[req.qpn] = req
    ep_b.responders[resp.qpn] = resp
    ep_a.start()
    ep_b.start()
    cap = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, (TOS_DATA & ~0x3) | ECN_CE)  # as a switch marks it
        t0 = time.monotonic()
        seq = req.post_send(500_000)
        assert req.wait_acked(seq, timeout_s=30)
        elapsed_s = time.monotonic() - t0
        c, rc = req.counters, resp.counters
        assert rc.delivered_bytes == 500_000 and rc.order_errors == 0
        assert rc.ce_pkts == rc.rx_pkts and rc.rx_pkts >= 489
        assert 1 <= rc.cnps_tx <= elapsed_s / 0.020 + 1      # at most one CNP per 20 ms interval
        deadline = time.monotonic() + 2
        while c.cnps_rx < rc.cnps_tx and time.monotonic() < deadline:
            time.sleep(0.01)
        assert c.cnps_rx == rc.cnps_tx == resp.np.cnps_tx
        cuts = [r for r in req.cc.rate_log if r.event == "cnp"]
        assert len(cuts) == c.cnps_rx and cuts[0].rate_bps == 5e6 and req.cc.rc < 10e6
        # the audit record: each CNP's send at the NP, >= N apart, and its arrival at the RP, the cut's time
        sent, sent_unrecorded = resp.np.sent.snapshot()
        got, got_unrecorded = req.cnp_rx.snapshot()
        assert len(sent) == len(got) == c.cnps_rx and sent_unrecorded == got_unrecorded == 0
        assert min((b - a for a, b in zip(sent, sent[1:])), default=20_000 * US) >= 20_000 * US
        assert got == [r.time_ns for r in cuts]
        delays = [g - s_ for s_, g in zip(sent, got)]
        assert all(0 < d < 0.5e9 for d in delays), delays   # over loopback: sent before it arrived
        assert c.tx_paced_ns > 0.2e9  # 500 kB at <= 5 Mbit/s: mostly waiting on the pacing
        assert resp.cnp_sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == CNP_TOS == 0xC0
    finally:
        cap.close()
        ep_a.stop()
        ep_b.stop()
