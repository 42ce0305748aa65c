"""Dual-plane fabric, scale-up domain, channels and the T = a + b S fit on real fabrics.

- dual-plane (2 planes of 1 spine and 2 leaves, 4 hosts): a ring all-reduce in 2 channels runs
  faithfully, every byte once, and puts the same bytes on both planes' switch ports (ports.csv);
- scale-up (2 servers of 4 GPUs on a spine-leaf, scale-up switches at 4 x the host rate): a
  4-rank all-reduce inside server 1 (a tensor-parallel group) sends not one frame out of a
  leaf or spine port and runs at 4 x the host link's busbw;
- a ring all-reduce of 4 ranks in 2 channels over a 64 KiB..1 MiB sweep: each channel's QPs carry
  exactly their share, and the time fits T = a + b S with R^2 >= 0.98 and b within 10% of
  2(n-1)/(n B) (summary.json ``fit``).
"""
import pandas as pd

from conftest import run_scenario_file
from testbed.results.rundir import RunDir

TRANSPORT = "transport: {payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}\n"
KIB = 1024


def _run(tmp_path, name: str, fabric: str, workload: str) -> dict:
    """Run a scenario of ``fabric`` and ``workload`` (YAML flow mappings' contents) for 512 KiB-class
    tests with the RoCE path MTU 4096; return summary.json (the run must be faithful)."""
    return run_scenario_file(tmp_path, f"name: {name}\nfabric: {{{fabric}, buffer_bytes: 100KB, mtu_bytes: 4200}}\n"
                             + TRANSPORT + f"workload: {{collective: allreduce, algorithm: ring, {workload},"
                             " iterations: 2, warmup_iterations: 0}\n", timeout=180)[1]


def _port_bytes(run_dir) -> pd.Series:
    """Bytes each switch port sent over the run (last sample of ports.csv)."""
    ports = RunDir.open(run_dir).ports
    return ports.groupby("port")["tx_bytes"].max()


def test_dual_plane_allreduce_puts_half_the_bytes_on_each_plane(tmp_path):
    size = 512 * KIB
    s = _run(tmp_path, "dual-plane-itest",
             "kind: dual_plane, planes: 2, spines: 1, leaves: 2, hosts_per_leaf: 2, host_link_bps: 5M",
             "channels: 2, sizes: {min_bytes: 512KiB, max_bytes: 512KiB}")
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] == 2 * 2 * 3 * size
    assert t["retx_pkts"] == 0
    ratio = s["sizes"][0]["busbw_ratio"]
    print(f"dual-plane ring all-reduce 512 KiB, 4 ranks, 2 channels: busbw/link {ratio:.3f}")
    assert 1.90 <= ratio <= 2.06, ratio                 # two NICs of 5 Mbit/s per host
    sent = _port_bytes(next(tmp_path.glob("scenario/*/")))
    rid = s["run_id"]
    per_plane = [int(sent[sent.index.str.startswith(f"{rid}{p}")].sum()) for p in (0, 1)]
    print(f"bytes on plane 0 / plane 1 switch ports: {per_plane}")
    assert min(per_plane) > 0.98 * max(per_plane) and min(per_plane) > 2 * 3 * size
    assert s["faithful"] is True, s["violations"]


def test_scale_up_group_inside_a_server_never_touches_a_leaf_port(tmp_path):
    size = 512 * KIB
    s = _run(tmp_path, "scale-up-itest", "kind: spine_leaf, spines: 1, leaves: 2, hosts_per_leaf: 4, "
             "host_link_bps: 5M, scale_up: {gpus_per_server: 4, rate_multiple: 4}",
             "ranks: 4, sizes: {min_bytes: 512KiB, max_bytes: 512KiB}")
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == 2 * 2 * 3 * size and t["retx_pkts"] == 0
    sent = _port_bytes(next(tmp_path.glob("scenario/*/")))
    rid = s["run_id"]
    scale_out = sent[~sent.index.str.startswith(f"{rid}u")]
    up = sent[sent.index.str.startswith(f"{rid}u1")]
    print(f"scale-out ports sent {int(scale_out.sum())} B, server 1's scale-up ports {int(up.sum())} B, "
          f"busbw/link {s['sizes'][0]['busbw_ratio']:.3f}")
    assert len(scale_out) == 12 and scale_out.sum() == 0     # 8 leaf host ports, 2 uplinks, 2 spine ports: no frame
    assert up.sum() > 2 * 2 * 3 * size
    assert 3.8 <= s["sizes"][0]["busbw_ratio"] <= 4.15       # the scale-up links run at 4 x the host rate
    assert s["faithful"] is True, s["violations"]


def test_ring_allreduce_in_channels_fits_a_plus_b_s(tmp_path):
    s = _run(tmp_path, "fit-itest", "spines: 2, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M",
             "channels: 2, ranks: 4, sizes: {min_bytes: 64KiB, max_bytes: 1MiB, factor: 2}")
    (fit,) = s["fit"]
    print(f"fit over {fit['sizes']} sizes: a {fit['a_s'] * 1e3:.2f} ms, b {fit['b_s_per_byte'] * 1e9:.1f} ns/B, "
          f"R^2 {fit['r2']:.5f}, b / (2(n-1)/(n B)) {fit['b_ratio']:.3f}")
    assert (fit["collective"], fit["algorithm"], fit["group_size"], fit["sizes"]) == ("allreduce", "ring", 4, 5)
    assert fit["r2"] >= 0.98 and abs(fit["b_ratio"] - 1) <= 0.10
    # a start-up time below 0 only as far as HTB's burst + one frame lets an operation end early (fit.py)
    assert fit["a_s"] >= fit["a_burst_floor_s"], fit
    qps = RunDir.open(s["run_dir"]).qps
    resp = qps[qps["role"] == "responder"].groupby("channel")["delivered_bytes"].sum()
    sizes = [64 * KIB << i for i in range(5)]
    want = [sum(2 * 2 * 3 * ((sz + 1 - c) // 2) for sz in sizes) for c in (0, 1)]   # 2 iterations x 2(n-1) x share
    assert resp.tolist() == want
    assert qps[qps["role"] == "requester"]["udp_sport"].nunique() == 4 * 2 * 2  # ranks x peers x channels: own ports
    assert s["faithful"] is True, s["violations"]
