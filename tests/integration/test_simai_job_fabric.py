"""A SimAI training job and a sweep job at once on the quickstart fabric (issue 18 item 1: a SimAI/AICB file as
a job's workload). scenarios/jobs_simai_sweep.yaml: job ``train`` replays workloads/tp2_dp2.txt (TP 2 x DP 2,
all_gpus 4 = its 4 ranks; overlap on) packed on leaves 1-2 (h1-h4), job ``sweep`` runs a 4-rank 512 KiB ring
all-reduce packed on leaves 3-4 (h5-h8); ``testbed run --solo`` runs each alone first on the same hosts.

Checked: both jobs complete every op, every posted byte is delivered, the shared run is faithful; the SimAI
job's streams (TP, DP) are its own, the sweep's stream follows them; no link carries both jobs, so each job's
JCT together is within 10 % of its JCT alone (the SimAI job's JCT: the sum of its iteration times, compute
waits included); the SimAI per-group figures sit under the job in summary.json and jobs.csv has a row per
group. Seen here: train iteration 0.770 s (alone 0.769 s), JCT 3.08 s (3.08 s), slowdown 1.00; sweep busbw/link
0.996 (0.995), JCT 3.20 s, slowdown 1.00; about 40 s with the two solo runs.
"""
from pathlib import Path

import pytest

from conftest import EXIT_FAITHFUL, assert_losses_accounted, raise_if_run_disturbed, run_cli
from testbed.results.rundir import RunDir

pytestmark = pytest.mark.integration

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "jobs_simai_sweep.yaml"
JCT_BAND = 0.10            # acceptance: each job's JCT together within 10 % of its JCT alone (no shared link)
ITERATIONS, TP_OPS, DP_OPS = 4, 4, 2   # per iteration of tp2_dp2.txt: fwd + ig TP all-reduces, wg DP all-reduces


def test_simai_job_beside_a_sweep_job_runs_at_its_solo_jct(tmp_path):
    res = run_cli("run", SCENARIO, "--results", tmp_path / "r", "--solo", timeout=600)
    raise_if_run_disturbed(res, tmp_path / "r")
    assert res.returncode == EXIT_FAITHFUL, f"{res.returncode}\n{res.stdout}\n{res.stderr}"
    (path,) = (tmp_path / "r").glob("*/summary.json")
    run = RunDir.open(path.parent)
    s = run.summary
    assert s["faithful"] is True, s.get("violations")
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] > 0 and t["order_errors"] == 0
    assert_losses_accounted(s)
    block = s["jobs"]
    train, sweep = block["jobs"]
    assert (train["name"], train["workload"], sweep["workload"]) == ("train", "simai", "sizes")
    assert train["hosts"] == ["h1", "h2", "h3", "h4"] and sweep["hosts"] == ["h5", "h6", "h7", "h8"]
    assert block["shared_links"] == {} and train["shares_links_with"] == []
    # every op of both jobs ran, each job on its own streams
    assert train["ops_done"] == ITERATIONS * (TP_OPS + DP_OPS) and sweep["ops_done"] == 1 + 4
    assert train["streams"] == [0, 1] and sweep["streams"] == [2]
    ops = run.table("ops")
    assert ops.groupby("job").size().to_dict() == {"train": 24, "sweep": 5}
    assert set(ops[ops["job"] == "train"]["group"]) == {"TP", "DP"}
    # the SimAI figures under the job: per group, per stream, per iteration; JCT = the iterations' sum
    r = train["replay"]
    assert r["iterations"] == ITERATIONS and r["overlap"] == "on"
    assert {g: v["ops"] for g, v in r["groups"].items()} == {"TP": TP_OPS, "DP": DP_OPS}
    assert set(r["streams"]) == {"TP s0", "DP s0"}
    assert train["jct_s"] == pytest.approx(sum(r["iterations_s"]))
    assert train["iteration_s"] == pytest.approx(train["jct_s"] / ITERATIONS)
    w = r["compute_s_per_iteration"]
    assert w == pytest.approx(6 * 125_000e-9 * 400, rel=0.01)   # 6 phases x 125,000 ns x compute scale 400
    assert train["iteration_s"] > w
    # a DP all-reduce moves 167,772 B each way per rank at no more than the 10 Mbit/s host link
    assert r["groups"]["DP"]["comm_s"] > 0.9 * DP_OPS * 167772 * 8 / 10e6
    # both jobs at their solo JCT: no link carries both
    for e in (train, sweep):
        print(f"{e['name']}: JCT {e['jct_s']:.3f} s, alone {e['solo_jct_s']:.3f} s, slowdown "
              f"{e['jct_slowdown']:.3f}; busbw/link {e['busbw_ratio']:.3f} (alone {e['solo_busbw_ratio']:.3f}); "
              f"solo faithful {e['solo_faithful']}")
        assert e["solo_faithful"] is True
        assert abs(e["jct_slowdown"] - 1) <= JCT_BAND, e
    print(f"train iteration {train['iteration_s']:.3f} s (alone {train['solo_iteration_s']:.3f} s), compute "
          f"{w:.3f} s, exposed {r['exposed_comm_s']:.3f} s; groups "
          + ", ".join(f"{g} {v['comm_s']:.3f} s in {v['ops']} ops" for g, v in r["groups"].items()))
    assert abs(train["iteration_s"] / train["solo_iteration_s"] - 1) <= JCT_BAND
    assert block["interference"]["jct_slowdown"][0][1] == pytest.approx(train["jct_slowdown"])
    # jobs.csv: the SimAI job's rows per group (with its solo figures), the sweep's per size
    jobs = run.table("jobs")
    rows = jobs[jobs["job"] == "train"].set_index("group")
    assert set(rows.index) == {"TP", "DP"} and rows.loc["DP", "ops"] == ITERATIONS * DP_OPS
    assert rows["solo_jct_s"].notna().all() and (rows["workload"] == "simai").all()
    print(jobs[["job", "group", "size_bytes", "ops", "time_us", "busbw_ratio", "jct_s", "iteration_s",
                "jct_slowdown"]].to_string())
    assert "job train (SimAI" in res.stdout and "per group: TP" in res.stdout
