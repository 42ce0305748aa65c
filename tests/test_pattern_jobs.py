"""A traffic pattern as a job's workload (testbed.workloads.pattern.job; issue 18 item 1): the spec takes
``jobs[].workload.pattern`` and refuses the keys that do not fit a job, naming them; the pattern runs on the
job's hosts (pattern rank i = the job's i-th host) on its own stream, adds no op to the plan; the results give
it a row in jobs.csv, its JCT and FCT figures in summary.json and its flows in fct.csv. The agents route a
pattern pass sent to some ranks by its op id. No fabric: tests/integration/test_pattern_job_fabric.py runs one."""
import copy
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from testbed.emulation.agent_events import AgentEvents
from testbed.workloads.jobs import links
from testbed.spec.jobs import job_hosts
from testbed.workloads.pattern.job import fct_rows, figures, host_pair_bytes
from testbed.workloads.jobs.plan import jobs_plan, pinned_spec
from testbed.workloads.jobs.results import JOBS_COLUMNS, format_jobs, job_entries, job_ops, jobs_table, tenant_entries
from testbed.workloads.jobs.solo import attach_solo
from testbed.workloads.pattern.ideal import ideal_fct_s
from testbed.results.rundir import RunDir
from testbed.results.schema import table
from testbed.spec.jobs import jobs_channels
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.workloads import load_scenario
from testbed.workloads import workload_for
from traffic import protocol
from traffic.patterns import Flow
from traffic.protocol import FlowMessage, FlowsDone, RunFlows

REPO = Path(__file__).resolve().parents[1]
QUICK = yaml.safe_load((REPO / "scenarios" / "quickstart.yaml").read_text())
SWEEP = {"sizes": {"min_bytes": "256KiB", "max_bytes": "256KiB"}, "iterations": 3, "warmup_iterations": 1}
A2A = {"pattern": {"kind": "alltoall", "size_bytes": "64KiB"}}


def scenario(*jobs):
    d = copy.deepcopy(QUICK)
    d.pop("workload")
    d["jobs"] = [{"workload": SWEEP, **j} for j in jobs]
    return d


def test_a_pattern_job_runs_on_its_own_hosts_and_stream_and_adds_no_op():
    spec = parse_scenario(scenario({"name": "s", "ranks": 2}, {"name": "p", "ranks": 4, "placement": "spread",
                                                               "workload": A2A}))
    plan, (s, p) = jobs_plan(spec)
    assert (s.workload, p.workload, p.stream) == ("sizes", "pattern", 1)
    assert p.hosts == ("h3", "h5", "h7", "h4") and p.ranks == (2, 4, 6, 3)
    assert {op.job for op in plan.ops} == {"s"}  # the pattern's flows are no op
    # all-to-all among the job's 4 hosts, in the run's ranks: pattern rank i = the job's i-th host
    assert len(p.flows) == 12 and {f.src for f in p.flows} == {2, 3, 4, 6}
    assert (p.flows[0].src, p.flows[0].dst) == (2, 4)
    assert any("pattern alltoall, 12 flows" in n for n in plan.notes)
    w = workload_for(spec)
    assert w.streams(plan.ops) == 2  # one stream per job
    peers = w.peers(plan.ops)
    assert peers[0] == [1] and peers[2] == [3, 4, 6]
    assert w.fan_in(plan.ops) == 3  # three senders into each of the pattern's hosts
    assert w.estimate_s(plan.ops) > 3 * 65536 * 8 / 10e6


def test_pattern_hosts_are_the_jobs_hosts():
    spec = parse_scenario(scenario({"name": "p", "hosts": ["h8", "h2"],
                                    "workload": {"pattern": {"kind": "flows", "flows": [
                                        {"src": 0, "dst": "h2", "size_bytes": 1000}]}}}))
    (p,) = jobs_plan(spec)[1]
    assert [(f.src, f.dst) for f in p.flows] == [(7, 1)]  # rank 0 of the job is h8
    assert [(h.name, h.rank, h.switch) for h in job_hosts(spec.fabric.layout_preview(), p.hosts)] == [
        ("h8", 0, "l4"), ("h2", 1, "l1")]


@pytest.mark.parametrize("workload, says", [
    ({"pattern": {"kind": "incast", "receiver": "h6", "size_bytes": 1000}},
     "jobs.0.workload.pattern.receiver: = 'h6' is not one of the pattern's hosts"),
    ({"pattern": {"kind": "flows", "flows": [{"src": "h1", "dst": 4, "size_bytes": 100}]}},
     "jobs.0.workload.pattern.flows.0.dst: = 4: a rank is 0..3"),
    ({"pattern": {"kind": "alltoall", "size_bytes": 1000, "trials": 3}}, "jobs.0.workload.pattern.trials: = 3"),
    ({"pattern": {"kind": "alltoall", "size_bytes": 1000, "qps": 2}},
     "jobs.0.workload.pattern.qps: = 2: every stream of a jobs run has the collective jobs' workload.channels = 1"),
    ({**A2A, "iterations": 3}, "jobs.0.workload.iterations: applies to a size sweep"),
    ({**A2A, "channels": 2}, "workload.channels = 2 applies to collectives"),
])
def test_pattern_keys_that_do_not_fit_a_job_are_refused_naming_the_key(workload, says):
    with pytest.raises(ScenarioError) as e:
        parse_scenario(scenario({"name": "p", "ranks": 4, "workload": workload}, {"name": "s", "ranks": 4}))
    assert says in str(e.value)
    assert "h1, h2, h3, h4" in str(e.value) or "pattern.receiver" not in says  # names the job's hosts


def test_a_kind_that_needs_two_leaves_is_refused_on_a_one_leaf_job():
    with pytest.raises(ScenarioError, match=r"jobs\.0\.workload\.pattern\.kind: 'kflows' needs hosts on at least two "
                                            r"leaves.*the job's: h1, h2"):
        parse_scenario(scenario({"name": "p", "hosts": ["h1", "h2"],
                                 "workload": {"pattern": {"kind": "kflows", "size_bytes": 1000}}}))


def test_channels_are_the_collective_jobs_and_a_pattern_fits_them():
    both = parse_scenario(scenario({"name": "s", "ranks": 4, "workload": {**SWEEP, "channels": 2}},
                                   {"name": "p", "ranks": 4,
                                    "workload": {"pattern": {"kind": "alltoall", "size_bytes": 1000, "qps": 2}}}))
    assert jobs_channels(both.jobs) == 2  # the pattern job's channels (1, unset) is not compared
    alone = parse_scenario(scenario({"name": "p", "ranks": 4,
                                     "workload": {"pattern": {"kind": "alltoall", "size_bytes": 1000, "qps": 3}}}))
    assert jobs_channels(alone.jobs) == 3


def test_the_shipped_scenario_loads_and_its_solo_run_keeps_the_pattern():
    spec = load_scenario(REPO / "scenarios" / "jobs_pattern_and_sweep.yaml")
    solo = pinned_spec(spec, ["p"], "solo-p")
    (p,) = jobs_plan(solo)[1]
    assert p.hosts == ("h1", "h2", "h3", "h4") and p.passes == 3 and p.stream == 0 and len(p.flows) == 12


# -- results ---------------------------------------------------------------------------------------------

def _pattern_run(spec, p, pass_ms):
    """A PatternRun-like record of ``p``'s passes: every flow of pass k posted at its start, acknowledged after
    the ideal FCT x (1 + k / 10) (pass k slower), the passes ``pass_ms`` apart."""
    layout = spec.fabric.layout_preview()
    ideal = ideal_fct_s(list(p.flows), layout, 1.0)
    trials = []
    for k in range(2):
        start = 10**18 + int(k * pass_ms * 1e6)
        sent = [FlowMessage(flow=f.flow, channel=0, rank=f.src, peer=f.dst, msg_seq=k, size_bytes=f.size_bytes,
                            t_post_ns=start, t_acked_ns=start + int(ideal[f.flow] * (1 + k / 10) * 1e9))
                for f in p.flows]
        trials.append(SimpleNamespace(trial=k, seed=1, start_at_ns=start, done=[SimpleNamespace(sent=sent)]))
    return SimpleNamespace(flows=list(p.flows), ideal_fct_s=ideal, trials=trials,
                           ideal_span_s=max(ideal.values()),
                           pattern=next(j.workload.pattern for j in spec.jobs if j.name == p.name),
                           fab=SimpleNamespace(layout=layout))


def test_results_give_the_pattern_job_a_row_its_jct_and_fct_figures():
    spec = parse_scenario(scenario({"name": "s", "ranks": 4, "tenant": "red"},
                                   {"name": "p", "ranks": 4, "workload": A2A, "tenant": "blue"}))
    plan, jobs = jobs_plan(spec)
    s, p = jobs
    layout = spec.fabric.layout_preview()
    host_of = {h.rank: h.name for h in layout.hosts}
    loads = links.job_loads(layout, jobs, plan.ops, {"p": host_pair_bytes(list(p.flows), host_of)})
    assert ("l3", "h5") in loads["p"] and links.shared_links(loads) == {}  # packed: leaves 1-2 and 3-4
    fair = links.fair_rates(loads, links.capacities(layout))
    run = _pattern_run(spec, p, 1000)
    fig = figures(run)
    ideal_us = max(run.ideal_fct_s.values()) * 1e6
    assert fig["passes"] == 2 and fig["jct_s"] == pytest.approx(1.0 + ideal_us * 1.1 / 1e6)
    pat = fig["pattern"]
    assert pat["flows_per_pass"] == 12 and pat["bytes_per_pass"] == 12 * 65536 and pat["fct_samples"] == 24
    assert pat["slowdown_p50"] == pytest.approx(1.0) and pat["slowdown_p99"] == pytest.approx(1.1)
    assert pat["completion_ratio_mean"] == pytest.approx((1 + 1 / 1.1) / 2)
    rows = [{"op_id": k, "rank": r, "t_start_ns": 10**18, "t_end_ns": 10**18 + 4 * 10**8, "group_size": 4}
            for k, op in enumerate(plan.ops) for r in op.groups[0]]
    ops = job_ops(rows, {k: {**op.meta(), "job": op.job} for k, op in enumerate(plan.ops)}, 8)
    entries = job_entries(ops, jobs, 1e7, fair, fair, 1e7, loads, {}, patterns={"p": fig})
    es, ep = entries
    assert es["pattern"] is None and es["busbw_ratio"] > 0 and es["workload"] == "sizes"
    assert ep["workload"] == "pattern" and ep["busbw_ratio"] is None and ep["fair_busbw_ratio"] is None
    assert ep["jct_s"] == fig["jct_s"] and ep["timed_ops"] == 2 and ep["pattern"]["fct_p99_us"] == pat["fct_p99_us"]
    t = jobs_table(ops, entries, 1e7)
    assert list(t["job"]) == ["s", "p"] and list(t["workload"]) == ["sizes", "pattern"]
    assert t.loc[1, "fct_p99_us"] == pat["fct_p99_us"] and t.loc[1, "size_bytes"] == 12 * 65536
    assert t.loc[1, "ops"] == 2 and pd.isna(t.loc[0, "fct_p50_us"]) and pd.isna(t.loc[1, "busbw_ratio"])
    assert table("jobs").problems(t.columns) == []
    assert [x["tenant"] for x in tenant_entries(entries)] == ["red", "blue"]
    text = format_jobs({"jobs": entries, "tenants": [], "shared_links": {}})
    assert "pattern alltoall: 12 flows x 2 pass(es), FCT p50" in text
    fct = fct_rows({"p": run}, None)
    assert list(fct.columns[:2]) == ["job", "trial"] and len(fct) == 24 and set(fct["job"]) == {"p"}
    assert set(fct["src"]) == {"h5", "h6", "h7", "h8"} and table("fct").problems(fct.columns) == []


def _fake_run(d: Path, entries, jobs_rows):
    d.mkdir(parents=True)
    (d / "manifest.json").write_text("{}")
    (d / "summary.json").write_text(json.dumps({"faithful": True, "jobs": {"jobs": entries, "tenants": [],
                                                                           "shared_links": {}}}))
    RunDir(d).write_table("jobs", pd.DataFrame(jobs_rows, columns=JOBS_COLUMNS))
    return d


def test_solo_gives_a_pattern_job_its_jct_and_fct_tail_slowdowns(tmp_path):
    def entry(name, jct, p99):
        return {"name": name, "tenant": "t", "hosts": ["h1"], "timed_ops": 3, "busbw_ratio": None, "jct_s": jct,
                "placement": "packed", "fair_busbw_ratio": None,
                "pattern": {"kind": "alltoall", "flows_per_pass": 12, "fct_p50_us": p99 / 2, "fct_p99_us": p99,
                            "slowdown_p50": 1.0, "slowdown_p99": 1.2, "completion_ratio_mean": 0.9}}

    def row(name, jct, p99):
        return {"job": name, "size_bytes": 786432, "jct_s": jct, "fct_p99_us": p99, "workload": "pattern"}

    shared = _fake_run(tmp_path / "shared", [entry("p", 3.0, 900.0)], [row("p", 3.0, 900.0)])
    solo = {"p": _fake_run(tmp_path / "solo-p", [entry("p", 2.0, 600.0)], [row("p", 2.0, 600.0)])}
    RunDir(shared).write_parquet()  # a real run has the Parquet copies (read first): they get the solo columns too
    block = attach_solo(shared, solo, {})
    (p,) = block["jobs"]
    assert p["jct_slowdown"] == pytest.approx(1.5) and p["fct_p99_slowdown"] == pytest.approx(1.5)
    assert p["solo_fct_p99_us"] == 600.0 and p["busbw_slowdown"] is None
    t = RunDir.open(shared).table("jobs")
    assert t.loc[0, "fct_p99_slowdown"] == pytest.approx(1.5) and table("jobs").problems(t.columns) == []
    assert "FCT p99 alone 600 us" in format_jobs(block)


# -- the agents' side: a pass goes to some ranks only, its FlowsDone routed by op id -------------------------

def test_a_pattern_pass_sent_to_some_ranks_is_routed_by_its_op_id():
    def done(rank, op_id):
        return protocol.encode(FlowsDone(trial=0, rank=rank, sent=[], received=[], op_id=op_id)).strip()

    # each fake agent answers its first line with a FlowsDone of op 7 (rank 1 first with one of no op), exits on EOF
    lines = {0: [done(0, 7)], 1: [done(1, None), done(1, 7)]}
    script = "import sys; sys.stdin.readline(); print(%r); sys.stdout.flush(); sys.stdin.read()"
    procs = [subprocess.Popen([sys.executable, "-c", script % "\n".join(lines[r])], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE) for r in (0, 1)]
    events = AgentEvents(procs, lambda i: f"agent {i} exited", RuntimeError)
    try:
        fut = events.expect_op(7, [0, 1])
        for p in procs:
            p.stdin.write(b"go\n")
            p.stdin.flush()
        got = events.wait_op(fut, 7, [0, 1], 10)
        assert [(d.rank, d.op_id) for d in got] == [(0, 7), (1, 7)]
        assert events.inbox[FlowsDone][1].op_id is None  # a trial sent to every agent: the inbox, as before
    finally:
        events.stop()
        for p in procs:
            p.stdin.close()
            p.wait(5)


def test_run_flows_carries_its_stream_and_op_id_on_the_wire():
    cmd = RunFlows(trial=1, flows=[], start_at_ns=5, sample_period_ns=10, timeout_s=1.0, stream=2, op_id=9)
    assert protocol.decode(protocol.encode(cmd)) == cmd
    assert protocol.decode(protocol.encode(FlowsDone(trial=1, rank=0, sent=[], received=[], op_id=9))).op_id == 9
    assert Flow(0, 1, 2, 3).qps == 1
