"""Priority classes and ECN marking without a fabric: the RED policy, the htb_classes plan, the
``congestion`` section and the marker's nft rules (the kernel side: tests/integration/test_ecn_marking.py)."""
import numpy as np
import pytest

from dataplane.ecn_policy import MarkingPolicy, RedCurve, quantize
from dataplane import queues
from dataplane.ecn_marker import NftEcnMarker, table_name
from dataplane.queues.base import QueueConfig, TrafficClass
from testbed.spec.scenario import ScenarioError, parse_scenario

SIZES = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}
CURVE = RedCurve(10_000, 50_000, 0.5)


@pytest.mark.parametrize("q,p", [(0, 0), (9_999, 0), (10_000, 0), (30_000, 0.25), (50_000, 0.5), (50_001, 1),
                                 (1e9, 1)])
def test_red_curve_is_floyd_jacobson(q, p):
    assert CURVE.probability(q) == pytest.approx(p)


@pytest.mark.parametrize("args,match", [((5, 5, 0.1), "need 0 <= kmin_bytes < kmax_bytes"),
                                        ((-1, 5, 0.1), "need 0"), ((1, 5, 0), "pmax=0 must be"),
                                        ((1, 5, 1.5), "pmax=1.5 must be")])
def test_red_curve_names_the_bad_field(args, match):
    with pytest.raises(ValueError, match=match):
        RedCurve(*args)


def test_quantize_keeps_zero_and_never_rounds_a_positive_probability_to_zero():
    assert quantize(0.0, 0.01) == 0.0 and quantize(0.0001, 0.01) == 0.01
    assert quantize(0.254, 0.01) == pytest.approx(0.25) and quantize(1.0, 0.01) == 1.0


def test_policy_reports_only_ports_whose_probability_moved():
    pol = MarkingPolicy(CURVE, ["a", "b", "c"])
    assert pol.decide([0, 30_000, 60_000]) == {"b": pytest.approx(0.25), "c": 1.0}
    assert pol.decide([5_000, 30_100, 60_000]) == {}  # a stays 0, b rounds to 0.25 again, c stays 1
    assert pol.decide([-1, 0, 60_000]) == {"b": 0.0}  # -1: port not in the dump, left as it was


def _classes():
    return (TrafficClass(30_000, dscp=(48,), priority=0), TrafficClass(150_000, dscp=(26,), priority=1),
            TrafficClass(100_000, priority=2))


def test_htb_classes_plan_three_classes_with_tbf_leaves_and_dscp_filters():
    plan = queues.get("htb_classes").plan(7, QueueConfig(10e6, 1500, _classes()))
    root, parent, *rest = plan
    assert root[:2] == ("add", "htb") and root[2]["default"] == 0x30  # the lossy class takes the rest
    assert parent[2]["rate"] == parent[2]["ceil"] == 1_250_000
    cls = [r[2] for r in rest if r[0] == "add-class"]
    assert [c["handle"] for c in cls] == [0x10010, 0x10020, 0x10030] and [c["prio"] for c in cls] == [0, 1, 2]
    assert all(c["rate"] == 12_500 and c["ceil"] == 1_250_000 for c in cls)  # 1 % guaranteed, then priority
    leaves = [r[2] for r in rest if r[1] == "tbf"]
    assert [(q["handle"], q["parent"], q["limit"]) for q in leaves] == [
        (0x100000, 0x10010, 30_000), (0x200000, 0x10020, 150_000), (0x300000, 0x10030, 100_000)]
    filters = [r[2] for r in rest if r[0] == "add-filter"]
    assert [(f["target"], f["keys"]) for f in filters] == [
        (0x10010, ["0x00c00000/0x00fc0000+0"]), (0x10020, ["0x00680000/0x00fc0000+0"])]


@pytest.mark.parametrize("classes,match", [
    ((TrafficClass(30_000, dscp=(26,)), TrafficClass(30_000, dscp=(26, 48)), TrafficClass(30_000)),
     "dscp 26 is in classes 0 and 1"),
    ((TrafficClass(30_000), TrafficClass(30_000)), "exactly one class without dscp"),
    ((TrafficClass(30_000, dscp=(64,)), TrafficClass(30_000)), r"dscp=64 must be in \[0, 63\]"),
])
def test_htb_classes_refuses_what_it_cannot_classify(classes, match):
    with pytest.raises(ValueError, match=match):
        queues.get("htb_classes").check(QueueConfig(10e6, 1500, classes))


def test_congestion_section_builds_classes_and_converts_packets():
    spec = parse_scenario({"fabric": {"queue_backend": "htb_classes", "buffer_bytes": "100KB"},
                           "congestion": {"buffers": {"lossless_bytes": "150KB"},
                                          "ecn": {"kmin_pkts": 5, "kmax_bytes": 60_000, "pmax": 0.2}},
                           "workload": SIZES})
    control, lossless, lossy = spec.congestion.traffic_classes(100_000, 1514)
    assert (control.dscp, lossless.dscp, lossy.dscp) == ((48,), (26,), ())
    assert (control.buffer_bytes, lossless.buffer_bytes, lossy.buffer_bytes) == (100_000, 150_000, 100_000)
    assert lossless.marking == RedCurve(5 * 1514, 60_000, 0.2) and control.marking is lossy.marking is None
    host = spec.congestion.traffic_classes(65_536, 1514, switch_port=False)
    assert {c.buffer_bytes for c in host} == {65_536} and all(c.marking is None for c in host)


@pytest.mark.parametrize("section,match", [
    ({"fabric": {}, "congestion": {"ecn": {"kmin_bytes": 1, "kmax_bytes": 9}}},
     "fabric.queue_backend = 'htb_bfifo' does not build; allowed: \\['htb_classes'\\]"),
    ({"congestion": {"ecn": {"kmin_bytes": 1, "kmin_pkts": 2, "kmax_bytes": 9}}},
     "give exactly one of kmin_bytes, kmin_pkts"),
    ({"congestion": {"ecn": {"kmin_bytes": 9000, "kmax_bytes": 9000}}}, "Kmin 9000 bytes must be below Kmax"),
    ({"congestion": {"ecn": {"kmin_bytes": 200_000, "kmax_bytes": 300_000}}}, "not below the lossless class buffer"),
    ({"congestion": {"ecn": {"kmin_bytes": 1, "kmax_bytes": 9, "pmax": 2}}}, "pmax"),
    ({"congestion": {"red": {}}}, "unknown key; allowed keys here: buffers, ecn, ecn_probability_step"),
])
def test_congestion_section_refuses_with_the_key(section, match):
    data = {"fabric": {"queue_backend": "htb_classes"}, "workload": SIZES}
    data.update(section)
    with pytest.raises(ScenarioError, match=match):
        parse_scenario(data)


def test_default_scenario_has_no_classes_and_no_marking():
    spec = parse_scenario({"workload": SIZES})
    assert spec.fabric.queue_backend == "htb_bfifo" and spec.congestion.ecn is None


class _Recorder:
    backend = "recorded"

    def __init__(self):
        self.batches = []

    def run(self, text):
        self.batches.append(text)
        return ""


def test_marker_rewrites_only_changed_ports_marking_ect_of_the_class_only():
    m = NftEcnMarker("tb00ab", MarkingPolicy(CURVE, ["p1", "p2"]))
    m._nft = _Recorder()
    m.start()
    assert m.table == table_name("tb00ab") == "tb00abecn"
    assert 'hook egress device "p1"' in m._nft.batches[0] and "ecn set ce" not in m._nft.batches[0]
    counters = np.zeros((2, 5), dtype=np.int64)
    counters[:, 3] = [30_000, 0]
    m.on_sample(0, counters)
    (batch,) = m._nft.batches[1:]
    assert "e1" not in batch  # p2 did not move
    assert ("ip dscp { 26 } ip ecn { ect0, ect1 } numgen random mod 10000 < 2500 ip ecn set ce "
            'counter name "ce0"') in batch
    counters[:, 3] = [60_000, 0]
    m.on_sample(0, counters)
    assert "numgen" not in m._nft.batches[2] and "ip ecn set ce" in m._nft.batches[2]  # p = 1: every ECT
    counters[:, 3] = [0, 0]
    m.on_sample(0, counters)
    assert "ecn set ce" not in m._nft.batches[3]  # below Kmin: no marking rule at all
    assert [p for _, _, p in m.changes] == [0.25, 1.0, 0.0] and len(m.loop_ns) == 3
