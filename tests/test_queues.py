"""Queue backends registry (dataplane.queues): lookup, refusals, and htb_bfifo's tc requests.

The requests are compared with the literal netlink requests the fabric sent
before the registry existed (testbed/emulation/shaping.py); the kernel side is
tested in tests/integration/test_shaping_telemetry.py. No root needed.
"""
import pytest

from dataplane import queues
from dataplane.queues import htb_bfifo
from dataplane.queues.base import QueueConfig, RedCurve, TrafficClass
from dataplane import qdisc_sampler
from testbed.spec.scenario import ScenarioError, parse_scenario

SIZES = {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}


def test_registry_has_htb_bfifo_as_default():
    assert sorted(queues.BACKENDS) == ["htb_bfifo", "htb_classes"]
    assert isinstance(queues.get("htb_bfifo"), htb_bfifo.HtbBfifo)
    assert parse_scenario({"workload": SIZES}).fabric.queue_backend == "htb_bfifo"


@pytest.mark.parametrize("name", ["red", "HTB_BFIFO", "", None])
def test_unknown_backend_names_the_key_and_the_registered_names(name):
    with pytest.raises(ValueError, match=r"fabric.queue_backend = .* is not one of \['htb_bfifo', 'htb_classes'\]"):
        queues.get(name)


def test_scenario_refuses_an_unknown_backend_before_anything_is_built():
    with pytest.raises(ScenarioError, match=r"fabric: fabric.queue_backend = 'red' is not one of \['htb_bfifo', 'htb_classes'\]"):
        parse_scenario({"fabric": {"queue_backend": "red"}, "workload": SIZES})


def test_sampler_reads_the_root_qdisc_named_by_the_backend():
    assert queues.get("htb_bfifo").sampled_parent == qdisc_sampler.TC_H_ROOT == 0xFFFFFFFF


@pytest.mark.parametrize("rate_bps,buffer_bytes,mtu,rate_Bps,burst,quantum", [
    (10e6, 100_000, 1500, 1_250_000, 3 * 1514, 1514),       # 3 frames > 1 ms at 10 Mbit/s
    (400e6, 30_000, 1500, 50_000_000, 50_000, 1514),        # 1 ms at 400 Mbit/s > 3 frames
    (80e6, 64 * 1024, 4200, 10_000_000, 3 * 4214, 4214),    # path MTU 4096 links
])
def test_htb_bfifo_plan_is_the_former_shaping_requests(rate_bps, buffer_bytes, mtu, rate_Bps, burst, quantum):
    plan = queues.get("htb_bfifo").plan(7, QueueConfig.single(rate_bps, buffer_bytes, mtu))
    assert plan == [
        ("add", "htb", {"index": 7, "handle": 0x10000, "parent": 0xFFFFFFFF, "default": 1}),
        ("add-class", "htb", {"index": 7, "handle": 0x10001, "parent": 0x10000, "rate": rate_Bps,
                              "ceil": rate_Bps, "burst": burst, "cburst": burst, "quantum": quantum, "mtu": mtu}),
        ("add", "bfifo", {"index": 7, "handle": 0x100000, "parent": 0x10001, "limit": buffer_bytes}),
    ]


class _RecordingIPRoute:
    """Records the tc requests; interface 'p1' has index 7."""

    def __init__(self):
        self.calls = []

    def link_lookup(self, ifname):
        return [7] if ifname == "p1" else []

    def tc(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return []


class _NoReadBack(htb_bfifo.HtbBfifo):
    def read_back(self, ipr, ifname):
        return "read back"


def test_install_clears_the_root_then_sends_the_plan_in_order():
    ipr, backend, cfg = _RecordingIPRoute(), _NoReadBack(), QueueConfig.single(10e6, 100_000, 1500)
    assert backend.install(ipr, "p1", cfg) == "read back"
    assert ipr.calls[0] == (("del",), {"index": 7, "parent": 0xFFFFFFFF, "handle": 0})
    assert ipr.calls[1:] == [((cmd, kind), attrs) for cmd, kind, attrs in backend.plan(7, cfg)]


def test_install_refuses_a_missing_interface_and_what_htb_bfifo_cannot_build():
    backend = _NoReadBack()
    with pytest.raises(ValueError, match="interface 'p2' not found"):
        backend.install(_RecordingIPRoute(), "p2", QueueConfig.single(10e6, 100_000))
    two = QueueConfig(10e6, 1500, (TrafficClass(50_000, dscp=(26,)), TrafficClass(50_000)))
    marked = QueueConfig(10e6, 1500, (TrafficClass(100_000, marking=RedCurve(20_000, 80_000, 0.2)),))
    for cfg, match in ((two, "builds at most 1 class"), (marked, "does not mark ECN")):
        ipr = _RecordingIPRoute()
        with pytest.raises(ValueError, match=f"queue backend 'htb_bfifo' {match}"):
            backend.install(ipr, "p1", cfg)
        assert ipr.calls == []  # refused before the kernel was asked anything


@pytest.mark.parametrize("args,match", [
    ((0, 30_000, 1500), "rate_bps=0 must be > 0"), ((1e7, 1500, 1500), "buffer_bytes=1500 must be"),
    ((1e7, 30_000, 10), "mtu_bytes=10 must be"), ((2.0 ** 70, 30_000, 1500), "exceeds the kernel's 64-bit"),
])
def test_queue_config_names_the_bad_value(args, match):
    with pytest.raises(ValueError, match=match):
        QueueConfig.single(*args)


@pytest.mark.parametrize("kmin,kmax,pmax,match", [(5, 5, 0.1, "kmin_bytes=5"), (0, 9, 0, "pmax=0")])
def test_red_curve_names_the_bad_value(kmin, kmax, pmax, match):
    with pytest.raises(ValueError, match=match):
        RedCurve(kmin, kmax, pmax)
