"""A SimAI/AICB file as one job of a ``jobs`` list (testbed.jobs.simai, testbed.jobs.plan, testbed.workloads.jobs,
testbed.jobs.results): the spec takes it, the file's world size against the job's ranks, the job's ops on its
hosts and streams no other job uses, its replay driven as one job, its rows in jobs.csv and its entry in
summary.json. No fabric: the run is in tests/integration/test_simai_job_fabric.py."""
import copy
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from testbed.jobs.plan import jobs_plan
from testbed.jobs.results import JOBS_COLUMNS, format_jobs, job_entries, job_ops, jobs_table
from testbed.replay_run import run_replay
from testbed.spec.scenario import ScenarioError, load_scenario, parse_scenario
from testbed.workloads import workload_for

REPO = Path(__file__).resolve().parents[1]
WL = REPO / "scenarios" / "workloads"
QUICK = yaml.safe_load((REPO / "scenarios" / "quickstart.yaml").read_text())
SWEEP = {"sizes": {"min_bytes": "256KiB", "max_bytes": "256KiB"}, "iterations": 3, "warmup_iterations": 1}


def simai(file="tp2_dp2.txt", **kw):
    return {"simai": {"path": str(WL / file), "size_scale": 0.01, **kw}}


def scenario(*jobs):
    d = copy.deepcopy(QUICK)
    d.pop("workload")
    d["jobs"] = [{"workload": SWEEP, **j} for j in jobs]
    return d


def write(tmp_path, data) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_the_spec_takes_workload_simai_in_a_job_and_still_refuses_a_pattern():
    spec = parse_scenario(scenario({"name": "t", "ranks": 4, "workload": simai()}, {"name": "s", "ranks": 4}))
    assert spec.jobs[0].workload.simai.size_scale == 0.01 and spec.jobs[1].workload.sizes is not None
    with pytest.raises(ScenarioError, match="workload.pattern is not supported in a job"):
        parse_scenario(scenario({"name": "p", "ranks": 4, "workload": {"pattern": {"kind": "kflows", "k": 2,
                                                                                    "size_bytes": 1000}}}))
    with pytest.raises(ScenarioError, match="workload.ranks = 4 applies to a size sweep"):
        parse_scenario(scenario({"name": "t", "ranks": 4, "workload": {**simai(), "ranks": 4}}))


@pytest.mark.parametrize("job, key", [
    ({"ranks": 3}, "jobs.0.ranks"),
    ({"ranks": 8}, "jobs.0.ranks"),
    ({"hosts": ["h1", "h2", "h3"]}, "jobs.0.hosts"),
])
def test_a_world_size_the_ranks_cannot_hold_is_refused_naming_the_key(tmp_path, job, key):
    p = write(tmp_path, scenario({"name": "t", "workload": simai(), **job}))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert f"{key}: job 't' has" in msg and "world size all_gpus: 4" in msg and "tp2_dp2.txt" in msg


def test_a_relative_path_resolves_against_the_scenario_and_a_missing_file_names_the_job_key(tmp_path):
    d = scenario({"name": "t", "ranks": 4, "workload": {"simai": {"path": "nope.txt"}}})
    with pytest.raises(ScenarioError, match=r"jobs\.0\.workload\.simai\.path: no such file"):
        load_scenario(write(tmp_path, d))
    spec = load_scenario(REPO / "scenarios" / "jobs_simai_sweep.yaml")
    assert Path(spec.jobs[0].workload.simai.path).is_absolute()


def test_the_shipped_scenario_plans_the_replay_on_the_jobs_hosts_with_its_own_streams():
    spec = load_scenario(REPO / "scenarios" / "jobs_simai_sweep.yaml")
    plan, (train, sweep) = jobs_plan(spec)
    assert train.hosts == ("h1", "h2", "h3", "h4") and sweep.hosts == ("h5", "h6", "h7", "h8")
    assert train.workload == "simai" and train.replay is not None and sweep.replay is None
    t_ops = [op for op in plan.ops if op.job == "train"]
    s_ops = [op for op in plan.ops if op.job == "sweep"]
    assert len(t_ops) == 4 * 6 and len(s_ops) == 1 + 4 and sweep.first_op == len(t_ops)
    # TP 2 x DP 2 on ranks 0-3: TP rings {0,1} {2,3} (one leaf each), DP rings {0,2} {1,3} (across the spines)
    assert {op.groups for op in t_ops if op.group == "TP"} == {((0, 1), (2, 3))}
    assert {op.groups for op in t_ops if op.group == "DP"} == {((0, 2), (1, 3))}
    assert {op.stream for op in t_ops} == {0, 1} and {op.stream for op in s_ops} == {2}
    assert (train.stream, train.n_streams, sweep.stream) == (0, 2, 2)
    assert train.as_dict()["streams"] == [0, 1] and sweep.as_dict()["streams"] == [2]
    w = workload_for(spec)
    # the SimAI job's compute waits count in the estimate: 4 iterations x 6 phases x 125,000 ns x 400
    assert w.estimate_s(plan.ops) > 4 * 6 * 125_000e-9 * 400


def test_two_simai_jobs_and_a_sweep_get_disjoint_streams_and_hosts():
    """tp2_dp2_pp2 (all_gpus 8) on 2 hosts per job: servers of 4 GPUs, TP in the scale-up domain; the pipeline
    boundary and DP on the fabric, each on its own stream, numbered after the previous job's."""
    spec = parse_scenario(scenario({"name": "a", "ranks": 2, "workload": simai("tp2_dp2_pp2.txt")},
                                   {"name": "s", "ranks": 2},
                                   {"name": "b", "ranks": 4, "workload": simai("tp2_dp2_pp2.txt")}))
    plan, (a, s, b) = jobs_plan(spec)
    streams = {j.name: {op.stream for op in plan.ops if op.job == j.name} for j in (a, s, b)}
    assert streams["a"] == set(range(a.stream, a.stream + a.n_streams)) and a.stream == 0
    assert streams["s"] == {a.n_streams} and b.stream == a.n_streams + 1
    assert streams["b"] == set(range(b.stream, b.stream + b.n_streams))
    assert not (streams["a"] & streams["b"]) and not (streams["s"] & (streams["a"] | streams["b"]))
    assert {op.group for op in plan.ops if op.job == "b"} >= {"DP", "PP"}
    for j in (a, s, b):
        ranks = {r for op in plan.ops if op.job == j.name for g in op.groups for r in g}
        assert ranks == set(j.ranks)
    assert b.first_op == sum(1 for op in plan.ops if op.job in ("a", "s"))


class _Agents:
    """What run_replay asks of testbed.emulation.agents.AgentGroup: run_op, each op 1 ms on every rank."""

    def __init__(self):
        self.calls, self.lock = [], threading.Lock()

    def run_op(self, op_id, size_bytes, groups, timeout_s, collective="allreduce", algorithm="ring", stream=0):
        with self.lock:
            self.calls.append((op_id, stream))
        return [SimpleNamespace(op_id=op_id, rank=r, t_start_ns=0, t_end_ns=1_000_000) for g in groups for r in g]


def test_a_jobs_replay_runs_its_own_ops_and_streams_and_stops_when_told():
    spec = parse_scenario(scenario({"name": "s", "ranks": 4},
                                   {"name": "t", "ranks": 4, "workload": simai(compute_scale="off", iterations=3)}))
    plan, (s, t) = jobs_plan(spec)
    ctx = SimpleNamespace(ops_plan=plan.ops, goodput_bps=1e7)
    agents, seen, asked = _Agents(), [], []
    block = run_replay(ctx, agents, None, None, t.replay, op_base=t.first_op,
                       record=lambda k, op, recs: seen.append((k, op.job)),
                       keep_going=lambda: asked.append(1) or len(asked) < 2)
    assert block["iterations"] == 2 and len(block["iterations_s"]) == 2 and len(asked) == 2
    per_it = t.replay.fabric_ops_per_iteration
    assert sorted(k for k, _ in agents.calls) == list(range(t.first_op, t.first_op + 2 * per_it))
    assert {st for _, st in agents.calls} == {t.stream, t.stream + 1} and {j for _, j in seen} == {"t"}


def test_results_give_the_simai_job_its_rows_jct_and_replay_block():
    spec = load_scenario(REPO / "scenarios" / "jobs_simai_sweep.yaml")
    plan, jobs = jobs_plan(spec)
    rows, meta = [], {}
    for k, op in enumerate(plan.ops):  # every op 10 ms on each rank that takes part
        for g in op.groups:
            for r in g:
                rows.append({"op_id": k, "rank": r, "t_start_ns": 10**18 + k * 10**7,
                             "t_end_ns": 10**18 + (k + 1) * 10**7, "group_size": len(g)})
        meta[k] = {**op.meta(), "job": op.job}
    ops = job_ops(rows, meta, 8)
    replay = {"file": "tp2_dp2.txt", "overlap": "on", "iterations_s": [0.5, 0.7], "iterations": 2,
              "groups": {"TP": {"comm_s": 0.1}, "DP": {"comm_s": 0.2}}}
    fair = {"train": 1e7, "sweep": 1e7}
    entries = job_entries(ops, jobs, 1e7, fair, fair, 1e7, {}, {}, {"train": replay})
    train, sweep = entries
    assert train["workload"] == "simai" and train["replay"]["groups"]["DP"]["comm_s"] == 0.2
    assert train["jct_s"] == pytest.approx(1.2) and train["iteration_s"] == pytest.approx(0.6)
    assert train["timed_ops"] == 24 and train["busbw_ratio"] is not None and "iteration_s" not in sweep
    table = jobs_table(ops, entries, 1e7)
    assert list(table.columns) == JOBS_COLUMNS
    t = table[table["job"] == "train"].set_index("group")
    assert set(t.index) == {"TP", "DP"} and t.loc["TP", "ops"] == 16 and t.loc["DP", "ops"] == 8
    assert t.loc["DP", "size_bytes"] == 167772 and (t["workload"] == "simai").all()
    # a 2-rank ring all-reduce of S in 10 ms: busbw = S x 8 / 0.01 x 2(n-1)/n = S x 800 bit/s
    assert t.loc["DP", "busbw_bps"] == pytest.approx(167772 * 800)
    assert t.loc["DP", "jct_s"] == pytest.approx(1.2) and t.loc["DP", "iteration_s"] == pytest.approx(0.6)
    srow = table[table["job"] == "sweep"]
    assert list(srow["group"]) == ["sweep"] and list(srow["ops"]) == [4]
    assert "train" in format_jobs({"jobs": entries, "tenants": [], "shared_links": {}})


def test_solo_figures_reach_the_simai_jobs_rows_and_the_parquet_copy(tmp_path):
    """attach_solo joins the solo rows per job, group, collective and size, gives a SimAI job its solo
    iteration time, and rewrites the Parquet copies RunDir reads before the CSV files."""
    from test_jobs import _fake_run
    from testbed.jobs.solo import attach_solo
    from testbed.results.rundir import RunDir

    def entry(jct, it):
        return {"name": "t", "tenant": "r", "hosts": ["h1"], "timed_ops": 2, "busbw_ratio": 0.5, "jct_s": jct,
                "placement": "packed", "fair_busbw_ratio": 1.0, "iteration_s": it}

    def rows(jct):
        return [{**{c: 0 for c in JOBS_COLUMNS}, "job": "t", "group": g, "collective": "allreduce",
                 "size_bytes": size, "busbw_ratio": 0.5, "jct_s": jct} for g, size in (("TP", 20972), ("DP", 167772))]

    shared = _fake_run(tmp_path / "shared", [entry(3.3, 1.1)], rows(3.3))
    RunDir(shared).write_parquet()
    solo = {"t": _fake_run(tmp_path / "solo", [entry(3.0, 1.0)], rows(3.0))}
    (e,) = attach_solo(shared, solo, {})["jobs"]
    assert e["solo_iteration_s"] == 1.0 and e["jct_slowdown"] == pytest.approx(1.1)
    table = RunDir.open(shared).table("jobs").set_index("group")
    assert (shared / "jobs.parquet").stat().st_mtime >= (shared / "jobs.csv").stat().st_mtime
    assert table.loc["DP", "solo_jct_s"] == 3.0 and table.loc["TP", "jct_slowdown"] == pytest.approx(1.1)


def test_an_unreadable_file_names_the_jobs_key():
    spec = parse_scenario(scenario({"name": "t", "ranks": 4, "workload": {"simai": {"path": "/nonexistent/w.txt"}}}))
    with pytest.raises(ScenarioError, match=r"^jobs\.0\.workload\.simai\.path: cannot read /nonexistent/w.txt"):
        jobs_plan(spec)
