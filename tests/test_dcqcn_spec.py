"""``transport.congestion_control: dcqcn`` in a scenario (no root): the ``transport.dcqcn``
overrides validated with the key named, the settings scaled by the run's dilation into the
agents' TransportParams, and the manifest's ``congestion_control`` block."""
import pytest

from testbed.emulation.agents import transport_params
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.spec.transport import congestion_control_manifest
from traffic.transport.cc import settings_of

WORKLOAD = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}


def _spec(dcqcn=None, cc="dcqcn", reference="1G", host="10M"):
    transport = {"congestion_control": cc}
    if dcqcn is not None:
        transport["dcqcn"] = dcqcn
    return parse_scenario({"reference_link_bps": reference, "fabric": {"host_link_bps": host},
                           "transport": transport, "workload": WORKLOAD})


def test_dcqcn_settings_are_scaled_by_the_runs_dilation():
    spec = _spec()
    assert spec.scale_factor == 100
    s = settings_of(transport_params(spec, 200_000))
    assert (s.cnp_interval_us, s.alpha_timer_us, s.rate_timer_us) == (5000.0, 5500.0, 5500.0)
    assert (s.rai_bps, s.rhai_bps, s.min_rate_bps, s.byte_counter_bytes) == (400e3, 500e3, 10e3, 10_000_000)
    m = congestion_control_manifest(spec)
    assert m["name"] == "dcqcn" and m["dilation"] == 100
    assert m["parameters"]["cnp_interval_us"]["published"] == 50.0
    assert "Zhu et al., SIGCOMM 2015" in m["parameters"]["g"]["source"]
    assert transport_params(_spec(cc="none"), 200_000).cc_settings == {}
    assert congestion_control_manifest(_spec(cc="none")) == {"name": "none"}


def test_overrides_are_taken_in_the_runs_units():
    spec = _spec({"cnp_interval_us": 1000, "rai_bps": "20k", "fast_recovery_stages": 3, "byte_counter_bytes": "64KiB"})
    s = settings_of(transport_params(spec, 200_000))
    assert (s.cnp_interval_us, s.rai_bps, s.fast_recovery_stages, s.byte_counter_bytes) == (1000.0, 20e3, 3, 65536)
    assert s.alpha_timer_us == 5500.0  # not set: scaled
    p = congestion_control_manifest(spec)["parameters"]
    assert p["cnp_interval_us"]["origin"] == "scenario" and p["alpha_timer_us"]["origin"] == "scaled"


@pytest.mark.parametrize("dcqcn, cc, words", [
    ({"cnp_interval": 5}, "dcqcn", ["transport.dcqcn.cnp_interval", "unknown key", "cnp_interval_us"]),
    ({"g": 0}, "dcqcn", ["transport.dcqcn.g", "greater than 0"]),
    ({"g": 1.5}, "dcqcn", ["transport.dcqcn.g", "less than or equal to 1"]),
    ({"g": True}, "dcqcn", ["transport.dcqcn.g", "boolean"]),
    ({"rai_bps": "fast"}, "dcqcn", ["transport.dcqcn.rai_bps", "not a rate"]),
    ({"fast_recovery_stages": 0}, "dcqcn", ["transport.dcqcn.fast_recovery_stages", "greater than or equal to 1"]),
    ({"cnp_interval_us": -1}, "dcqcn", ["transport.dcqcn.cnp_interval_us", "greater than 0"]),
    ({"min_rate_bps": "20M"}, "dcqcn", ["transport.dcqcn.min_rate_bps", "fabric.host_link_bps"]),
    ({"cnp_interval_us": 6000}, "dcqcn", ["transport.dcqcn.alpha_timer_us", "cnp_interval_us", "must exceed"]),
    ({"g": 0.5}, "none", ["transport.dcqcn", "congestion_control: dcqcn", "'none'"]),
])
def test_bad_dcqcn_settings_are_refused_naming_the_key(dcqcn, cc, words):
    with pytest.raises(ScenarioError) as e:
        _spec(dcqcn, cc=cc)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
