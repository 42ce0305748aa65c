"""Every collective algorithm beyond ring all-reduce on the quickstart fabric (8 hosts, 10 Mbit/s, path MTU
4096; switch buffers 512 KB, see BUFFER_BYTES): one run of the runner (testbed.pipeline.runner.run_scenario) whose op
plan holds 1 warm-up and 2 timed operations of each, so the fabric is built once (about 20 s).

Checked per algorithm: every rank sent exactly the bytes its schedule lists (rank_ops.csv), the transport
delivered every posted byte exactly once (summary.json), and busbw/link (busbw from the span / (link x
payload efficiency)) lies in the band measured here for 512 KiB (figures in BANDS' comment).
"""
from pathlib import Path

from conftest import raise_if_disturbed
from testbed.workloads.plan import PlannedOp
from testbed.results.rundir import RunDir
from testbed.pipeline.runner import run_scenario
from testbed.workloads import load_scenario
from traffic import collectives

REPO = Path(__file__).resolve().parents[2]
SIZE_BYTES = 512 * 1024
N = 8
#: switch port buffer: the quickstart's 100 KB holds one QP's window (64 KiB) but not the fan-in of a tree
#: node (2 children and a parent) or of all-to-all (up to 7 senders), which tail-drop there without PFC and
#: congestion control (issue 7); 7 windows fit in 512 KB, so every algorithm runs without loss here
BUFFER_BYTES = 512_000
#: (collective, algorithm) -> busbw/link band at 512 KiB on 8 hosts, around what was measured here (2 cores
#: shared with other jobs, userspace OVS; 0 retransmissions, faithful)
BANDS = {
    ("allreduce", "tree"): (0.70, 0.90),          # measured 0.853, 0.855; at most 1.75/2 (inner nodes send 2 S)
    ("allreduce", "halving_doubling"): (0.50, 0.85),  # 0.642: its cross-leaf exchanges collide on ECMP uplinks
    ("reducescatter", "ring"): (0.95, 1.02),      # 0.998
    ("allgather", "ring"): (0.95, 1.02),          # 0.995, 0.998
    ("alltoall", "pairwise"): (0.50, 0.85),       # 0.604, 0.635: ECMP collisions, one step's block per peer
    ("alltoall", "direct"): (0.60, 0.95),         # 0.777
    ("broadcast", "ring"): (0.90, 1.02),          # 0.991, 0.994 (8 KiB chunks: the chain fills in n-2 of 70 steps)
    ("sendrecv", "ring"): (0.95, 1.02),           # 0.992, 0.997
}


def _plan(keys) -> list[PlannedOp]:
    world = (tuple(range(N)),)
    return [PlannedOp(size_bytes=SIZE_BYTES, iteration=i - 1, warmup=i == 0, layer="", collective=c, algorithm=a,
                      groups=world) for (c, a) in keys for i in range(3)]


def _run(tmp_path, keys) -> dict:
    """One run of the quickstart fabric with 1 warm-up + 2 timed ops of each algorithm of ``keys``; checks that
    every rank sent its schedule's bytes and every posted byte was delivered exactly once; returns the summary."""
    spec = load_scenario(REPO / "scenarios" / "quickstart.yaml")
    fabric = spec.fabric.model_copy(update={"buffer_bytes": BUFFER_BYTES})
    spec = spec.model_copy(update={"name": "collectives", "fabric": fabric})
    summary = run_scenario(spec, REPO / "scenarios" / "quickstart.yaml", tmp_path, quiet=True, ops_plan=_plan(keys))
    raise_if_disturbed(summary)  # the test asserts the run faithful
    run = RunDir.open(summary["run_dir"])
    ranks = run.rank_ops.merge(run.ops[["op_id", "collective", "algorithm"]], on="op_id")
    want_total = 0
    for (c, a), g in ranks.groupby(["collective", "algorithm"]):
        alg = collectives.get(c, a)
        want = {r: sum(t.nbytes for s in alg.schedule(r, N, SIZE_BYTES) for t in s.sends) for r in range(N)}
        assert all(g["sent_bytes"] == g["rank"].map(want)), (c, a)
        want_total += 3 * sum(want.values())
    t = summary["transport"]
    assert t["posted_bytes"] == t["delivered_bytes"] == t["acked_bytes"] == want_total
    assert t["order_errors"] == 0
    summary["figures"] = {(r["collective"], r["algorithm"]): round(r["busbw_ratio"], 3) for r in summary["sizes"]}
    print(f"busbw/link at {SIZE_BYTES} B on {N} hosts: {summary['figures']}; faithful {summary['faithful']} "
          f"{summary['violations']}; retransmitted {t['retx_pkts']}, switch drops {t['switch_drops_pkts']}")
    return summary


def test_every_collective_delivers_its_schedule_at_its_busbw(tmp_path):
    summary = _run(tmp_path, BANDS)
    for k, (lo, hi) in BANDS.items():
        assert lo <= summary["figures"][k] <= hi, (k, summary["figures"][k])
    assert summary["transport"]["retx_pkts"] == 0
    assert summary["faithful"] is True, summary["violations"]
