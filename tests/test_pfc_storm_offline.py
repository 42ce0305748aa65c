"""PFC storms without a fabric: the fault's spec, the switch-side receiver (parsing, expiry), the honouring
and watchdog glue on a synthetic clock, the storm figures from result files, paused-sample marking."""
import pandas as pd
import pytest
import yaml

from controllers.congestion.rx_pauses import PortPauses, RxPauses
from controllers.congestion.watchdog import PfcWatchdog
from testbed.measure.pfc_paused import paused_windows
from testbed.results.pfc_storm import storm_block
from testbed.spec.scenario import ScenarioError, parse_scenario
from traffic.wire.pfc import pfc_frame

MAC = bytes.fromhex("020000000002")
MS = 1_000_000
PORT = "tb0001l1-eth2"
LINK_BPS = 10e6


def _xoff(quanta=0xFFFF, vector=0x08):
    return pfc_frame(MAC, vector, [quanta if vector >> p & 1 else 0 for p in range(8)])


# ------------------------------------------------------------------ spec
BASE = """
name: s
fabric: {kind: spine_leaf, spines: 2, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M,
         mtu_bytes: 4200, queue_backend: htb_classes}
transport: {payload_bytes: 4096}
congestion: {pfc: {xoff_bytes: 100KB, xon_bytes: 70KB, watchdog: {detect_ms: 200}}}
workload: {pattern: {kind: flows, flows: [{src: h1, dst: h3, size_bytes: 1MiB}]}}
"""


def _spec(faults: str, base: str = BASE):
    return parse_scenario(yaml.safe_load(base + "faults: " + faults))


def test_storm_fault_parses_with_host_and_duration():
    spec = _spec("[{at_s: 1.0, host: h2, action: pfc_storm, duration_s: 2.0}]")
    (f,) = spec.faults
    assert (f.action, f.host, f.duration_s, f.target) == ("pfc_storm", "h2", 2.0, "h2")


@pytest.mark.parametrize("faults, words", [
    ("[{at_s: 1.0, host: h9, action: pfc_storm, duration_s: 2.0}]", ["faults.0.host", "h9", "h1, h2, h3, h4"]),
    ("[{at_s: 1.0, host: h2, action: pfc_storm}]", ["duration_s"]),
    ("[{at_s: 1.0, host: h2, action: pfc_storm, duration_s: 0}]", ["duration_s"]),
    ("[{at_s: 1.0, link: [l1, s1], action: pfc_storm, duration_s: 1}]", ["pfc_storm", "host"]),
    ("[{at_s: 1.0, host: h2, action: down}]", ["pfc_storm", "down"]),
])
def test_bad_storm_faults_are_refused_by_key(faults, words):
    with pytest.raises(ScenarioError) as e:
        _spec(faults)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_storm_needs_pfc():
    base = BASE.replace("congestion: {pfc: {xoff_bytes: 100KB, xon_bytes: 70KB, watchdog: {detect_ms: 200}}}\n", "")
    with pytest.raises(ScenarioError, match="faults.0.action: pfc_storm needs congestion.pfc"):
        _spec("[{at_s: 1.0, host: h2, action: pfc_storm, duration_s: 2.0}]", base)


# ------------------------------------------------------------------ receiver: parsing and expiry
def test_port_pauses_parse_and_expire_after_quanta_time():
    pp = PortPauses({PORT: LINK_BPS})
    assert pp.on_frame(PORT, 0, _xoff())
    expiry_ns = round(0xFFFF * 512 / LINK_BPS * 1e9)  # 3.355 s at 10 Mbit/s
    assert pp.demand(PORT, 0) and pp.demand(PORT, expiry_ns - 1)
    assert not pp.demand(PORT, expiry_ns)
    assert pp.paused_ns(PORT, 10 * expiry_ns) == expiry_ns


def test_refresh_extends_and_quanta_zero_resumes_at_once():
    pp = PortPauses({PORT: LINK_BPS})
    pp.on_frame(PORT, 0, _xoff(quanta=1000))          # 51.2 ms
    pp.on_frame(PORT, 40 * MS, _xoff(quanta=1000))    # reloaded: until 91.2 ms
    assert pp.demand(PORT, 90 * MS)
    pp.on_frame(PORT, 95 * MS, _xoff(quanta=1000))
    pp.on_frame(PORT, 100 * MS, _xoff(quanta=0))      # XON
    assert not pp.demand(PORT, 100 * MS)
    assert pp.frames == 4


def test_other_frames_priorities_and_ports_are_ignored():
    pp = PortPauses({PORT: LINK_BPS})
    pause_8023x = bytes.fromhex("0180c2000001") + MAC + bytes.fromhex("88080001ffff") + bytes(42)
    assert not pp.on_frame(PORT, 0, pause_8023x)
    assert not pp.on_frame("tb0001l1-eth9", 0, _xoff())
    assert not pp.on_frame(PORT, 0, b"\x00" * 20)
    assert pp.on_frame(PORT, 0, _xoff(vector=0x01))   # priority 0 only: the lossless class goes on
    assert not pp.demand(PORT, 1)
    assert (pp.frames, pp.ignored) == (1, 3)


# ------------------------------------------------------------------ honouring and the watchdog
class FakeGate:
    def __init__(self):
        self.paused, self.calls = False, []

    def pause(self):
        self.paused = True
        self.calls.append("pause")
        return 1000

    def resume(self):
        self.paused = False
        self.calls.append("resume")
        return 2000


class FakeDrop:
    dropped_pkts, dropped_bytes = 3, 12000

    def __init__(self):
        self.active, self.log = set(), []

    def drop(self, port):
        self.active.add(port)
        self.log.append(("drop", port))

    def release(self, port):
        if port in self.active:
            self.active.discard(port)
            self.log.append(("release", port))


def _rx(watchdog=None, drop=None):
    gate = FakeGate()
    return RxPauses({PORT: (LINK_BPS, "tb0001h2", "tb0001h2-eth0")}, {PORT: gate}, watchdog, drop), gate


def _run(rx, frames: dict, until_ms: int):
    """Tick every 1 ms to ``until_ms``; ``frames``: ms -> frame received then. Returns the event rows."""
    rows = []
    for ms in range(until_ms + 1):
        if ms in frames:
            rx.pauses.on_frame(PORT, ms * MS, frames[ms])
        rows += rx.tick(ms * MS)
    return rows


def test_without_watchdog_every_pause_is_honoured_until_it_expires():
    rx, gate = _rx()
    rows = _run(rx, {10: _xoff(quanta=1000)}, 100)   # 51.2 ms of pause
    assert [(r[0] // MS, r[3]) for r in rows] == [(10, "rx_pause"), (62, "rx_resume")]
    assert rows[0][5:7] == ("tb0001h2", "tb0001h2-eth0") and rows[0][7] == 1.0


def test_storm_detected_once_dropped_then_restored_once_after_the_xon():
    wd, drop = PfcWatchdog(detect_ms=200, restore_ms=200), FakeDrop()
    rx, gate = _rx(wd, drop)
    frames = {ms: _xoff() for ms in range(0, 2000, 400)}   # a storm refreshed every 400 ms ...
    frames[2000] = _xoff(quanta=0)                          # ... ends with an XON at 2 s
    rows = _run(rx, frames, 2600)
    kinds = [(r[0] // MS, r[3]) for r in rows]
    assert kinds == [(0, "rx_pause"), (200, "storm"), (200, "rx_resume"), (2199, "restore")]
    assert drop.log == [("drop", PORT), ("release", PORT)]
    assert gate.calls == ["pause", "resume"] and (wd.storms, wd.restores) == (1, 1)
    s = rx.summary(2600 * MS)
    assert s["rx_pfc_frames"] == 6 and s["rx_paused_time_s"] == pytest.approx(2.0, abs=1e-6)
    assert (s["watchdog_drops_pkts"], s["watchdog_drops_bytes"]) == (3, 12000)


def test_a_storm_queue_is_not_charged_to_its_feeders():
    wd = PfcWatchdog(detect_ms=200, restore_ms=200)
    rx, _ = _rx(wd, FakeDrop())
    ports = ["tb0001l1-eth1", PORT]
    _run(rx, {0: _xoff()}, 150)
    assert rx.uncharge_storms(ports, [5, 7]) == [5, 7]        # paused, not yet a storm
    for ms in range(151, 260):
        rx.tick(ms * MS)
    assert rx.uncharge_storms(ports, [5, 7]) == [5, 0]        # in storm: its queue is not charged


def test_report_only_watchdog_keeps_honouring():
    wd, drop = PfcWatchdog(detect_ms=50, restore_ms=50, mitigate=False), FakeDrop()
    rx, gate = _rx(wd, drop)
    rows = _run(rx, {0: _xoff()}, 100)
    assert [r[3] for r in rows] == ["rx_pause", "storm"] and gate.paused and not drop.log
    assert rx.uncharge_storms([PORT], [9]) == [9]


# ------------------------------------------------------------------ results
def test_storm_block_and_paused_windows_from_result_files(tmp_path):
    t0 = 10**18
    pd.DataFrame([{"fault": 0, "host": "h2", "switch_port": PORT, "start_ns": t0, "end_ns": t0 + 2000 * MS,
                   "xoff_frames": 2, "xon_frames": 1}]).to_csv(tmp_path / "pfc_storms.csv", index=False)
    ev = [(t0 + 1 * MS, PORT, 3, "rx_pause", -1, "tb0001h2", "tb0001h2-eth0", 20.0, False),
          (t0 + 201 * MS, PORT, 3, "storm", -1, "tb0001h2", "tb0001h2-eth0", 900.0, False),
          (t0 + 201 * MS, PORT, 3, "rx_resume", -1, "tb0001h2", "tb0001h2-eth0", 40.0, False),
          (t0 + 2203 * MS, PORT, 3, "restore", -1, "tb0001h2", "tb0001h2-eth0", 500.0, False)]
    cols = ["time_ns", "port", "class", "event", "charged_bytes", "upstream", "upstream_port", "actuation_us",
            "pfc_frame"]
    pd.DataFrame(ev, columns=cols).to_csv(tmp_path / "pfc_events.csv", index=False)
    # one other flow: 1250 B per 10 ms bin (1 Mbit/s) except while the pause spreads (0)
    bins = range(-500, 3500, 10)
    pd.DataFrame([{"trial": 0, "flow": 1, "src": "h3", "dst": "h1", "bin_start_ns": t0 + b * MS,
                   "rx_bytes": 0.0 if 0 <= b < 201 else 1250.0, "goodput_bps": 0} for b in bins]
                 ).to_csv(tmp_path / "flow_rates.csv", index=False)
    pd.DataFrame([{"trial": 0, "flow": 0, "src": "h5", "dst": "h2", "size_bytes": 0, "start_ns": t0 - 500 * MS,
                   "end_ns": t0 + 4000 * MS, "fct_us": 0.0, "ideal_fct_us": 0.0, "slowdown": 0.0, "lost_pkts": 0.0},
                  {"trial": 0, "flow": 1, "src": "h3", "dst": "h1", "size_bytes": 0, "start_ns": t0 - 500 * MS,
                   "end_ns": t0 + 3500 * MS, "fct_us": 0.0, "ideal_fct_us": 0.0, "slowdown": 0.0, "lost_pkts": 0.0}]
                 ).to_csv(tmp_path / "fct.csv", index=False)
    faults = {"list": [{"fault": 0, "action": "pfc_storm", "detect_ms": None, "detected_by": None}]}
    b = storm_block(tmp_path, faults)
    assert b["storm_detect_ms"] == 201.0 and b["storm_restore_after_end_ms"] == 203.0
    assert b["rest_goodput_before_bps"] == b["rest_goodput_during_bps"] == b["rest_goodput_after_bps"] == 1e6
    assert b["rest_goodput_spreading_bps"] == 0.0
    assert faults["list"][0]["detect_ms"] == 201.0 and faults["list"][0]["detected_by"] == "pfc_watchdog"
    assert paused_windows(tmp_path) == {PORT: [(t0 + 1 * MS, t0 + 201 * MS)]}
    assert storm_block(tmp_path / "none", None) == {}
