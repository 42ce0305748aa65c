"""Issue 10 item 3 on a real fabric: ``output.pcap`` captures of a short DCQCN + PFC incast decode as RoCEv2
(UDP 4791, InfiniBand BTH) with CNPs (BTH opcode 0x81) and PFC frames (MAC control 0x8808, opcode 0x0101,
class vector 0x08: the lossless priority 3), in tshark where installed, else in scapy.

The incast is scenarios/incast_both.yaml with 1 MiB per sender and h2 (on the receiver's leaf) among the
senders: when l1's port to h1 passes Xoff, l1 pauses h2 with PFC frames. Captured: h2's NIC (its data
out, CNPs and PFC frames in) and the bottleneck port l1-h1 (data to h1, CNPs from h1). One run, ~20 s."""
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import psutil
import pytest

from conftest import REPO, run_scenario_file
from testbed.results.rundir import RunDir

pytestmark = pytest.mark.integration

OPCODE_CNP, OPCODE_ACK = 0x81, 0x11
PFC_CLASS_VECTOR = 0x08  # priority 3 (traffic.wire.pfc.LOSSLESS_PRIORITY)


def _scenario() -> str:
    text = (REPO / "scenarios" / "incast_both.yaml").read_text()
    text = re.sub(r"pattern: \{kind: incast, senders: 4, receiver: h1, size_bytes: \w+, trials: 1\}",
                  "pattern: {kind: incast, senders: [h2, h3, h5, h7], receiver: h1, size_bytes: 1MiB, trials: 1}", text)
    assert "senders: [h2" in text
    return text.replace("name: incast_both", "name: incast_pcap") + \
        "output: {pcap: {ports: [h2, l1-h1], snaplen_bytes: 128, max_bytes: 20MB}}\n"


def _decode_tshark(path: Path) -> dict:
    """BTH opcodes and PFC (opcode, class vector) pairs in ``path``, by tshark's own dissectors."""
    out = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-E", "separator=,", "-e", "udp.dstport",
                          "-e", "infiniband.bth.opcode", "-e", "macc.opcode", "-e", "macc.cbfc.enbv"],
                         capture_output=True, text=True, check=True).stdout
    bth, pfc = Counter(), Counter()
    for line in out.splitlines():
        port, opcode, macc, enbv = (line.split(",") + ["", "", "", ""])[:4]
        if opcode:
            assert port == "4791", line
            bth[int(opcode)] += 1
        if macc:
            pfc[(int(macc, 16), int(enbv, 16))] += 1
    return {"bth": bth, "pfc": pfc}


def _decode_scapy(path: Path) -> dict:
    """The same with scapy's layers (scapy.contrib.roce binds BTH to UDP 4791; scapy.contrib.mac_control)."""
    from scapy.contrib.mac_control import MACControlClassBasedFlowControl
    from scapy.contrib.roce import BTH
    from scapy.utils import rdpcap

    bth, pfc = Counter(), Counter()
    for pkt in rdpcap(str(path)):
        if BTH in pkt:
            bth[pkt[BTH].opcode] += 1
        if MACControlClassBasedFlowControl in pkt:
            m = pkt[MACControlClassBasedFlowControl]
            pfc[(m._op_code, sum(getattr(m, f"c{k}_enabled") << k for k in range(8)))] += 1
    return {"bth": bth, "pfc": pfc}


@pytest.fixture(scope="module")
def capture_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pcap")
    res, summary = run_scenario_file(tmp, _scenario(), timeout=240, expect_rc=None, name="incast_pcap")
    run_dir = Path(summary["run_dir"])
    return res, summary, run_dir, RunDir.open(run_dir).manifest


def test_manifest_lists_each_capture_with_its_packet_count(capture_run):
    res, summary, run_dir, manifest = capture_run
    block = manifest["pcap"]
    assert [(f["port"], f["asked"], f["namespace"]) for f in block["files"]] == [
        ("h2-eth0", "h2", "host"), ("l1-eth1", "l1-h1", "root")]
    assert block["snaplen_bytes"] == 128 and block["cap_bytes_per_port"] == 10_000_000
    for f in block["files"]:
        assert (run_dir / f["file"]).stat().st_size == f["bytes"] and f["packets"] > 0 and not f["capped"]
        assert f["dropped_by_kernel"] == 0, f  # tcpdump stopped by SIGINT printed its counters
        assert 0 <= f["cpu_s"] < 5, f  # tcpdump's own CPU time
    # the bottleneck port carried every data packet to h1: 1 MiB from each of 4 senders, 4096 B each
    l1 = next(f for f in block["files"] if f["port"] == "l1-eth1")
    assert l1["packets"] >= 4 * 256
    assert "pcap: 2 files" in res.stdout
    # nothing left running: every tcpdump of this run is gone
    rid = summary["run_id"]
    assert not [p for p in psutil.process_iter(["cmdline"]) if rid in " ".join(p.info["cmdline"] or [])]


@pytest.mark.parametrize("decoder", ["tshark", "scapy"])
def test_captures_decode_as_rocev2_with_cnps_and_pfc_frames(capture_run, decoder):
    if decoder == "tshark" and shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (scripts/install installs it)")
    _, summary, run_dir, _ = capture_run
    decode = _decode_tshark if decoder == "tshark" else _decode_scapy
    host, bottleneck = decode(run_dir / "pcap" / "h2-eth0.pcap"), decode(run_dir / "pcap" / "l1-eth1.pcap")
    data = lambda c: sum(n for op, n in c.items() if op <= 0x05)  # RC SEND first/middle/last/only
    assert data(host["bth"]) >= 256 and data(bottleneck["bth"]) >= 4 * 256, (host, bottleneck)
    assert host["bth"][OPCODE_ACK] > 0 and bottleneck["bth"][OPCODE_ACK] > 0
    c = summary["congestion"]
    # every CNP h1 sent crossed the bottleneck port; h2 received its own
    assert bottleneck["bth"][OPCODE_CNP] == c["cnp_sent"] > 0, (bottleneck, c["cnp_sent"])
    assert 0 < host["bth"][OPCODE_CNP] <= c["cnp_sent"]
    # PFC frames to h2 from l1: class-based (opcode 0x0101), the lossless class only; pause and resume
    assert set(host["pfc"]) == {(0x0101, PFC_CLASS_VECTOR)} and host["pfc"][(0x0101, PFC_CLASS_VECTOR)] >= 2
    assert not bottleneck["pfc"]  # h1 was never paused: it only receives


def test_a_killed_run_leaves_complete_pcaps_and_no_tcpdump(tmp_path):
    """SIGKILL of the run during the traffic: the kernel stops its tcpdumps (parent-death SIGINT), each file is
    complete (tshark reads it to the end without a cut-short packet); ``testbed clean`` removes the rest."""
    import re
    import signal
    import sys
    import time

    from conftest import run_cli

    scenario = tmp_path / "killme.yaml"
    scenario.write_text("name: killme\nfabric: {spines: 1, leaves: 2, hosts_per_leaf: 1}\n"
                        "workload: {sizes: {min_bytes: 4MiB, max_bytes: 4MiB}, iterations: 20, max_bytes_per_size: 1GiB}\n"
                        "output: {pcap: {ports: [h1, l1-s1]}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(scenario), "--results", str(tmp_path / "res")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        rid = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not rid:
            m = re.match(r"run (tb[0-9a-f]{4}): ", proc.stderr.readline())
            rid = m and m.group(1)
        assert rid, "run never reported its id"
        pcaps = tmp_path / "res"
        while time.monotonic() < deadline and sum(p.stat().st_size for p in pcaps.glob("*/pcap/*.pcap")) < 200_000:
            time.sleep(0.2)  # traffic is being captured
        dumps = [p for p in psutil.process_iter(["name", "cmdline"])
                 if p.info["name"] == "tcpdump" and rid in " ".join(p.info["cmdline"] or [])]
        assert len(dumps) == 2, dumps
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(dumps, timeout=10)
        assert not alive, alive
        for path in pcaps.glob("*/pcap/*.pcap"):
            res = subprocess.run(["tshark", "-r", str(path)] if shutil.which("tshark") else ["tcpdump", "-r", str(path)],
                                 capture_output=True, text=True)
            assert res.returncode == 0 and "cut short" not in res.stderr, (path, res.stderr[-500:])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        run_cli("clean")
