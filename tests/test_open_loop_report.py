"""report.html of an open-loop run (issue 32 item 3), from tables written here (no fabric): the FCT slowdown plot
per size bucket (p50/p95/p99, n in the labels) and the latency CDF per bucket rather than per size."""
import html as html_lib
import json
import re

import numpy as np
import pandas as pd

from testbed.report import write_report
from testbed.report.extent import outside
from testbed.results.rundir import RunDir
from testbed.results.slowdown import slowdown_table

RID = "tb5678"
T0 = 1_796_000_000_000_000_000


def _open_loop_run(tmp_path, with_block=True):
    d = tmp_path / "run"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"run_id": RID, "started_utc": "20261208T000000Z",
                                                 "scenario": {"name": "ol"}, "seed": 1}))
    (d / "topology.json").write_text(json.dumps({
        "switches": [{"name": f"{RID}l1"}], "hosts": [{"name": f"{RID}h{r + 1}", "rank": r} for r in range(2)],
        "links": [{"a": f"{RID}h{r + 1}", "a_port": 0, "b": f"{RID}l1", "b_port": r + 1, "rate_bps": 1e7}
                  for r in range(2)]}))
    rng = np.random.default_rng(1)
    size = rng.integers(1, 300_000, 60)
    slow = 1 + rng.exponential(2, 60)
    fct = pd.DataFrame({"trial": 0, "flow": range(60), "src": "h1", "dst": "h2", "size_bytes": size,
                        "start_ns": T0 + np.arange(60) * 10**7, "end_ns": T0 + np.arange(60) * 10**7 + 10**6,
                        "fct_us": slow * 1000, "ideal_fct_us": 1000.0, "slowdown": slow, "lost_pkts": np.nan})
    run = RunDir(d)
    run.write_table("fct", fct)
    table = slowdown_table(fct, [1000, 20_000, 100_000, 300_000])
    run.write_table("slowdown", table)
    block = {"buckets": table.astype(object).to_dict("records")} if with_block else None
    (d / "summary.json").write_text(json.dumps({"run_id": RID, "scenario": "ol", "host_link_bps": 1e7,
                                                "payload_efficiency": 0.986, "open_loop": block}, default=int))
    return d, table


def _axes(page):
    return {key: json.loads(html_lib.unescape(js)) for key, js in
            re.findall(r'<section id="plot-([a-z_]+)"><h2>[^<]*</h2><figure><img[^>]*?data-axes="([^"]*)"', page)}


def test_an_open_loop_report_draws_slowdown_by_size_bucket_and_the_fct_cdf_per_bucket(tmp_path):
    d, table = _open_loop_run(tmp_path)
    page = write_report(d)[0].read_text()
    axes = _axes(page)
    assert "slowdown" in axes and "latency_cdf" in axes and "could not be drawn" not in page
    assert outside(axes["slowdown"]) == [] and outside(axes["latency_cdf"]) == []
    (ax,) = axes["slowdown"]
    lines = {s["label"]: s for s in ax["series"] if not s["ref"]}
    assert set(lines) == {"p50", "p95", "p99"}
    filled = table[table["n"] > 0]
    p99 = filled["slowdown_p99"].astype(float)
    assert np.allclose(lines["p99"]["y"], [p99.min(), p99.max()])  # each series' extent (testbed.report.extent)
    assert lines["p50"]["x"] == [0, len(filled) - 1]
    cdf_labels = [s["label"] for s in axes["latency_cdf"][0]["series"]]
    assert len(cdf_labels) == len(filled)  # one line per bucket, not 60 (one per flow size)
    assert all(f"(n={n})" in lab for lab, n in zip(cdf_labels, filled["n"]))


def test_a_run_without_the_open_loop_block_has_no_slowdown_plot(tmp_path):
    d, _ = _open_loop_run(tmp_path, with_block=False)
    assert 'id="plot-slowdown"' not in write_report(d)[0].read_text()
