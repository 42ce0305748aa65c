"""SimAI/AICB replay: placement of groups on hosts, the timeline plan, the overlap model, the replay table."""
from __future__ import annotations

from pathlib import Path

import pytest

from shared_files import needs, shared
from testbed.workloads.simai.plan import ReplayPlan, ReplayStep
from testbed.spec.scenario import ScenarioError
from testbed.workloads import load_scenario
from traffic.workloads.parallel_groups import rank_groups
from traffic.workloads.placement import PlacementError, gpus_per_host, place

REPO = Path(__file__).resolve().parents[1]
EP_TEST = shared("simai/workload_ep_test.txt")


def _scenario(tmp_path, path, extra="", hosts_per_leaf=2):
    p = tmp_path / "s.yaml"
    p.write_text(f"fabric: {{spines: 2, leaves: 4, hosts_per_leaf: {hosts_per_leaf}}}\n"
                 f"workload: {{simai: {{path: {path}, size_scale: 0.001{extra}}}}}\n")
    return p


def test_ep_test_groups_on_8_servers_of_4_gpus():
    per_host = gpus_per_host(32, 8)
    assert per_host == 4
    tp = place(rank_groups("TP", 32, 4, 4), per_host)
    assert (tp.where, tp.host_groups, tp.group_size) == ("scale_up", (), 4)
    ep = place(rank_groups("EP", 32, 4, 4), per_host)
    # EP group (i, k) = ranks (4i + m) x 4 + k: GPU k of servers 4i..4i+3; the 4 GPUs k share those NICs
    assert (ep.where, ep.host_groups, ep.multiplicity) == ("fabric", ((0, 1, 2, 3), (4, 5, 6, 7)), 4)
    dp_ep = place(rank_groups("DP_EP", 32, 4, 4), per_host)
    assert (dp_ep.host_groups, dp_ep.multiplicity) == (((0, 4), (1, 5), (2, 6), (3, 7)), 4)
    dp = place(rank_groups("DP", 32, 4, 4), per_host)
    assert (dp.host_groups, dp.multiplicity, dp.group_size) == ((tuple(range(8)),), 4, 8)
    # one rank per host: every group crosses the fabric unchanged
    one = place(rank_groups("TP", 8, 2), gpus_per_host(8, 8))
    assert (one.where, one.host_groups, one.multiplicity) == ("fabric", ((0, 1), (2, 3), (4, 5), (6, 7)), 1)


def test_placement_refusals_name_the_numbers():
    with pytest.raises(PlacementError, match="all_gpus: 12 GPUs cannot be spread evenly over the fabric's 8 hosts"):
        gpus_per_host(12, 8)
    with pytest.raises(PlacementError, match="all_gpus: 4 GPUs cannot"):
        gpus_per_host(4, 8)
    # TP 2 with 8 GPUs per host: a DP ring holds 4 ranks of each host
    with pytest.raises(PlacementError, match=r"rank group \(0, 2, 4, 6, 8, .*puts several ranks on one host"):
        place(rank_groups("DP", 64, 2), gpus_per_host(64, 8))


@needs(EP_TEST)
def test_plan_of_workload_ep_test(tmp_path):
    from testbed.workloads import plan_workload
    spec = load_scenario(_scenario(tmp_path, EP_TEST, ", iterations: 2, overlap: on"))
    plan = plan_workload(spec)
    r = plan.replay
    assert r.overlap == "on" and r.gpus_per_host == 4 and r.fabric_ops_per_iteration == 20
    assert r.compute_scale == pytest.approx(40000 * 0.001)
    assert len(plan.ops) == 40
    kinds = {(o.collective, o.algorithm, o.group) for o in plan.ops}
    assert kinds == {("alltoall", "pairwise", "EP"), ("reducescatter", "ring", "DP_EP"),
                     ("allgather", "ring", "DP_EP"), ("reducescatter", "ring", "DP"), ("allgather", "ring", "DP")}
    # ALLTOALL_EP of 25165824 B scaled by 0.001 (25166 B), 4 rank groups on each host group
    assert {o.size_bytes for o in plan.ops if o.collective == "alltoall"} == {25166 * 4}
    # every step of the file's order: 43 rows, fwd + ig + wg collectives (78) plus the trailing compute
    assert len(r.steps) == 79 and r.steps[-1].layer == "(end of iteration)"
    # compute: the file's 137,078,497 ns per iteration plus the weight updates, x 40; W is the makespan of the
    # compute program (testbed.workloads.replay.program), where a few 100 ns updates run beside the compute (16 us of 5.48 s)
    assert r.compute_s_per_iteration == pytest.approx(137078497e-9 * 40 + 78 * 100e-9 * 40, rel=1e-5)
    up = [s for s in r.steps if s.where == "scale_up"]
    assert len(up) == 54 and {s.group for s in up} == {"TP"}
    ag = next(s for s in up if s.token == "ALLGATHER")
    # (n-1)/n x S x 8 / (9 x 10 Mbit/s), n = 4, S = 12583 B
    assert ag.scale_up_s == pytest.approx(0.75 * 12583 * 8 / 90e6)
    assert {s.blocking for s in r.steps if s.phase == "wg" and s.where != "none"} == {False}
    assert any("32 GPUs on 8 hosts: each host is a server of 4 GPUs" in n for n in plan.notes)


def test_every_collective_type_runs_and_unknown_types_name_the_line(tmp_path):
    from testbed.workloads import plan_workload
    head = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 1 all_gpus: 4\n2\n")
    rows = ("a\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLREDUCEALLTOALL\t4096\t1\n"
            "b\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLTOALL\t4096\t1\n")
    (tmp_path / "w.txt").write_text(head + rows)
    plan = plan_workload(load_scenario(_scenario(tmp_path, tmp_path / "w.txt", hosts_per_leaf=1)))
    assert [(o.collective, o.algorithm) for o in plan.ops] == [("alltoall", "pairwise"), ("allreduce", "ring")]
    (tmp_path / "w.txt").write_text(head + rows.replace("\tALLTOALL\t", "\tGATHER\t"))
    with pytest.raises(ScenarioError, match=r"w.txt:4: column 'wg_collective' value 'GATHER': unknown "
                                            r"collective; allowed: NONE, ALLREDUCE"):
        load_scenario(_scenario(tmp_path, tmp_path / "w.txt", hosts_per_leaf=1))


def test_compute_scale_and_overlap_settings(tmp_path):
    from testbed.workloads import plan_workload
    ours = REPO / "scenarios" / "workloads" / "dp_overlap_tp2.txt"
    spec = load_scenario(_scenario(tmp_path, ours, ", compute_scale: off, overlap: off"))
    r = plan_workload(spec).replay
    assert r.compute_scale == 0 and r.compute_s_per_iteration == 0 and r.modes == ("off",)
    plan = plan_workload(load_scenario(_scenario(tmp_path, ours, ", overlap: compare, iterations: 2")))
    assert plan.replay.modes == ("off", "on", "on", "off") and len(plan.ops) == 4 * 5
    assert [o.iteration for o in plan.ops[::5]] == [0, 1, 2, 3]
    spec = load_scenario(_scenario(tmp_path, ours, ", compute_scale: 2.5"))
    assert plan_workload(spec).replay.compute_s_per_iteration == pytest.approx((0.5 * 3 + 2 * 12 + 0.2 * 3 + 1.4e-3)
                                                                               * 1e-3 * 2.5)
    for bad, words in ((", compute_scale: 0", "compute_scale = 0.0: allowed auto, off or a number > 0"),
                       (", overlap: maybe", "overlap"), (", compute_scale: true", "compute_scale")):
        with pytest.raises(ScenarioError, match=words):
            load_scenario(_scenario(tmp_path, ours, bad))


def _step(i, compute_s, scale_up_s, blocking):
    return ReplayStep(line=i + 3, layer=f"l{i}", phase="fwd" if blocking else "wg", token="ALLGATHER",
                      collective="allgather", algorithm="ring", group="TP", where="scale_up", size_bytes=1,
                      compute_s=compute_s, update_s=0.0, blocking=blocking, scale_up_s=scale_up_s, group_size=2)


@pytest.mark.parametrize("overlap,iteration_s,exposed_s", [("off", 0.75, 0.35), ("on", 0.55, 0.15)])
def test_overlap_model_on_the_streams(overlap, iteration_s, exposed_s):
    """Compute 0.1 s, a non-blocking 0.2 s collective, compute 0.3 s, a blocking 0.15 s collective:
    overlap off waits 0.35 s; on hides the first behind the compute (0.15 s exposed)."""
    from testbed.workloads.replay.run import _Replay, replay_block
    from testbed.workloads.replay.program import Action, CommTask
    steps = (_step(0, 0.1, 0.2, False), _step(1, 0.3, 0.15, True))
    tasks = tuple(CommTask(step=i, stage=0, micro_batch=0, stream=0, group="TP", where="scale_up",
                           scale_up_s=st.scale_up_s, blocking=st.blocking) for i, st in enumerate(steps))
    program = (Action("compute", 0.1), Action("issue", task=0), Action("compute", 0.3),
               Action("issue", task=1, blocking=True))
    plan = ReplayPlan(path="x", steps=steps, iterations=1, overlap=overlap, compute_scale=1.0, gpus_per_host=2,
                      fabric_ops_per_iteration=0, programs=(program,), tasks=tasks, stream_names=("TP s0",))
    r = _Replay(None, None, None, None, plan)
    try:
        it = r.iteration(0, overlap)
    finally:
        r.close()
    assert it["iteration_s"] == pytest.approx(iteration_s, abs=0.04)
    assert it["exposed_comm_s"] == pytest.approx(exposed_s, abs=0.04)
    block = replay_block(plan, [it], overlap)
    assert block["exposed_share"] == pytest.approx(exposed_s / iteration_s, abs=0.06)
    assert [s["comm_s"] for s in block["steps"]] == pytest.approx([0.2, 0.15], abs=0.02)


def test_replay_table_per_layer():
    from testbed.results.replay_table import format_replay_table, per_layer
    steps = [{"line": 3, "layer": "a", "phase": "fwd", "collective": "ALLTOALL_EP", "where": "fabric",
              "comm_s": 0.5, "exposed_s": 0.5},
             {"line": 3, "layer": "a", "phase": "ig", "collective": "ALLTOALL_EP", "where": "fabric",
              "comm_s": 0.25, "exposed_s": 0.25},
             {"line": 4, "layer": "b", "phase": "wg", "collective": "ALLREDUCE", "where": "fabric",
              "comm_s": 1.0, "exposed_s": 0.0}]
    rows = per_layer(steps)
    assert [(r["line"], r["fwd_s"], r["ig_s"], r["wg_s"], r["exposed_s"]) for r in rows] == [
        (3, 0.5, 0.25, None, 0.75), (4, None, None, 1.0, 0.0)]
    block = {"file": "w.txt", "overlap": "on", "iterations": 1, "gpus_per_host": 1, "compute_scale": 40.0,
             "steps": steps, "drain_s": 0.2, "iteration_s": 4.0, "equivalent_iteration_ms": 100.0,
             "compute_s_per_iteration": 3.0, "comm_s_per_iteration": 1.75, "exposed_comm_s": 0.95,
             "exposed_share": 0.2375}
    text = format_replay_table(block, 40000, 0.001)
    assert "      3 a                          500.0     250.0         -      750.0  ALLTOALL_EP@fabric" in text
    assert text.endswith("exposed communication 0.950 s, exposed share 0.237")


@pytest.mark.parametrize("t,w,c,exposed,overhead,hidden", [
    (10.0, 7.0, 4.5, 3.0, 0.0, 1.5),     # T - W < C: the rest of C ran under compute
    (10.0, 4.0, 4.5, 4.5, 1.5, 0.0),     # T - W > C: 1.5 s neither compute nor communication
    (10.0, 5.5, 4.5, 4.5, 0.0, 0.0),     # T - W = C: nothing hidden, no overhead
    (6.9, 7.0, 4.5, 0.0, 0.0, 4.5)])     # T < W (timer resolution): nothing exposed
def test_exposed_split_bounds_exposed_communication_by_the_communication(t, w, c, exposed, overhead, hidden):
    from testbed.workloads.replay.run import exposed_split
    s = exposed_split(t, w, c)
    assert (s["exposed_comm_s"], s["overhead_s"], s["hidden_comm_s"]) == (exposed, overhead, hidden)
    assert s["hidden_share"] == hidden / c


def test_replay_table_prints_the_overhead():
    from testbed.results.replay_table import format_replay_table
    block = {"file": "w.txt", "overlap": "off", "iterations": 1, "gpus_per_host": 1, "compute_scale": 40.0,
             "steps": [], "drain_s": 0.0, "iteration_s": 4.0, "equivalent_iteration_ms": 100.0,
             "compute_s_per_iteration": 3.0, "comm_s_per_iteration": 0.75, "exposed_comm_s": 0.75,
             "exposed_share": 0.1875, "overhead_s": 0.25}
    assert format_replay_table(block, 40000, 0.001).endswith(
        "exposed communication 0.750 s, exposed share 0.188, overhead (not compute, not communication) 0.250 s")
