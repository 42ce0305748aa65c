"""Pipeline schedules (1F1B, GPipe), the bubble formula, the replay programs' timeline and the plan of a
tp 2, dp 2, pp 2 SimAI file (no fabric)."""
from __future__ import annotations

from pathlib import Path

import pytest

from testbed.workloads.replay.program import Action, CommTask, ProgramDeadlock, serialized_s, simulate
from traffic.workloads.pipeline_schedule import bubble_fraction, stage_passes

REPO = Path(__file__).resolve().parents[1]


def test_1f1b_order_per_stage_as_megatron():
    """Warm-up min(p - s - 1, m) forwards, then one forward one backward, then the remaining backwards."""
    assert stage_passes("1f1b", 0, 4, 6) == (("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("F", 4), ("B", 1),
                                             ("F", 5), ("B", 2), ("B", 3), ("B", 4), ("B", 5))
    assert stage_passes("1f1b", 3, 4, 3) == (("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2))
    assert stage_passes("1f1b", 0, 2, 4) == (("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2),
                                             ("B", 3))
    # fewer micro-batches than warm-up slots: all forwards first
    assert stage_passes("1f1b", 0, 4, 2) == (("F", 0), ("F", 1), ("B", 0), ("B", 1))


def test_gpipe_order_all_forwards_then_all_backwards():
    assert stage_passes("gpipe", 1, 3, 3) == (("F", 0), ("F", 1), ("F", 2), ("B", 0), ("B", 1), ("B", 2))


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (3, 5), (4, 8), (4, 2)])
def test_every_pass_once_and_in_flight_bound(schedule, p, m):
    for s in range(p):
        passes = stage_passes(schedule, s, p, m)
        assert sorted(passes) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
        assert all(passes.index(("F", i)) < passes.index(("B", i)) for i in range(m))
        in_flight = max(sum(1 for k, _ in passes[:j + 1] if k == "F") - sum(1 for k, _ in passes[:j + 1] if k == "B")
                        for j in range(len(passes)))
        assert in_flight == (min(p - s, m) if schedule == "1f1b" else m)


def test_schedule_refusals():
    with pytest.raises(ValueError, match=r"pipeline schedule 'zb' unknown: allowed 1f1b, gpipe"):
        stage_passes("zb", 0, 2, 2)
    with pytest.raises(ValueError, match=r"stage 2 outside 0..1"):
        stage_passes("1f1b", 2, 2, 2)
    with pytest.raises(ValueError, match=r"micro_batches = 0: must be a positive integer"):
        bubble_fraction(2, 0)


def _pipeline(schedule, p, m, tf, tb, comm_s=0.0):
    """Programs of p uniform stages: F = tf compute then a send (comm_s), B = tb then a send back."""
    tasks, fwd, bwd = [], {}, {}
    for s in range(p - 1):
        for i in range(m):
            fwd[(s, i)] = len(tasks)
            tasks.append(CommTask(-1, s, i, 2 * s, "PP", "fabric"))
            bwd[(s + 1, i)] = len(tasks)
            tasks.append(CommTask(-1, s + 1, i, 2 * s + 1, "PP", "fabric"))
    programs = []
    for s in range(p):
        prog = []
        for kind, i in stage_passes(schedule, s, p, m):
            if kind == "F":
                prog += [Action("wait", task=fwd[(s - 1, i)])] if s else []
                prog += [Action("compute", tf)] + ([Action("issue", task=fwd[(s, i)])] if s < p - 1 else [])
            else:
                prog += [Action("wait", task=bwd[(s + 1, i)])] if s < p - 1 else []
                prog += [Action("compute", tb)] + ([Action("issue", task=bwd[(s, i)])] if s else [])
        programs.append(prog)
    return programs, tasks, [comm_s] * len(tasks)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("p,m,tf,tb", [(2, 4, 1.0, 2.0), (4, 8, 1.0, 1.0), (3, 2, 0.5, 1.5), (2, 1, 1.0, 1.0)])
def test_simulated_bubble_is_the_papers_formula(schedule, p, m, tf, tb):
    """Uniform stages, free communication: makespan (m + p - 1)(tf + tb), each stage idle (p - 1)/(m + p - 1)."""
    t = simulate(*_pipeline(schedule, p, m, tf, tb))
    assert t.makespan_s == pytest.approx((m + p - 1) * (tf + tb))
    for s in range(p):
        assert 1 - t.stage_compute_s[s] / t.makespan_s == pytest.approx(bubble_fraction(p, m))
    assert bubble_fraction(p, m) == pytest.approx((p - 1) / (m + p - 1))


def test_overlap_saving_equals_hidden_communication():
    """Serialized = W + sum of durations; the overlapped timeline hides part of it: the saving is
    sum(durations) - (T_on - W)."""
    programs, tasks, d = _pipeline("1f1b", 2, 4, 1.0, 2.0, comm_s=0.25)
    w = simulate(programs, tasks, [0.0] * len(tasks)).makespan_s
    t_on = simulate(programs, tasks, d).makespan_s
    t_off = serialized_s(programs, tasks, d)
    assert t_off == pytest.approx(w + 0.25 * len(tasks))
    assert w < t_on < t_off
    assert t_off - t_on == pytest.approx(sum(d) - (t_on - w))


def test_streams_are_fifo_and_blocking_waits():
    """Two tasks on one stream queue; a blocking issue waits for its own task, which waits for the first."""
    tasks = [CommTask(0, 0, 0, 0, "DP", "fabric"), CommTask(1, 0, 0, 0, "DP", "fabric"),
             CommTask(2, 0, 0, 1, "TP", "fabric")]
    prog = [Action("issue", task=0), Action("issue", task=1, blocking=True), Action("issue", task=2, blocking=True)]
    t = simulate([prog], tasks, [1.0, 0.5, 0.25])
    assert t.task_end_s == {0: 1.0, 1: 1.5, 2: 1.75} and t.stage_comm_wait_s == [1.75]
    with pytest.raises(ProgramDeadlock, match="stage 0 at action 0"):
        simulate([[Action("wait", task=0)]], tasks[:1], [1.0])


def _spec(tmp_path, extra=""):
    from testbed.workloads import load_scenario
    text = (REPO / "scenarios" / "simai_tp2_dp2_pp2.yaml").read_text().replace(
        "path: workloads/", f"path: {REPO}/scenarios/workloads/").replace("pp_schedule: 1f1b", f"pp_schedule: 1f1b{extra}")
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return load_scenario(p)


def test_plan_of_tp2_dp2_pp2(tmp_path):
    from testbed.workloads.plan import plan_peers, plan_streams
    from testbed.workloads import plan_workload
    plan = plan_workload(_spec(tmp_path))
    r = plan.replay
    assert (r.n_stages, r.micro_batches, r.pp_schedule) == (2, 4, "1f1b")
    assert r.stream_names == ("PP s0>s1", "PP s1>s0", "TP s0", "DP s0", "TP s1", "DP s1")
    it0 = [o for o in plan.ops if o.iteration == 0]
    assert len(it0) == r.fabric_ops_per_iteration == 44 and plan_streams(plan.ops) == 6
    pp = [o for o in it0 if o.group == "PP"]
    # activations 2 MiB x 0.01 from stage 0 to 1 over the 4 PP pairs, gradients back
    assert {(o.collective, o.algorithm, o.size_bytes) for o in pp} == {("send", "chain", 20972)}
    assert {o.groups for o in pp if o.stream == 0} == {((0, 4), (1, 5), (2, 6), (3, 7))}
    assert {o.groups for o in pp if o.stream == 1} == {((4, 0), (5, 1), (6, 2), (7, 3))}
    tp = {o.groups for o in it0 if o.group == "TP"}
    dp = {o.groups for o in it0 if o.group == "DP"}
    assert tp == {((0, 1), (2, 3)), ((4, 5), (6, 7))} and dp == {((0, 2), (1, 3)), ((4, 6), (5, 7))}
    # 2 rows x (fwd + ig) TP all-reduces per micro-batch and stage; DP only in the last micro-batch
    assert sum(o.group == "TP" for o in it0) == 2 * 4 * 2 * 2 and sum(o.group == "DP" for o in it0) == 2 * 2
    assert all(o.layer.endswith(":mb3") for o in it0 if o.group == "DP")
    assert plan_peers(plan.ops)[0] == [1, 2, 4]
    # compute-only time: (m + p - 1)(t_f + t_b), t_f = 2 x 125 us x 400, t_b = 2 x (125 + 125) us x 400 plus
    # the rows' update ticks (100 ns x 400 after each collective)
    tf, tb = 2 * 0.05, 2 * 0.1
    assert r.compute_s_per_iteration == pytest.approx(5 * (tf + tb), rel=0.01)
    assert any("pipeline of 2 stages, 4 micro-batches per iteration (the header ga), schedule 1f1b" in n
               for n in plan.notes)


def test_gpipe_and_micro_batches_setting(tmp_path):
    from testbed.workloads import plan_workload
    assert plan_workload(_spec(tmp_path, ", micro_batches: 2")).replay.micro_batches == 2
    r = plan_workload(_spec(tmp_path)).replay
    spec = _spec(tmp_path)
    spec = spec.model_copy(update={"workload": spec.workload.model_copy(update={
        "simai": spec.workload.simai.model_copy(update={"pp_schedule": "gpipe"})})})
    g = plan_workload(spec).replay
    assert g.pp_schedule == "gpipe" and g.compute_s_per_iteration == pytest.approx(r.compute_s_per_iteration)
    labels = [a.label for a in g.programs[0] if a.kind == "compute"]
    assert labels.index("B0") > labels.index("F3")
