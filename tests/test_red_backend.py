"""The RED marker (``congestion.ecn.marker: red``): sch_red as the lossless class's leaf, its parameters,
how ``auto`` resolves, and the refusals. Its marking is measured in the guest tier
(tests/vm/test_guest_tier.py::test_red_marks_on_the_red_line)."""
import pytest

from dataplane import queues
from dataplane.queues import htb_classes, sch_red
from dataplane.queues.base import QueueConfig
from testbed.pipeline.runner import with_ecn_marker
from testbed.spec.congestion import resolve_marker
from testbed.spec.scenario import ScenarioError, parse_scenario

ECN = {"kmin_bytes": 10_000, "kmax_bytes": 50_000, "pmax": 0.2}
PFC = {"xoff_bytes": 60_000, "xon_bytes": 40_000}


def _spec(ecn=None, pfc=None):
    congestion = {"ecn": {**ECN, **(ecn or {})}}
    if pfc:
        congestion["pfc"] = PFC
    return parse_scenario({"fabric": {"queue_backend": "htb_classes"}, "congestion": congestion,
                           "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})


def _plan(spec):
    classes = spec.congestion.traffic_classes(100_000, 1514)
    return queues.get("htb_classes").plan(7, QueueConfig(10e6, 1500, classes))


def test_red_marker_makes_the_lossless_leaf_sch_red_with_the_curve():
    reqs = _plan(_spec({"marker": "red"}))
    leaves = {attrs["handle"]: (kind, attrs) for cmd, kind, attrs in reqs if cmd == "add" and kind != "htb"}
    kind, red = leaves[htb_classes.leaf_handle(1)]  # the lossless class
    assert kind == "red"
    assert red == {"index": 7, "handle": htb_classes.leaf_handle(1), "parent": htb_classes.class_handle(1),
                   "limit": 100_000, "qth_min": 10_000, "qth_max": 50_000, "max_p": pytest.approx(0.2 / 1.8),
                   "ecn": True}
    assert [leaves[htb_classes.leaf_handle(i)][0] for i in (0, 2)] == ["tbf", "tbf"]  # control, lossy
    # nftables (and auto before the probe resolved it): tbf leaves everywhere, the loop marks
    for marker in ("nftables", "auto"):
        assert {k for c, k, _a in _plan(_spec({"marker": marker})) if c == "add"} == {"htb", "tbf"}


def test_red_options_encode_the_instantaneous_backlog_and_ecn():
    opts = dict(sch_red.get_parameters({"limit": 100_000, "qth_min": 10_000, "qth_max": 50_000,
                                        "max_p": 0.25, "ecn": True})["attrs"])
    assert opts["TCA_RED_PARMS"]["Wlog"] == 0 and opts["TCA_RED_PARMS"]["flags"] == sch_red.TC_RED_ECN
    assert opts["TCA_RED_STAB"] == [31] * 256
    assert opts["TCA_RED_MAX_P"] == 2 ** 30
    with pytest.raises(ValueError, match="qth_min=50000 qth_max=10000"):
        sch_red.get_parameters({"limit": 1, "qth_min": 50_000, "qth_max": 10_000, "max_p": 0.1})


def test_kernel_max_p_marks_pmax_at_kmax_and_stays_near_the_line():
    # Linux RED spaces marks uniformly: fraction 2p / (1 + p); max_P = Pmax / (2 - Pmax) puts Pmax at Kmax
    for pmax in (0.1, 0.2, 0.5, 1.0):
        p = sch_red.kernel_max_p(pmax)
        assert 2 * p / (1 + p) == pytest.approx(pmax)
    assert sch_red.max_line_error(0.2) == pytest.approx(0.0053, abs=1e-4)
    assert sch_red.max_line_error(0.5) == pytest.approx(0.0359, abs=1e-4)
    with pytest.raises(ValueError, match="pmax=0 must be"):
        sch_red.kernel_max_p(0)


@pytest.mark.parametrize("asked,machine,pfc,want", [
    ("auto", "red", False, "red"), ("auto", "red", True, "nftables"), ("auto", "nftables", False, "nftables"),
    ("nftables", "red", False, "nftables"), ("red", "red", False, "red"),
])
def test_auto_picks_red_where_the_kernel_has_it_and_pfc_is_off(asked, machine, pfc, want):
    spec = _spec({"marker": asked}, pfc=pfc)
    assert resolve_marker(spec.congestion, machine) == want
    resolved = with_ecn_marker(spec, machine)
    assert resolved.congestion.ecn.marker == want
    assert resolved.congestion.ecn.thresholds_bytes(1514) == (10_000, 50_000)


def test_red_is_refused_where_the_kernel_lacks_it_and_with_pfc():
    with pytest.raises(ScenarioError, match="congestion.ecn.marker = 'red': this kernel has no sch_red; "
                                            "allowed here: auto, nftables"):
        with_ecn_marker(_spec({"marker": "red"}), "nftables")
    with pytest.raises(ScenarioError, match="congestion.ecn.marker = 'red' with congestion.pfc"):
        _spec({"marker": "red"}, pfc=True)
    with pytest.raises(ScenarioError, match="congestion.ecn.marker"):
        _spec({"marker": "kernel"})


def test_the_loop_leaves_marking_to_red_leaves():
    from controllers.contract import EcnSettings, LoopSettings
    from controllers.congestion.loop import CongestionLoop
    from topology import build

    spec = _spec({"marker": "red"})
    layout = build(spec.fabric.kind, spec.fabric, "tb0001")
    conf = LoopSettings(run_id="tb0001", results_dir="/nonexistent", period_s=0.001, sampled_parent=0x10020,
                        mtu_bytes=1500, lossless_buffer_bytes=100_000, host_queue_bytes=65536, host_pids={},
                        ecn=EcnSettings(10_000, 50_000, 0.2, 0.01, 26, marker="red"), pfc=None, clock_wander=0.0)
    assert CongestionLoop(conf, layout).marker is None
