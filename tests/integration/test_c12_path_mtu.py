"""C12: RoCE path MTUs 1024, 2048 and 4096 end to end, links and switches at a matching MTU."""
import subprocess

import pytest

from conftest import run_scenario_file

from testbed.measure import link_model
from testbed.results.rundir import RunDir

SCENARIO = """
name: mtu{payload}
fabric: {{spines: 1, leaves: 2, hosts_per_leaf: 1, host_link_bps: 20M, fabric_link_bps: 20M, mtu_bytes: {mtu}}}
transport: {{payload_bytes: {payload}}}
workload: {{sizes: {{min_bytes: 512KiB, max_bytes: 512KiB}}, iterations: 1, warmup_iterations: 0}}
"""


@pytest.mark.parametrize("payload,mtu", [(1024, 1500), (2048, 2100), (4096, 4200)])
def test_path_mtu_end_to_end_every_byte_delivered(tmp_path, payload, mtu):
    res, s = run_scenario_file(tmp_path, SCENARIO.format(payload=payload, mtu=mtu), timeout=120)
    run = RunDir.open(s["run_dir"])
    t = s["transport"]
    print(f"path MTU {payload} on link MTU {mtu}: {t['delivered_bytes']} of {t['posted_bytes']} bytes, "
          f"{t['sent_pkts']} packets, busbw/link {s['sizes'][0]['busbw_ratio']:.3f}")
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] == 2 * 512 * 1024
    assert t["order_errors"] == 0 and t["retx_pkts"] == 0 and t["unexplained_lost_pkts"] == 0
    qps = run.qps
    req = qps[(qps["role"] == "requester") & (qps["tx_pkts"] > 0)]
    # 2 ranks: each sends two chunks of 256 KiB, i.e. 2 * 256 KiB / payload full-size packets
    assert req["tx_pkts"].tolist() == [2 * 256 * 1024 // payload] * 2
    assert (req["tx_wire_bytes"] == req["tx_pkts"] * link_model.data_frame_bytes(payload)).all()
    assert run.manifest["link_model"]["mtu_bytes"] == mtu
    assert s["faithful"], s["violations"]
