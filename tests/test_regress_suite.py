"""testbed regress without a fabric: suite files, overrides, baselines, judging, JUnit XML, exit codes."""
from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from testbed import cli
from testbed.process.exitcodes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_NOT_FAITHFUL, EXIT_REGRESSED
from testbed.regress import baseline as baselines
from testbed.regress.command import exit_code, judge_entry, prepare
from testbed.regress.junit import Case, write
from testbed.regress.suite import SuiteError, load_suite, parse_set, scenario_data
from testbed.spec.yaml_loader import merge
from testbed.results.figures import figures
from testbed.workloads import load_scenario
from tests.test_compare import INCAST, QUICKSTART

REPO = Path(__file__).resolve().parents[1]
MACHINE = {"cores": 2, "cpu_model": "AMD EPYC", "datapath": "user", "kernel": "6.1"}


def _suite(tmp_path, body: dict, name="s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(body))
    return p


def _entry(**kw):
    return {"name": "qs", "scenario": str(REPO / "scenarios/quickstart.yaml"), **kw}


def test_default_suite_is_valid_and_has_baselines():
    suite = load_suite(REPO / "regress/default.yaml")
    data, base = prepare(suite, list(suite.scenarios), update=False)
    assert [e.name for e in suite.scenarios] == ["allreduce_ring", "incast_dcqcn", "kflows_ecmp", "kflows_spray"]
    for e in suite.scenarios:
        assert base[e.name]["machine"]["datapath"] in ("user", "kernel")
        assert base[e.name]["figures"]["faithful"] == 1.0  # baselines come from faithful runs only
    assert data["kflows_ecmp"]["workload"]["pattern"]["trials"] == 8
    assert data["kflows_spray"]["transport"]["entropy"] == "spray"


def test_merge_is_deep_and_replaces_leaves():
    base = {"fabric": {"host_link_bps": "10M", "spines": 2}, "workload": {"sizes": {"min_bytes": 1}}}
    out = merge(base, {"fabric": {"host_link_bps": "8M"}, "workload": {"sizes": [1]}})
    assert out == {"fabric": {"host_link_bps": "8M", "spines": 2}, "workload": {"sizes": [1]}}
    assert base["fabric"]["host_link_bps"] == "10M"  # untouched


def test_overrides_reach_the_scenario_that_runs(tmp_path):
    p = _suite(tmp_path, {"overrides": {"fabric": {"datapath": "user"}},
                          "scenarios": [_entry(overrides={"fabric": {"host_link_bps": "8M"}})]})
    suite = load_suite(p, parse_set(["fabric.fabric_link_bps=8M", "seed=7"]))
    data = scenario_data(suite, suite.scenarios[0])
    out = tmp_path / "run.yaml"
    out.write_text(yaml.safe_dump(data))
    spec = load_scenario(out)
    assert spec.fabric.host_link_bps == 8e6 and spec.fabric.fabric_link_bps == 8e6
    assert spec.fabric.datapath == "user" and spec.seed == 7
    assert spec.fabric.spines == 2  # the rest from the scenario file


def test_simai_path_made_absolute(tmp_path):
    suite = load_suite(_suite(tmp_path, {"scenarios": [_entry(scenario=str(REPO / "scenarios/simai_replay.yaml"))]}))
    path = Path(scenario_data(suite, suite.scenarios[0])["workload"]["simai"]["path"])
    assert path.is_absolute() and path.is_file()


@pytest.mark.parametrize("body, msg", [
    ({"scenarios": []}, "scenarios: List should have at least 1 item"),
    ({"scenarios": [_entry(colour="red")]}, "scenarios.0.colour: Extra inputs are not permitted"),
    ({"scenarios": [_entry(), _entry()]}, "repeated: qs"),
    ({"scenarios": [_entry(figures=["busbw"])]}, "unknown figure 'busbw'"),
    ({"scenarios": [_entry(bands={"retx_pkts": "lots"})]}, "'lots' is not a number"),
    ({"scenarios": [_entry(name="a b")]}, "scenarios.0.name"),
])
def test_bad_suites_are_named(tmp_path, body, msg):
    with pytest.raises(SuiteError, match=msg.replace(".", r"\.")):
        load_suite(_suite(tmp_path, body))


def test_bad_override_names_entry_and_key(tmp_path):
    suite = load_suite(_suite(tmp_path, {"scenarios": [_entry(overrides={"fabric": {"host_link_bps": "fast"}})]}))
    with pytest.raises(SuiteError, match="(?s)suite entry 'qs'.*fabric.host_link_bps"):
        scenario_data(suite, suite.scenarios[0])
    suite = load_suite(_suite(tmp_path, {"scenarios": [_entry(scenario="nope.yaml")]}))
    with pytest.raises(SuiteError, match="scenarios.qs.scenario: no such file"):
        scenario_data(suite, suite.scenarios[0])


@pytest.mark.parametrize("item", ["fabric.datapath", "=3", "fabric..x=1"])
def test_bad_set_items(item):
    with pytest.raises(SuiteError, match="--set"):
        parse_set([item])


def test_prepare_checks_baselines_before_any_run(tmp_path):
    p = _suite(tmp_path, {"scenarios": [_entry(figures=["jain_index"])]})
    suite = load_suite(p)
    with pytest.raises(SuiteError, match="no baseline .*qs.json.*--update-baseline"):
        prepare(suite, list(suite.scenarios), update=False)
    baselines.save({"name": "qs", "figures": figures(QUICKSTART)}, tmp_path / "baselines/qs.json")
    with pytest.raises(SuiteError, match="'jain_index' matches no figure of"):
        prepare(suite, list(suite.scenarios), update=False)
    assert prepare(suite, list(suite.scenarios), update=True)[1] == {}  # updating needs none


def test_cli_regress_bad_input_exits_2_before_running(tmp_path, capsys):
    p = _suite(tmp_path, {"scenarios": [_entry()]})
    assert cli.main(["regress", str(p)]) == EXIT_BAD_INPUT
    assert "no baseline" in capsys.readouterr().err
    assert cli.main(["regress", str(p), "--only", "other"]) == EXIT_BAD_INPUT
    assert "--only: no entry other in the suite; entries: qs" in capsys.readouterr().err
    assert cli.main(["regress", str(tmp_path / "none.yaml")]) == EXIT_BAD_INPUT
    assert not (tmp_path / "results").exists()


def _judge(summary, base_summary=QUICKSTART, **entry):
    suite = load_suite(_suite(Path(entry.pop("tmp")), {"scenarios": [_entry(**entry)]}))
    base = {"name": "qs", "made_utc": "20261201T000000Z", "run_id": "tb0000", "machine": MACHINE,
            "figures": figures(base_summary)}
    return judge_entry(suite.scenarios[0], base, {**summary, "run_dir": "/r"}, MACHINE)


def test_judge_passes_the_same_figures(tmp_path):
    case = _judge(QUICKSTART, tmp=tmp_path)
    assert case.passed and "0 REGRESSED" in case.details and "warning" not in case.details


def test_judge_names_figure_value_baseline_and_band(tmp_path):
    slow = copy.deepcopy(QUICKSTART)
    slow["sizes"][0]["busbw_bps"] = 7.9e6
    case = _judge(slow, tmp=tmp_path, figures=["busbw_bps", "retx_pkts"])
    assert case.failures == ["busbw_bps@64KiB: measured 7.9e+06, baseline 9.8318e+06, band ±3% "
                             "(higher is better): REGRESSED"]
    assert _judge(slow, tmp=tmp_path, figures=["busbw_bps"], bands={"busbw_bps": "25%"}).passed
    assert _judge(slow, tmp=tmp_path, figures=["busbw_ratio"]).passed  # not checked: not judged


def test_judge_fails_unfaithful_and_missing_figures(tmp_path):
    bad = {**QUICKSTART, "faithful": False, "violations": ["CPU saturated: idle < 5% in 9 of 20 s"], "fit": None}
    case = _judge(bad, tmp=tmp_path)
    assert "run NOT faithful: CPU saturated: idle < 5% in 9 of 20 s" in case.failures
    assert any(f.startswith("fit_b_ratio@allreduce-ring-n8: missing from the run (baseline 1.0035)")
               for f in case.failures)
    other = _judge(INCAST, base_summary=INCAST, tmp=tmp_path)
    assert other.passed


def test_machine_class_mismatch_is_a_warning(tmp_path):
    base = {"name": "qs", "machine": MACHINE, "figures": figures(QUICKSTART)}
    assert baselines.machine_mismatch(base, MACHINE) is None
    assert baselines.machine_mismatch(base, {**MACHINE, "kernel": "other"}) is None  # kernel not in the class
    vm = {**MACHINE, "datapath": "kernel", "cores": 4}
    msg = baselines.machine_mismatch(base, vm)
    assert "cores 2 (baseline) vs 4" in msg and "datapath 'user' (baseline) vs 'kernel'" in msg


def test_exit_codes_of_a_suite():
    ok, regressed = Case("a"), Case("b", failures=["busbw_bps@1MiB: ... REGRESSED"])
    unfaithful, failed = Case("c", failures=["run NOT faithful: x"]), Case("d", error="run failed (exit 4)")
    assert exit_code([ok], [0]) == 0
    assert exit_code([ok, unfaithful], [0, 3]) == EXIT_NOT_FAITHFUL
    assert exit_code([ok, unfaithful, regressed], [0, 3, 0]) == EXIT_REGRESSED
    assert exit_code([regressed, failed], [0, 4]) == EXIT_FAILED


def test_junit_xml(tmp_path):
    cases = [Case("a", 12.5, details="table"), Case("b", 3.0, failures=["x: REGRESSED", "y: REGRESSED"]),
             Case("c", 1.0, error="run failed (exit 4)")]
    root = ET.parse(write(tmp_path / "j/junit.xml", "default", cases)).getroot()
    ts = root.find("testsuite")
    assert (ts.get("tests"), ts.get("failures"), ts.get("errors"), ts.get("time")) == ("3", "1", "1", "16.500")
    tcs = {tc.get("name"): tc for tc in ts.findall("testcase")}
    assert tcs["a"].find("failure") is None and tcs["a"].find("system-out").text == "table"
    assert tcs["b"].find("failure").get("message") == "x: REGRESSED; y: REGRESSED"
    assert tcs["c"].find("error").get("message") == "run failed (exit 4)"
    assert tcs["a"].get("classname") == "regress.default"


def test_baseline_round_trip(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"started_utc": "20261201T061330Z", "backends": {"datapath": "user"},
                                                   "versions": {"git_commit": "abc"}}))
    b = baselines.make("qs", "../../scenarios/quickstart.yaml", {"suite": {}, "entry": {}},
                       {**QUICKSTART, "run_id": "tb1234"}, run)
    assert b["machine"]["datapath"] == "user" and b["machine"]["cores"] >= 1 and b["run_id"] == "tb1234"
    assert baselines.load(baselines.save(b, tmp_path / "b/qs.json")) == b
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="not a baseline"):
        baselines.load(tmp_path / "x.json")
