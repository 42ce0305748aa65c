"""A SimAI/AICB file as one job of a ``jobs`` list (testbed.workloads.simai.job, testbed.workloads.jobs.plan, testbed.workloads.jobs.workload,
testbed.workloads.jobs.results): the spec takes it, the file's world size against the job's ranks, the job's ops on its
hosts and streams no other job uses, its replay driven as one job, its rows in jobs.csv and its entry in
summary.json. No fabric: the run is in tests/integration/test_simai_job_fabric.py."""
import copy
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from testbed.workloads.jobs.plan import jobs_plan
from testbed.workloads.jobs.results import JOBS_COLUMNS, format_jobs, job_entries, job_ops, jobs_table
from testbed.workloads.replay.run import run_replay
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.workloads import load_scenario
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


def test_the_spec_takes_workload_simai_and_a_pattern_in_a_job_and_still_refuses_chakra():
    spec = parse_scenario(scenario({"name": "t", "ranks": 4, "workload": simai()}, {"name": "s", "ranks": 2},
                                   {"name": "p", "ranks": 2, "workload": {"pattern": {"kind": "alltoall",
                                                                                      "size_bytes": 1000}}}))
    assert spec.jobs[0].workload.simai.size_scale == 0.01 and spec.jobs[1].workload.sizes is not None
    assert spec.jobs[2].workload.pattern.kind == "alltoall"
    with pytest.raises(ScenarioError, match="workload.chakra is not supported in a job") as e:
        parse_scenario(scenario({"name": "c", "ranks": 4, "workload": {"chakra": {"path": "x"}}}))
    assert "workload.sizes" in str(e.value) and "workload.simai" in str(e.value) and "workload.pattern" in str(e.value)
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


def _ops_10ms(plan):
    """ops.csv's rows (testbed.workloads.jobs.results.job_ops) of ``plan`` on 8 ranks, every op 10 ms on each rank that
    takes part, one after the other."""
    rows, meta = [], {}
    for k, op in enumerate(plan.ops):
        for g in op.groups:
            for r in g:
                rows.append({"op_id": k, "rank": r, "t_start_ns": 10**18 + k * 10**7,
                             "t_end_ns": 10**18 + (k + 1) * 10**7, "group_size": len(g)})
        meta[k] = {**op.meta(), "job": op.job}
    return job_ops(rows, meta, 8)


def test_results_give_the_simai_job_its_rows_jct_and_replay_block():
    spec = load_scenario(REPO / "scenarios" / "jobs_simai_sweep.yaml")
    plan, jobs = jobs_plan(spec)
    ops = _ops_10ms(plan)
    replay = {"file": "tp2_dp2.txt", "overlap": "on", "iterations_s": [0.5, 0.7], "iterations": 2,
              "groups": {"TP": {"comm_s": 0.1}, "DP": {"comm_s": 0.2}}}
    fair = {"train": 1e7, "sweep": 1e7}
    entries = job_entries(ops, jobs, 1e7, fair, fair, 1e7, {}, {}, replays={"train": replay})
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
    from testbed.workloads.jobs.solo import attach_solo
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


def _three_jobs():
    """A SimAI job (tp2_dp2: all_gpus 4), a 2-rank sweep and a 2-rank all-to-all pattern on the 8 quickstart
    hosts, packed in that order: the pattern job comes last, on the highest stream, with no op of its own."""
    return parse_scenario(scenario({"name": "t", "ranks": 4, "workload": simai()}, {"name": "s", "ranks": 2},
                                   {"name": "p", "ranks": 2, "workload": {"pattern": {"kind": "alltoall",
                                                                                      "size_bytes": "64KiB"}}}))


def test_a_sweep_a_simai_and_a_pattern_job_plan_together_on_their_own_hosts_and_streams():
    from testbed.workloads.plan import plan_streams

    spec = _three_jobs()
    plan, (t, s, p) = jobs_plan(spec)
    assert (t.workload, s.workload, p.workload) == ("simai", "sizes", "pattern")
    assert t.hosts == ("h1", "h2", "h3", "h4") and s.hosts == ("h5", "h6") and p.hosts == ("h7", "h8")
    # streams numbered job by job: the SimAI job's communicators (TP, DP), then one each
    assert (t.stream, t.n_streams, s.stream, s.n_streams, p.stream, p.n_streams) == (0, 2, 2, 1, 3, 1)
    streams = {j.name: {op.stream for op in plan.ops if op.job == j.name} for j in (t, s, p)}
    assert streams == {"t": {0, 1}, "s": {2}, "p": set()}  # the pattern's passes are no op
    assert [j.as_dict()["streams"] for j in (t, s, p)] == [[0, 1], [2], [3]]
    for j in (t, s):
        assert {r for op in plan.ops if op.job == j.name for g in op.groups for r in g} == set(j.ranks)
    assert len(p.flows) == 2 and {(f.src, f.dst) for f in p.flows} == {(6, 7), (7, 6)} and set(p.ranks) == {6, 7}
    assert s.first_op == sum(1 for op in plan.ops if op.job == "t") and len(plan.ops) == s.first_op + 1 + 3
    assert any("pattern alltoall, 2 flows" in n and "on stream 3" in n for n in plan.notes)
    assert any("SimAI" in n and "streams 0..1" in n for n in plan.notes)
    w = workload_for(spec)
    # the agents start every job's streams, the pattern job's too (the ops alone would say 3)
    assert w.streams(plan.ops) == 4 and plan_streams(plan.ops) == 3
    peers = w.peers(plan.ops)
    assert peers[6] == [7] and peers[7] == [6] and peers[4] == [5] and set(peers[0]) <= {1, 2, 3}
    # every job's estimate counts: the SimAI compute waits (6 phases x 125 us x 400 per iteration) and more
    assert w.estimate_s(plan.ops) > 6 * 125_000e-9 * 400


def test_one_jobs_csv_holds_the_sweep_simai_and_pattern_rows_and_solo_joins_each(tmp_path):
    from test_jobs import _fake_run
    from test_pattern_jobs import _pattern_run
    from testbed.workloads.pattern.job import figures
    from testbed.workloads.jobs.solo import attach_solo
    from testbed.results.rundir import RunDir
    from testbed.results.schema import table

    spec = _three_jobs()
    plan, jobs = jobs_plan(spec)
    ops = _ops_10ms(plan)
    replay = {"file": "tp2_dp2.txt", "overlap": "on", "iterations_s": [0.5, 0.7], "iterations": 2}
    fig = figures(_pattern_run(spec, jobs[2], 1000))
    fair = {j.name: 1e7 for j in jobs}

    def jobs_csv(scale):
        entries = job_entries(ops, jobs, 1e7, fair, fair, 1e7, {}, {},
                              replays={"t": {**replay, "iterations_s": [x * scale for x in replay["iterations_s"]]}},
                              patterns={"p": {**fig, "jct_s": fig["jct_s"] * scale, "pattern": {
                                  **fig["pattern"], "fct_p99_us": fig["pattern"]["fct_p99_us"] * scale}}})
        return entries, jobs_table(ops, entries, 1e7)

    entries, t = jobs_csv(1.0)
    assert list(t.columns) == JOBS_COLUMNS and table("jobs").problems(t.columns) == []
    assert list(t["workload"]) == ["simai", "simai", "sizes", "pattern"]
    assert list(t["group"]) == ["TP", "DP", "s", "p"] and list(t["collective"])[2:] == ["allreduce", "alltoall"]
    assert t["iteration_s"].notna().tolist() == [True, True, False, False]
    assert t["busbw_ratio"].notna().tolist() == [True, True, True, False]
    assert t["fct_p99_us"].notna().tolist() == [False, False, False, True]
    shared = _fake_run(tmp_path / "shared", entries, t.to_dict("records"))
    RunDir(shared).write_parquet()
    solo = {}
    for name in ("t", "s", "p"):  # each job alone: half the times of the shared run
        e, rows_solo = jobs_csv(0.5)
        solo[name] = _fake_run(tmp_path / f"solo-{name}", [x for x in e if x["name"] == name],
                               rows_solo[rows_solo["job"] == name].to_dict("records"))
    block = attach_solo(shared, solo, {})
    by = {e["name"]: e for e in block["jobs"]}
    assert by["t"]["jct_slowdown"] == pytest.approx(2.0) and by["t"]["solo_iteration_s"] == pytest.approx(0.3)
    assert by["p"]["jct_slowdown"] == pytest.approx(2.0) and by["p"]["fct_p99_slowdown"] == pytest.approx(2.0)
    out = RunDir.open(shared).table("jobs")  # the Parquet copy, rewritten by RunDir.write_table
    assert len(out) == 4 and table("jobs").problems(out.columns) == []
    got = out.set_index(["job", "group"])
    assert got.loc[("t", "DP"), "jct_slowdown"] == pytest.approx(2.0) and got.loc[("s", "s"), "busbw_slowdown"] == 1.0
    assert got.loc[("p", "p"), "fct_p99_slowdown"] == pytest.approx(2.0)
    assert got.loc[("p", "p"), "solo_jct_s"] == pytest.approx(fig["jct_s"] * 0.5)


def test_every_stream_of_a_simai_job_carries_its_traffic_class():
    """A SimAI job has one stream per communicator: its class's DSCP must reach each, not only the first."""
    from testbed.workloads.jobs.plan import jobs_plan, stream_tos
    from traffic.transport.qp import class_tos

    spec = load_scenario(REPO / "scenarios" / "jobs_simai_sweep.yaml")
    train, sweep = spec.jobs
    spec = spec.model_copy(update={"jobs": (train.model_copy(update={"traffic_class": "lossy"}), sweep)})
    _, jobs = jobs_plan(spec)
    streams = max(j.stream + j.n_streams for j in jobs)
    assert [j.n_streams for j in jobs] == [2, 1] and streams == 3
    assert stream_tos(jobs, streams) == [class_tos("lossy"), class_tos("lossy"), class_tos("lossless")]
    assert class_tos("lossy") >> 2 == 0 and class_tos("lossless") >> 2 == 26
