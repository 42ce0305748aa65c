"""How a host reacts to PFC frames, measured from a capture of its link (issue 7, item 4, host side).

Set-up shared by ``tests/integration/test_pfc_host.py`` and ``benchmarks/pfc_host_reaction.py``: one
leaf, two hosts at 10 Mbit/s (path MTU 4096) streaming to each other (a 2-rank ring all-reduce, real
agents and QPs), tcpdump at h1's end of its link, PFC frames sent from the leaf's port toward h1
(:mod:`dataplane.pfc_frames`). Frames sent past the qdisc skip the sending interface's packet
taps, so the capture runs in h1's namespace, where they arrive.

For each pause, from the capture (one clock: pcap timestamps are CLOCK_REALTIME in every namespace):

- ``drain_s``: last lossless data packet h1 sent after the frame arrived, minus the frame's time:
  what h1 had handed to its NIC before the pause (its socket buffer) still leaves;
- ``restart_s``: first data packet after the pause's end (quanta expiry, or the resume frame) minus
  that end: the host's resume latency;
- ``gap_s``: the silence between them.
"""
from __future__ import annotations

import contextlib
import subprocess
import threading

from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.inet import IP
from scapy.utils import rdpcap

from testbed.spec.scenario import parse_scenario
from traffic.wire.pfc import LOSSLESS_PRIORITY, quanta_s

LINK_BPS = 10e6
DSCP_LOSSLESS = 26


def scenario():
    """The two-host fabric (see module doc) as a ScenarioSpec."""
    return parse_scenario({"name": "pfc_host", "fabric": {"spines": 1, "leaves": 1, "hosts_per_leaf": 2,
                                                          "host_link_bps": LINK_BPS, "fabric_link_bps": LINK_BPS,
                                                          "mtu_bytes": 4200},
                           "transport": {"payload_bytes": 4096, "window_pkts": 16, "ack_every_pkts": 4},
                           "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})


@contextlib.contextmanager
def capture(node, ifname: str, path):
    """tcpdump on ``ifname`` in Mininet ``node``'s namespace into ``path``, armed on entry, stopped on exit.

    Raises RuntimeError when tcpdump does not start."""
    p = node.popen(["tcpdump", "-i", ifname, "-w", str(path), "-s", "96", "-U", "-B", "8192", "-n"],
                   stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        for line in p.stderr:  # "listening on ..." once the capture is armed
            if "listening on" in line:
                break
        else:
            raise RuntimeError(f"tcpdump on {ifname} did not start: exit code {p.wait()}")
        yield p
    finally:
        p.terminate()
        p.wait(5)


@contextlib.contextmanager
def streaming(agents, size_bytes: int, timeout_s: float = 60):
    """A 2-rank ring all-reduce of ``size_bytes`` running in a thread; on exit waits for it and
    returns its result in the yielded dict (``done["r"]``; AssertionError if it did not finish)."""
    done: dict = {}

    def run():
        try:
            done["r"] = agents.run_op(0, size_bytes, [[0, 1]], timeout_s)
        except Exception as e:  # noqa: BLE001  reported on exit
            done["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield done
    finally:
        t.join(timeout_s + 15)
    assert "r" in done, f"the all-reduce did not finish: {done.get('error')}"


def read_capture(path, host_ip: str) -> tuple[list, list[float]]:
    """(PFC frames as (time_s, scapy layer), times of the host's lossless data packets) in ``path``."""
    pkts = rdpcap(str(path))
    pfc = [(float(p.time), p[MACControlClassBasedFlowControl]) for p in pkts if MACControlClassBasedFlowControl in p]
    data = [float(p.time) for p in pkts if IP in p and p[IP].src == host_ip and p[IP].tos >> 2 == DSCP_LOSSLESS]
    return pfc, data


def reaction(data_times: list[float], t_frame: float, t_end: float, min_gap_s: float = 0.05) -> dict:
    """drain_s, restart_s, gap_s of the pause from ``t_frame`` to ``t_end`` (module doc); the first
    silence longer than ``min_gap_s`` after the frame is the pause. Raises ValueError if there is none."""
    after = [t for t in data_times if t >= t_frame - 0.05]
    for a, b in zip(after, after[1:]):
        if b - a > min_gap_s:
            return {"drain_s": a - t_frame, "restart_s": b - t_end, "gap_s": b - a}
    raise ValueError(f"the host never stopped sending after the pause at {t_frame:.3f}")


def expiry_s(frame, link_bps: float = LINK_BPS) -> float:
    """How long a frame pauses the lossless priority (its quanta x 512 / link rate)."""
    return quanta_s(getattr(frame, f"c{LOSSLESS_PRIORITY}_pause_time"), link_bps)
