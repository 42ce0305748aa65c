"""The teaching labs (labs/, issue 10 item 6, issue 22): each test runs one lab's scenario files as they are,
with ``testbed run`` as the lab's README tells students, checks the lab's observation (relations between
the runs), and runs the lab's checker (``testbed lab check LAB DIR``) on the fresh runs: every figure of
the lab's expected.yaml inside its band measured over N fresh runs (benchmarks/lab_bands.py)."""
from pathlib import Path

from conftest import EXIT_FAITHFUL, EXIT_NOT_FAITHFUL, run_cli
from testbed.labcheck.bands import load as load_bands
from testbed.labcheck.figures import switch_tx_bytes
from testbed.results.congestion_flows import victim_dip
from testbed.results.rundir import RunDir

LABS = Path(__file__).resolve().parents[2] / "labs"
TREE_SMALL, RING_LARGE = 0.85, 0.85   # lab 4: tree/ring time of 1 + 4 KiB, ring/tree from 64 KiB


def run_lab(tmp_path, lab: str, name: str, timeout: float = 240) -> dict:
    """``testbed run labs/LAB/NAME.yaml``; summary.json of the completed run (faithful or not) with its
    ``run_dir``. Every posted byte must be delivered and acknowledged."""
    results = tmp_path / name
    res = run_cli("run", LABS / lab / f"{name}.yaml", "--results", results, "--quiet", timeout=timeout)
    assert res.returncode in (EXIT_FAITHFUL, EXIT_NOT_FAITHFUL), f"{lab}/{name}: {res.returncode}\n{res.stderr}"
    (path,) = results.glob("*/summary.json")
    s = RunDir.open(path.parent).summary
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] > 0 and t["order_errors"] == 0
    print(f"{lab}/{name}: faithful {s['faithful']} {s.get('violations')}")
    return s


def lab_check(lab: str, results: Path, expect_rc: int = 0) -> str:
    """``testbed lab check LAB RESULTS`` on the fresh runs; its output (printed). A lab whose bands are
    measured must pass with every figure judged; one without is still checked for its scenarios."""
    # run_lab keeps NOT faithful runs (the observation holds on them): counted, flagged WARN
    res = run_cli("lab", "check", lab, results, "--include-unfaithful", timeout=120)
    print(res.stdout, res.stderr)
    assert res.returncode == expect_rc, f"lab check {lab}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    if expect_rc == 0 and load_bands(LABS / lab).measured is not None:
        assert "SKIP" not in res.stdout and "FAIL" not in res.stdout
    return res.stdout


def test_lab1_spraying_uses_the_paths_ecmp_leaves_idle(tmp_path):
    """k = 4 flows on 4 spines: ECMP's per-flow hash collides (balls into bins: 1 - (3/4)^4 = 0.684 of
    the paths in use on average); spraying every packet over 64 source ports keeps all 4 busy."""
    ecmp, spray = (run_lab(tmp_path, "01_ecmp_spray", n)["load_balance"] for n in ("ecmp", "spray"))
    for name, b in (("ecmp", ecmp), ("spray", spray)):
        print(name, {k: b[k] for k in ("throughput_ratio_mean", "throughput_ratio_p5", "completion_ratio_mean",
                                       "balance_index", "slowdown_p99", "reorder_pkts")})
    assert spray["throughput_ratio_mean"] >= ecmp["throughput_ratio_mean"] + 0.10
    assert spray["balance_index"] >= ecmp["balance_index"] + 0.15
    assert ecmp["reorder_pkts"] == 0 and spray["reorder_pkts"] > 0
    lab_check("01_ecmp_spray", tmp_path)


def test_lab2_dcqcn_keeps_the_incast_queue_short(tmp_path):
    """4:1 incast with ECN marking: without congestion control the receiver's port fills its lossless
    buffer and drops; with DCQCN the queue's p99 stays under half of that, near Kmax."""
    none, dcqcn = (run_lab(tmp_path, "02_incast_dcqcn", n) for n in ("no_cc", "dcqcn"))
    for name, s in (("no_cc", none), ("dcqcn", dcqcn)):
        c = s["congestion"]
        print(name, {k: c.get(k) for k in ("bottleneck_port", "queue_p99_bytes", "kmax_bytes", "lossless_drops_pkts",
                                           "ce_marked_pkts", "cnp_sent", "jain_index", "bottleneck_util")},
              "retx", s["transport"]["retx_pkts"])
    cn, cd = none["congestion"], dcqcn["congestion"]
    assert cd["queue_p99_bytes"] < 0.5 * cn["queue_p99_bytes"]
    assert cn["lossless_drops_pkts"] > 0 and none["transport"]["retx_pkts"] > 0
    assert cn["cnp_sent"] == 0 and cd["cnp_sent"] > 0
    lab_check("02_incast_dcqcn", tmp_path)


def test_lab3_pfc_pauses_the_victim_that_never_goes_to_the_congested_host(tmp_path):
    """Head-of-line blocking: the burst into h1 makes PFC pause the spine -> leaf 1 lossless class, and the
    victim h5 -> h2 (h2 idle, its port never congested) dips with it; without PFC the burst drops at h1's
    port instead and the victim keeps its rate."""
    pfc = run_lab(tmp_path, "03_pfc_hol", "pfc")
    lossy = run_lab(tmp_path, "03_pfc_hol", "lossy")
    c = pfc["congestion"]
    (vp,) = c["victim"]
    run = RunDir.open(lossy["run_dir"])
    (vl,) = victim_dip(run.fct, run.flow_rates)
    print("pfc", {k: c.get(k) for k in ("pause_frames", "paused_time_s", "lossless_drops_pkts")}, vp)
    print("lossy", {"retx_pkts": lossy["transport"]["retx_pkts"]}, vl)
    assert vp["src"] == vl["src"] == "h5" and vp["dst"] == vl["dst"] == "h2"
    assert c["pause_frames"] > 0 and c["lossless_drops_pkts"] == 0
    assert vp["baseline_bps"] > 8e6 and vl["baseline_bps"] > 8e6   # its own receiver's rate before the burst
    assert vp["dip_depth"] >= 0.8 and vp["dip_duration_s"] >= 0.3
    assert vl["dip_depth"] <= 0.4 and lossy["transport"]["retx_pkts"] > 0
    lab_check("03_pfc_hol", tmp_path)
    refused = lab_check("02_incast_dcqcn", tmp_path, expect_rc=1)   # lab 2's checker on lab 3's runs
    assert "holds no run of lab 02_incast_dcqcn" in refused and "lab3-pfc" in refused


def test_lab4_tree_wins_small_ring_wins_large(tmp_path):
    """All-reduce on 8 hosts, the median of 5 timed iterations per size: the double binary tree's
    2 log2(n) steps beat the ring's 2(n-1) at 1 and 4 KiB, where each step's fixed cost dominates; from
    64 KiB the ring's bandwidth optimality wins (the tree's inner nodes send 2 S)."""
    ring, tree = ({r["size_bytes"]: r for r in run_lab(tmp_path, "04_ring_tree", n)["sizes"]}
                  for n in ("ring", "tree"))
    for size in sorted(ring):
        print(size, "ring", round(ring[size]["p50_us"]), round(ring[size]["busbw_ratio"], 3),
              "tree", round(tree[size]["p50_us"]), round(tree[size]["busbw_ratio"], 3))
    # small sizes judged together: one 1 KiB median of 5 was seen at 1.02 x the ring's (typically 0.45-0.54)
    small = (1024, 4096)
    assert sum(tree[s]["p50_us"] for s in small) < TREE_SMALL * sum(ring[s]["p50_us"] for s in small)
    for size in (65536, 262144):
        assert ring[size]["p50_us"] < RING_LARGE * tree[size]["p50_us"], size
    lab_check("04_ring_tree", tmp_path)


def test_lab5_rail_aligned_expert_groups_keep_the_alltoall_off_the_spines(tmp_path):
    """MoE all-to-all on a rail-optimized fabric with 2:1 spines: expert groups along the rails (TP 2, EP 4:
    GPU i of every server) never leave their rail leaf and run at the host link rate; groups across rails
    (TP 1, EP 4) send 2/3 of their bytes through the spines and take over 1.5x as long."""
    aligned, cross = (run_lab(tmp_path, "05_moe_rail", n) for n in ("rail_aligned", "cross_rail"))
    (a,), (x,) = aligned["sizes"], cross["sizes"]
    spine_a, spine_x = (switch_tx_bytes(RunDir.open(s["run_dir"]), "spine") for s in (aligned, cross))
    print("aligned", round(a["time_us"]), round(a["busbw_ratio"], 3), spine_a,
          "cross", round(x["time_us"]), round(x["busbw_ratio"], 3), spine_x)
    assert a["collective"] == x["collective"] == "alltoall" and a["count"] == x["count"] == 8
    assert a["busbw_ratio"] >= 0.9
    assert x["time_us"] >= 1.5 * a["time_us"]
    assert spine_a < 0.01 * spine_x
    lab_check("05_moe_rail", tmp_path)


def test_lab6_placement_or_spraying_removes_the_interference_ecmp_causes(tmp_path):
    """Two tenants' 4-rank ring all-reduce jobs at once: packed on their own leaves they share no link and
    run at line rate; spread over every leaf, per-flow ECMP puts one flow of each job on one uplink and the
    slower job runs at most 0.75 x the packed rate (measured 0.500 against 0.995); sprayed, each job gets
    its fair share of the shared uplinks (the full rate here), within 10 % of it and of the other job."""
    runs = [run_lab(tmp_path, "06_tenants_interference", n) for n in ("packed", "spread_ecmp", "spread_spray")]
    for s in runs:  # the tenants' hosts are isolated: every probe (cross-tenant blocked, own delivered) as expected
        assert s["tenants"]["isolation"] and all(p["passed"] for p in s["tenants"]["probes"])
    packed, ecmp, spray = (s["jobs"] for s in runs)
    for name, b in (("packed", packed), ("spread_ecmp", ecmp), ("spread_spray", spray)):
        print(name, {e["name"]: (round(e["busbw_ratio"], 3), e["fair_busbw_ratio"]) for e in b["jobs"]},
              len(b["shared_links"]))
    assert packed["shared_links"] == {} and len(ecmp["shared_links"]) == len(spray["shared_links"]) == 16
    packed_min = min(e["busbw_ratio"] for e in packed["jobs"])
    assert packed_min >= 0.9
    assert min(e["busbw_ratio"] for e in ecmp["jobs"]) <= 0.75 * packed_min
    a, b = spray["jobs"]
    assert abs(a["busbw_ratio"] / b["busbw_ratio"] - 1) <= 0.10
    assert all(abs(e["busbw_ratio"] / e["fair_busbw_ratio"] - 1) <= 0.10 for e in (a, b))
    lab_check("06_tenants_interference", tmp_path)
