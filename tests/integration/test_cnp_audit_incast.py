"""DCQCN's CNP audit on a real fabric (issue 16 item 8): a 3:1 incast marked by the controller's RED curve;
every CNP's send at its notification point and arrival at its reaction point, and every rate change with
its cause, land in cnp_events / qp_rates; the verdict's cnp_interval check passes. 4 hosts, 10 Mbit/s links
standing for 1 Gbit/s (dilation 100: N = 5 ms, K = T = 5.5 ms)."""
from pathlib import Path

import numpy as np

from conftest import run_scenario_file
from testbed.measure.cnp_audit import CNP_INTERVAL_TOLERANCE_NS
from testbed.results.rundir import RunDir

SCENARIO = """
name: cnp_audit
seed: 1
reference_link_bps: 1G
fabric: {spines: 1, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: 200KB,
         mtu_bytes: 4200, queue_backend: htb_classes}
congestion:
  buffers: {control_bytes: 30KB, lossless_bytes: 200KB, lossy_bytes: 100KB}
  ecn: {kmin_pkts: 5, kmax_pkts: 20, pmax: 0.2}
transport: {payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4, rto_us: auto, congestion_control: dcqcn}
workload:
  pattern: {kind: incast, senders: 3, receiver: h1, size_bytes: 1MiB, trials: 1}
"""


def test_every_cnp_and_rate_change_is_recorded_and_np_intervals_keep_n(tmp_path):
    res, s = run_scenario_file(tmp_path, SCENARIO, timeout=300, expect_rc=None, name="cnp_audit")
    print(res.stdout)
    run_dir = Path(s["run_dir"])
    run = RunDir.open(run_dir)
    n_ns = run.manifest["congestion_control"]["parameters"][
        "cnp_interval_us"]["value"] * 1000
    assert n_ns == 5_000_000 and "# CNP audit (N = 5 ms): shortest NP interval " in res.stdout
    assert (run_dir / "cnp_events.parquet").is_file() and (run_dir / "qp_rates.parquet").is_file()
    ev, rates, qps = run.cnp_events, run.qp_rates, run.qps.set_index(["rank", "qpn"])
    for (rank, peer, qpn, role), g in ev.groupby(["rank", "peer", "qpn", "role"]):
        t = np.sort(g["time_ns"].to_numpy())
        gaps_ms = np.diff(t) / 1e6
        print(f"{role} rank {rank} qpn {qpn:#x} (peer {peer}): {len(t)} CNPs, shortest gap "
              f"{gaps_ms.min() if len(gaps_ms) else float('nan'):.3f} ms, median {np.median(gaps_ms):.3f} ms")
        counter = qps.loc[(rank, qpn), "cnps_tx" if role == "np" else "cnps_rx"]
        assert len(t) == counter                            # every CNP the counters saw is in the table
        if role == "np":
            assert (np.diff(t) >= n_ns - CNP_INTERVAL_TOLERANCE_NS).all()
        else:  # the RP's cuts are its CNP arrivals
            cuts = rates[(rates["rank"] == rank) & (rates["qpn"] == qpn) & (rates["event"] == "cnp")]
            assert sorted(cuts["time_ns"]) == list(t)
    assert set(ev["role"]) == {"np", "rp"} and (ev["role"] == "np").sum() >= 20
    check, fig = s["checks"]["cnp_interval"], s["fidelity"]["cnp_interval"]
    print(check, {k: v for k, v in fig["rp"].items() if k != "per_qp"}, fig["unrecorded"])
    assert check["status"] == "passed" and fig["np"]["below_n"] == 0 and fig["np"]["min_interval_ms"] >= 5.0 - 1e-3
    assert fig["np"]["cnps"] == s["transport"]["cnps_tx"] and fig["unrecorded"]["np_cnps"] == 0
    assert fig["rp"]["cnps"] + fig["rp"]["cnps_not_received"] == fig["np"]["cnps"]
    assert {"start", "cnp", "timer", "alpha_timer"} <= set(rates["event"])
    assert {"fast_recovery", "additive"} <= set(rates["stage"])
    assert (rates.loc[rates["event"].isin(["timer", "bytes"]), "stage"] != "").all()
