"""The scripting API (testbed.api; ``from testbed import Scenario, run, sweep``) without a fabric: building,
changing and validating scenarios, errors before anything is built, results of a run directory."""
import json
import os
from pathlib import Path

import pandas as pd
import pytest

import testbed
from testbed import RunResult, Scenario, run, shipped, sweep
from testbed.results import TableError, tables
from testbed.results.rundir import RunDir
from testbed.spec.scenario import ScenarioError
from testbed.workloads import load_scenario

REPO = Path(__file__).resolve().parents[1]


def test_from_yaml_by_shipped_name_or_path_is_the_cli_spec():
    by_name = Scenario.from_yaml("quickstart")
    by_path = Scenario.from_yaml(REPO / "scenarios" / "quickstart.yaml")
    assert by_name.spec == by_path.spec == load_scenario(REPO / "scenarios" / "quickstart.yaml")
    assert by_name.name == "quickstart" and by_name.path == REPO / "scenarios" / "quickstart.yaml"
    assert "quickstart" in shipped() and "incast_both" in shipped()
    with pytest.raises(FileNotFoundError, match="no scenario file 'nosuch'; shipped: .*quickstart"):
        Scenario.from_yaml("nosuch")


def test_with_sets_dotted_keys_on_a_copy():
    base = Scenario.from_yaml("quickstart")
    fast = base.with_({"fabric.host_link_bps": "20M"}, workload__iterations=2)
    assert fast.get("fabric.host_link_bps") == 20e6 and fast.get("workload.iterations") == 2
    assert base.get("fabric.host_link_bps") == 10e6 and base.get("workload.iterations") == 5
    assert "fabric.host_link_bps, workload.iterations" in fast.source and fast.path is None
    # mappings on the way are made: congestion is absent from the quickstart
    ecn = base.with_({"fabric.queue_backend": "htb_classes", "congestion.ecn.kmin_pkts": 5,
                      "congestion.ecn.kmax_pkts": 20, "congestion.ecn.pmax": 0.2})
    assert ecn.spec.congestion.ecn is not None and base.data.get("congestion") is None
    with pytest.raises(KeyError, match="no key 'nope'"):
        base.get("fabric.nope")


def test_errors_are_the_cli_errors(tmp_path):
    base = Scenario.from_yaml("quickstart")
    with pytest.raises(ScenarioError) as api_err:
        base.with_({"fabric.host_link_bsp": "20M", "workload.iterations": -1})
    bad = base.data
    bad["fabric"]["host_link_bsp"] = "20M"
    bad["workload"]["iterations"] = -1
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(bad))  # JSON is YAML
    with pytest.raises(ScenarioError) as file_err:
        load_scenario(path)
    lines = str(api_err.value).splitlines()[1:]
    assert lines == str(file_err.value).splitlines()[1:] and len(lines) == 2
    assert "fabric.host_link_bsp: unknown key (did you mean host_link_bps?); allowed keys here:" in lines[0]
    with pytest.raises(ScenarioError, match="fabric.spines.x: fabric.spines is 2, not a mapping"):
        base.with_({"fabric.spines.x": 1})
    with pytest.raises(ScenarioError, match="top level must be a mapping"):
        Scenario.from_dict([1, 2])


def test_sweep_validates_every_value_before_the_first_run():
    base = Scenario.from_yaml("quickstart")
    with pytest.raises(ScenarioError, match="fabric.host_link_bps"):
        next(sweep(base, ("fabric.host_link_bps", "fabric.fabric_link_bps"), ["10M", "fast"]))


def test_each_run_of_a_sweep_is_named_for_its_value(monkeypatch):
    import testbed.api as api
    from testbed.api import sweep_name

    ran = []
    monkeypatch.setattr(api, "run", lambda s, **kw: ran.append(s.name) or s.name)
    base = Scenario.from_yaml("quickstart")
    got = [(v, name) for v, name in sweep(base, "fabric.host_link_bps", ["5M", "20M"])]
    assert got == [("5M", "quickstart-5M"), ("20M", "quickstart-20M")] and ran == ["quickstart-5M", "quickstart-20M"]
    assert sweep_name("quickstart", 1.5e7) == "quickstart-15000000.0"
    assert sweep_name("x" * 64, "a b/c") == "x" * 58 + "-a_b_c" and len(sweep_name("x" * 64, "v" * 80)) <= 64


def test_run_needs_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(PermissionError, match="needs root"):
        run(Scenario.from_yaml("quickstart"))


def test_estimate_is_the_printed_one():
    from testbed.workloads import plan_workload
    from testbed.spec import estimate

    s = Scenario.from_yaml("quickstart")
    f = s.spec.fabric
    assert s.estimate_s() == estimate.estimate_run_s(plan_workload(s.spec).ops, f.n_hosts, f.host_link_bps,
                                                     f.fabric_link_bps, f.ranks_per_switch,
                                                     s.spec.transport.payload_bytes, estimate.setup_s(f))
    assert s.with_({"fabric.host_link_bps": "20M", "fabric.fabric_link_bps": "20M"}).estimate_s() < s.estimate_s()


def test_simai_path_is_kept_absolute(tmp_path, monkeypatch):
    s = Scenario.from_yaml("simai_replay")
    monkeypatch.chdir(tmp_path)
    moved = s.with_({"seed": 2})
    assert Path(moved.spec.workload.simai.path).is_absolute() and Path(moved.spec.workload.simai.path).is_file()


def test_run_result_reads_its_run_directory(tmp_path):
    d = tmp_path / "20261201T000000Z-quickstart-tb0002"
    d.mkdir()
    (d / "manifest.json").write_text("{}")
    (d / "summary.json").write_text(json.dumps({"faithful": False, "complete": True}))
    rows = [{"op_id": 0, "rank": r, "group_index": 0, "group_size": 2, "t_start_ns": 0, "t_end_ns": 10**9,
             "sent_bytes": 1, "rx_msgs": 1, "t_rx_done_ns": 1} for r in range(2)]
    tables.write_tables(RunDir(d), 2, 1e7, rows, {0: {"size_bytes": 1 << 20, "iteration": 0, "warmup": False}}, [], None, None)
    r = RunResult(Scenario.from_yaml("quickstart"), 3, d)
    assert r.verdict == "NOT faithful" and not r.ok and r.faithful is False
    assert r.sizes.busbw_bps.iloc[0] == pytest.approx((1 << 20) * 8)
    assert isinstance(r.tables["ops"], pd.DataFrame)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        r.nope
    none = RunResult(Scenario.from_yaml("quickstart"), 2, None)
    assert none.verdict == "bad input" and none.summary == {}
    with pytest.raises(TableError, match="made no run directory"):
        none.sizes


def test_package_exports():
    assert testbed.Scenario is Scenario and testbed.run is run
    with pytest.raises(AttributeError):
        testbed.nope


@pytest.mark.skipif(os.geteuid() != 0, reason="run() checks root first")
def test_run_refuses_bad_input_as_the_cli_before_building(tmp_path):
    from testbed.spec.estimate import DurationError

    s = Scenario.from_yaml("quickstart")
    with pytest.raises(DurationError, match="max"):
        run(s, results=tmp_path, max_duration_s=5)
    (tmp_path / "file").write_text("")
    with pytest.raises(ScenarioError, match="--results .*file"):
        run(s, results=tmp_path / "file" / "sub")
    assert list(tmp_path.iterdir()) == [tmp_path / "file"]  # no run directory was made
