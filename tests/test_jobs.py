"""Several jobs on one fabric (testbed.spec.jobs, testbed.workloads.jobs, testbed.workloads.jobs.workload): the scenario's
``jobs`` list, placement, the op plan with one stream per job, links and fair shares, per-job and
per-tenant results, the solo comparison and the report's jobs plots. No fabric: the runs are in
tests/integration/test_jobs_on_one_fabric.py."""
import copy
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from testbed.workloads.jobs import links
from testbed.spec.placement import leaves_of, place_jobs
from testbed.workloads.jobs.plan import jobs_plan, pinned_spec
from testbed.workloads.jobs.results import JOBS_COLUMNS, format_jobs, job_entries, job_ops, jobs_table, tenant_entries
from testbed.workloads.jobs.solo import attach_solo
from testbed.results.rundir import RunDir
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.workloads import load_scenario
from testbed.workloads import workload_for
from testbed.workloads.jobs.workload import Jobs
from testbed.workloads.sweep.job import pass_starts

REPO = Path(__file__).resolve().parents[1]
QUICK = yaml.safe_load((REPO / "scenarios" / "quickstart.yaml").read_text())
SWEEP = {"sizes": {"min_bytes": "256KiB", "max_bytes": "256KiB"}, "iterations": 3, "warmup_iterations": 1}


def scenario(*jobs, fabric=None, seed=1, keep_workload=False):
    d = copy.deepcopy(QUICK)
    if not keep_workload:
        d.pop("workload")
    d["seed"] = seed
    d.update(fabric or {})
    if jobs:
        d["jobs"] = [{"workload": SWEEP, **j} for j in jobs]
    return d


def job(name, **kw):
    return {"name": name, **kw}


@pytest.mark.parametrize("data, says", [
    (scenario(job("a", ranks=4), keep_workload=True), "exactly one of workload"),
    (scenario(), "exactly one of workload"),
    (scenario(job("a", ranks=4, hosts=["h1", "h2"])), "give exactly one of hosts"),
    (scenario(job("a", hosts=["h1"])), ">= 2"),
    (scenario(job("a", hosts=["h1", "h9"])), "jobs.0.hosts: no host 'h9'"),
    (scenario(job("a", hosts=["h1", "h2"]), job("b", hosts=["h2", "h3"])), "jobs.1.hosts: h2 belongs to job 'a'"),
    (scenario(job("a", ranks=6), job("b", ranks=4)), "jobs.1.ranks: 4 ranks, but only 2"),
    (scenario(job("a", ranks=4), job("a", ranks=4)), "jobs.1.name: 'a' is also jobs.0's name"),
    (scenario(job("a", ranks=4, workload={**SWEEP, "ranks": 2})), "workload.ranks does not apply in a job"),
    (scenario(job("a", ranks=4, placement="diagonal")), "jobs.0.placement"),
    (scenario(job("a", ranks=4, colour=1)), "jobs.0.colour: unknown key"),
    (scenario(job("a", ranks=4, iterations=2, duration_s=3)), "iterations or duration_s, not both"),
    (scenario(job("a", hosts=["h1", "h2"], placement="spread")), "placement applies to ranks"),
    (scenario(job("a", ranks=2), job("b", ranks=2, workload={**SWEEP, "channels": 2})),
     "jobs.1.workload.channels"),
])
def test_bad_jobs_are_refused_with_the_key_path(data, says):
    with pytest.raises(ScenarioError) as e:
        parse_scenario(data)
    assert says in str(e.value)


def test_placement_packed_spread_and_seeded_random_skip_hosts_taken_earlier():
    spec = parse_scenario(scenario(job("a", ranks=4)))
    layout = spec.fabric.layout_preview()
    assert leaves_of(layout) == [["h1", "h2"], ["h3", "h4"], ["h5", "h6"], ["h7", "h8"]]
    jobs = parse_scenario(scenario(job("x", hosts=["h1", "h8"]), job("p", ranks=3, placement="packed"),
                                   job("s", ranks=3, placement="spread"))).jobs
    got = place_jobs(layout, jobs, 1)
    assert got == {"x": ("h1", "h8"), "p": ("h2", "h3", "h4"), "s": ("h5", "h7", "h6")}
    rnd = parse_scenario(scenario(job("r", ranks=4, placement="random"), job("q", ranks=4, placement="random"))).jobs
    one, again, other = (place_jobs(layout, rnd, seed) for seed in (1, 1, 2))
    assert one == again and one != other
    assert sorted(one["r"] + one["q"]) == [f"h{i}" for i in range(1, 9)]


def test_plan_maps_each_jobs_ranks_tags_its_ops_and_gives_it_a_stream():
    spec = parse_scenario(scenario(job("a", ranks=4, placement="spread", tenant="red"),
                                   job("b", ranks=4, placement="spread", iterations=2, start_s=1.5)))
    plan, jobs = jobs_plan(spec)
    a, b = jobs
    assert (a.ranks, b.ranks) == ((0, 2, 4, 6), (1, 3, 5, 7)) and (a.stream, b.stream) == (0, 1)
    assert a.tenant == "red" and b.tenant == "default" and b.start_s == 1.5
    ops_a = [op for op in plan.ops if op.job == "a"]
    ops_b = [op for op in plan.ops if op.job == "b"]
    assert len(ops_a) == 1 + 3 and len(ops_b) == 1 + 2 * 3  # warm-up in the first pass only
    assert all(op.groups == ((0, 2, 4, 6),) and op.stream == 0 and op.group == "a" for op in ops_a)
    assert [op.iteration for op in ops_b] == [-1, 0, 1, 2, 3, 4, 5]
    assert pass_starts(ops_b, 2) == {4}
    w = workload_for(spec)
    assert type(w) is Jobs and w.peers(plan.ops)[0] == [2, 6]
    assert w.estimate_s(plan.ops) > 1.5 and w.scaling_keys().startswith("jobs[]")
    assert w.fan_in(plan.ops) == 2  # per-flow hashing can put two jobs' flows on one uplink


def test_duration_plans_enough_passes_to_fill_it():
    spec = parse_scenario(scenario(job("a", ranks=2, duration_s=10)))
    (a,) = jobs_plan(spec)[1]
    assert a.passes > 1 and a.duration_s == 10


def test_the_shipped_two_job_scenarios_load():
    for v in ("packed", "spread", "spread_spray"):
        spec = load_scenario(REPO / "scenarios" / f"two_jobs_{v}.yaml")
        assert [j.tenant for j in spec.jobs] == ["red", "blue"]


def _loads(spec):
    plan, jobs = jobs_plan(spec)
    layout = spec.fabric.layout_preview()
    return links.job_loads(layout, jobs, plan.ops), links.capacities(layout)


def test_ring_flows_cross_the_spines_evenly_and_packed_jobs_share_no_link():
    packed = parse_scenario(scenario(job("a", ranks=4), job("b", ranks=4)))
    loads, caps = _loads(packed)
    assert links.shared_links(loads) == {}
    # h2 -> h3 crosses l1's uplinks half and half; h1 -> h2 stays in leaf 1
    assert loads["a"][("l1", "s1")] == pytest.approx(0.5) and loads["a"][("l1", "s2")] == pytest.approx(0.5)
    assert ("l3", "s1") not in loads["a"]
    spread = parse_scenario(scenario(job("a", ranks=4, placement="spread"), job("b", ranks=4, placement="spread")))
    loads, caps = _loads(spread)
    shared = links.shared_links(loads)
    assert shared[("l1", "s1")] == ["a", "b"] and len(shared) == 16  # every leaf-spine link, both ways
    # two half-flows of each job on each uplink: 2 x 0.5 x r = 10 Mbit/s, so each gets the full link
    assert links.fair_rates(loads, caps) == pytest.approx({"a": 1e7, "b": 1e7})


def test_two_jobs_on_one_uplink_get_half_each():
    """One spine, two leaves of 4: two 2-rank jobs each with one host per leaf: both rings cross the one
    leaf-spine link each way, so the fair share is half the link each; alone, the whole link."""
    one_spine = {"fabric": {**QUICK["fabric"], "spines": 1, "leaves": 2, "hosts_per_leaf": 4}}
    spec = parse_scenario(scenario(job("a", hosts=["h1", "h5"]), job("b", hosts=["h2", "h6"]),
                                   job("c", hosts=["h3", "h4"]), fabric=one_spine))
    loads, caps = _loads(spec)
    fair = links.fair_rates(loads, caps)
    assert fair["a"] == pytest.approx(5e6) and fair["b"] == pytest.approx(5e6)
    assert fair["c"] == pytest.approx(1e7)  # inside leaf 1: the host links only
    assert links.fair_rates({"a": loads["a"]}, caps)["a"] == pytest.approx(1e7)


def _records(plan, t0_ns, per_op_ms):
    """OpDone-like rank rows for every op of ``plan``: each job's ops back to back from t0."""
    rows, meta, clock = [], {}, {}
    for k, op in enumerate(plan.ops):
        start = clock.get(op.job, t0_ns)
        end = start + int(per_op_ms[op.job] * 1e6)
        clock[op.job] = end
        for r in op.groups[0]:
            rows.append({"op_id": k, "rank": r, "t_start_ns": start, "t_end_ns": end, "group_size": len(op.groups[0])})
        meta[k] = {**op.meta(), "job": op.job}
    return rows, meta


def test_job_and_tenant_tables_give_busbw_jct_and_fair_share():
    spec = parse_scenario(scenario(job("a", ranks=4, placement="spread", tenant="red"),
                                   job("b", ranks=4, placement="spread", tenant="blue")))
    plan, jobs = jobs_plan(spec)
    rows, meta = _records(plan, 10**18, {"a": 400, "b": 800})
    ops = job_ops(rows, meta, 8)
    loads, caps = _loads(spec)
    fair = links.fair_rates(loads, caps)
    entries = job_entries(ops, jobs, 1e7, fair, fair, 1e7, loads, links.shared_links(loads))
    a, b = entries
    # 256 KiB ring all-reduce on 4 ranks in 0.4 s: algbw 5.24 Mbit/s, busbw x 1.5
    assert a["busbw_ratio"] == pytest.approx(262144 * 8 / 0.4 * 1.5 / 1e7)
    assert a["jct_s"] == pytest.approx(4 * 0.4) and b["jct_s"] == pytest.approx(4 * 0.8)
    assert a["fair_busbw_ratio"] == 1.0 and a["shares_links_with"] == ["b"] and a["timed_ops"] == 3
    table = jobs_table(ops, entries, 1e7)
    assert list(table["job"]) == ["a", "b"] and list(table["ops"]) == [3, 3]
    assert table.loc[0, "hosts"] == "h1 h3 h5 h7"
    tenants = tenant_entries(entries)
    assert [t["tenant"] for t in tenants] == ["red", "blue"] and tenants[1]["jct_max_s"] == pytest.approx(3.2)
    text = format_jobs({"jobs": entries, "tenants": tenants, "shared_links": {"l1>s1": ["a", "b"]}})
    assert "h1,h3,h5,h7" in text and "links two or more jobs may cross: 1" in text


def _fake_run(d: Path, entries, jobs_rows):
    d.mkdir(parents=True)
    (d / "manifest.json").write_text("{}")
    (d / "summary.json").write_text(json.dumps({"faithful": True, "jobs": {"jobs": entries, "tenants": [],
                                                                           "shared_links": {}}}))
    RunDir(d).write_table("jobs", pd.DataFrame(jobs_rows))
    return d


def test_solo_attaches_slowdowns_and_the_interference_matrix(tmp_path):
    spec = parse_scenario(scenario(job("a", ranks=4, placement="spread", start_s=2), job("b", ranks=4,
                                                                                         placement="spread")))
    solo_a = pinned_spec(spec, ["a"], "solo-a")
    (ja,) = solo_a.jobs
    assert ja.hosts == ("h1", "h3", "h5", "h7") and ja.ranks is None and ja.start_s == 0
    assert solo_a.name.endswith("-solo-a")

    def entry(name, ratio, jct):
        return {"name": name, "tenant": name, "hosts": ["h1"], "timed_ops": 3, "busbw_ratio": ratio, "jct_s": jct,
                "placement": "spread", "fair_busbw_ratio": 1.0}

    def row(name, ratio, jct):
        return {**{c: 0 for c in JOBS_COLUMNS}, "job": name, "size_bytes": 1024, "busbw_ratio": ratio, "jct_s": jct}

    shared = _fake_run(tmp_path / "shared", [entry("a", 0.5, 4.0), entry("b", 0.6, 3.0)],
                       [row("a", 0.5, 4.0), row("b", 0.6, 3.0)])
    solo = {n: _fake_run(tmp_path / f"solo-{n}", [entry(n, 1.0, 2.0)], [row(n, 1.0, 2.0)]) for n in "ab"}
    block = attach_solo(shared, solo, {})
    a, b = block["jobs"]
    assert a["jct_slowdown"] == pytest.approx(2.0) and a["busbw_slowdown"] == pytest.approx(2.0)
    assert b["jct_slowdown"] == pytest.approx(1.5)
    assert block["interference"]["jct_slowdown"] == [[1.0, 2.0], [1.5, 1.0]]
    run = RunDir.open(shared)
    assert list(run.table("jobs")["jct_slowdown"]) == pytest.approx([2.0, 1.5])
    assert run.summary["jobs"]["tenants"][0]["jct_slowdown_max"] == pytest.approx(2.0)
    assert "interference matrix" in format_jobs(block)


def test_the_report_adds_the_jobs_timeline_and_matrix_to_jobs_runs_only(tmp_path):
    from test_report import _run_dir, _sections
    from testbed.report import write_report

    plain = _run_dir(tmp_path, "plain")
    assert "jobs_timeline" not in _sections(write_report(plain)[0].read_text())
    d = _run_dir(tmp_path, "jobs")
    s = json.loads((d / "summary.json").read_text())
    s["jobs"] = {"jobs": [{"name": "a", "links": ["l1>s1"]}, {"name": "b", "links": ["l1>s1"]}],
                 "shared_links": {"l1>s1": ["a", "b"]},
                 "interference": {"jobs": ["a", "b"], "jct_slowdown": [[1.0, 1.8], [1.7, 1.0]], "method": "m"}}
    (d / "summary.json").write_text(json.dumps(s))
    ops = pd.read_csv(d / "ops.csv")
    ops["group"] = ["a", "b"] * (len(ops) // 2)
    ops.to_csv(d / "ops.csv", index=False)
    secs = _sections(write_report(d)[0].read_text())
    assert secs["jobs_timeline"][0] == "img" and secs["jobs_interference"][0] == "table"


def test_solo_with_three_jobs_runs_each_alone_and_each_pair_then_all(tmp_path, capsys):
    """--solo on N = 3 jobs: 3 solo runs, 3 pair runs, then the shared run; M[i][j] from the pair runs."""
    from testbed.workloads.jobs.solo import run_with_solo
    from testbed.pipeline.runner import RunOutcome

    spec = parse_scenario(scenario(job("a", ranks=2), job("b", ranks=2), job("c", ranks=2)))
    jct = {("a",): 1.0, ("b",): 1.0, ("c",): 1.0, ("a", "b"): (1.5, 1.2), ("a", "c"): (1.0, 1.0),
           ("b", "c"): (1.1, 2.0), ("a", "b", "c"): (1.6, 2.1, 2.0)}
    calls = []

    def run_one(s, root):
        names = tuple(j.name for j in s.jobs)
        calls.append((names, Path(root).name))
        times = jct[names] if len(names) > 1 else (jct[names],)
        entries = [{"name": n, "tenant": "t", "hosts": list(j.hosts or ()), "timed_ops": 1, "busbw_ratio": 1 / t,
                    "jct_s": t, "placement": "explicit", "fair_busbw_ratio": 1.0}
                   for n, j, t in zip(names, s.jobs, times)]
        d = _fake_run(Path(root) / "-".join(names), entries,
                      [{**{c: 0 for c in JOBS_COLUMNS}, "job": e["name"], "size_bytes": 1,
                        "busbw_ratio": 1 / e["jct_s"], "jct_s": e["jct_s"]} for e in entries])
        return RunOutcome(0, d)

    out = run_with_solo(spec, tmp_path, run_one)
    assert [c[1] for c in calls] == ["solo"] * 3 + ["pairs"] * 3 + [tmp_path.name]
    block = RunDir.open(out.run_dir).summary["jobs"]
    assert block["interference"]["jct_slowdown"] == [[1.0, 1.5, 1.0], [1.2, 1.0, 1.1], [1.0, 2.0, 1.0]]
    assert [e["jct_slowdown"] for e in block["jobs"]] == pytest.approx([1.6, 2.1, 2.0])
    assert "each pair run alone (3 pair runs)" in capsys.readouterr().out


def test_solo_needs_a_jobs_list():
    from testbed.workloads.jobs.solo import run_with_solo

    with pytest.raises(ScenarioError, match="--solo"):
        run_with_solo(parse_scenario(scenario(keep_workload=True)), "results", None)


def test_tenant_hosts_gathers_each_tenants_placed_hosts():
    from testbed.spec.jobs import tenant_hosts

    spec = parse_scenario(scenario(job("a", ranks=2, tenant="red"), job("b", ranks=2, tenant="blue"),
                                   job("c", ranks=2, tenant="red", placement="spread")))
    assert tenant_hosts(spec) == {"red": ("h1", "h2", "h5", "h7"), "blue": ("h3", "h4")}
    assert tenant_hosts(parse_scenario(scenario(keep_workload=True))) == {}


def test_jobs_hosts_join_their_tenants_in_the_run_tenant_map():
    from testbed.spec.jobs import run_tenant_map

    tenants = {"tenants": {"red": {"hosts": ["h1"]}, "blue": {"hosts": ["h8"]}}}
    d = scenario(job("a", ranks=4, tenant="red"), job("b", ranks=4, tenant="blue"))
    spec = parse_scenario({**d, **tenants})
    tmap = run_tenant_map(spec)
    assert tmap.tenants == {"red": ("h1", "h2", "h3", "h4"), "blue": ("h5", "h6", "h7", "h8")} and tmap.isolation
    assert tmap.allows("h1", "h4") and not tmap.allows("h1", "h5")
    with pytest.raises(ScenarioError, match="jobs.1.tenant: 'green' is not declared under tenants"):
        parse_scenario({**scenario(job("a", ranks=4, tenant="red"), job("b", ranks=4, tenant="green")), **tenants})
    with pytest.raises(ScenarioError, match="jobs.1.hosts: h8 belongs to tenant 'blue', not to this job's tenant 'red'"):
        parse_scenario({**scenario(job("a", ranks=2, tenant="red"), job("b", hosts=["h7", "h8"], tenant="red")),
                        **tenants})
    assert run_tenant_map(parse_scenario(scenario(job("a", ranks=4)))) is None


@pytest.mark.parametrize("placement", ["packed", "spread", "random"])
def test_placement_never_takes_another_tenants_or_a_shared_host(placement):
    from testbed.workloads.jobs.plan import placed_jobs

    tenants = {"tenants": {"red": {"hosts": ["h1", "h5"]}, "blue": {"hosts": ["h2", "h8"]}}, "shared_hosts": ["h4"]}
    for seed in range(1, 6):
        spec = parse_scenario({**scenario(job("a", ranks=2, placement=placement, tenant="red"),
                                          job("b", ranks=3, placement=placement, tenant="blue")), **tenants,
                               "seed": seed, "isolation": "off"})
        got = {p.name: set(p.hosts) for p in placed_jobs(spec)}
        assert not got["a"] & {"h2", "h8", "h4"} and not got["b"] & {"h1", "h5", "h4"}, (seed, got)
        assert len(got["a"]) == 2 and len(got["b"]) == 3
    with pytest.raises(ScenarioError, match=r"jobs.1.ranks: 5 ranks, but only 4 .* free for tenant 'blue'"):
        parse_scenario({**scenario(job("a", ranks=2, tenant="red"), job("b", ranks=5, tenant="blue")), **tenants})
    with pytest.raises(ScenarioError, match="jobs.0.hosts: h4 is a shared host"):
        parse_scenario({**scenario(job("a", hosts=["h1", "h4"], tenant="red")), **tenants})


def test_a_solo_run_keeps_the_full_runs_tenant_map():
    from testbed.spec.jobs import run_tenant_map

    tenants = {"tenants": {"red": {"hosts": ["h1"]}, "blue": {"hosts": ["h8"]}}}
    spec = parse_scenario({**scenario(job("a", ranks=4, placement="spread", tenant="red"),
                                      job("b", ranks=4, placement="spread", tenant="blue")), **tenants})
    solo = pinned_spec(spec, ["a"], "solo-a")
    assert solo.tenants["red"].hosts == ("h1", "h3", "h5", "h7")
    assert solo.tenants["blue"].hosts == ("h2", "h4", "h6", "h8")
    assert run_tenant_map(solo).tenants == run_tenant_map(spec).tenants
    parse_scenario(solo.model_dump(mode="json"))  # a valid scenario on its own
