"""The congestion block's flow figures (testbed.results.congestion_flows) on synthetic run files, and
thresholds given as fractions of the bandwidth-delay product (testbed.spec.congestion)."""
import json

import pandas as pd
import pytest

from testbed.results.congestion_flows import flow_figures, jain, steady_window, victim_dip
from testbed.results.rundir import RunDir
from testbed.results.schema import TABLES
from testbed.spec.congestion import bdp_basis
from testbed.spec.scenario import parse_scenario

MS = 1_000_000
BIN_NS = 10 * MS
#: a documented column a test leaves out: its value in every row
_FILL = {"int": 0, "float": 0.0, "str": "", "bool": False}


def _write(d, name, df):
    """Table ``name`` (``NAME.csv``) of ``df``; the documented columns it leaves out filled with 0 / ""."""
    table = name.removesuffix(".csv")
    df = df.copy()
    for c in TABLES[table].required():
        if c not in df:
            df[c] = _FILL[TABLES[table].column(c).dtype]
    RunDir(d).write_table(table, df)


def _fct(rows):
    return pd.DataFrame([{"trial": 0, "flow": i, "src": s, "dst": d, "size_bytes": 1, "start_ns": a, "end_ns": b}
                         for i, (s, d, a, b) in enumerate(rows)])


def _rates(fct, bps_of):
    """10 ms bins per flow from its start to its end; bps_of(flow, t_ns) -> goodput."""
    rows = []
    for _, f in fct.iterrows():
        for t in range(int(f["start_ns"]), int(f["end_ns"]), BIN_NS):
            bps = bps_of(f["flow"], t)
            rows.append({"trial": 0, "flow": f["flow"], "src": f["src"], "dst": f["dst"], "bin_start_ns": t,
                         "rx_bytes": bps * BIN_NS / 1e9 / 8, "goodput_bps": bps})
    return pd.DataFrame(rows)


def test_jain_index_is_one_when_even_and_one_over_n_when_one_takes_all():
    assert jain([2.5e6] * 4) == pytest.approx(1.0)
    assert jain([10e6, 0, 0, 0]) == pytest.approx(0.25)
    assert jain([3, 1]) == pytest.approx(16 / 20)
    assert jain([]) is None and jain([0, 0]) is None


def test_steady_window_is_the_overlap_of_the_opening_flows_without_its_first_third():
    fct = _fct([("h3", "h1", 0, 900 * MS), ("h4", "h1", 30 * MS, 1200 * MS), ("h5", "h1", 600 * MS, 700 * MS)])
    assert steady_window(fct) == (30 * MS + 290 * MS, 900 * MS)   # the late flow (600 ms) is not opening
    assert steady_window(_fct([("h3", "h1", 0, 900 * MS)])) is None  # one flow: nothing to share


def test_flow_figures_reads_fairness_bottleneck_queue_and_cnps(tmp_path):
    fct = _fct([(f"h{i + 3}", "h1", 0, 3000 * MS) for i in range(4)])
    write = lambda name, df: _write(tmp_path, name, df)  # noqa: E731
    write("fct.csv", fct)
    write("flow_rates.csv", _rates(fct, lambda flow, t: [2.6e6, 2.4e6, 2.5e6, 2.5e6][flow]))
    # the receiver's port sends 9.5 Mbit/s with a backlog of 40-60 KB; another port idles
    times = range(0, 3000 * MS, MS)
    q = [{"time_ns": t, "port": "xl1-eth1", "class": "lossless", "tx_bytes": t * 9.5e6 / 8e9, "tx_pkts": 0,
          "drops_pkts": 0, "backlog_bytes": 40_000 + (t // MS) % 21 * 1000, "backlog_pkts": 0} for t in times]
    q += [{**r, "port": "xl1-eth3", "tx_bytes": 0, "backlog_bytes": 0} for r in q]
    write("lossless_queues.csv", pd.DataFrame(q))
    (tmp_path / "topology.json").write_text(json.dumps({"links": [
        {"a": "xh1", "a_port": 0, "b": "xl1", "b_port": 1, "rate_bps": 10e6}]}))
    qps = [{"trial": 0, "rank": r, "peer": 0, "role": "requester", "tx_busy_ns": 2000 * MS, "cnps_rx": 100}
           for r in range(1, 5)]
    qps += [{"trial": 0, "rank": 0, "peer": r, "role": "responder", "tx_busy_ns": 0, "cnps_tx": 100, "cnps_rx": None}
            for r in range(1, 5)]
    write("qps.csv", pd.DataFrame(qps))
    write("qp_rates.csv", pd.DataFrame([{"trial": 0, "rank": 1, "peer": 0, "time_ns": t, "event": "cnp",
                                         "rate_bps": 1, "target_rate_bps": 1, "alpha": 1}
                                        for t in (0, 6 * MS, 20 * MS)]))
    out = flow_figures(tmp_path, cnp_interval_us=5000)
    assert out["jain_index"] == pytest.approx(25e12 * 4 / (2.6e6 ** 2 + 2.4e6 ** 2 + 2 * 2.5e6 ** 2) / 4)
    assert out["bottleneck_port"] == "xl1-eth1"
    assert out["bottleneck_util"] == pytest.approx(0.95, abs=0.002)
    assert 59_000 <= out["queue_p99_bytes"] <= 60_000
    assert out["cnp_sent"] == 400 and out["cnp_received"] == 400
    assert out["cnp_min_gap_ms"] == pytest.approx(6.0)
    assert out["cnp_per_interval_max"] == pytest.approx(100 * 5 * MS / (2000 * MS))
    assert "victim" not in out


def test_victim_dip_depth_and_duration_from_the_smoothed_goodput():
    fct = _fct([("h3", "h1", 0, 2000 * MS), ("h5", "h2", 0, 2000 * MS), ("h4", "h1", 500 * MS, 900 * MS)])
    # the victim (h5 -> h2) runs at 5 Mbit/s, 1 Mbit/s from 600 to 800 ms
    rates = _rates(fct, lambda flow, t: 1e6 if flow == 1 and 600 * MS <= t < 800 * MS else 5e6)
    (v,) = victim_dip(fct, rates)
    assert (v["flow"], v["src"], v["dst"]) == (1, "h5", "h2")
    assert v["baseline_bps"] == pytest.approx(5e6)
    assert v["dip_depth"] == pytest.approx(0.8)
    # below 2.5 Mbit/s (half): the 5-bin mean is below once 4 of its bins are low (630 to 800 ms)
    assert v["dip_duration_s"] == pytest.approx(0.18, abs=0.011)
    assert victim_dip(fct.iloc[:2], rates) == []  # no burst, no victim


def test_victim_dip_counts_until_the_victim_ends_not_the_burst():
    """A victim still held down after the burst ended (a congestion control slow to recover) counts."""
    fct = _fct([("h3", "h1", 0, 2000 * MS), ("h5", "h2", 0, 2000 * MS), ("h4", "h1", 500 * MS, 700 * MS)])
    rates = _rates(fct, lambda flow, t: 1e6 if flow == 1 and 600 * MS <= t < 1500 * MS else 5e6)
    (v,) = victim_dip(fct, rates)
    assert v["burst_s"] == pytest.approx(0.2)
    assert v["dip_duration_s"] == pytest.approx(0.88, abs=0.011)   # 630 to 1500 ms, far past the burst's end


BASE = {"fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2, "host_link_bps": "10M", "fabric_link_bps": "10M",
                   "buffer_bytes": "200KB", "mtu_bytes": 4200, "queue_backend": "htb_classes"},
        "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}}


def test_bdp_is_host_rate_times_the_computed_base_rtt():
    b = bdp_basis(parse_scenario(BASE).fabric)
    # 4 links (3 switches), each a 4214 B frame and a 62 B ACK (traffic.transport.ACK_FRAME_BYTES) at 10 Mbit/s
    assert b["base_rtt_us"] == pytest.approx(4 * (4214 + 62) * 8 / 10e6 * 1e6, abs=0.1)
    assert b["bdp_bytes"] == int(10e6 * 4 * (4214 + 62) * 8 / 10e6 / 8)


def test_thresholds_in_bdp_fractions_resolve_against_the_fabric():
    s = parse_scenario({**BASE, "congestion": {"ecn": {"kmin_bdp": 1, "kmax_bdp": 4},
                                               "pfc": {"xon_bdp": 5, "xoff_pkts": 28}}})
    bdp = bdp_basis(s.fabric)["bdp_bytes"]
    assert s.congestion.ecn.thresholds_bytes(4214) == (bdp, 4 * bdp)
    assert s.congestion.pfc.thresholds_bytes(4214) == (5 * bdp, 28 * 4214)


def test_a_threshold_given_twice_names_the_three_units():
    with pytest.raises(ValueError, match="kmin_bytes, kmin_pkts, kmin_bdp"):
        parse_scenario({**BASE, "congestion": {"ecn": {"kmin_bdp": 1, "kmin_pkts": 3, "kmax_bdp": 4}}})
    with pytest.raises(ValueError, match="need Xon < Xoff"):
        parse_scenario({**BASE, "congestion": {"pfc": {"xon_bdp": 9, "xoff_bdp": 8}}})
