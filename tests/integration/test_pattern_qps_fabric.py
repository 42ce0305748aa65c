"""Several queue pairs per pattern flow on a real fabric (issue 18 item 4): a flow split over 4 QPs spreads
over both spine uplinks under ECMP, a flow on 1 QP keeps to one, and every byte of both arrives.

One run, two flows in opposite directions so that each leaf's uplinks carry one flow's data: h1 -> h3 on 4
QPs leaves over leaf l1's uplinks, h4 -> h2 on 1 QP over leaf l2's (each uplink set also carries the other
flow's ACKs, under 1 % of the bytes). Three trials, each with new UDP source ports (seed + trial): per-QP
ECMP hashing puts all 4 QPs on one spine with probability 2 x (1/2)^4 = 1/8 per trial, so at least one of
the three trials must show both uplinks busy (all three collide with probability 1/512; the seed is fixed,
so the outcome is the same every run).
"""
import numpy as np

from conftest import run_scenario_file
from testbed.results.rundir import RunDir

SIZE = 512 * 1024
SCENARIO = f"""name: pattern_qps
seed: 5
reference_link_bps: 400G
fabric: {{spines: 2, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: 200KB,
         mtu_bytes: 4200}}
transport: {{payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4, entropy: per_flow}}
load_balance: {{policy: ecmp}}
workload:
  pattern:
    kind: flows
    trials: 3
    flows:
      - {{src: h1, dst: h3, size_bytes: {SIZE}, qps: 4}}
      - {{src: h4, dst: h2, size_bytes: {SIZE}}}
"""


def test_a_flow_on_four_qps_uses_both_spines_and_one_qp_uses_one(tmp_path):
    _, s = run_scenario_file(tmp_path, SCENARIO, timeout=240, expect_rc=None)
    run = RunDir.open(s["run_dir"])
    t = s["transport"]
    assert s["complete"] and t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] == 3 * 2 * SIZE
    lb = s["load_balance"]
    assert lb["flows_per_trial"] == 2 and lb["qps_per_trial"] == 5 and lb["trials"] == 3
    fct, per_qp = run.fct, run.table("flow_qps")
    assert len(fct) == 6 and len(per_qp) == 3 * 5
    assert (run.flow_rates.groupby(["trial", "flow"])["rx_bytes"].sum().round() == SIZE).all()
    for (trial, flow), q in per_qp.groupby(["trial", "flow"]):
        f = fct[(fct["trial"] == trial) & (fct["flow"] == flow)].iloc[0]
        assert len(q) == (4 if flow == 0 else 1) and q["size_bytes"].sum() == SIZE
        assert q["udp_sport"].nunique() == len(q)  # every QP its own entropy
        assert f["end_ns"] == q["end_ns"].max() and f["start_ns"] == q["start_ns"].min()
        assert f["lost_pkts"] == q["lost_pkts"].sum()
    up = run.uplinks
    l1 = {tr: g["share"].to_numpy() for tr, g in up[up["switch"] == "l1"].groupby("trial")}
    l2 = {tr: g["share"].to_numpy() for tr, g in up[up["switch"] == "l2"].groupby("trial")}
    assert sorted(l1) == sorted(l2) == [0, 1, 2]
    for tr in range(3):
        assert l2[tr].max() > 0.95, (tr, l2[tr])  # one QP: one path
        # four equal QPs on two uplinks: shares near k/4
        assert abs(l1[tr].max() * 4 - round(l1[tr].max() * 4)) < 0.2, (tr, l1[tr])
    assert any(l1[tr].min() >= 0.2 for tr in range(3)), l1  # both spines carried a share
    print("qps 4 uplink shares per trial:", {tr: np.round(v, 3).tolist() for tr, v in l1.items()},
          "| qps 1:", {tr: np.round(v, 3).tolist() for tr, v in l2.items()},
          f"| fct p50 {lb['fct_p50_us']:.0f} us, slowdown p50 {lb['slowdown_p50']:.3f}")
