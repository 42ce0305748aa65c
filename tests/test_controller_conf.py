"""The controller's settings file and framework choice (testbed.emulation.controller_proc), no fabric."""
from __future__ import annotations

import configparser

import pytest

from controllers import contract
from testbed.pipeline import runner
from testbed.emulation import controller_proc as C
from testbed.spec.scenario import ScenarioError, parse_scenario

RID = "tb9c02"
BASE = {"workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}}


@pytest.fixture
def no_ryu(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "RYU_VENV", tmp_path / "no-venv-ryu")
    C.framework_version.cache_clear()
    yield
    C.framework_version.cache_clear()


def _settings(tmp_path, **scenario):
    return C.controller_settings(parse_scenario({**BASE, **scenario}), RID, tmp_path)


def test_conf_file_names_the_settings_file_that_holds_every_setting(tmp_path):
    proc = C.ControllerProcess(tmp_path, _settings(tmp_path), port=40123)
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(tmp_path / "controller.conf")
    assert dict(ini["testbed"]) == {"settings_file": str(tmp_path / "controller.settings.json"),
                                    **ini["DEFAULT"]}
    assert (ini["DEFAULT"]["ofp_listen_host"], ini["DEFAULT"]["ofp_tcp_listen_port"]) == ("127.0.0.1", "40123")
    assert ini["DEFAULT"]["log_file"] == str(tmp_path / "controller.log")
    settings = contract.read_json(tmp_path / "controller.settings.json", contract.ControllerSettings)
    assert settings == proc.settings
    assert (settings.run_id, settings.topology_file, settings.ready_file, settings.load_balance.policy) == (
        RID, str(tmp_path / "topology.json"), str(tmp_path / "controller.ready"), "ecmp")
    assert settings.loop_settings_file is None and settings.events_file == str(tmp_path / "controller.events.jsonl")


def test_os_ken_command_keeps_the_run_id_visible(tmp_path):
    argv, env = C.ControllerProcess(tmp_path, _settings(tmp_path), port=40123).command()
    assert argv[1:] == ["-m", "controllers.run", "--config-file", str(tmp_path / "controller.conf"),
                        "--testbed-run-id", RID]
    assert env is None


def test_ryu_command_runs_the_same_app_under_ryu_manager(tmp_path, monkeypatch):
    fake = tmp_path / "venv"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "ryu-manager").touch()
    monkeypatch.setattr(C, "RYU_VENV", fake)
    argv, env = C.ControllerProcess(tmp_path, _settings(tmp_path), port=40123, framework="ryu").command()
    assert argv == [str(fake / "bin" / "ryu-manager"), "--user-flags", str(C.REPO / "controllers" / "flags.py"),
                    "--config-file", str(tmp_path / "controller.conf"), "--testbed-run-id", RID, "controllers.app"]
    assert env["PYTHONPATH"] == str(C.REPO)


def test_unknown_framework_is_refused(tmp_path):
    with pytest.raises(C.ControllerError, match="controller.framework: 'pox'; allowed: os_ken, ryu"):
        C.ControllerProcess(tmp_path, _settings(tmp_path), framework="pox")


def test_preflight_records_framework_and_version():
    info = C.preflight(parse_scenario(BASE))
    assert info["framework"] == "os_ken" and info["framework_version"].count(".") >= 1
    assert (info["lb_policy"], info["conf_file"]) == ("ecmp", "controller.conf")


def test_ryu_without_its_environment_is_refused_before_anything_is_built(tmp_path, monkeypatch, no_ryu):
    spec = parse_scenario({**BASE, "controller": {"framework": "ryu"}})
    with pytest.raises(ScenarioError, match=r"controller\.framework: 'ryu' needs .*no-venv-ryu.*pyenv install 3\.9\.18"):
        C.preflight(spec)

    def no_probe(*a, **k):
        raise AssertionError("the run probed the kernel before refusing")

    monkeypatch.setattr(runner.capabilities, "probe", no_probe)
    with pytest.raises(ScenarioError, match="controller.framework"):
        runner.run_scenario(spec, None, tmp_path / "results", quiet=True)
    assert not (tmp_path / "results").exists()


PY39_CHECK = """
from controllers import app, contract, flags, lb, ofmsg, ofplan
from controllers.ryu_api import FRAMEWORK, FRAMEWORK_VERSION
moved = contract.parse_event('{"event": "rerouted", "seq": 1, "switches": 2, "dead_links": [["l1", "s1"]], '
                             '"time_ns": 5}')
assert moved == contract.Rerouted(seq=1, switches=2, dead_links=[["l1", "s1"]], time_ns=5), moved
from topology import build, routing, spine_leaf
layout = spine_leaf.build("tb9c02", spines=2, leaves=3, hosts_per_leaf=2)
plans = ofplan.plan_fabric(layout, "ecmp")
print(FRAMEWORK, FRAMEWORK_VERSION, len(plans), sum(len(p.flows) for p in plans.values()))
"""


@pytest.mark.skipif(not (C.RYU_VENV / "bin" / "python").exists(), reason=f"no {C.RYU_VENV}: {C.RYU_HOWTO}")
def test_app_and_topology_run_on_python39_under_ryu():
    """controllers/ and topology/ must run on Ryu's Python 3.9 (no ``X | Y`` at run time, no ``match``)."""
    import subprocess

    from controllers.ofplan import plan_fabric
    from topology import spine_leaf

    res = subprocess.run([str(C.RYU_VENV / "bin" / "python"), "-W", "ignore", "-c", PY39_CHECK],
                         env={"PYTHONPATH": str(C.REPO)}, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    plans = plan_fabric(spine_leaf.build("tb9c02", spines=2, leaves=3, hosts_per_leaf=2))
    assert res.stdout.split() == ["ryu", "4.34", str(len(plans)), str(sum(len(p.flows) for p in plans.values()))]
