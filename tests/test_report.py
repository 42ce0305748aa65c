"""report.html built from small tables written here (no fabric): every plot present or replaced by its
'not recorded' line, the figures' values, the page self-contained and escaped, and ``testbed report``'s
exit codes."""
import base64
import json
import re
import struct

import numpy as np
import pandas as pd
import pytest

from testbed.cli import main
from testbed.report import write_report
from testbed.report.congestion import paused_time_s
from testbed.report.figure import NOT_RECORDED
from testbed.report.portgrid import port_grid
from testbed.results.rundir import NotARunDir, RunDir
from testbed.results.schema import TABLES

T0 = 1_796_000_000_000_000_000  # Unix ns
MS = 1_000_000
RID = "tb1234"


#: a documented column this test leaves out: its value in every row
_FILL = {"int": 0, "float": 0.0, "str": "", "bool": False}


def _write(d, name, rows):
    """Table ``name`` (``NAME.csv``) of ``rows``; the documented columns they leave out filled with 0 / ""."""
    table = name.removesuffix(".csv")
    df = pd.DataFrame(rows)
    for c in TABLES[table].required():
        if c not in df:
            df[c] = _FILL[TABLES[table].column(c).dtype]
    RunDir(d).write_table(table, df)


def _run_dir(tmp_path, name="run"):
    """A run directory of a 4-host ring: manifest, summary, topology, sizes, ops, msgs and ports (10 ms
    samples of 4 switch ports for 1 s; l1-eth3 sends at its full 10 Mbit/s and queues 8 KB)."""
    d = tmp_path / name
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"run_id": RID, "started_utc": "20261201T000000Z",
                                                 "scenario": {"name": "unit<script>"}, "seed": 1}))
    (d / "summary.json").write_text(json.dumps({
        "run_id": RID, "scenario": "unit", "faithful": False, "host_link_bps": 1e7, "payload_efficiency": 0.986,
        "scale_factor": 40000.0, "violations": ["CPU saturated <b>"], "not_judged": [],
        "checks": {"cpu": {"status": "failed", "reason": "idle < 5%"}, "drops": {"status": "passed", "reason": ""}},
        "fidelity": {"cpu": {"seconds": 10}}}))
    (d / "topology.json").write_text(json.dumps({
        "switches": [{"name": f"{RID}l1"}, {"name": f"{RID}s1"}],
        "hosts": [{"name": f"{RID}h{r + 1}", "rank": r} for r in range(4)],
        "links": [{"a": f"{RID}h1", "a_port": 0, "b": f"{RID}l1", "b_port": 1, "rate_bps": 1e7},
                  {"a": f"{RID}l1", "a_port": 3, "b": f"{RID}s1", "b_port": 1, "rate_bps": 1e7}]}))
    sizes = [65536, 131072]
    _write(d, "sizes.csv", [{"size_bytes": s, "group_size": 4, "time_us": 1e5 * (i + 1), "algbw_bps": 5e6,
                             "busbw_bps": 7.5e6 + i * 1e6, "busbw_ratio": 0.8, "time_rank_avg_us": 9e4,
                             "busbw_rank_avg_bps": 7.6e6, "count": 3, "p50_us": 1e5, "p99_us": np.nan,
                             "p999_us": np.nan, "collective": "allreduce", "algorithm": "ring",
                             "busbw_factor": 1.5} for i, s in enumerate(sizes)])
    _write(d, "ops.csv", [{"op_id": k, "size_bytes": s, "iteration": k % 4, "warmup": k % 4 == 0,
                           "t_start_ns": T0 + k * 100 * MS, "t_end_ns": T0 + (k + 1) * 100 * MS, "time_us": 1e5 + k}
                          for k, s in enumerate([sizes[0]] * 4 + [sizes[1]] * 4)])
    _write(d, "msgs.csv", [{"rank": r, "peer": (r + 1) % 4, "msg_seq": k, "size_bytes": 16384,
                            "t_post_ns": T0 + k * 20 * MS, "t_acked_ns": T0 + (k + 1) * 20 * MS, "fct_us": 2e4}
                           for r in range(4) for k in range(40)])
    rows = []
    for i in range(101):
        for port, rate_bps, backlog in ((f"{RID}l1-eth1", 5e6, 0), (f"{RID}l1-eth3", 1e7, 8000),
                                        (f"{RID}s1-eth1", 0, 0), (f"{RID}l1-eth2", 2.5e6, 0)):
            rows.append({"time_ns": T0 + i * 10 * MS, "port": port, "tx_bytes": int(rate_bps / 8 * i * 0.01),
                         "tx_pkts": i, "drops_pkts": 0, "backlog_bytes": backlog, "backlog_pkts": backlog // 4000})
    _write(d, "ports.csv", rows)
    return d


def _congestion_tables(d):
    """ECN marking, DCQCN rate changes with CNPs, and two PFC pauses of 0.2 s on l1-eth3 (one resumed)."""
    _write(d, "ecn_marking.csv", [{"time_ns": T0 + k * 50 * MS, "port": f"{RID}l1-eth3", "probability": p}
                                  for k, p in enumerate([0.01, 0.1, 0.2, 0.0])])
    _write(d, "qp_rates.csv", [{"trial": 0, "rank": 1, "peer": 0, "time_ns": T0 + k * 100 * MS, "event": ev,
                                "rate_bps": 1e7 / (k + 1), "target_rate_bps": 1e7, "alpha": 1.0}
                               for k, ev in enumerate(["start", "cnp", "cnp", "timer"])]
           + [{"trial": 0, "rank": 0, "peer": 1, "time_ns": T0, "event": "start", "rate_bps": 1e7,
               "target_rate_bps": 1e7, "alpha": 1.0}])
    _write(d, "pfc_events.csv", [
        {"time_ns": T0 + 100 * MS, "port": f"{RID}s1-eth1", "class": 3, "event": "pause",
         "upstream": f"{RID}l1", "upstream_port": f"{RID}l1-eth3"},
        {"time_ns": T0 + 300 * MS, "port": f"{RID}s1-eth1", "class": 3, "event": "resume",
         "upstream": f"{RID}l1", "upstream_port": f"{RID}l1-eth3"},
        {"time_ns": T0 + 600 * MS, "port": f"{RID}s1-eth1", "class": 3, "event": "pause",
         "upstream": f"{RID}l1", "upstream_port": f"{RID}l1-eth3"}])
    RunDir(d).write_summary({**RunDir(d).summary, "congestion": {"ce_marked_pkts": 12, "ect_pkts": 300,
                                                                 "kmin_bytes": 5000, "kmax_bytes": 20000}})


def _sections(html):
    """plot key -> ('img', png bytes), ('table', its HTML) or ('missing', text)."""
    out = {}
    for key, body in re.findall(r'<section id="plot-([a-z_]+)">(.*?)</section>', html, re.S):
        img = re.search(r'<img class="plot"[^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', body)
        table = re.search(r'<table class="matrix">.*?</table>', body, re.S)
        miss = re.search(r'<p class="missing">(.*?)</p>', body)
        out[key] = (("img", base64.b64decode(img.group(1))) if img else ("table", table.group(0)) if table
                    else ("missing", miss.group(1)))
    return out


def _png_size(png: bytes):
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


ALL_PLOTS = {"busbw", "latency_cdf", "queue_heatmap", "queue_busiest", "link_utilization", "congestion", "qp_rates"}


def test_collective_run_has_every_plot_but_congestion_which_says_why(tmp_path):
    path, took_s = write_report(_run_dir(tmp_path))
    html = path.read_text()
    s = _sections(html)
    assert set(s) == ALL_PLOTS
    for key in ALL_PLOTS - {"congestion"}:
        kind, png = s[key]
        assert kind == "img", (key, png)
        w, h = _png_size(png)
        assert w > 500 and h > 200
    kind, text = s["congestion"]
    assert kind == "missing" and text.startswith(NOT_RECORDED) and "congestion.ecn off" in text
    assert took_s < 30 and "could not be drawn" not in html


def test_page_is_self_contained_and_escaped(tmp_path):
    html = write_report(_run_dir(tmp_path))[0].read_text()
    assert not re.search(r'(src|href)="(?!data:|#)', html)          # nothing to fetch: data: URLs and anchors only
    assert "<script" not in html.replace("&lt;script", "") and "<link" not in html
    assert "unit&lt;script&gt;" in html and "CPU saturated &lt;b&gt;" in html
    assert 'class="verdict bad">Verdict: <b>NOT faithful</b>' in html
    assert "<td>131 KiB</td>" not in html and "<td>128 KiB</td>" in html  # sizes table in binary units


def test_congestion_panels_and_dcqcn_rates(tmp_path):
    d = _run_dir(tmp_path)
    _congestion_tables(d)
    s = _sections(write_report(d)[0].read_text())
    assert s["congestion"][0] == "img" and s["qp_rates"][0] == "img"
    assert (d / "report.html").stat().st_size > 50_000


def test_paused_time_is_the_integral_of_ports_paused_at_once():
    t, total = paused_time_s([(1.0, 0.5), (1.2, 0.5), (3.0, 1.0)])
    assert list(t) == [1.0, 1.2, 1.5, 1.7, 3.0, 4.0]
    assert np.allclose(total, [0, 0.2, 0.8, 1.0, 1.0, 2.0])
    assert len(paused_time_s([])[0]) == 0


def test_pause_intervals_never_resumed_last_to_the_end(tmp_path):
    from testbed.report.congestion import _intervals
    d = _run_dir(tmp_path)
    _congestion_tables(d)
    spans = _intervals(RunDir.open(d), 0.8)
    assert list(spans) == ["l1-eth3 > s1"]
    assert np.allclose(spans["l1-eth3 > s1"], [(0.1, 0.2), (0.6, 0.2)])


def test_port_grid_utilization_and_queue_values(tmp_path):
    run = RunDir.open(_run_dir(tmp_path))
    util = port_grid(run, "tx_bytes", "rate")
    assert util.labels == ["l1-eth1 > h1", "l1-eth2", "l1-eth3 > s1", "s1-eth1 > l1"]
    bps = util.values[:, 1:] * 8
    assert np.allclose(np.nanmean(bps, axis=1), [5e6, 2.5e6, 1e7, 0], rtol=0.03)
    q = port_grid(run, "backlog_bytes", "max")
    assert np.nanmax(q.values[2]) == 8000 and np.nanmax(q.values[0]) == 0
    with pytest.raises(ValueError, match="how='mean'"):
        port_grid(run, "tx_bytes", "mean")


def test_a_run_with_only_a_manifest_gets_every_plot_replaced(tmp_path):
    d = tmp_path / "bare"
    d.mkdir()
    (d / "manifest.json").write_text("{}")
    (d / "INCOMPLETE").write_text("SIGINT during the traffic\n")
    html = write_report(d)[0].read_text()
    s = _sections(html)
    assert set(s) == ALL_PLOTS and all(kind == "missing" and text.startswith(NOT_RECORDED)
                                       for kind, text in s.values()), s
    assert "INCOMPLETE: SIGINT during the traffic" in html


@pytest.mark.parametrize("make, says", [
    (lambda p: p / "absent", "no such directory"),
    (lambda p: (p / "f").write_text("x") and p / "f", "not a directory"),
    (lambda p: p, "not a run directory (no manifest.json"),
])
def test_bad_run_dir_is_refused_naming_it(tmp_path, capsys, make, says):
    bad = make(tmp_path)
    with pytest.raises(NotARunDir, match=re.escape(says)):
        write_report(bad)
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"testbed: error: RUN_DIR '{bad}'") and says in err


def test_report_command_remakes_the_page(tmp_path, capsys):
    d = _run_dir(tmp_path)
    assert main(["report", str(d)]) == 0
    assert f"report: {d / 'report.html'}" in capsys.readouterr().out
    assert (d / "report.html").exists()


def test_message_rate_is_size_over_service_time_in_order():
    from testbed.report.rates import _service_rates
    msgs = pd.DataFrame({"rank": [0, 0, 1], "peer": [1, 1, 0], "size_bytes": [12500, 12500, 1250],
                         "t_post_ns": [0, 0, 5 * MS], "t_acked_ns": [10 * MS, 30 * MS, 6 * MS]})
    (k0, start0, bps0, end0), (k1, start1, bps1, end1) = _service_rates(msgs, ["rank", "peer"])
    assert k0 == (0, 1) and list(start0) == [0, 10 * MS] and list(end0) == [10 * MS, 30 * MS]
    assert np.allclose(bps0, [1e7, 5e6])  # the second waited for the first: served over 20 ms
    assert k1 == (1, 0) and np.allclose(bps1, [1e7])


def _axes(html):
    """plot key -> the axes limits and data extents its <img> carries (data-axes, testbed.report.extent)."""
    import html as html_lib
    return {key: json.loads(html_lib.unescape(js)) for key, js in
            re.findall(r'<section id="plot-([a-z_]+)"><h2>[^<]*</h2><figure><img[^>]*?data-axes="([^"]*)"', html)}


def test_every_plot_carries_its_axes_and_holds_its_data_and_reference_lines(tmp_path):
    from testbed.report.extent import outside
    d = _run_dir(tmp_path)
    _congestion_tables(d)
    axes = _axes(write_report(d)[0].read_text())
    assert set(axes) == ALL_PLOTS
    for key, a in axes.items():
        assert a and outside(a) == [], (key, outside(a))
    busbw = axes["busbw"][0]
    (goodput,) = [s for s in busbw["series"] if s["ref"]]
    assert goodput["label"] == "link goodput 9.86 Mbit/s" and goodput["y"] == [9.86, 9.86]
    assert goodput["x"] == busbw["xlim"]                       # an axhline spans the axis it crosses
    assert busbw["ylim"][0] == 0 and busbw["ylim"][1] > 9.86 * 1.05  # above the line (data tops at 8.5)


def test_outside_names_a_series_the_axes_cut():
    from testbed.report.extent import axes_extents, outside
    from testbed.report.figure import new_figure
    fig = new_figure()
    ax = fig.add_subplot()
    ax.plot([0, 1, 2], [1, 5, 2], label="cut")
    ax.axhline(7, label="ref")
    ax.set_ylim(0, 4)
    fig.canvas.draw()
    bad = outside(axes_extents(fig))
    assert len(bad) == 2 and bad[0] == ": cut y [1.0, 5.0] outside ylim [0.0, 4.0]" and "ref y [7.0, 7.0]" in bad[1]


def test_busiest_ports_are_small_multiples_with_the_thresholds(tmp_path):
    d = _run_dir(tmp_path)
    _congestion_tables(d)
    busiest = _axes(write_report(d)[0].read_text())["queue_busiest"]
    assert len(busiest) == 1  # one port held a queue: one panel
    (panel,) = busiest
    assert panel["title"].startswith("1. l1-eth3 > s1: mean 8.0 KB")
    refs = {s["label"]: s["y"] for s in panel["series"] if s["ref"]}
    assert refs == {"kmin_bytes": [5.0, 5.0], "kmax_bytes": [20.0, 20.0]}
    assert panel["ylim"][1] > 20  # Kmax above the 8 KB queue, inside the panel


def _pattern_run(tmp_path, names):
    """A flows run: h2 > h1 (the victim, or as ``names`` names it) and four busier flows into h1."""
    d = _run_dir(tmp_path, "pattern")
    flows = [{"src": f"h{i}", "dst": "h1", "size_bytes": 1 << 20, **({"name": names[i]} if i in names else {})}
             for i in range(2, 7)]
    m = json.loads((d / "manifest.json").read_text())
    m["scenario"]["workload"] = {"pattern": {"kind": "flows", "flows": flows}}
    (d / "manifest.json").write_text(json.dumps(m))
    _write(d, "flow_rates.csv", [{"trial": 0, "flow": i - 2, "src": f"h{i}", "dst": "h1",
                                  "bin_start_ns": T0 + b * 10 * MS, "rx_bytes": 1e4, "goodput_bps": 1e6 * i}
                                 for i in range(2, 7) for b in range(30)])
    (d / "sizes.csv").unlink()
    (d / "sizes.parquet").unlink(missing_ok=True)
    return d


def test_qp_rates_highlight_the_flows_the_scenario_names(tmp_path):
    (rates,) = _axes(write_report(_pattern_run(tmp_path, {2: "victim", 5: "long"}))[0].read_text())["qp_rates"]
    labels = sorted(s["label"] for s in rates["series"])
    assert labels == ["_h3 > h1", "_h4 > h1", "_h6 > h1", "long: h5 > h1", "victim: h2 > h1"]  # "_": grey, no legend
    assert rates["ylim"][1] > 6  # the busiest (6 Mbit/s) inside


def test_qp_rates_without_names_colour_every_flow_when_few(tmp_path):
    (rates,) = _axes(write_report(_pattern_run(tmp_path, {}))[0].read_text())["qp_rates"]
    assert not [s for s in rates["series"] if s["label"].startswith("_")]


@pytest.mark.parametrize("content, says", [
    (None, "ports.csv absent (the qdisc sampler did not run)"),
    (b"\xe8\x00\xff garbage", "ports.csv unreadable: UnicodeDecodeError"),
    (b"time_ns,port\n1,x\n", "ports.csv unreadable: TableError: missing column 'tx_bytes'"),
    (b"time_ns,port,tx_bytes,tx_pkts,drops_pkts,backlog_bytes,backlog_pkts\n", "ports.csv has no rows"),
])
def test_not_recorded_lines_tell_absent_unreadable_and_empty_apart(tmp_path, content, says):
    d = _run_dir(tmp_path)
    (d / "ports.parquet").unlink(missing_ok=True)
    if content is None:
        (d / "ports.csv").unlink()
    else:
        (d / "ports.csv").write_bytes(content)
    s = _sections(write_report(d)[0].read_text())
    for key in ("queue_heatmap", "queue_busiest", "link_utilization"):
        kind, text = s[key]
        assert kind == "missing" and text.startswith(NOT_RECORDED) and says in text.replace("&#x27;", "'"), (key, text)
    assert s["busbw"][0] == "img"  # the other plots are drawn


def test_flow_name_is_checked_in_the_scenario():
    from testbed.spec.scenario import ScenarioError, parse_scenario
    flows = [{"src": "h1", "dst": "h2", "size_bytes": 1000, "name": "the victim"}]
    with pytest.raises(ScenarioError, match=r"workload\.pattern\.flows\.0\.name"):
        parse_scenario({"workload": {"pattern": {"kind": "flows", "flows": flows}}})
