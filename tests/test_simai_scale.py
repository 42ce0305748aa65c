"""SimAI files at real size: the plan of a 9,216-GPU job on 12 hosts (how its ranks map onto the fabric, the
printout), the refusal of a job that does not fit the fabric with mappings that do, and the programs built
when read (testbed.workloads.simai.programs) equal to the ones simai_plan built before. Load time is measured by
benchmarks/simai_load_time.py, not here."""
from __future__ import annotations

from pathlib import Path

import pytest

from shared_files import needs, shared
from testbed.spec.scenario import ScenarioError
from testbed.workloads import load_scenario

REPO = Path(__file__).resolve().parents[1]
SHARED = shared("simai/workload_analytical.txt")
OURS = REPO / "scenarios"

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {tp} ep: {ep} pp: {pp} vpp: 8 ga: {ga} "
          "all_gpus: {all_gpus} checkpoints: 0 checkpoint_initiates: 0 pp_comm 50331648")
#: rows as SimAI's example/workload_analytical.txt writes them: weight-gradient collectives over DP and DP_EP
FIRST_ROWS = (
    "grad_gather\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLGATHER\t2807758848\t100",
    "grad_param_comm\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tREDUCESCATTER\t5615517696\t100",
    "moe_grad_norm1\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLGATHER_DP_EP\t19327352832\t100",
    "moe_grad_norm2\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tREDUCESCATTER_DP_EP\t38654705664\t100",
    "embedding_layer\t-1\t622731\tALLREDUCE\t50331648\t1\tNONE\t0\t15091072\tNONE\t0\t100",
)
#: one transformer layer of it: TP all-gather / reduce-scatter (an ig one of size 0), TP and EP all-to-alls
LAYER_ROWS = (
    "attention_column\t-1\t1750840\tALLGATHER\t50331648\t875420\tREDUCESCATTER\t0\t875420\tNONE\t0\t100",
    "attention_row\t-1\t1750840\tREDUCESCATTER\t50331648\t875420\tALLGATHER\t50331648\t875420\tNONE\t0\t100",
    "mlp_moelayer\t-1\t1\tALLTOALL\t25165824\t1\tALLTOALL\t25165824\t1\tNONE\t0\t100",
    "mlp_moelayer\t-1\t1\tALLTOALL_EP\t100663296\t1\tALLTOALL_EP\t100663296\t1\tNONE\t0\t100",
)


def big_file(all_gpus=9216, tp=2, ep=16, pp=12, ga=24, layers=2) -> str:
    """A file of SimAI's 9,216-GPU example's shape (its header, its kinds of rows) with ``layers`` layers."""
    rows = FIRST_ROWS + LAYER_ROWS * layers
    return "\n".join((HEADER.format(tp=tp, ep=ep, pp=pp, ga=ga, all_gpus=all_gpus), str(len(rows))) + rows) + "\n"


def _scenario(tmp_path: Path, text: str | None, spines=2, leaves=6, per_leaf=2, extra="", path=None) -> Path:
    if text is not None:
        (tmp_path / "w.txt").write_text(text)
    p = tmp_path / "s.yaml"
    p.write_text(f"fabric: {{spines: {spines}, leaves: {leaves}, hosts_per_leaf: {per_leaf}}}\n"
                 f"workload: {{simai: {{path: {path or 'w.txt'}, size_scale: 0.0001{extra}}}}}\n")
    return p


#: the 9,216-GPU job on 12 hosts: every stage is one host; TP, DP, EP, DP_EP groups inside it (scale-up
#: waits), the PP groups one rank per host: 11 stage boundaries, each one host pair carrying 768 groups
MAPPING_12 = {"all_gpus": 9216, "hosts": 12, "ranks_per_host": 768, "tp": 2, "dp": 384, "pp": 12, "ep": 16,
              "dp_ep": 24, "scopes": {
                  "TP": {"where": "scale_up", "groups": 4608, "ranks_per_group": 2},
                  "DP": {"where": "scale_up", "groups": 24, "ranks_per_group": 384, "entries": 2},
                  "EP": {"where": "scale_up", "groups": 576, "ranks_per_group": 16},
                  "DP_EP": {"where": "scale_up", "groups": 384, "ranks_per_group": 24, "entries": 2},
                  "PP": {"where": "fabric", "groups": 768, "ranks_per_group": 12, "host_groups": 1,
                         "hosts_per_host_group": 2, "groups_per_host_group": 768}}}


def _expected(tp_entries: int, ep_entries: int) -> dict:
    scopes = {k: dict(v) for k, v in MAPPING_12["scopes"].items()}
    scopes["TP"]["entries"], scopes["EP"]["entries"] = tp_entries, ep_entries
    return {**MAPPING_12, "scopes": scopes}


def test_9216_gpus_on_12_hosts_map_stages_to_hosts(tmp_path):
    from testbed.workloads import plan_workload
    plan = plan_workload(load_scenario(_scenario(tmp_path, big_file())))
    r = plan.replay
    # entries that run: TP fwd 1 + 2 x 3, ig 2 x 2 (attention_column's ig is size 0); EP 2 x 2
    assert r.mapping == _expected(tp_entries=11, ep_entries=4)
    # fabric: 11 boundaries x 2 directions x 24 micro-batches; scale-up: per stage 24 F x 9 + 24 B x 6 + 4
    # weight-gradient collectives in the last B, x 12 stages
    assert len(plan.ops) == 528 and {o.group for o in plan.ops} == {"PP"}
    assert {o.size_bytes for o in plan.ops} == {round(50331648 * 0.0001) * 768}
    assert len(r.tasks) == 528 + 12 * (24 * 9 + 24 * 6 + 4)
    assert sum(t.where == "scale_up" for t in r.tasks) == 4368
    assert "replaying 528 fabric ops and 4368 scale-up collectives per iteration" in plan.notes[0]
    assert plan.notes[1] == (
        "simai: 9216 ranks (TP 2 x DP 384 x PP 12; EP 16, DP_EP 24) on 12 hosts, 768 ranks per host (a server of "
        "768 GPUs sharing one NIC); scale-up waits (every group inside one host): TP 4608 groups of 2 ranks (11 "
        "file entries), DP 24 groups of 384 ranks (2 file entries), EP 576 groups of 16 ranks (4 file entries), "
        "DP_EP 384 groups of 24 ranks (2 file entries); on the fabric: PP 768 groups of 12 ranks, one rank per "
        "stage: 11 stage boundaries of 1 host pair, 768 groups each")


@needs(SHARED)                         # SimAI's example/workload_analytical.txt
def test_simai_example_workload_analytical_on_12_hosts(tmp_path):
    from testbed.workloads import plan_workload
    plan = plan_workload(load_scenario(_scenario(tmp_path, None, path=str(SHARED))))
    r = plan.replay
    # awk over the file: TP entries with size > 0 (fwd and ig, no _EP suffix) 2552, ALLTOALL_EP 768
    assert r.mapping == _expected(tp_entries=2552, ep_entries=768)
    assert len(plan.ops) == 528 and len(r.steps) == 3541
    assert "replaying 528 fabric ops and 956208 scale-up collectives per iteration" in plan.notes[0]
    assert len(r.tasks) == 956736 and r.tasks._timeline._made is None   # counted, not built by the plan


def test_the_mapping_is_printed_before_the_run(tmp_path, capsys):
    from testbed.pipeline import runner
    spec = load_scenario(_scenario(tmp_path, big_file()))
    (tmp_path / "results").mkdir()
    runner._validate(spec, tmp_path / "results", quiet=True, max_duration_s=1e12, over_capacity=True)
    err = capsys.readouterr().err
    assert ("testbed: note: simai: 9216 ranks (TP 2 x DP 384 x PP 12; EP 16, DP_EP 24) on 12 hosts, 768 ranks "
            "per host") in err
    assert "on the fabric: PP 768 groups of 12 ranks, one rank per stage: 11 stage boundaries" in err


@pytest.mark.parametrize("leaves,per_leaf,words", [
    (4, 2, "pp 12 stages of 768 GPUs do not fill whole hosts of 1152 GPUs (9216 GPUs on 8 hosts): allowed a "
           "fabric whose hosts divide a stage; mappings that fit: 9216 GPUs fit a fabric of 12 hosts (768 GPUs "
           "each); no workload.simai.all_gpus fits these 8 hosts (a multiple of TP x pp x EP = 384 GPUs; with "
           "several GPUs per host, stages of whole hosts)"),
    (5, 2, "all_gpus: 9216 but the fabric has 10 hosts"),
    # 24 hosts of 384: a DP group (every second rank of a stage) would have 192 ranks on each of 2 hosts
    (4, 4, "mappings that fit: 9216 GPUs fit a fabric of 12 hosts (768 GPUs each) or 4608 hosts (2 GPUs each)"),
])
def test_a_job_that_does_not_fit_is_refused_with_mappings_that_fit(tmp_path, leaves, per_leaf, words):
    with pytest.raises(ScenarioError) as info:
        load_scenario(_scenario(tmp_path, big_file(), leaves=leaves, per_leaf=per_leaf))
    msg = str(info.value)
    assert "workload.simai.path" in msg and "w.txt:1: " in msg and words in msg
    assert "12 hosts (768 GPUs each)" in msg


def test_a_group_across_hosts_is_refused_with_hosts_and_a_world_size_that_fit(tmp_path):
    # 64 GPUs, TP 2, pp 1 on 8 hosts: a DP group (every second rank) would put 4 ranks on each host
    text = big_file(all_gpus=64, ep=1, pp=1, ga=1).replace("_DP_EP", "").replace("ALLTOALL_EP", "ALLTOALL")
    with pytest.raises(ScenarioError) as info:
        load_scenario(_scenario(tmp_path, text, leaves=4))
    msg = str(info.value)
    assert "w.txt:1: all_gpus: 64 on the fabric's 8 hosts: rank group (0, 2, 4," in msg
    assert msg.endswith("mappings that fit: 64 GPUs fit a fabric of 32 hosts (2 GPUs each); on these 8 hosts, "
                        "workload.simai.all_gpus: 16 fits (2 GPUs per host, DP 8)")
    # the proposal runs: 16 GPUs on 8 hosts, TP inside a host, DP across
    spec = load_scenario(_scenario(tmp_path, text, leaves=4, extra=", all_gpus: 16"))
    from testbed.workloads import plan_workload
    m = plan_workload(spec).replay.mapping
    assert (m["ranks_per_host"], m["scopes"]["TP"]["where"], m["scopes"]["DP"]["where"]) == (2, "scale_up", "fabric")
    assert (m["scopes"]["DP"]["host_groups"], m["scopes"]["DP"]["hosts_per_host_group"],
            m["scopes"]["DP"]["groups_per_host_group"]) == (1, 8, 2)


def test_fitting_searches_host_counts_and_world_sizes():
    from traffic.workloads.job_mapping import JobShape, fitting, misfit
    big = JobShape(9216, 2, 16, 12)
    assert fitting(big, 8, ("TP", "DP", "EP", "DP_EP")) == {"hosts_below": None, "hosts_above": 12,
                                                           "all_gpus": None}
    assert misfit(big, 12, ("TP", "DP", "EP", "DP_EP")) is None
    assert misfit(big, 1, ("TP",)) == "pp 12 stages of 768 GPUs do not fill whole hosts of 9216 GPUs"
    assert misfit(JobShape(64, 2, 1, 1), 1, ("TP", "DP"), need_fabric=True) == (
        "every group inside one host: nothing crosses the fabric")
    assert fitting(JobShape(64, 2, 1, 1), 8, ("TP", "DP")) == {"hosts_below": None, "hosts_above": 32,
                                                               "all_gpus": 16}
    # 48 GPUs, TP 4 on 8 hosts: 6 per host would split TP groups, 12 (4 hosts) or 24 (2) put 3 or 6 ranks of a
    # DP group on a host; 12 hosts of 4 fit, or 32 GPUs (4 per host) on the 8
    assert fitting(JobShape(48, 4, 1, 1), 8, ("TP", "DP")) == {"hosts_below": None, "hosts_above": 12,
                                                               "all_gpus": 32}


# -- the programs built when read are the ones simai_plan built before (commit a8669ac's loop, kept here)

def _before(spec):
    """(programs, tasks, fabric ops, stream names) as simai_plan built them eagerly before
    testbed.workloads.simai.programs, from the plan's steps."""
    from testbed.workloads.replay.program import Action, CommTask
    from testbed.workloads.simai.plan import _Streams, simai_plan
    from testbed.workloads.simai.reader import load_file
    from traffic.workloads.parallel_groups import stage_groups
    from traffic.workloads.pipeline_schedule import stage_passes
    from traffic.workloads.placement import place

    r = simai_plan(spec).replay
    wl, _, _ = load_file(spec)
    s, h = spec.workload.simai, wl.header
    steps, n_stages, m, per_host = r.steps, r.n_stages, r.micro_batches, r.gpus_per_host
    all_gpus = r.mapping["all_gpus"]

    def placed(scope, stage):
        return place(stage_groups(scope, stage, all_gpus, h.tp_size, h.ep_size, n_stages), per_host)

    f_idx = [i for i, st in enumerate(steps) if st.phase == "fwd"]
    b_idx = [i for i, st in enumerate(steps) if st.phase != "fwd"]
    ns = 1e-9 * r.compute_scale * {"ns": 1, "us": 1_000}[s.time_unit]
    f_tail_s = 0.0
    if n_stages > 1:
        f_tail_s = max(0.0, sum(row.fwd_compute_ticks for row in wl.rows) * ns
                       - sum(steps[i].compute_s + (steps[i].update_s if steps[i].where != "none" else 0.0)
                             for i in f_idx))
    streams, tasks, fabric_ops = _Streams(), [], []

    def add_task(step, stage, mb, group, where, stream_name, size, coll, alg, host_groups, mult, layer, blocking,
                 scale_up_s=0.0):
        stream = streams.get(where, stream_name)
        off = None
        if where == "fabric":
            off = len(fabric_ops)
            fabric_ops.append(dict(size_bytes=size * mult, layer=layer, collective=coll, group=group,
                                   groups=host_groups, algorithm=alg, stream=stream))
        tasks.append(CommTask(step=step, stage=stage, micro_batch=mb, stream=stream, group=group, where=where,
                              op_offset=off, scale_up_s=scale_up_s, blocking=blocking))
        return len(tasks) - 1

    tagged = n_stages > 1 or m > 1
    pp_fwd, pp_bwd = {}, {}
    if n_stages > 1:
        pp_size = max(1, round(h.pp_comm_bytes * s.size_scale))
        pp_groups = stage_groups("PP", 0, all_gpus, h.tp_size, h.ep_size, n_stages)
        for bnd in range(n_stages - 1):
            for direction, src, dst, table in (("F", bnd, bnd + 1, pp_fwd), ("B", bnd + 1, bnd, pp_bwd)):
                pl = place(tuple((g[src], g[dst]) for g in pp_groups), per_host)
                t_up = (pp_size * 8 / (s.scale_up_ratio * spec.fabric.host_link_bps) if pl.where == "scale_up"
                        else 0.0)
                for i in range(m):
                    table[(src, i)] = add_task(-1, src, i, "PP", pl.where, f"PP s{src}>s{dst}", pp_size, "send",
                                               "chain", pl.host_groups, pl.multiplicity,
                                               f"pp:{'activations' if direction == 'F' else 'gradients'}:"
                                               f"s{src}>s{dst}:mb{i}", False, t_up)
    programs = []
    for stage in range(n_stages):
        prog = []

        def run_steps(indices, mb, label, first_extra_s=0.0):
            for j, i in enumerate(indices):
                st = steps[i]
                c = st.compute_s - (first_extra_s if j == 0 else 0.0)
                prog.append(Action("compute", seconds=max(0.0, c), label=label))
                if st.where == "none" or (st.phase == "wg" and mb != m - 1):
                    continue
                if st.where == "fabric":
                    pl = placed(st.group, stage)
                    layer = f"{st.layer}:{st.phase}" + (f":s{stage}:mb{mb}" if tagged else "")
                    k = add_task(i, stage, mb, st.group, "fabric", f"{st.group} s{stage}", st.size_bytes,
                                 st.collective, st.algorithm, pl.host_groups, pl.multiplicity, layer, st.blocking)
                else:
                    k = add_task(i, stage, mb, st.group, "scale_up", f"{st.group} s{stage}", st.size_bytes,
                                 st.collective, st.algorithm, (), 1, "", st.blocking, st.scale_up_s)
                prog.append(Action("issue", task=k, blocking=st.blocking, label=label))
                if st.update_s:
                    prog.append(Action("compute", seconds=st.update_s, label=label))

        for kind, mb in stage_passes(s.pp_schedule, stage, n_stages, m):
            label = f"{kind}{mb}"
            if kind == "F":
                if stage > 0:
                    prog.append(Action("wait", task=pp_fwd[(stage - 1, mb)], label=label))
                run_steps(f_idx, mb, label)
                if f_tail_s:
                    prog.append(Action("compute", seconds=f_tail_s, label=label))
                if stage < n_stages - 1:
                    prog.append(Action("issue", task=pp_fwd[(stage, mb)], label=label))
            else:
                if stage < n_stages - 1:
                    prog.append(Action("wait", task=pp_bwd[(stage + 1, mb)], label=label))
                run_steps(b_idx, mb, label, f_tail_s)
                if stage > 0:
                    prog.append(Action("issue", task=pp_bwd[(stage, mb)], label=label))
        programs.append(tuple(prog))
    n_fabric = len(streams.fabric)
    tasks = [t if t.where == "fabric" else CommTask(**{**t.__dict__, "stream": n_fabric + t.stream}) for t in tasks]
    return tuple(programs), tuple(tasks), fabric_ops, streams.names()


def _pp3_file() -> str:
    """pp 3 with 2 GPUs per host on 12 hosts: TP inside hosts, DP and the stage transfers on the fabric."""
    return big_file(all_gpus=24, tp=2, ep=1, pp=3, ga=3, layers=1).replace("_DP_EP", "").replace("_EP", "")


@pytest.mark.parametrize("case", ["tp2_dp2_pp2", "big", "pp3_gpipe", "pp3_overlap", "moe"])
def test_programs_built_when_read_equal_the_ones_built_before(tmp_path, case):
    from testbed.workloads.replay.program import simulate
    from testbed.workloads import plan_workload
    if case == "tp2_dp2_pp2":
        spec = load_scenario(OURS / "simai_tp2_dp2_pp2.yaml")
    elif case == "moe":
        spec = load_scenario(OURS / "moe_alltoall.yaml")
    elif case == "big":
        spec = load_scenario(_scenario(tmp_path, big_file(layers=1)))
    else:
        extra = ", pp_schedule: gpipe" if case == "pp3_gpipe" else ", overlap: on, micro_batches: 4"
        spec = load_scenario(_scenario(tmp_path, _pp3_file(), extra=extra))
    plan = plan_workload(spec)
    r = plan.replay
    programs, tasks, fabric_ops, names = _before(spec)
    assert r.tasks == tasks and r.programs == programs and len(r.tasks) == len(tasks)
    assert r.stream_names == names
    n = r.fabric_ops_per_iteration
    assert [dict(size_bytes=o.size_bytes, layer=o.layer, collective=o.collective, group=o.group, groups=o.groups,
                 algorithm=o.algorithm, stream=o.stream) for o in plan.ops[:n]] == fabric_ops
    # the figures known without the programs: the scale-up time exactly, W up to float rounding
    assert r.scale_up_s_per_iteration == sum(t.scale_up_s for t in tasks)
    assert r.compute_s_per_iteration == pytest.approx(simulate(programs, tasks, [0.0] * len(tasks)).makespan_s,
                                                      rel=1e-12)
    assert r.compute_s_per_iteration > 0


def test_the_quick_screen_never_drops_a_mapping_that_fits():
    """fitting() places only candidates that pass _plausible (the layout's formulas): over every small job and
    host count, each one that fits passes it."""
    from itertools import product

    from traffic.workloads.job_mapping import JobShape, _plausible, misfit
    fits = 0
    for t, e, p, k in product((1, 2, 3, 4), (1, 2, 4), (1, 2, 3), range(1, 7)):
        a = t * e * p * k
        for h in (h for h in range(1, a + 1) if a % h == 0):
            for scopes in (("TP",), ("DP",), ("TP", "DP"), ("TP", "DP", "EP", "DP_EP"), ("EP", "DP_EP")):
                if misfit(JobShape(a, t, e, p), h, scopes) is None:
                    fits += 1
                    assert _plausible(JobShape(a, t, e, p), a // h, scopes), (a, t, e, p, h, scopes)
    assert fits > 1000
