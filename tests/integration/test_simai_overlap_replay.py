"""Replay of $TESTBED_SHARED_WORKLOADS/simai/workload_ep_test.txt (32 GPUs, TP 4, EP 4) on 8 hosts at 10 Mbit/s,
with overlap off and on: per-layer times, iteration time and exposed share; overlap on hides the DP_EP
weight-gradient collectives.

Sizes x 0.001, compute x 40 (dilation 40,000 x 0.001): one iteration takes about 7 s here. Each host is a
server of 4 GPUs: TP collectives stay in its scale-up domain, EP all-to-alls (2 groups of 4 hosts), DP_EP
and DP weight-gradient collectives cross the fabric. With overlap on, the DP_EP weight-gradient collectives
run behind the 1.19 s of compute of the layers below them (grad_param_compute) and stop being exposed
(about 18 ms of 6.7 s; on their own stream they then share the NICs with the next EP all-to-all). The EP
all-to-alls (1.1 s, exposed in both modes) vary more than that from run to run on a shared machine, so one run compares both (``overlap: compare``: off, on, on, off).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.integration.conftest import run_scenario_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from shared_files import needs, shared  # noqa: E402

pytestmark = pytest.mark.integration

EP_TEST = shared("simai/workload_ep_test.txt")
SCENARIO = """
name: ep-test-overlap
fabric: {{spines: 2, leaves: 4, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: 100KB,
          mtu_bytes: 4200}}
transport: {{payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}}
workload:
  simai: {{path: {path}, size_scale: 0.001, time_unit: ns, iterations: 2, overlap: compare}}
"""


@needs(EP_TEST)
def test_ep_test_replays_and_overlap_lowers_the_exposed_share(tmp_path):
    res, s = run_scenario_file(tmp_path, SCENARIO.format(path=EP_TEST), expect_rc=None)
    assert s["ops_done"] == 4 * 20 and s["transport"]["delivered_bytes"] == s["transport"]["posted_bytes"]
    assert s["replay"]["order"] == ["off", "on", "on", "off"]
    blocks = {o: s["replay"][o] for o in ("off", "on")}
    for overlap, b in blocks.items():
        assert b["overlap"] == overlap and b["iterations"] == 2 and b["gpus_per_host"] == 4
        assert b["compute_scale"] == pytest.approx(40)
        # the timeline: iteration = compute + the time the compute stream waited (sleep overheads: 3 %)
        assert max(b["iterations_s"]) < 120
        assert b["iteration_s"] == pytest.approx(b["compute_s_per_iteration"] + b["exposed_comm_s"] + b["overhead_s"],
                                                 rel=0.03)
        assert b["exposed_comm_s"] <= b["comm_s_per_iteration"] + 1e-9 and b["overhead_s"] >= 0
        assert b["compute_s_per_iteration"] == pytest.approx(137078497e-9 * 40, rel=0.01)
        # per layer: every EP all-to-all moved 3/4 of 4 x 25,166 B per host, at most at the link rate
        a2a = [st for st in b["steps"] if st["collective"] == "ALLTOALL_EP"]
        assert len(a2a) == 16 and all(st["comm_s"] > 0.75 * 4 * 25166 * 8 / 10e6 for st in a2a)
    assert res.stdout.count("exposed share") == 2 and "ALLTOALL_EP@fabric" in res.stdout
    wg = {o: [st for st in blocks[o]["steps"] if st["group"] == "DP_EP"] for o in blocks}
    assert len(wg["off"]) == len(wg["on"]) == 2
    # overlap off: the compute stream waits for each of them; on: they run behind the compute
    assert all(st["exposed_s"] >= 0.9 * st["comm_s"] for st in wg["off"])
    assert all(st["exposed_s"] < 0.005 for st in wg["on"])
    # each group scope runs on its own stream now (testbed.workloads.replay.run): the hidden DP_EP collectives (about
    # 18 ms here) share the NICs with the next blocking EP all-to-all instead of queueing before it, so the
    # saving is below the all-to-alls' run-to-run spread (about 35 ms): overlap on exposes no more than off
    # beyond that spread, and its iteration is what the model's critical path gives from its measured times
    assert blocks["on"]["exposed_comm_s"] < blocks["off"]["exposed_comm_s"] + 0.08
    assert blocks["on"]["iteration_s"] == pytest.approx(blocks["on"]["predicted_iteration_s"], rel=0.03)
