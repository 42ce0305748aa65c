"""Open-loop WebSearch flows on a real fabric (issue 32 item 3): 48 flows, Poisson arrivals at 30 % load on 4
hosts at 10 Mbit/s, several flows per host pair sharing lanes; every byte delivered once, fct.csv a row per
flow, slowdown.csv a row per size bucket with n adding up to the flows and every slowdown >= 1 (the ideal is
the flow alone on an idle path, testbed.workloads.open_loop.standalone; a measured ratio below 1 counts as 1,
as HPCC's analysis prints it, and as ``below_ideal``), the table printed."""
import numpy as np

from conftest import run_scenario_file
from testbed.results.rundir import RunDir
from testbed.results.slowdown import SLOWDOWN_COLUMNS

FLOWS = 48
SCENARIO = f"""name: open_loop
seed: 4
reference_link_bps: 400G
fabric: {{spines: 2, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: 100KB,
         mtu_bytes: 4200}}
transport: {{payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4, entropy: per_flow}}
load_balance: {{policy: ecmp}}
workload:
  open_loop: {{cdf: websearch, load: 0.3, flows: {FLOWS}, buckets: 4, lanes: 2}}
"""


def test_open_loop_flows_deliver_every_byte_once_and_slow_down_by_at_least_one(tmp_path):
    res, s = run_scenario_file(tmp_path, SCENARIO, timeout=180, expect_rc=None)
    run = RunDir.open(s["run_dir"])
    b, t = s["open_loop"], s["transport"]
    fct, table = run.fct, run.table("slowdown")
    assert s["complete"] and b["flows"] == b["flows_done"] == len(fct) == FLOWS
    assert sorted(fct["flow"]) == list(range(FLOWS))
    total = int(fct["size_bytes"].sum())
    assert total == b["bytes"] and t["posted_bytes"] == t["acked_bytes"] == t["delivered_bytes"] == total
    assert t["order_errors"] == 0
    assert fct.groupby(["src", "dst"]).size().max() >= 3  # pairs carried several flows over their 2 lanes
    assert list(table.columns) == SLOWDOWN_COLUMNS and len(table) == 4 and table["n"].sum() == FLOWS
    # a flow beats a serialized link's ideal by at most the host shaper's burst + one frame (17 KB here)
    big = fct[fct["size_bytes"] >= 64 * 1024]
    assert (big["slowdown"] >= 0.7).all() and (fct["slowdown"] > 0).all(), fct.sort_values("slowdown").head(3)
    assert table["below_ideal"].sum() == (fct["slowdown"] < 1).sum() == b["below_ideal"]
    filled = table[table["n"] > 0]
    for col in ("slowdown_p50", "slowdown_p95", "slowdown_p99"):
        assert (filled[col] >= 1).all()
    assert (filled["slowdown_p50"] <= filled["slowdown_p95"]).all()
    assert (filled["slowdown_p95"] <= filled["slowdown_p99"]).all()
    assert (table["size_lo_bytes"].to_numpy()[1:] == table["size_hi_bytes"].to_numpy()[:-1] + 1).all()
    assert "FCT slowdown = FCT / FCT alone on an idle path" in res.stdout
    print("open loop:", b["offered_load"], "slowdown p50/p99", b["slowdown_p50"], b["slowdown_p99"], "min",
          b["slowdown_min"], "| buckets n", table["n"].tolist(), "p99", np.round(table["slowdown_p99"], 2).tolist())
