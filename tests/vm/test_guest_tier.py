"""Guest tier: kernel features this machine's own kernel lacks, tested inside a scripts/vm guest.

Run by scripts/vm-tier (``scripts/vm -- python -m pytest -m vm tests/vm``). Skipped unless asked for
with ``-m vm``, and skipped outside a scripts/vm guest (no ``$TESTBED_VM_RESULTS``). Each test writes
its wall time into ``$TESTBED_VM_RESULTS/vm-tier-times.json`` (seconds), which scripts/vm-tier prints.

- the smallest spine-leaf (1 spine, 1 leaf, 2 hosts) on the kernel datapath with netem delay on every
  link: ping and a window-limited QP take the round trip the delay sets; the transport delivers every
  posted byte exactly once, in order, and the run leaves no bridge, interface, namespace or process
  behind (``testbed clean`` finds nothing). Its manifest's ``capabilities`` (the probe ``testbed doctor``
  prints) show that Debian's stock kernel gives the kernel datapath, sch_red and sch_netem and that the
  probe picks them (datapath=kernel, ecn_marker=red, delay=netem): no separate doctor run (51-80 s).
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = os.environ.get("TESTBED_VM_RESULTS")

pytestmark = pytest.mark.vm


@pytest.fixture(autouse=True)
def _only_in_guest(request, monkeypatch):
    """Skip outside a scripts/vm guest; inside, the runs write no report.html (``TESTBED_REPORT=off``:
    19-47 s of matplotlib a run under software emulation, 2026-12-08)."""
    if "vm" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("guest tier: runs only when asked for with -m vm (scripts/vm-tier)")
    if not RESULTS:
        pytest.skip("guest tier: runs inside a scripts/vm guest only (scripts/vm-tier boots one)")
    monkeypatch.setenv("TESTBED_REPORT", "off")


def _record_time(name: str, seconds: float) -> None:
    path = Path(RESULTS) / "vm-tier-times.json"
    times = json.loads(path.read_text()) if path.exists() else {}
    times[name] = round(seconds, 1)
    path.write_text(json.dumps(times, indent=1))


def assert_probe_picks_kernel_features(capabilities: dict) -> None:
    """The machine's probe (``testbed doctor``'s, written into every run's manifest as ``capabilities``)
    picks the guest kernel's features: datapath=kernel, ecn_marker=red, delay=netem, and names the
    acceleration scripts/vm booted the guest with."""
    print(f"probe backends: {capabilities['backends']}")
    assert capabilities["backends"] == {"datapath": "kernel", "ecn_marker": "red", "delay": "netem"}, \
        capabilities["features"]
    accel = capabilities["features"]["acceleration"]
    print(f"probe acceleration: {accel['detail']}")
    assert accel["detail"].startswith("guest of testbed vm, ") and \
        accel["available"] is (os.environ.get("TESTBED_VM_ACCEL") == "kvm"), accel


def assert_nothing_left() -> None:
    """``testbed clean`` finds nothing of any run, the guest's Open vSwitch has no bridge and no named
    network namespace remains."""
    from testbed.host import cleanup
    report = cleanup.clean()
    assert report.empty, f"the run left objects behind: {report}"
    bridges = subprocess.run(["ovs-vsctl", "--timeout=10", "list-br"], capture_output=True, text=True, check=True)
    assert bridges.stdout.split() == []
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert netns == [], f"named network namespaces left: {netns}"


# -- propagation delay (netem, issue 20 item 4) ----------------------------------------------------------
DELAY_US = 40_000
WINDOW_PKTS = 8
#: hosts on one leaf: a path of 2 links (h1 - leaf - h2)
DELAY_LINKS = 2
DELAYED = f"""
name: vm_netem_delay
seed: 1
fabric: {{spines: 1, leaves: 1, hosts_per_leaf: 2, host_link_bps: 2M, fabric_link_bps: 2M, datapath: kernel,
         link_delay_us: {DELAY_US}}}
transport: {{window_pkts: {WINDOW_PKTS}, ack_every_pkts: 1}}
workload: {{pattern: {{kind: flows, trials: 1, flows: [{{src: h1, dst: h2, size_bytes: 192KiB}}]}}}}
"""


def test_kernel_datapath_netem_delay_rtt_goodput_exactly_once_nothing_left(tmp_path):
    """``fabric.link_delay_us`` = 40 ms on the tiny fabric at 2 Mbit/s: ping h1 -> h2 (2 links) takes
    2 x 2 x 40 ms, within 10 %; one QP with an 8-packet window and an ACK per packet (8 frames serialize
    in 35 ms, under the 164.6 ms round trip: the window is the limit) moves window / RTT within 10 %,
    RTT = the path's propagation + one data and one ACK frame serialized
    (testbed.measure.link_model.path_rtt_us). The delay is long against the software's own latency per
    round trip under software emulation (about 4 ms of ping and 7 ms of QP round trip were measured at
    20 ms). On the kernel datapath (the manifest says so) every posted byte is delivered and acknowledged
    exactly once, in order, and afterwards ``testbed clean`` finds nothing, no bridge is left in the
    guest's Open vSwitch and no named network namespace remains."""
    import pandas as pd

    from testbed.measure import link_model
    from traffic.transport import ACK_FRAME_BYTES

    scenario = tmp_path / "delay.yaml"
    scenario.write_text(DELAYED)
    results = Path(RESULTS) / "delay-run"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-X", "faulthandler", "-m", "testbed.cli", "run", str(scenario),
                          "--results", str(results), "--cli"], input="h1 ping -c 20 -i 0.2 h2\nexit\n",
                         capture_output=True, text=True, timeout=1500, cwd=REPO)
    _record_time("netem_delay_run_s", time.monotonic() - t0)
    (Path(RESULTS) / "delay-run.out").write_text(res.stdout + res.stderr)
    assert res.returncode in (0, 3, 6), \
        f"testbed run exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    (run_dir,) = [p.parent for p in results.glob("*/summary.json")]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert manifest["backends"]["datapath"] == "kernel", manifest["backends"]
    assert_probe_picks_kernel_features(manifest["capabilities"])
    assert summary["complete"] is True
    t = summary["transport"]
    print(f"kernel datapath: faithful={summary['faithful']} transport={t}")
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] == 192 * 1024, t
    assert t["order_errors"] == 0 and t["dup_pkts"] <= t["retx_pkts"], t
    assert_nothing_left()
    assert manifest["link_model"]["propagation_delay_us"] == DELAY_US
    assert manifest["link_model"]["delay_backend"].startswith("netem")

    # ping: min/avg/max/mdev in ms
    line = next(ln for ln in (res.stdout + res.stderr).splitlines() if "min/avg/max" in ln)
    rtt_min_ms, rtt_avg_ms, rtt_max_ms = (float(v) for v in line.split("=")[1].split("/")[:3])
    ping_frame_bytes = 14 + 20 + 8 + 56  # Ethernet + IPv4 + ICMP + ping's 56 data bytes
    nominal_ms = 2 * DELAY_LINKS * DELAY_US / 1e3
    model_ms = nominal_ms + 2 * ping_frame_bytes * 8e3 / 2e6
    print(f"ping RTT min/avg/max {rtt_min_ms}/{rtt_avg_ms}/{rtt_max_ms} ms; 2 x hops x delay {nominal_ms} ms, "
          f"with the ping frames serialized {model_ms:.2f} ms")
    assert abs(rtt_avg_ms - nominal_ms) <= 0.1 * nominal_ms, line

    fct = pd.read_csv(run_dir / "fct.csv")
    (flow,) = fct.itertuples()
    goodput_bps = flow.size_bytes * 8 / (flow.fct_us / 1e6)
    payload = manifest.get("transport", {}).get("payload_bytes", 1024)
    data_frame = link_model.data_frame_bytes(payload)
    rtt_us = link_model.path_rtt_us(DELAY_LINKS, DELAY_US, 2e6, data_frame, ACK_FRAME_BYTES)
    assert WINDOW_PKTS * data_frame * 8e6 / 2e6 < rtt_us  # the window, not the link, is the limit
    want_bps = link_model.window_limited_goodput_bps(WINDOW_PKTS, payload, rtt_us)
    print(f"window-limited QP: {flow.size_bytes} B in {flow.fct_us / 1e3:.1f} ms = {goodput_bps / 1e3:.1f} kbit/s; "
          f"window / RTT = {WINDOW_PKTS} x {payload} B / {rtt_us / 1e3:.2f} ms = {want_bps / 1e3:.1f} kbit/s "
          f"({goodput_bps / want_bps - 1:+.1%}); window / ping RTT {WINDOW_PKTS * payload * 8 / rtt_avg_ms:.1f} kbit/s")
    (Path(RESULTS) / "delay-figures.json").write_text(json.dumps({
        "ping_rtt_ms": [rtt_min_ms, rtt_avg_ms, rtt_max_ms], "nominal_rtt_ms": nominal_ms, "model_rtt_ms": model_ms,
        "goodput_bps": goodput_bps, "window_over_rtt_bps": want_bps, "fct_us": flow.fct_us}, indent=1))
    assert abs(goodput_bps - want_bps) <= 0.1 * want_bps


# -- RED queue backend (sch_red, issue 20 item 3) ----------------------------------------------------------
RED_KMIN, RED_KMAX, RED_PMAX = 10_000, 50_000, 0.2
RED_TOLERANCE_PP = 5.0
#: bins judged: at least this many datagrams (binomial sd at p = 0.2: 2.8 points; RED's uniform spacing
#: of marks makes it smaller)
RED_MIN_PACKETS = 200
#: every link's rate: 120 frames of 1042 B a second, what software emulation holds
RED_LINK_BPS = "1M"
#: measured seconds and warm-up (the senders' Python starts in seconds under software emulation)
RED_SECONDS, RED_WARMUP_S = 90.0, 10.0
#: the holder sweeps the backlog between these (bytes): below Kmin to above Kmax
RED_LOW_BYTES, RED_HIGH_BYTES = 4_000, 58_000
RED_PERIOD_S = 0.005


def test_red_marking_follows_the_red_line():
    """``congestion.ecn.marker: red`` builds a sch_red leaf with ECN in the lossless class of every switch
    port (1 leaf, 3 hosts, 1 Mbit/s, kernel datapath). h1 and h2 send ECT(0) datagrams into h3 while a
    queue holder switches their pace between 1.3 and 0.7 x the port's rate, so the port's lossless
    backlog sweeps between 4 kB and 58 kB for 90 s (benchmarks/instruments/red_curve.py); each datagram
    is binned by the backlog it found (samples every 5 ms, fewer under software emulation, interpolated
    at its send time). RED's average is the instantaneous queue (Wlog 0, dataplane/queues/sch_red.py), so
    the bin is the queue RED decided on. Every bin of at
    least 200 datagrams marks within 5 points of the RED line (Kmin 10 kB, Kmax 50 kB, Pmax 0.2): none
    below Kmin, the line across four bins between Kmin and Kmax, all above Kmax; every bin between Kmin
    and Kmax has that many; the kernel's own ``marked`` counter equals the CE datagrams received and the
    class dropped nothing (no tail drop hides a mark). The curve is written to red-curve.json (for
    ``benchmarks/red_curve.py --beside``)."""
    from benchmarks.instruments.red_curve import format_bins, run_curve, scenario

    spec = scenario("red", RED_LINK_BPS, RED_KMIN, RED_KMAX, RED_PMAX, datapath="kernel")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        res = run_curve(spec, Path(tmp), "kernel", RED_PERIOD_S, seconds=RED_SECONDS, warmup_s=RED_WARMUP_S,
                        low_bytes=RED_LOW_BYTES, high_bytes=RED_HIGH_BYTES, bins=4)
    _record_time("red_curve_s", time.monotonic() - t0)
    (Path(RESULTS) / "red-curve.json").write_text(json.dumps(res, indent=1))
    print(f"RED on {res['port']}: fabric up {res['fabric_up_s']} s, sent {res['sent']}, received "
          f"{res['received']}, CE {res['ce']}, holder switches {res['flips']}, class drops {res['drops_pkts']}, "
          f"{res['samples']} samples ({res['missed_ticks']} missed); RED counters {res['red_stats']}")
    print("\n".join(format_bins(res["bins"])))
    (stats,) = res["red_stats"]  # the port's lossless leaf is sch_red
    # the backlog swept up and down at least five times (20 switches in a guest whose senders offered half
    # their pace: 2026-12-02)
    assert res["flips"] >= 10, res
    assert res["drops_pkts"] == 0, res
    assert stats["marked"] == res["ce"], (stats, res["ce"])  # RED's own count of marks = CE received
    below, *inner, above = res["bins"]
    assert all(b["packets"] >= RED_MIN_PACKETS for b in inner), res["bins"]
    for b in res["bins"]:
        if b["packets"] >= RED_MIN_PACKETS:
            assert abs(b["measured_p"] - b["line_p"]) * 100 <= RED_TOLERANCE_PP, b
