"""Stored solo runs (testbed.workloads.jobs.solo_store, ``testbed run --solo-from DIR``): the match of a stored run
to a job (every differing key named), the layout (DIR/solo, DIR/pairs), which stored runs may be used,
the results of a run that reuses them, the trimmed copy a regression suite keeps, and ``testbed regress``
entries with ``solo: true``. No fabric: tests/integration/test_solo_baseline_fabric.py runs it for real."""
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from test_jobs import job, scenario
from testbed import cli
from testbed.workloads.jobs.results import JOBS_COLUMNS
from testbed.workloads.jobs.plan import pinned_spec
from testbed.workloads.jobs.solo import run_with_solo
from testbed.workloads.jobs.solo_store import SoloBaselineError, canonical, differences, find, save, spec_sha256
from testbed.regress.suite import SuiteError, load_suite
from testbed.results.figures import figures
from testbed.results.rundir import RunDir
from testbed.pipeline.runner import RunOutcome
from testbed.spec.scenario import parse_scenario

SIZE = {"min_bytes": "256KiB", "max_bytes": "256KiB"}


def two_jobs(size=SIZE, seed=1, **fabric):
    sweep = {"sizes": size, "iterations": 3, "warmup_iterations": 1}
    d = scenario(job("a", ranks=2, workload=sweep), job("b", ranks=2, workload=sweep), seed=seed)
    d["fabric"] = {**d["fabric"], **fabric}
    return parse_scenario(d)


def fake_run(d: Path, spec, jct: dict, faithful=True, started="20261202T100000Z", datapath="user") -> Path:
    """A run directory of ``spec`` as the runner leaves it (manifest, summary with a jobs block, jobs.csv);
    ``jct``: job -> JCT in s (busbw ratio 1/JCT)."""
    d.mkdir(parents=True)
    rid = d.name[-6:]
    (d / "manifest.json").write_text(json.dumps({"run_id": rid, "started_utc": started,
                                                 "scenario": spec.model_dump(mode="json"),
                                                 "backends": {"datapath": datapath}, "versions": {"git_commit": "c0"}}))
    entries = [{"name": n, "tenant": "default", "hosts": ["h1"], "timed_ops": 3, "busbw_ratio": 1 / t, "jct_s": t,
                "placement": "packed", "fair_busbw_ratio": 1.0} for n, t in jct.items()]
    (d / "summary.json").write_text(json.dumps({"run_id": rid, "faithful": faithful, "violations": [] if faithful
                                                else ["cpu idle 1 % < 5 %"], "sizes": [],
                                                "jobs": {"jobs": entries, "tenants": [], "shared_links": {}}}))
    RunDir(d).write_table("jobs", pd.DataFrame([{**{c: 0 for c in JOBS_COLUMNS}, "job": n, "size_bytes": 262144,
                                                 "busbw_ratio": 1 / t, "jct_s": t} for n, t in jct.items()]))
    return d


def stored_solo(root: Path, spec, jct=1.0, **kw) -> dict:
    """What ``--solo`` stores: one solo run per job of ``spec`` under root/solo; job -> run directory."""
    return {j.name: fake_run(root / "solo" / f"20261202T1000{i:02d}Z-s-solo-{j.name}-tb00{i:02d}",
                             pinned_spec(spec, [j.name], f"solo-{j.name}"), {j.name: jct}, **kw)
            for i, j in enumerate(spec.jobs)}


def test_differences_name_every_differing_key_with_both_values():
    a = {"seed": 1, "fabric": {"host_link_bps": 1e7, "spines": 2}, "jobs": [{"hosts": ["h1", "h2"]}]}
    b = {"seed": 2, "fabric": {"host_link_bps": 2e7, "spines": 2}, "jobs": [{"hosts": ["h1", "h3"]}], "x": 1}
    assert differences(a, b) == ["fabric.host_link_bps: 10000000.0 (stored) vs 20000000.0 (this run)",
                                 'jobs.0.hosts.1: "h2" (stored) vs "h3" (this run)',
                                 "seed: 1 (stored) vs 2 (this run)", 'x: "absent" (stored) vs 1 (this run)']
    assert differences({"jobs": [1]}, {"jobs": [1, 2]}) == ["jobs: [1] (stored) vs [1, 2] (this run)"]
    assert differences(a, a) == []


def test_the_name_is_not_part_of_the_match_everything_else_is():
    spec = two_jobs()
    one = pinned_spec(spec, ["a"], "solo-a").model_dump(mode="json")
    renamed = pinned_spec(spec.model_copy(update={"name": "other"}), ["a"], "x").model_dump(mode="json")
    assert one["name"] != renamed["name"] and canonical(one) == canonical(renamed)
    assert spec_sha256(one) == spec_sha256(renamed)
    assert spec_sha256(one) != spec_sha256(pinned_spec(two_jobs(seed=2), ["a"], "s").model_dump(mode="json"))


def test_find_reuses_each_jobs_matching_faithful_solo_run(tmp_path):
    spec = two_jobs()
    runs = stored_solo(tmp_path, spec)
    got = find(spec, tmp_path)
    assert got.solo == runs and got.pairs == {} and got.root == tmp_path


def test_a_changed_job_is_refused_naming_the_job_and_the_key(tmp_path):
    stored_solo(tmp_path, two_jobs())
    bigger = parse_scenario({**two_jobs().model_dump(mode="json"), "jobs": [
        {**two_jobs().jobs[0].model_dump(mode="json"), "workload": {"sizes": {"min_bytes": "512KiB",
                                                                              "max_bytes": "512KiB"}}},
        two_jobs().jobs[1].model_dump(mode="json")]})
    with pytest.raises(SoloBaselineError) as e:
        find(bigger, tmp_path)
    msg = str(e.value)
    assert "job 'a'" in msg and "job 'b'" not in msg, msg
    assert "jobs.0.workload.sizes.max_bytes: 262144 (stored) vs 524288 (this run)" in msg
    assert "jobs.0.workload.iterations: 3 (stored) vs 5 (this run)" in msg  # the default came back


@pytest.mark.parametrize("change, key", [
    ({"seed": 2}, "seed: 1 (stored) vs 2 (this run)"),
    ({"host_link_bps": "20M"}, "fabric.host_link_bps: 10000000.0 (stored) vs 20000000.0 (this run)"),
    ({"spines": 4}, "fabric.spines: 2 (stored) vs 4 (this run)"),
])
def test_a_changed_fabric_or_seed_is_refused_for_every_job(tmp_path, change, key):
    stored_solo(tmp_path, two_jobs())
    seed = change.pop("seed", 1)
    with pytest.raises(SoloBaselineError) as e:
        find(two_jobs(seed=seed, **change), tmp_path)
    assert "job 'a'" in str(e.value) and "job 'b'" in str(e.value) and key in str(e.value)


def test_other_hosts_transport_or_controller_are_named(tmp_path):
    spec = two_jobs()
    stored_solo(tmp_path, spec)
    d = spec.model_dump(mode="json")
    d["jobs"][0] = {**d["jobs"][0], "ranks": None, "placement": None, "hosts": ["h5", "h6"]}
    d["transport"]["window_pkts"] = 8
    d["controller"]["restart"] = False
    with pytest.raises(SoloBaselineError) as e:
        find(parse_scenario(d), tmp_path)
    msg = str(e.value)
    assert 'jobs.0.hosts.0: "h1" (stored) vs "h5" (this run)' in msg
    assert "transport.window_pkts: 16 (stored) vs 8 (this run)" in msg
    assert "controller.restart: true (stored) vs false (this run)" in msg


def test_only_complete_faithful_runs_are_used_the_newest_first(tmp_path):
    spec = two_jobs()
    stored_solo(tmp_path / "x", spec, faithful=False)
    with pytest.raises(SoloBaselineError, match=r"job 'a': the stored runs that match it cannot be used: .* is "
                       r"NOT faithful \(cpu idle 1 % < 5 %\)"):
        find(spec, tmp_path / "x")
    old = stored_solo(tmp_path / "y", spec)
    new = fake_run(tmp_path / "y" / "solo" / "20261202T120000Z-s-solo-a-tb0099", pinned_spec(spec, ["a"], "s"),
                   {"a": 2.0}, started="20261202T120000Z")
    assert find(spec, tmp_path / "y").solo == {"a": new, "b": old["b"]}
    (new / "INCOMPLETE").write_text("interrupted\n")
    assert find(spec, tmp_path / "y").solo["a"] == old["a"]


def test_layout_errors_name_the_folder(tmp_path):
    with pytest.raises(SoloBaselineError, match=r"no folder .*/solo; give the results root of an earlier "
                       r"'testbed run --solo'"):
        find(two_jobs(), tmp_path)
    (tmp_path / "solo").mkdir()
    with pytest.raises(SoloBaselineError, match=r"job 'a': no stored run of it under .*/solo"):
        find(two_jobs(), tmp_path)


def test_three_jobs_need_the_pair_runs_too(tmp_path):
    d = scenario(job("a", ranks=2), job("b", ranks=2), job("c", ranks=2))
    spec = parse_scenario(d)
    stored_solo(tmp_path, spec)
    with pytest.raises(SoloBaselineError) as e:
        find(spec, tmp_path)
    assert all(f"pair {p}: no stored run" in str(e.value) for p in ("'a', 'b'", "'a', 'c'", "'b', 'c'"))
    for i, pair in enumerate([("a", "b"), ("a", "c"), ("b", "c")]):
        fake_run(tmp_path / "pairs" / f"20261202T1100{i:02d}Z-p-tb01{i:02d}", pinned_spec(spec, list(pair), "p"),
                 dict.fromkeys(pair, 1.5))
    assert sorted(find(spec, tmp_path).pairs) == [("a", "b"), ("a", "c"), ("b", "c")]


def test_solo_from_runs_only_the_shared_run_and_says_where_the_solo_figures_came_from(tmp_path, capsys):
    spec = two_jobs()
    stored = stored_solo(tmp_path / "stored", spec, jct=1.0, datapath="kernel")
    calls = []

    def run_one(s, root):
        calls.append((tuple(j.name for j in s.jobs), Path(root)))
        return RunOutcome(0, fake_run(Path(root) / "20261202T130000Z-s-tb0200", s, {"a": 2.0, "b": 1.5}))

    out = run_with_solo(spec, tmp_path / "new", run_one, solo_from=tmp_path / "stored")
    assert calls == [(("a", "b"), tmp_path / "new")]  # no solo run
    block = RunDir.open(out.run_dir).summary["jobs"]
    a, b = block["jobs"]
    assert (a["jct_slowdown"], b["jct_slowdown"]) == pytest.approx((2.0, 1.5))
    assert a["solo_run_dir"] == str(stored["a"]) and a["solo_run_id"] == "tb0000" and b["solo_run_id"] == "tb0001"
    assert block["interference"]["jct_slowdown"] == [[1.0, 2.0], [1.5, 1.0]]
    src = block["solo_baseline"]
    assert src["from"] == str(tmp_path / "stored")
    assert [(r["run_id"], r["jobs"]) for r in src["runs"]] == [("tb0000", ["a"]), ("tb0001", ["b"])]
    assert src["runs"][0]["scenario_sha256"] == spec_sha256(pinned_spec(spec, ["a"], "x").model_dump(mode="json"))
    assert len(src["warnings"]) == 2 and "kernel datapath, this run on user" in src["warnings"][0]
    assert "warning: solo run tb0000" in capsys.readouterr().out
    jobs_csv = RunDir.open(out.run_dir).table("jobs")
    assert list(jobs_csv["jct_slowdown"]) == pytest.approx([2.0, 1.5])
    assert figures(RunDir.open(out.run_dir).summary)["jct_slowdown@a"] == pytest.approx(2.0)


def test_solo_from_refuses_before_running_anything(tmp_path):
    stored_solo(tmp_path, two_jobs())

    def run_one(s, root):
        raise AssertionError("nothing may run")

    with pytest.raises(SoloBaselineError, match="job 'a'"):
        run_with_solo(two_jobs(size={"min_bytes": "1MiB", "max_bytes": "1MiB"}), tmp_path / "n", run_one,
                      solo_from=tmp_path)


def test_save_keeps_the_files_solo_from_reads_in_the_same_layout(tmp_path):
    spec = two_jobs()
    runs = stored_solo(tmp_path / "r", spec)
    (runs["a"] / "ops.csv").write_text("big\n")
    (tmp_path / "r" / "20261202T130000Z-shared-tb0300").mkdir()  # the shared run: not kept
    dest = save(tmp_path / "r", tmp_path / "keep")
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == sorted(
        f"solo/{r.name}/{f}" for r in runs.values() for f in ("jobs.csv", "manifest.json", "summary.json"))
    assert find(spec, dest).solo == {n: dest / "solo" / r.name for n, r in runs.items()}
    with pytest.raises(SoloBaselineError, match="no solo runs"):
        save(tmp_path / "nothing", tmp_path / "keep2")


def test_cli_solo_and_solo_from_exclude_each_other(tmp_path):
    args = cli.build_parser().parse_args(["run", "s.yaml", "--solo-from", str(tmp_path)])
    assert args.solo_from == str(tmp_path) and not args.solo
    with pytest.raises(cli.CliError, match="not allowed with argument --solo"):
        cli.build_parser().parse_args(["run", "s.yaml", "--solo", "--solo-from", str(tmp_path)])


def _suite(tmp_path, scenario_data, **entry) -> Path:
    (tmp_path / "two.yaml").write_text(yaml.safe_dump(scenario_data))
    p = tmp_path / "suite.yaml"
    p.write_text(yaml.safe_dump({"scenarios": [{"name": "two", "scenario": "two.yaml", **entry}]}))
    return p


def test_regress_solo_entries_check_their_solo_baseline_before_any_run(tmp_path):
    from testbed.regress.command import prepare

    spec = two_jobs()
    suite = load_suite(_suite(tmp_path, spec.model_dump(mode="json"), solo=True))
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "two.json").write_text(json.dumps({"figures": {"jct_slowdown@a": 1.0}}))
    e = suite.scenarios[0]
    assert suite.solo_path(e) == (tmp_path / "baselines" / "two.solo").resolve()
    with pytest.raises(SuiteError, match=r"scenarios.two.solo: no solo baseline .*two.solo'; make it with "
                       r"--update-baseline"):
        prepare(suite, [e], update=False)
    stored_solo(suite.solo_path(e), two_jobs(seed=3))
    with pytest.raises(SuiteError, match=r"(?s)scenarios.two.solo: .*job 'a'.*seed: 3 \(stored\) vs 1 \(this run\)"):
        prepare(suite, [e], update=False)
    shutil.rmtree(suite.solo_path(e))
    stored_solo(suite.solo_path(e), spec)
    data, base = prepare(suite, [e], update=False)
    assert base["two"]["figures"] == {"jct_slowdown@a": 1.0}


def test_regress_solo_needs_a_jobs_scenario(tmp_path):
    from testbed.regress.command import prepare

    d = scenario(keep_workload=True)
    suite = load_suite(_suite(tmp_path, d, solo=True))
    with pytest.raises(SuiteError, match="scenarios.two.solo: slowdowns against solo runs need a jobs scenario"):
        prepare(suite, list(suite.scenarios), update=True)
