"""Issue 7's storm acceptance on a real fabric: the watchdog fires once, restores once after the storm ends,
and the rest of the fabric keeps running. Runs scenarios/pfc_storm.yaml as it is (8 hosts, 10 Mbit/s host
links, about 6 s of traffic): h2's NIC sends real PFC XOFF frames for 2 s, 1.5 s after the fault
scheduler starts (about 0.8 s into the flows), while h5 sends 2 MiB to h2 and five other flows run."""
from pathlib import Path

import pytest

from conftest import assert_losses_accounted, run_scenario_file
from testbed.results.rundir import RunDir

pytestmark = pytest.mark.integration

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
DETECT_MS = RESTORE_MS = 200  # the scenario's watchdog
#: the loop samples every 1 ms and stamps a frame with the clock reading of the tick that reads it (taken
#: before the tick's queue dump: up to about a period early, 199.2 ms seen; a restore 197.2 ms after the
#: storm's recorded end once, 192.96 ms in a full-suite run whose loop missed 2,517 of 4,884 ticks, max 40 ms);
#: ticks missed on a loaded machine delay a decision (loop max 10-40 ms seen):
#: detection and restore within -10 .. +50 ms of the setting
EARLY_MS, LATE_MS = 10, 50


@pytest.fixture(scope="module")
def storm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pfc_storm")
    _, s = run_scenario_file(tmp, (SCENARIOS / "pfc_storm.yaml").read_text(), timeout=240, expect_rc=None,
                             name="pfc_storm")
    run = RunDir.open(s["run_dir"])
    print({k: v for k, v in s["congestion"].items() if not isinstance(v, (dict, list))})
    return s, run, run.pfc_storms.iloc[0], run.pfc_events


def test_watchdog_fires_once_and_restores_once_after_the_storm_ended(storm):
    s, _, st, events = storm
    c = s["congestion"]
    assert c["storms"] == 1 and c["restores"] == 1
    rows = events[events["event"].isin(["storm", "restore"])].sort_values("time_ns")
    assert list(rows["event"]) == ["storm", "restore"] and set(rows["port"]) == {st["switch_port"]}
    storm_ns, restore_ns = rows["time_ns"].tolist()
    assert st["start_ns"] < storm_ns < st["end_ns"] < restore_ns
    assert DETECT_MS - EARLY_MS <= c["storm_detect_ms"] <= DETECT_MS + LATE_MS
    assert RESTORE_MS - EARLY_MS <= c["storm_restore_after_end_ms"] <= RESTORE_MS + LATE_MS
    # the switch received every frame the NIC sent (first XOFF, refreshes, XON), and honoured the first at once
    assert c["rx_pfc_frames"] == st["xoff_frames"] + st["xon_frames"] >= 2
    held = events[(events["event"] == "rx_pause") & (events["port"] == st["switch_port"])]
    assert len(held) >= 1 and held["time_ns"].min() - st["start_ns"] < LATE_MS * 1e6
    # the pause spread upstream before the detection: leaf 1's other ingresses paused their upstreams
    spread = events[(events["event"] == "pause") & events["time_ns"].between(st["start_ns"], storm_ns)]
    assert len(spread) >= 1, events


def test_only_the_storming_port_drops_and_every_byte_arrives_once(storm):
    s, run, st, _ = storm
    c, t = s["congestion"], s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] and t["order_errors"] == 0
    assert c["lossless_drops_pkts"] == 0  # no lossless queue dropped anything
    assert c["watchdog_drops_pkts"] > 0 and c["watchdog_drops_bytes"] >= c["watchdog_drops_pkts"] * 4000
    assert t["switch_drops_pkts"] == c["watchdog_drops_pkts"]
    i = assert_losses_accounted(s)  # every loss the watchdog's, counted once
    assert i["watchdog_drops_pkts"] == c["watchdog_drops_pkts"] and i["switch_queue_drops_pkts"] == 0
    qps = run.qps
    hosts = {f"h{r + 1}": r for r in range(8)}
    req = qps[(qps["role"] == "requester") & (qps["tx_pkts"] > 0)]
    to_storm = req["peer"] == hosts[st["host"]]
    assert (req.loc[~to_storm, "retx_pkts"] == 0).all() and (req.loc[~to_storm, "timeouts"] == 0).all()
    assert req.loc[to_storm, "retx_pkts"].sum() >= c["watchdog_drops_pkts"]


def test_the_rest_of_the_fabric_keeps_running(storm):
    """The five flows that do not touch h2 (5 x 10 Mbit/s of host links, 49.1 Mbit/s of goodput measured
    before the storm): while the pause spreads (leaf 1's ingresses, spine 2's, then the hosts of leaves 3
    and 4) they are held (17.3 Mbit/s measured); once the watchdog drops h2's traffic nothing is paused for
    it, so they run at their line rate again (48.1 Mbit/s measured after the detection, 49.1 after the
    restore): at least 85% of their rate before the storm."""
    s, _, _, _ = storm
    c = s["congestion"]
    before, spreading = c["rest_goodput_before_bps"], c["rest_goodput_spreading_bps"]
    during, after = c["rest_goodput_during_bps"], c["rest_goodput_after_bps"]
    assert before > 30e6
    assert during >= 0.75 * before and after >= 0.75 * before  # 0.80 measured in a loaded CI-like run
    assert spreading < 0.8 * during  # the storm did hurt them before the detection
