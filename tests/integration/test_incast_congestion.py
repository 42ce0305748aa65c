"""Issue 7's congestion acceptance on a real fabric: the DCQCN 4:1 incast converges fair (Jain >= 0.95),
full and below Kmax; with PFC too, no pause in steady state; CNPs paced on a real run; the victim flow
dips under PFC alone and DCQCN pauses far less, 0 lossless drops in all (the dips' ordering needs many runs:
benchmarks/victim_dip_ordering.py). Runs scenarios/incast_dcqcn.yaml, incast_both.yaml, victim_flow.yaml and victim_flow_dcqcn.yaml
as they are (10 Mbit/s, 8 hosts; the incasts about 15 s of traffic, the victim runs about 6 s)."""
from pathlib import Path

import pytest

from conftest import assert_losses_accounted, run_scenario_file
from testbed.results.rundir import RunDir

pytestmark = pytest.mark.integration

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
FRAME_BYTES = 4214


def _run(tmp_path, name: str) -> dict:
    _, s = run_scenario_file(tmp_path, (SCENARIOS / f"{name}.yaml").read_text(), timeout=240, expect_rc=None,
                             name=name)
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] and t["order_errors"] == 0
    assert_losses_accounted(s)
    c = s["congestion"]
    print(name, {k: c.get(k) for k in ("lossless_drops_pkts", "pause_frames", "paused_time_s", "ce_marked_pkts",
                                       "cnp_sent", "cnp_per_interval_max", "jain_index", "bottleneck_util",
                                       "queue_p99_bytes", "kmax_bytes", "controller_loop_p99_ms", "storms",
                                       "victim")})
    return s


def _cnp_interval_ns(s: dict) -> float:
    """N of the run, ns (manifest.json's congestion_control block: the published 50 us x dilation)."""
    manifest = RunDir.open(s["run_dir"]).manifest
    return manifest["congestion_control"]["parameters"]["cnp_interval_us"]["value"] * 1e3


def _cnps_paced(s: dict, cnp_interval_ns: float) -> None:
    """At most one CNP per interval per QP, from the NPs' counters over their requesters' busy time, and
    the RPs' timestamps: no two CNPs to one QP closer than the interval less the reverse path's jitter."""
    run = RunDir.open(s["run_dir"])
    qps = run.qps
    busy = qps[qps["role"] == "requester"].set_index(["rank", "peer"])["tx_busy_ns"]
    for _, r in qps[qps["role"] == "responder"].iterrows():
        assert r["cnps_tx"] <= busy[(r["peer"], r["rank"])] / cnp_interval_ns + 1, r.to_dict()
    cnp = run.qp_rates.query("event == 'cnp'").sort_values("time_ns")
    gaps = cnp.groupby(["rank", "peer"])["time_ns"].diff().dropna()
    assert len(gaps) >= 20 and (gaps < 0.9 * cnp_interval_ns).mean() <= 0.05, gaps.describe()  # 48-67 ms seen


def test_dcqcn_incast_converges_fair_full_and_below_kmax_and_pfc_stays_quiet(tmp_path):
    for name in ("incast_dcqcn", "incast_both"):
        s = _run(tmp_path, name)
        c = s["congestion"]
        assert c["ce_marked_pkts"] > 0 and c["cnp_sent"] == c["cnp_received"] > 0
        _cnps_paced(s, _cnp_interval_ns(s))  # N = 50 us x dilation 1000
        assert c["jain_index"] >= 0.95, c["steady_goodput_bps"]
        assert c["bottleneck_util"] >= 0.90
        assert c["queue_p99_bytes"] < c["kmax_bytes"] + 2 * FRAME_BYTES
        assert c["controller_loop_p99_ms"] < 5
        if name == "incast_both":
            assert c["lossless_drops_pkts"] == 0
            events = RunDir.open(s["run_dir"]).pfc_events
            t0 = c["steady_start_ns"]
            steady = events[(events["time_ns"] >= t0) & (events["time_ns"] <= t0 + c["steady_s"] * 1e9)]
            assert (steady["event"] == "pause").sum() == 0, steady


def test_victim_flow_dips_under_pfc_and_dcqcn_pauses_far_less(tmp_path):
    """The same traffic (two long flows, then a sustained 3:1 burst into the receiver of one) with PFC
    alone and with PFC + ECN + DCQCN, one run each: the victim's goodput falls below half its pre-burst
    rate under PFC alone (head-of-line blocking behind the paused burst); DCQCN pauses far less; the
    lossless class drops nothing. That the victim's dip is shorter with DCQCN is an ordering one pair
    cannot carry with a margin (DCQCN's dip 0.77-2.44 s against PFC's 2.42-2.69 s in 20 runs each): the mean
    of three DCQCN dips at most 0.9 of PFC's is benchmarks/victim_dip_ordering.py's figure, over many runs."""
    pfc = _run(tmp_path, "victim_flow")
    (tmp_path / "dcqcn").mkdir()
    dcqcn = _run(tmp_path / "dcqcn", "victim_flow_dcqcn")
    cp = pfc["congestion"]
    (vp,) = cp["victim"]
    assert cp["lossless_drops_pkts"] == 0 and cp["pause_frames"] > 0
    assert vp["src"] == "h5" and vp["dst"] == "h2"
    assert vp["dip_depth"] >= 0.5 and vp["dip_duration_s"] >= 2.0   # 2.42-2.69 s in 20 runs
    cb = dcqcn["congestion"]
    (vb,) = cb["victim"]
    assert vb["src"] == "h5" and vb["dst"] == "h2"
    assert cb["lossless_drops_pkts"] == 0 and cb["ce_marked_pkts"] > 0
    # 39-102 pauses (1.1-2.9 s paused) against 384-456 (12.2-12.7 s) in 20 runs each
    assert cb["pause_frames"] <= 0.35 * cp["pause_frames"] and cb["paused_time_s"] <= 0.35 * cp["paused_time_s"]
    for s, v in ((pfc, vp), (dcqcn, vb)):
        if s["faithful"]:  # before the burst: its own receiver's rate (7.9 Mbit/s in a run the verdict failed)
            assert v["baseline_bps"] > 8e6, v
    # the dips' ordering: benchmarks/victim_dip_ordering.py (docs/dcqcn.md, "Incast, fairness and the victim
    # flow"; 20 fresh runs of each: PFC's dip 2.42-2.69 s, DCQCN's 0.77-2.44 s, the mean of three DCQCN dips
    # above 0.9 of PFC's in 0.3 % of resampled draws)
    print(f"victim dip: PFC {vp['dip_duration_s']} s, DCQCN {vb['dip_duration_s']} s")
