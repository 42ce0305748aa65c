"""Open-loop flows (workload.open_loop, issue 32 item 3): CDF files in HPCC's format, sampling, Poisson arrivals
at a load, the ideal FCT alone on an idle path, slowdown buckets, the scenario's checks, flows sharing a lane."""
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from testbed.results.shape import RunSummary
from testbed.results.slowdown import format_slowdown, slowdown_table
from testbed.spec.yaml_loader import ScenarioError
from testbed.workloads import WORKLOADS, load_scenario, workload_for
from testbed.workloads.open_loop.arrivals import mean_interarrival_s, open_loop_flows
from testbed.workloads.open_loop.cdf import CDF_DIR, parse_cdf, read_cdf
from testbed.workloads.open_loop.plan import bucket_edges
from testbed.workloads.open_loop.standalone import IdlePath, flow_wire_bytes, standalone_fct_s
from testbed.workloads.open_loop.workload import OpenLoopFlows
from traffic.clock import unix_ns
from traffic.patterns.executor import run_flows
from traffic.protocol import FlowOrder, RunFlows

#: HPCC's traffic_gen/WebSearch_distribution.txt (alibaba-edu/High-Precision-Congestion-Control)
HPCC_WEBSEARCH = ("0 0\n10000 15\n20000 20\n30000 30\n50000 40\n80000 53\n200000 60\n1000000 70\n2000000 80\n"
                  "5000000 90\n10000000 97\n30000000 100\n")

SCENARIO = """name: ol
seed: 3
fabric: {spines: 2, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: 100KB,
         mtu_bytes: 4200}
transport: {payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}
workload:
  open_loop: %s
"""


def scenario(tmp_path, open_loop: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO % open_loop)
    return p


# -- CDF files ----------------------------------------------------------------------------------------------
def test_shipped_files_are_hpccs_byte_for_byte_and_their_means_are_the_trapezoid_sums():
    assert (CDF_DIR / "WebSearch_distribution.txt").read_text() == HPCC_WEBSEARCH
    web, hdp = read_cdf("websearch"), read_cdf("fbhdp")
    assert web.sizes_bytes[-1] == 30_000_000 and web.percents[:3] == (0, 15, 20)
    assert web.mean_bytes == pytest.approx(1_711_250.0)  # sum of (x0 + x1) / 2 x (y1 - y0) / 100 over the points
    assert hdp.mean_bytes == pytest.approx(120_420.75) and hdp.percents[-3:] == (97.5, 99, 100)


def test_any_file_in_hpccs_format_is_read(tmp_path):
    f = tmp_path / "mine.txt"
    f.write_text("0 0\n1000 50\n\n3000 100\n")
    cdf = read_cdf(str(f))
    assert cdf.sizes_bytes == (0, 1000, 3000) and cdf.percents == (0, 50, 100)
    assert cdf.mean_bytes == pytest.approx(0.5 * 500 + 0.5 * 2000)
    assert cdf.quantile_bytes(75) == pytest.approx(2000)


@pytest.mark.parametrize("text, says", [
    ("0 0\n10 fifty\n", "line 2: '10 fifty' is not 'size_bytes cdf_percent'"),
    ("0 0\n10 50 7\n20 100\n", "line 2"),
    ("0 0\n10 60\n5 100\n", "line 3: '5 100' does not increase"),
    ("0 0\n10 60\n20 60\n30 100\n", "line 3"),
    ("0 5\n10 100\n", "the percents run from 5 to 100"),
    ("0 0\n10 90\n", "the percents run from 0 to 90"),
    ("-1 0\n10 100\n", "size -1 is negative"),
    ("0 0\n", "holds 1 point"),
])
def test_a_bad_cdf_is_refused_naming_the_key_the_file_and_the_line(text, says):
    with pytest.raises(ScenarioError) as e:
        parse_cdf(text, "x.txt", "workload.open_loop.cdf")
    assert str(e.value).startswith("workload.open_loop.cdf: x.txt") and says in str(e.value)


def test_sampling_matches_the_cdf_over_many_draws():
    cdf = read_cdf("websearch")
    x = cdf.sample_bytes(np.random.default_rng(7), 200_000)
    for size, pct in zip(cdf.sizes_bytes[1:-1], cdf.percents[1:-1]):
        assert np.mean(x <= size) == pytest.approx(pct / 100, abs=0.006), size  # 3 / sqrt(n) ~ 0.0067 (DKW)
    assert x.mean() == pytest.approx(cdf.mean_bytes, rel=0.03)
    scaled = cdf.sample_bytes(np.random.default_rng(7), 200_000, 0.01)
    assert scaled.min() >= 1 and scaled.mean() == pytest.approx(cdf.mean_bytes * 0.01, rel=0.03)


# -- arrivals -----------------------------------------------------------------------------------------------
def test_poisson_interarrival_mean_is_mean_size_over_load_times_link_rate():
    cdf = read_cdf("websearch")
    gap = mean_interarrival_s(cdf.mean_bytes * 0.01, 0.3, 10e6)
    assert gap == pytest.approx(1_711_250 * 0.01 * 8 / (0.3 * 10e6))  # 45.6 ms
    flows = open_loop_flows(cdf, 4, 0.3, 10e6, 0.01, seed=5, lanes=4, flows=20_000)
    for h in range(4):
        t = np.array([f.start_s for f in flows if f.src == h])
        d = np.diff(t)
        assert d.mean() == pytest.approx(gap, rel=0.05) and d.std() / d.mean() == pytest.approx(1, abs=0.05)
    span = flows[-1].start_s
    offered = 8 * sum(f.size_bytes for f in flows) / (span * 4 * 10e6)
    assert offered == pytest.approx(0.3, rel=0.08)
    assert all(f.src != f.dst for f in flows) and [f.flow for f in flows] == list(range(20_000))
    assert all(a.start_s <= b.start_s for a, b in zip(flows, flows[1:]))


def test_one_seed_draws_the_same_sizes_at_every_load_and_lanes_go_round_robin():
    cdf = read_cdf("fbhdp")
    lo = open_loop_flows(cdf, 4, 0.3, 10e6, 0.01, seed=9, lanes=3, flows=500)
    hi = open_loop_flows(cdf, 4, 0.6, 10e6, 0.01, seed=9, lanes=3, flows=500)
    assert [f.size_bytes for f in lo] == [f.size_bytes for f in hi]
    assert hi[-1].start_s == pytest.approx(lo[-1].start_s / 2, rel=0.1)
    seen: dict = {}
    for f in lo:
        k = seen.get((f.src, f.dst), 0)
        assert f.channel == k % 3
        seen[(f.src, f.dst)] = k + 1
    timed = open_loop_flows(cdf, 4, 0.3, 10e6, 0.01, seed=9, lanes=3, duration_s=2.0)
    assert timed and max(f.start_s for f in timed) <= 2.0
    with pytest.raises(ValueError, match="load = 1.0"):
        open_loop_flows(cdf, 4, 1.0, 10e6, 0.01, seed=9, lanes=3, flows=5)


# -- the ideal FCT alone on an idle path ------------------------------------------------------------------------
def test_the_ideal_fct_is_the_store_and_forward_time_on_the_idle_path():
    # 10 Mbit/s, 4 hops (host-leaf-spine-leaf-host), 100 us one way per link
    path = IdlePath((10e6,) * 4, 4 * 100e-6)
    total, first = flow_wire_bytes(10_000, 4096)  # 3 packets: 4096, 4096, 1808; 58 bytes of headers each
    assert (total, first) == (10_000 + 3 * 58, 4096 + 58)
    ack = 62
    want = 2 * 400e-6 + 4 * (first + ack) * 8 / 10e6 + (total - first) * 8 / 10e6
    assert standalone_fct_s(10_000, path, 4096) == pytest.approx(want)
    assert flow_wire_bytes(100, 4096) == (158, 158)


# -- slowdown buckets ---------------------------------------------------------------------------------------
def test_slowdown_buckets_count_and_take_nearest_rank_percentiles():
    sizes = [1, 5, 10, 11, 20, 20, 30, 500]
    slow = [1.0, 2.0, 3.0, 1.5, 2.5, 4.0, 9.0, 1.2]
    fct = pd.DataFrame({"size_bytes": sizes, "slowdown": slow, "fct_us": [s * 100 for s in slow]})
    t = slowdown_table(fct, [10, 10, 30, 40])  # the repeated edge merged; 500 B joins the last bucket
    assert t["n"].tolist() == [3, 4, 1]
    assert t["size_lo_bytes"].tolist() == [1, 11, 31] and t["size_hi_bytes"].tolist() == [10, 30, 500]
    first, second = t.iloc[0], t.iloc[1]
    assert (first.slowdown_p50, first.slowdown_p95, first.slowdown_p99) == (2.0, 3.0, 3.0)
    assert (second.slowdown_p50, second.slowdown_p99) == (2.5, 9.0) and second.slowdown_mean == pytest.approx(17 / 4)
    assert second.fct_p50_us == 250.0
    empty = slowdown_table(fct[fct["size_bytes"] > 40], [10, 30, 40])
    assert empty["n"].tolist() == [0, 0, 1] and pd.isna(empty.iloc[0].slowdown_p50)
    lines = format_slowdown(t.astype(object).to_dict("records"))
    assert len(lines) == 4 and "  3   2.00   3.00   3.00        0" in lines[1]


def test_a_slowdown_below_one_counts_as_one_and_is_counted_as_hpccs_analysis_prints_it():
    fct = pd.DataFrame({"size_bytes": [5, 6, 7], "slowdown": [0.4, 0.9, 3.0], "fct_us": [40.0, 90.0, 300.0]})
    row = slowdown_table(fct, [10]).iloc[0]
    assert (row.slowdown_p50, row.slowdown_p99, row.below_ideal) == (1.0, 3.0, 2)
    assert row.slowdown_mean == pytest.approx(5 / 3) and row.fct_p50_us == 90.0


def test_bucket_edges_are_equal_steps_of_the_cdf_scaled():
    cdf = read_cdf("websearch")
    assert bucket_edges(cdf, 5, 1.0) == (20_000, 50_000, 200_000, 2_000_000, 30_000_000)  # at 20, 40, ... 100 %
    assert bucket_edges(cdf, 5, 0.001) == (20, 50, 200, 2000, 30000)
    assert bucket_edges(cdf, 10, 1e-5) == (1, 2, 10, 20, 50, 300)  # equal edges after rounding merged


# -- the scenario ---------------------------------------------------------------------------------------------
def test_a_scenario_is_an_open_loop_workload_through_the_registry(tmp_path):
    spec = load_scenario(scenario(tmp_path, "{cdf: websearch, load: 0.3, flows: 40}"))
    w = workload_for(spec)
    assert WORKLOADS["open_loop"] is OpenLoopFlows and isinstance(w, OpenLoopFlows)
    plan = w.open_loop_plan()
    assert len(plan.flows) == 40 and plan.seed == 3 and len(plan.ideal_fct_s) == 40
    assert w.plan().ops == () and "40 flows of websearch x 0.01" in w.plan().notes[0]
    assert w.peers(()) == {0: [1, 2, 3], 1: [0, 2, 3], 2: [0, 1, 3], 3: [0, 1, 2]}
    assert spec.workload.qp_channels == 4 and w.estimate_s(()) > plan.ideal_span_s


def test_a_relative_cdf_path_is_read_against_the_scenarios_folder(tmp_path):
    (tmp_path / "my.txt").write_text("0 0\n2000 100\n")
    spec = load_scenario(scenario(tmp_path, "{cdf: my.txt, load: 0.5, flows: 10, size_scale: 1}"))
    assert spec.workload.open_loop.cdf == str(tmp_path / "my.txt")
    assert all(1 <= f.size_bytes <= 2000 for f in workload_for(spec).open_loop_plan().flows)


@pytest.mark.parametrize("section, says", [
    ("{cdf: websearch, load: 1.0, flows: 5}", "workload.open_loop.load"),
    ("{cdf: websearch, load: 0, flows: 5}", "workload.open_loop.load"),
    ("{cdf: websearch, load: -0.2, flows: 5}", "workload.open_loop.load"),
    ("{cdf: websearch, flows: 5}", "workload.open_loop.load"),
    ("{load: 0.3, flows: 5}", "workload.open_loop.cdf"),
    ("{cdf: websearch, load: 0.3}", "exactly one of duration_s"),
    ("{cdf: websearch, load: 0.3, flows: 5, duration_s: 2}", "exactly one of duration_s"),
    ("{cdf: websearch, load: 0.3, flows: 5, size_scale: 0}", "workload.open_loop.size_scale"),
    ("{cdf: websearch, load: 0.3, flows: 5, lanes: 40}", "workload.open_loop.lanes"),
    ("{cdf: websearch, load: 0.3, flows: 5, rate: 2}", "workload.open_loop.rate"),
    ("{cdf: nowhere.txt, load: 0.3, flows: 5}", "workload.open_loop.cdf: no such file"),
    ("{cdf: bad.txt, load: 0.3, flows: 5}", "workload.open_loop.cdf: "),
])
def test_bad_input_is_refused_naming_the_key_before_anything_is_built(tmp_path, section, says):
    (tmp_path / "bad.txt").write_text("0 0\n100 40\n50 100\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(scenario(tmp_path, section))
    assert says in str(e.value)


def test_collective_keys_are_refused_beside_open_loop(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text((SCENARIO % "{cdf: websearch, load: 0.3, flows: 5}") + "  channels: 2\n")
    with pytest.raises(ScenarioError, match="workload.channels applies to collectives"):
        load_scenario(p)


def test_summary_json_takes_the_open_loop_block():
    base = {"run_id": "tb0001", "run_dir": "/r", "scenario": "ol", "n_ranks": 4, "status": "complete",
            "violations": [], "not_judged": [], "checks": {}, "fidelity": {}, "sizes": [], "congestion": {}}
    assert RunSummary.from_dict({**base, "open_loop": {"buckets": []}}).to_json()["open_loop"] == {"buckets": []}


# -- flows sharing a lane (traffic.patterns.executor) ---------------------------------------------------------------
class _Sender:
    def __init__(self):
        self.messages = {}

    def post_send(self, size):
        seq = len(self.messages) + 1
        self.messages[seq] = SimpleNamespace(t_post_ns=unix_ns(), t_acked_ns=unix_ns() + 1000, size=size)
        return seq

    def wait_acked(self, seq, timeout_s):
        return True


class _Receiver:
    """A responder QP whose k-th message (of ``sizes``) is complete ``at_s[k]`` after ``t0``."""

    def __init__(self, t0_ns, sizes, at_s):
        self.t0_ns, self.sizes, self.at_s = t0_ns, sizes, at_s

    @property
    def counters(self):
        k = sum(1 for a in self.at_s if unix_ns() >= self.t0_ns + a * 1e9)
        return SimpleNamespace(messages=k, delivered_bytes=sum(self.sizes[:k]))

    def wait_messages(self, count, timeout_s):
        end = time.monotonic() + timeout_s
        while self.counters.messages < count and time.monotonic() < end:
            time.sleep(0.005)
        return self.counters.messages >= count


def test_flows_sharing_a_lane_complete_one_after_the_other_each_with_its_own_message():
    start = unix_ns() + 30_000_000
    flows = [FlowOrder(flow=0, src=1, dst=0, size_bytes=300, start_ns=0, channel=0),
             FlowOrder(flow=1, src=1, dst=0, size_bytes=700, start_ns=10_000_000, channel=0),
             FlowOrder(flow=2, src=1, dst=0, size_bytes=50, start_ns=0, channel=1),
             FlowOrder(flow=3, src=0, dst=1, size_bytes=90, start_ns=0, channel=1),
             FlowOrder(flow=4, src=0, dst=1, size_bytes=80, start_ns=5_000_000, channel=1)]
    cmd = RunFlows(trial=0, flows=flows, start_at_ns=start, sample_period_ns=5_000_000, timeout_s=5.0)
    lane0 = _Receiver(start, [300, 700], [0.05, 0.15])
    lane1 = _Receiver(start, [50], [0.02])
    senders = [{1: _Sender()}, {1: _Sender()}]
    rx_consumed = [{}, {}]
    done = run_flows(0, cmd, senders, [{1: lane0}, {1: lane1}], rx_consumed)
    got = {r.flow: r.t_done_ns - start for r in done.received}
    assert 0.05e9 <= got[0] < 0.15e9 <= got[1] and got[2] < got[0]
    assert rx_consumed == [{1: 2}, {1: 1}]
    assert [(m.flow, m.channel, m.msg_seq, m.size_bytes) for m in done.sent] == [(3, 1, 1, 90), (4, 1, 2, 80)]
    assert not senders[0][1].messages
    with pytest.raises(ValueError, match=r"flow\(s\) \[0\] need more queue pairs"):
        run_flows(0, RunFlows(trial=1, flows=[FlowOrder(flow=0, src=0, dst=1, size_bytes=5, start_ns=0, channel=2)],
                              start_at_ns=start, sample_period_ns=5_000_000, timeout_s=1.0),
                  senders, [{1: lane0}, {1: lane1}], [{}, {}])



def test_results_of_a_run_fct_rows_slowdown_table_and_the_summary_block(tmp_path):
    import json
    from testbed.results.rundir import RunDir
    from testbed.workloads.open_loop.driver import OpenLoopRun, format_open_loop, write_open_loop_results
    from traffic.protocol import FlowMessage, FlowsDone
    spec = load_scenario(scenario(tmp_path, "{cdf: fbhdp, load: 0.5, flows: 30, buckets: 3}"))
    plan = workload_for(spec).open_loop_plan()
    layout = spec.fabric.layout_preview()
    ctx = SimpleNamespace(spec=spec, run_dir=tmp_path)
    run = OpenLoopRun(ctx, SimpleNamespace(layout=layout), plan)
    run.start_at_ns = 10**18
    sent = [FlowMessage(flow=f.flow, channel=f.channel, rank=f.src, peer=f.dst, msg_seq=1, size_bytes=f.size_bytes,
                        t_post_ns=run.start_at_ns + int(f.start_s * 1e9),
                        t_acked_ns=run.start_at_ns + int(f.start_s * 1e9) + int(2e9 * t))  # slowdown 2
            for f, t in zip(plan.flows, plan.ideal_fct_s)]
    run.done = [FlowsDone(trial=0, rank=0, sent=sent, received=[])]
    block = write_open_loop_results(ctx, run)
    json.dumps(block)
    fct, table = RunDir(tmp_path).table("fct"), RunDir(tmp_path).table("slowdown")
    assert len(fct) == 30 and fct["slowdown"].round(4).eq(2.0).all()
    assert fct["ideal_fct_us"].tolist() == pytest.approx([t * 1e6 for t in plan.ideal_fct_s])
    assert table["n"].sum() == 30 and len(table) == len(plan.edges_bytes) == len(block["buckets"])
    assert block["flows"] == block["flows_done"] == 30 and block["slowdown_p50"] == pytest.approx(2.0, abs=1e-3)
    assert block["bytes"] == sum(f.size_bytes for f in plan.flows) and 0 < block["offered_load"]
    assert block["cdf"] == "fbhdp" and block["lanes"] == 4 and block["seed"] == 3
    lines = format_open_loop(block)
    assert lines[0].startswith("# open loop fbhdp x 0.01: 30/30 flows on 4 hosts, load 0.50") and len(lines) == 3 + len(table)
    cpu = pd.DataFrame({"time_ns": [run.start_at_ns - 10**9, run.start_at_ns + 10**9, run.start_at_ns + 10**11]})
    assert run.during_traffic(cpu)["time_ns"].tolist() == [run.start_at_ns + 10**9]
