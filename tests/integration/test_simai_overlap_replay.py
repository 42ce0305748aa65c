"""Replay of ../shared/workloads/simai/workload_ep_test.txt (32 GPUs, TP 4, EP 4) on 8 hosts at 10 Mbit/s,
with overlap off and on: per-layer times, iteration time and exposed share; overlap on exposes less.

Sizes x 0.004, compute x 160 (dilation 40,000 x 0.004): one iteration takes about 27 s here. Each host is a
server of 4 GPUs: TP collectives stay in its scale-up domain, EP all-to-alls (2 groups of 4 hosts), DP_EP
and DP weight-gradient collectives cross the fabric. With overlap on, the DP_EP weight-gradient collectives
run behind the 1.19 s of compute of the layers below them (grad_param_compute) and stop being exposed.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import run_scenario_file

pytestmark = pytest.mark.integration

EP_TEST = Path(__file__).resolve().parents[3] / "shared" / "workloads" / "simai" / "workload_ep_test.txt"
SCENARIO = """
name: ep-test-{overlap}
fabric: {{spines: 2, leaves: 4, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: 100KB,
          mtu_bytes: 4200}}
transport: {{payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}}
workload:
  simai: {{path: {path}, size_scale: 0.004, time_unit: ns, iterations: 1, overlap: {overlap}}}
"""


@pytest.mark.skipif(not EP_TEST.exists(), reason="../shared/workloads/simai is not here")
def test_ep_test_replays_and_overlap_lowers_the_exposed_share(tmp_path):
    blocks = {}
    for overlap in ("off", "on"):
        res, s = run_scenario_file(tmp_path, SCENARIO.format(path=EP_TEST, overlap=overlap), expect_rc=None,
                                   name=overlap)
        assert s["ops_done"] == 20 and s["transport"]["delivered_bytes"] == s["transport"]["posted_bytes"]
        b = blocks[overlap] = s["replay"]
        assert b["overlap"] == overlap and b["gpus_per_host"] == 4 and b["compute_scale"] == pytest.approx(160)
        # the timeline: iteration = compute + the time the compute stream waited (sleep overheads: 3 %)
        assert b["iteration_s"] < 120
        assert b["iteration_s"] == pytest.approx(b["compute_s_per_iteration"] + b["exposed_comm_s"], rel=0.03)
        assert b["compute_s_per_iteration"] == pytest.approx(137078497e-9 * 160, rel=0.01)
        # per layer: every EP all-to-all moved 3/4 of 4 x 100,663 B per host, at most at the link rate
        a2a = [st for st in b["steps"] if st["collective"] == "ALLTOALL_EP"]
        assert len(a2a) == 16 and all(st["comm_s"] > 0.75 * 4 * 100663 * 8 / 10e6 for st in a2a)
        assert "exposed share" in res.stdout and "ALLTOALL_EP@fabric" in res.stdout
    wg = {o: [st for st in blocks[o]["steps"] if st["group"] == "DP_EP"] for o in blocks}
    assert len(wg["off"]) == len(wg["on"]) == 2
    # overlap off: the compute stream waits for each of them; on: they run behind the compute
    assert all(st["exposed_s"] >= 0.9 * st["comm_s"] for st in wg["off"])
    assert all(st["exposed_s"] < 0.005 for st in wg["on"])
    assert blocks["on"]["exposed_share"] < blocks["off"]["exposed_share"]
