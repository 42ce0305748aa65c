"""``testbed run --solo`` and the runs its slowdowns rest on (issue 31 item 2): a solo run the machine disturbed
(only pacing checks failed) runs once more; one that still cannot be a baseline (the rule ``--solo-from`` uses:
testbed.workloads.jobs.solo_store.unusable) is kept but marked (warnings, ``*``) and the exit code is its
verdict's; the markers and the estimate of every run printed before and as each starts; a jobs run's printed
size table has a job column under a header that fits.

No fabric: the run function hands the solo code run directories as the runner leaves them
(test_solo_store.fake_run), each with a verdict the product's own fidelity checks made
(testbed.measure.verdict: 3 spurious retransmissions, a saturated CPU)."""
import itertools
import json
from pathlib import Path

import pandas as pd
import pytest

from test_solo_store import fake_run, two_jobs
from testbed.measure import fidelity_checks
from testbed.measure.thresholds import FidelityThresholds
from testbed.measure.verdict import CHECKS, FidelityVerdict
from testbed.pipeline.runner import RunOutcome
from testbed.process.exitcodes import EXIT_FAITHFUL, EXIT_NOT_FAITHFUL, exit_code
from testbed.results.rundir import RunDir
from testbed.spec.estimate import format_duration
from testbed.workloads.jobs.results import format_jobs
from testbed.workloads.jobs.solo import run_with_solo

FAITHFUL, SPURIOUS, CPU = "faithful", "spurious", "cpu"
SOLO_JCT_S, SHARED_JCT_S = {"a": 1.0, "b": 1.0}, {"a": 1.98, "b": 0.99}


def verdict_of(kind: str) -> dict:
    """summary.json's verdict keys as testbed.measure.verdict makes them: every check passed but, for SPURIOUS,
    spurious_retx (the real check on 3 spurious of 5 retransmitted packets) or, for CPU, cpu (the real check on
    10 one-second samples at 1 % idle on both cores: only a pacing check fails)."""
    th = FidelityThresholds()
    v = FidelityVerdict(faithful=True, violations=[], figures={})
    idle = 1.0 if kind == CPU else 60.0
    cpu = pd.DataFrame({"time_ns": [k * 10**9 for k in range(10)], "idle_pct": [idle] * 10,
                        "cpu0_idle_pct": [idle] * 10, "cpu1_idle_pct": [idle] * 10})
    for name in CHECKS:
        chk = fidelity_checks.Check()
        if name == "spurious_retx":
            n = 3 if kind == SPURIOUS else 0
            fidelity_checks.check_spurious({"spurious_retx_pkts": n, "retx_pkts": n + 2}, th, chk)
        elif name == "cpu":
            fidelity_checks.check_cpu(cpu, th, chk)
        v.add(name, *chk.outcome())
    return {"faithful": v.faithful, "verdict": v.status, "violations": v.violations, "not_judged": v.not_judged,
            "checks": v.checks}


def runs(plan: dict):
    """A run function: for each call, the run directory of the next verdict kind ``plan`` lists for the jobs
    tuple it runs (a solo run: SOLO_JCT_S; the shared run: SHARED_JCT_S); and the list of its calls."""
    plan = {k: list(v) for k, v in plan.items()}
    calls = []

    def run_one(spec, root):
        names = tuple(j.name for j in spec.jobs)
        calls.append(names)
        jct = {n: (SOLO_JCT_S if len(names) == 1 else SHARED_JCT_S)[n] for n in names}
        d = fake_run(Path(root) / f"20261208T0100{len(calls):02d}Z-s-{'-'.join(names)}-tb01{len(calls):02d}", spec,
                     jct)
        s = json.loads((d / "summary.json").read_text())
        s.update(verdict_of(plan[names].pop(0)))
        (d / "summary.json").write_text(json.dumps(s))
        return RunOutcome(exit_code(s), d)
    return run_one, calls


ALL_FAITHFUL = {("a",): [FAITHFUL], ("b",): [FAITHFUL], ("a", "b"): [FAITHFUL]}


def test_a_solo_run_with_spurious_retransmissions_marks_its_slowdowns_and_exits_not_faithful(tmp_path, capsys):
    run_one, calls = runs({**ALL_FAITHFUL, ("a",): [SPURIOUS]})
    out = run_with_solo(two_jobs(), tmp_path, run_one)
    printed = capsys.readouterr()
    print(printed.out, printed.err)
    assert out.exit_code == EXIT_NOT_FAITHFUL  # the shared run itself was faithful (exit 0)
    assert calls == [("a",), ("b",), ("a", "b")]  # spurious retransmissions: no second solo run
    block = RunDir.open(out.run_dir).summary["jobs"]
    a, b = block["jobs"]
    (warning,) = block["solo_baseline"]["warnings"]
    assert warning == ("solo run tb0101 (a) is NOT faithful (3 spurious retransmissions (duplicates at the "
                       "responders that no lost packet explains; 5 retransmissions in all; allowed 0: "
                       "fidelity.max_spurious_retx_pkts): a retransmission timer fired before an ACK that was on "
                       "its way): the slowdowns marked * rest on it")
    assert [r["problem"] is None for r in block["solo_baseline"]["runs"]] == [False, True]
    assert a["solo_faithful"] is False and b["solo_faithful"] is True and block["solo_baseline"]["reruns"] == []
    assert (a["jct_slowdown"], b["jct_slowdown"]) == pytest.approx((1.98, 0.99))
    table = printed.out[printed.out.index("jobs:"):].splitlines()
    row_a = next(x for x in table if x.startswith("a "))
    row_b = next(x for x in table if x.startswith("b "))
    assert row_a.endswith(" 1.98*") and row_b.endswith(" 0.99")
    assert any(x.startswith("* rests on a solo or pair run that is NOT faithful") for x in table)
    matrix = table[table.index(next(x for x in table if x.startswith("interference matrix"))) + 2:][:2]
    assert matrix == ["a              1.00      1.98*", "b              0.99      1.00"]
    assert f"testbed: warning: {warning}" in printed.out
    assert "testbed: exit code 3: a solo or pair run the slowdowns rest on is NOT faithful" in printed.err


def test_a_solo_run_the_machine_disturbed_runs_once_more_and_the_second_is_used(tmp_path, capsys):
    run_one, calls = runs({**ALL_FAITHFUL, ("a",): [CPU, FAITHFUL]})
    out = run_with_solo(two_jobs(), tmp_path, run_one)
    err = capsys.readouterr().err
    assert calls == [("a",), ("a",), ("b",), ("a", "b")]
    assert out.exit_code == EXIT_FAITHFUL
    block = RunDir.open(out.run_dir).summary["jobs"]
    (rerun,) = block["solo_baseline"]["reruns"]
    assert rerun["run_id"] == "tb0101" and rerun["jobs"] == ["a"] and set(rerun["disturbed"]) == {"cpu"}
    a = block["jobs"][0]
    assert a["solo_run_id"] == "tb0102" and a["solo_faithful"] is True
    assert block["solo_baseline"]["warnings"] == []
    assert ("testbed: solo 1 of 2 (run 1 of 3) again: its verdict says the machine disturbed it (cpu: CPU "
            "saturated") in err


def test_a_solo_run_disturbed_twice_runs_no_third_time_and_is_marked(tmp_path):
    run_one, calls = runs({**ALL_FAITHFUL, ("a",): [CPU, CPU]})
    out = run_with_solo(two_jobs(), tmp_path, run_one)
    assert calls == [("a",), ("a",), ("b",), ("a", "b")]
    assert out.exit_code == EXIT_NOT_FAITHFUL
    block = RunDir.open(out.run_dir).summary["jobs"]
    assert [r["run_id"] for r in block["solo_baseline"]["reruns"]] == ["tb0101"]
    (warning,) = block["solo_baseline"]["warnings"]
    assert warning.startswith("solo run tb0102 (a) is NOT faithful (CPU saturated")


def test_an_unfaithful_shared_run_keeps_its_own_exit_code_and_faithful_runs_exit_0(tmp_path):
    run_one, _ = runs(ALL_FAITHFUL)
    assert run_with_solo(two_jobs(), tmp_path / "ok", run_one).exit_code == EXIT_FAITHFUL
    run_one, _ = runs({**ALL_FAITHFUL, ("a", "b"): [SPURIOUS]})
    out = run_with_solo(two_jobs(), tmp_path / "shared", run_one)
    assert out.exit_code == EXIT_NOT_FAITHFUL
    assert RunDir.open(out.run_dir).summary["jobs"]["solo_baseline"]["warnings"] == []


def test_markers_and_the_estimate_of_every_run(tmp_path, capsys):
    from testbed.workloads.jobs.plan import pinned_spec
    from testbed.workloads.jobs.solo import estimated_run_s

    spec = two_jobs()
    run_one, _ = runs(ALL_FAITHFUL)
    run_with_solo(spec, tmp_path, run_one)
    err = capsys.readouterr().err.splitlines()
    solo = {n: pinned_spec(spec, [n], f"solo-{n}") for n in "ab"}
    total_s = sum(estimated_run_s(s) for s in (solo["a"], solo["b"], spec))
    assert total_s > 2 * estimated_run_s(spec)  # every run counted, not only the shared one
    assert err[0] == (f"testbed: --solo: 3 runs (2 solo, the shared run), estimated duration "
                      f"{format_duration(total_s)} in all")
    hosts = {n: ", ".join(solo[n].jobs[0].hosts) for n in "ab"}
    assert err[1:] == [f"testbed: solo 1 of 2 (run 1 of 3): job a alone on {hosts['a']}",
                       f"testbed: solo 2 of 2 (run 2 of 3): job b alone on {hosts['b']}",
                       "testbed: shared run (run 3 of 3): jobs a, b together"]

    run_one, _ = runs(ALL_FAITHFUL)
    run_with_solo(spec, tmp_path / "quiet", run_one, quiet=True)
    assert capsys.readouterr().err == ""


def test_the_estimate_of_a_run_is_the_one_the_runner_prints(tmp_path, capsys):
    from testbed.pipeline.runner import _validate
    from testbed.workloads.jobs.solo import estimated_run_s

    spec = two_jobs()
    _validate(spec, tmp_path, False, None)
    assert f"testbed: estimated duration {format_duration(estimated_run_s(spec))} (" in capsys.readouterr().err


def test_three_jobs_count_the_pair_runs(tmp_path, capsys):
    from test_jobs import _fake_run, job, scenario
    from testbed.spec.scenario import parse_scenario
    from testbed.workloads.jobs.results import JOBS_COLUMNS

    spec = parse_scenario(scenario(job("a", ranks=2), job("b", ranks=2), job("c", ranks=2)))

    def run_one(s, root):
        names = [j.name for j in s.jobs]
        entries = [{"name": n, "tenant": "t", "hosts": ["h1"], "timed_ops": 1, "busbw_ratio": 1.0, "jct_s": 1.0,
                    "placement": "explicit", "fair_busbw_ratio": 1.0} for n in names]
        d = _fake_run(Path(root) / "-".join(names), entries,
                      [{**{c: 0 for c in JOBS_COLUMNS}, "job": n, "size_bytes": 1, "busbw_ratio": 1.0, "jct_s": 1.0}
                       for n in names])
        return RunOutcome(0, d)

    run_with_solo(spec, tmp_path, run_one)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("testbed: --solo: 7 runs (3 solo, 3 pair, the shared run), estimated duration ")
    assert [x.split(":")[1].strip() for x in err[1:]] == [
        "solo 1 of 3 (run 1 of 7)", "solo 2 of 3 (run 2 of 7)", "solo 3 of 3 (run 3 of 7)",
        "pair 1 of 3 (run 4 of 7)", "pair 2 of 3 (run 5 of 7)", "pair 3 of 3 (run 6 of 7)", "shared run (run 7 of 7)"]
    assert err[4].endswith("jobs a and b alone") and err[7] == "testbed: shared run (run 7 of 7): jobs a, b, c together"


def test_matrix_cells_resting_on_an_unfaithful_pair_run_are_marked():
    names = ["a", "b", "c"]
    block = {"jobs": [{"name": n, "tenant": "t", "hosts": ["h1"], "placement": "packed", "timed_ops": 1,
                       "busbw_ratio": 0.5, "fair_busbw_ratio": 1.0, "jct_s": 2.0, "solo_busbw_ratio": 1.0,
                       "solo_jct_s": 1.0, "jct_slowdown": 2.0} for n in names],
             "interference": {"jobs": names, "method": "m", "pair_run_dirs": {"a,b": "x", "a,c": "y", "b,c": "z"},
                              "jct_slowdown": [[1.0, 1.5, 1.0], [1.2, 1.0, 1.1], [1.0, 2.0, 1.0]]},
             "solo_baseline": {"runs": [{"jobs": list(g), "problem": "NOT faithful (x)" if g == ("b", "c") else None}
                                        for g in [*((n,) for n in names), *itertools.combinations(names, 2)]]}}
    lines = format_jobs(block).splitlines()
    head = lines.index(next(x for x in lines if x.startswith("interference matrix")))
    header, rows = lines[head + 1], lines[head + 2:head + 5]
    assert rows == ["a              1.00      1.50      1.00",
                    "b              1.20      1.00      1.10*",
                    "c              1.00      2.00*     1.00"]
    for label, col in zip(names, range(3)):  # each label ends where its column's figures end
        assert header.index(label) == rows[0].index(("1.00", "1.50", "1.00")[col], 10 * (col + 1)) + 3


def _jobs_ops(long_name: str):
    """ops.csv of a jobs run (testbed.results.tables.ops_table): job ``a`` and job ``long_name``, 2 ranks each,
    256 KiB all-reduces, one warm-up and two timed ops each; a's take 0.2 s, the other's 0.4 s."""
    from testbed.results.tables import ops_table

    rows, meta = [], {}
    for k, (job, t_s) in enumerate([("a", 0.2)] * 3 + [(long_name, 0.4)] * 3):
        meta[k] = {"size_bytes": 262144, "iteration": k % 3, "warmup": k % 3 == 0, "job": job, "group_size": 2,
                   "group": job}
        t0 = 10**18 + k * 10**9
        rows += [{"op_id": k, "rank": r, "t_start_ns": t0, "t_end_ns": t0 + int(t_s * 1e9), "group_size": 2}
                 for r in ((0, 1) if job == "a" else (2, 3))]
    return ops_table(rows, meta, 4)


def _fits(header: str, rows: list[str], labels: list[str]) -> None:
    """Each label of ``header`` ends where each row's cell under it ends (right-aligned columns)."""
    for label in labels:
        end = header.index(label) + len(label)
        for row in rows:
            assert row[end - 1] != " " and (end == len(row) or row[end] == " "), (label, header, row)


def test_a_jobs_runs_size_table_has_a_job_column_under_a_header_that_fits():
    from testbed.results.tables import format_size_table, job_size_table, size_table

    long_name = "job_with_a_long_name"
    ops = _jobs_ops(long_name)
    assert len(size_table(ops, 4, 1e7)) == 1  # sizes.csv: both jobs in one row
    table = job_size_table(ops, 4, 1e7)
    assert list(table["job"]) == ["a", long_name]
    assert list(table["time_us"]) == pytest.approx([200_000, 400_000]) and list(table["count"]) == [2, 2]
    header, *rows = format_size_table(table).splitlines()
    assert header.startswith("job ") and [r.split()[0] for r in rows] == ["a", long_name]
    width = len(long_name) + 1
    assert header[width:].startswith("      size") and all(r[width:].startswith("   256 KiB") for r in rows)
    _fits(header, rows, ["size", "ranks", "time(us)", "algbw(Mb/s)", "busbw(Mb/s)", "busbw/link", "avg(us)",
                         "avg busbw", " n", "p50(us)", "p99(us)", "p99.9(us)"])


def test_the_printed_table_of_a_jobs_run_is_per_job_other_runs_print_sizes_csv(tmp_path):
    from types import SimpleNamespace

    from testbed.pipeline.printing import _printed_sizes
    from testbed.results.tables import size_table

    ops = _jobs_ops("b")
    sizes = size_table(ops, 4, 1e7)
    RunDir(tmp_path).write_table("ops", ops)
    ctx = SimpleNamespace(run_dir=tmp_path, n_ranks=4, goodput_bps=1e7)
    assert list(_printed_sizes(ctx, sizes)["job"]) == ["a", "b"]
    plain = tmp_path / "plain"
    plain.mkdir()
    RunDir(plain).write_table("ops", ops.drop(columns=["job"]))
    assert _printed_sizes(SimpleNamespace(run_dir=plain, n_ranks=4, goodput_bps=1e7), sizes) is sizes


def test_real_solo_runs_one_with_spurious_retransmissions_under_a_faithful_shared_run(tmp_path, capsys):
    """The issue's case with real solo runs (tests/data/solo_baseline): job a's NOT faithful on spurious
    retransmissions, job b's faithful; the shared run faithful. Before: slowdowns printed unmarked, no warning,
    exit 0."""
    import shutil

    from testbed.workloads import load_scenario

    data = Path(__file__).resolve().parent / "data" / "solo_baseline"
    given = {("a",): data / "spurious-solo-a", ("b",): data / "faithful-solo-b"}
    shared_run, _ = runs(ALL_FAITHFUL)

    def run_one(spec, root):
        names = tuple(j.name for j in spec.jobs)
        if names not in given:
            return shared_run(spec, root)
        d = Path(root) / given[names].name
        shutil.copytree(given[names], d)
        return RunOutcome(exit_code(RunDir.open(d).summary), d)

    solo_a = RunDir.open(given[("a",)]).summary
    assert solo_a["checks"]["spurious_retx"]["status"] == "failed" and solo_a["transport"]["spurious_retx_pkts"] == 38
    out = run_with_solo(load_scenario(data / "scenario.yaml"), tmp_path, run_one)
    printed = capsys.readouterr().out
    assert out.exit_code == EXIT_NOT_FAITHFUL
    block = RunDir.open(out.run_dir).summary["jobs"]
    (warning,) = block["solo_baseline"]["warnings"]
    assert warning.startswith("solo run tbe5b3 (a) is NOT faithful (38 spurious retransmissions")
    a, b = block["jobs"]
    assert a["jct_slowdown"] == pytest.approx(SHARED_JCT_S["a"] / solo_a["jobs"]["jobs"][0]["jct_s"])
    assert any(x.startswith("a ") and x.endswith(f" {a['jct_slowdown']:.2f}*") for x in printed.splitlines())
    assert b["solo_faithful"] is True and not any(x.startswith("b ") and x.endswith("*") for x in printed.splitlines())
