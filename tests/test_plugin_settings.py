"""Plugins declare their own settings (traffic.registry.setting): the scenario's keys are validated against
the plugin's ``Settings`` (testbed.spec.plugins) and the plugin receives an instance. No root."""
from dataclasses import dataclass

import pytest

from dataplane import queues
from testbed.emulation.agents import transport_params
from dataplane.queues.htb_bfifo import HtbBfifo
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.spec.transport import congestion_control_manifest
from traffic import protocol
from traffic.registry import setting
from traffic.transport.cc import CONGESTION_CONTROLS, CongestionControl, for_transport, register

WORKLOAD = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}


@dataclass(frozen=True)
class PaceSettings:
    share: float = setting(1.0, gt=0, le=1)
    floor_bps: float = setting(1e6, gt=0)


class Pace(CongestionControl):
    name = "pace_test"
    Settings = PaceSettings


@pytest.fixture
def pace(monkeypatch):
    monkeypatch.setattr("traffic.transport.cc.CONGESTION_CONTROLS", dict(CONGESTION_CONTROLS))
    register(Pace)
    return Pace


def test_a_registered_control_takes_its_block_and_its_qps_receive_the_settings(pace):
    spec = parse_scenario({"transport": {"congestion_control": "pace_test", "pace_test": {"share": 0.25,
                                                                                           "floor_bps": "2M"}},
                           "workload": WORKLOAD})
    assert spec.transport.cc_given == {"share": 0.25, "floor_bps": 2e6}
    params = transport_params(spec, 200_000)
    assert params.cc_settings == {"share": 0.25, "floor_bps": 2e6} and params.cc_module == __name__
    decoded = protocol.decode(protocol.encode(protocol.AgentConfig(rank=0, ranks=[], peers=[], seed=1,
                                                                   transport=params))).transport
    assert for_transport(decoded).settings == PaceSettings(share=0.25, floor_bps=2e6)
    assert congestion_control_manifest(spec) == {"name": "pace_test", "parameters": {
        "share": {"value": 0.25, "origin": "scenario"}, "floor_bps": {"value": 1e6 * 2, "origin": "scenario"}}}
    assert parse_scenario(spec.model_dump()).transport.cc_given == spec.transport.cc_given  # a dump reads back


@pytest.mark.parametrize("transport, words", [
    ({"congestion_control": "pace_test", "pace_test": {"shar": 1}}, ["transport.pace_test.shar", "unknown key",
                                                                      "floor_bps, share"]),
    ({"congestion_control": "pace_test", "pace_test": {"share": 2}}, ["transport.pace_test.share", "less than or equal"]),
    ({"congestion_control": "none", "pace_test": {"share": 0.5}}, ["transport.pace_test", "congestion_control: pace_test"]),
    ({"pace": 1}, ["transport.pace", "unknown key", "pace_test"]),
])
def test_bad_blocks_are_refused_naming_the_key_path(pace, transport, words):
    with pytest.raises(ScenarioError) as e:
        parse_scenario({"transport": transport, "workload": WORKLOAD})
    assert all(w in str(e.value) for w in words), str(e.value)


def test_a_queue_backend_with_settings_gets_its_fabric_block(monkeypatch):
    @dataclass(frozen=True)
    class QuantumSettings:
        quantum_bytes: int = setting(1514, gt=0)

    class Quantum(HtbBfifo):
        name, Settings = "quantum_test", QuantumSettings

    monkeypatch.setitem(queues.BACKENDS, Quantum.name, Quantum)
    spec = parse_scenario({"fabric": {"queue_backend": "quantum_test", "quantum_test": {"quantum_bytes": "3KiB"}},
                           "workload": WORKLOAD})
    assert queues.get(spec.fabric.queue_backend, spec.fabric.queue_settings).settings == QuantumSettings(3072)
    with pytest.raises(ScenarioError, match=r"fabric\.quantum_test\.quantum_bytes: Input should be greater than 0"):
        parse_scenario({"fabric": {"queue_backend": "quantum_test", "quantum_test": {"quantum_bytes": 0}},
                        "workload": WORKLOAD})
    assert parse_scenario({"workload": WORKLOAD}).fabric.queue_settings == HtbBfifo.Settings()
