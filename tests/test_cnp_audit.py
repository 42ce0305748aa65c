"""The cnp_interval check (testbed.measure.cnp_audit): NP intervals judged against N, RP gaps reported,
CNPs matched end to end; and cnp_events.csv / qp_rates.csv from the agents' logs to the run directory."""
import json

import pandas as pd
import pytest

from testbed.measure.cnp_audit import CNP_INTERVAL_TOLERANCE_NS, audit_cnps, judge_cnp_interval
from testbed.measure.verdict import FidelityVerdict
from testbed.workloads.pattern.driver import TrialStats
from testbed.results import tables
from testbed.results.rundir import RunDir
from traffic.protocol import QpCnpLog, QpRateLog, Stats
from traffic.transport import TransportParams
from traffic.transport.cc import Dcqcn, DcqcnSettings, transport_fields

MS = 1_000_000
N = 5 * MS
T0 = 1_764_000_000_000_000_000


def _events(np_ms: dict, rp_ms: dict, trial=None) -> pd.DataFrame:
    """cnp_events rows: ``np_ms[(rank, peer)]`` send times and ``rp_ms[(rank, peer)]`` arrival times, ms after T0."""
    rows = [{"rank": r, "peer": p, "qpn": 0x20000 + p, "channel": 0, "role": "np", "time_ns": T0 + int(t * MS)}
            for (r, p), ts in np_ms.items() for t in ts]
    rows += [{"rank": r, "peer": p, "qpn": 0x10000 + p, "channel": 0, "role": "rp", "time_ns": T0 + int(t * MS)}
             for (r, p), ts in rp_ms.items() for t in ts]
    df = pd.DataFrame(rows)
    return df if trial is None else df.assign(trial=trial)


def test_paced_nps_pass_and_the_rp_side_is_reported_with_each_cnps_delay():
    # rank 1's NP paces CNPs to rank 0's RP 5.0, 7.0 ms apart; the first waits 2.2 ms on the way, the second
    # 0.4 ms: at the RP they arrive 3.2 ms apart (compressed on the reverse path), then 7.0 ms
    ev = _events({(1, 0): [0, 5, 12], (0, 1): [3, 8.5]}, {(0, 1): [2.2, 5.4, 12.4], (1, 0): [3.1, 8.6]})
    status, reason, fig = audit_cnps(ev, N)
    assert (status, reason) == ("passed", "")
    assert fig["interval_us"] == 5000.0 and fig["tolerance_us"] == CNP_INTERVAL_TOLERANCE_NS / 1e3 == 1.0
    assert fig["np"] == {**fig["np"], "qps": 2, "cnps": 5, "min_interval_ms": 5.0, "below_n": 0}
    assert [(q["rank"], q["qpn"], q["cnps"], q["min_interval_ms"]) for q in fig["np"]["per_qp"]] == \
        [(0, 0x20001, 2, 5.5), (1, 0x20000, 3, 5.0)]
    rp = fig["rp"]
    assert (rp["qps"], rp["cnps"], rp["min_gap_ms"], rp["below_n"], rp["below_n_after_paced_np"]) == (2, 5, 3.2, 1, 1)
    assert (rp["cnps_not_received"], rp["matched_qps"]) == (0, 2)
    assert (rp["delay_min_ms"], rp["delay_p50_ms"], rp["delay_max_ms"]) == (0.1, 0.4, 2.2)
    q0 = next(q for q in rp["per_qp"] if q["rank"] == 0)
    assert q0 == {"trial": 0, "rank": 0, "peer": 1, "channel": 0, "qpn": 0x10001, "cnps": 3, "min_gap_ms": 3.2,
                  "below_n": 1, "np_cnps": 3, "delay_min_ms": 0.4, "delay_p50_ms": 0.4, "delay_max_ms": 2.2,
                  "below_n_after_paced_np": 1, "below_n_after_short_np": 0}


def test_an_np_interval_below_n_fails_naming_the_qp_the_shortest_interval_and_how_many():
    ev = _events({(1, 0): [0, 5, 5.32, 10.32, 10.64], (2, 0): [0, 6]}, {})
    status, reason, fig = audit_cnps(ev, N)
    assert status == "failed"
    assert reason == ("NP of responder QP 0x20000 at rank 1 (CNPs to rank 0's requester): 2 of 4 intervals between "
                      "CNP sends below N = 5 ms (shortest 0.32 ms; tolerance 1 us)")
    assert fig["np"]["below_n"] == 2 and fig["np"]["min_interval_ms"] == 0.32
    assert fig["rp"]["cnps_not_received"] == 7 and fig["rp"]["qps"] == 0


def test_the_tolerance_is_one_microsecond():
    def sends(gap_ns):
        return pd.DataFrame({"rank": 1, "peer": 0, "qpn": 0x20000, "channel": 0, "role": "np",
                             "time_ns": [T0, T0 + gap_ns]})
    assert audit_cnps(sends(N - CNP_INTERVAL_TOLERANCE_NS), N)[0] == "passed"
    assert audit_cnps(sends(N - CNP_INTERVAL_TOLERANCE_NS - 1), N)[0] == "failed"


def test_no_cnp_or_single_cnps_are_not_judged_with_the_reason():
    status, reason, fig = audit_cnps(None, N)
    assert status == "not_judged" and reason.startswith("no notification point sent a CNP")
    assert fig["np"]["cnps"] == 0 and fig["rp"]["min_gap_ms"] is None
    status, reason, _ = audit_cnps(_events({(1, 0): [0], (2, 0): [1]}, {(0, 1): [0.5]}), N)
    assert status == "not_judged" and reason.startswith("no notification point sent two CNPs (2 single CNPs on 2 QPs)")
    with pytest.raises(ValueError, match="interval_ns=0"):
        audit_cnps(None, 0)


def test_lost_cnps_are_counted_and_not_matched():
    _, _, fig = audit_cnps(_events({(1, 0): [0, 5, 10]}, {(0, 1): [0.3, 10.3]}), N)
    rp = fig["rp"]
    assert (rp["cnps_not_received"], rp["matched_qps"], rp["delay_max_ms"]) == (1, 0, None)
    assert rp["per_qp"][0]["np_cnps"] == 3 and "delay_min_ms" not in rp["per_qp"][0]


def test_pattern_trials_are_separate_qps_and_named():
    ev = pd.concat([_events({(1, 0): [0, 5]}, {}, trial=0), _events({(1, 0): [5.1, 6]}, {}, trial=1)])
    status, reason, fig = audit_cnps(ev, N)   # 5 -> 5.1 ms spans two trials' fresh QPs: not an interval
    assert status == "failed" and reason.startswith("NP of responder QP 0x20000 at rank 1 (CNPs to rank 0's "
                                                    "requester, trial 1): 1 of 1 intervals")
    assert [q["trial"] for q in fig["np"]["per_qp"]] == [0, 1]


def _run_dir(path, cnp_interval_us=5000.0, stats=()):
    path.mkdir(exist_ok=True)
    (path / "manifest.json").write_text(json.dumps(
        {"congestion_control": {"name": "dcqcn", "parameters": {"cnp_interval_us": {"value": cnp_interval_us}}}}))
    tables.write_tables(RunDir(path), 2, 9.5e6, [], {}, list(stats), None, None)
    return path


def _stats(rank, peer, np_ms=(), rp_ms=(), unrecorded=0, rates=True):
    cnps = []
    if np_ms:
        cnps.append(QpCnpLog(rank=rank, peer=peer, qpn=0x20000 + peer, channel=0, role="np",
                             time_ns=[T0 + int(t * MS) for t in np_ms], unrecorded=unrecorded))
    if rp_ms:
        cnps.append(QpCnpLog(rank=rank, peer=peer, qpn=0x10000 + peer, channel=0, role="rp",
                             time_ns=[T0 + int(t * MS) for t in rp_ms]))
    log = [QpRateLog(rank=rank, peer=peer, qpn=0x10000 + peer, channel=0, time_ns=[T0, T0 + int(rp_ms[0] * MS)],
                     event=["start", "cnp"], stage=["", ""], rate_bps=[10e6, 5e6], target_rate_bps=[10e6, 10e6],
                     alpha=[1.0, 1.0])] if rates and rp_ms else []
    return Stats(rank=rank, requesters=[], responders=[], msgs=[], rx_pkts=0, rx_unknown_pkts=0, rates=log, cnps=cnps)


DCQCN = TransportParams(**transport_fields(Dcqcn, DcqcnSettings(cnp_interval_us=5000.0)))


def test_the_agents_logs_become_cnp_events_and_qp_rates_tables_in_csv_and_parquet(tmp_path):
    stats = [_stats(0, 1, rp_ms=[2.2, 7.4]), _stats(1, 0, np_ms=[0, 5])]
    d = _run_dir(tmp_path, stats=stats)
    assert RunDir(d).write_parquet().count("cnp_events") == 1
    run = RunDir.open(d)
    ev = run.cnp_events
    assert list(ev.columns) == ["rank", "peer", "qpn", "channel", "role", "time_ns"]
    assert ev["role"].tolist() == ["rp", "rp", "np", "np"] and ev["time_ns"].iloc[-1] == T0 + 5 * MS
    rates = run.qp_rates
    assert list(rates.columns) == ["rank", "peer", "qpn", "channel", "time_ns", "event", "stage", "rate_bps",
                                   "target_rate_bps", "alpha"]
    assert rates["event"].tolist() == ["start", "cnp"] and rates["stage"].tolist() == ["", ""]
    trial = TrialStats.of(stats[1], 3)
    assert trial.cnp_rows()[0] == {"trial": 3, "rank": 1, "peer": 0, "qpn": 0x20000, "channel": 0, "role": "np",
                                   "time_ns": T0}


def test_judge_adds_the_check_only_with_dcqcn_and_reads_n_from_the_manifest(tmp_path):
    stats = [_stats(0, 1, rp_ms=[2.2, 7.4]), _stats(1, 0, np_ms=[0, 5], unrecorded=2)]
    v = FidelityVerdict(faithful=True, violations=[], figures={})
    judge_cnp_interval(v, _run_dir(tmp_path / "a", stats=stats), stats, DCQCN)
    assert v.checks["cnp_interval"] == {"status": "passed", "reason": ""} and v.faithful
    fig = v.figures["cnp_interval"]
    assert fig["unrecorded"] == {"np_cnps": 2, "rp_cnps": 0, "rate_changes": 0} and fig["agents_interval_us"] == 5000.0
    assert fig["rp"]["delay_min_ms"] == 2.2

    none = FidelityVerdict(faithful=True, violations=[], figures={})
    judge_cnp_interval(none, tmp_path / "a", stats, TransportParams())   # no notification points: no check
    assert "cnp_interval" not in none.checks

    wrong = FidelityVerdict(faithful=True, violations=[], figures={})   # the manifest states N = 6 ms
    judge_cnp_interval(wrong, _run_dir(tmp_path / "b", 6000.0, stats), stats, DCQCN)
    assert not wrong.faithful and wrong.violations == [
        "the notification points paced CNPs with N = 5000 us, but manifest.json states cnp_interval_us = 6000",
        "NP of responder QP 0x20000 at rank 1 (CNPs to rank 0's requester): 1 of 1 intervals between CNP sends "
        "below N = 6 ms (shortest 5 ms; tolerance 1 us)"]

    quiet = FidelityVerdict(faithful=True, violations=[], figures={})
    judge_cnp_interval(quiet, _run_dir(tmp_path / "c"), [], DCQCN)     # DCQCN ran, no CE mark: no CNP
    assert quiet.checks["cnp_interval"]["status"] == "not_judged" and quiet.faithful
