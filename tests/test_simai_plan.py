"""The op plan of a SimAI replay (testbed.workloads.plan): group scopes, notes, refusals, concurrent group rings."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.spec.scenario import ScenarioError
from traffic.workloads.parallel_groups import rank_groups

OURS = Path(__file__).resolve().parents[1] / "scenarios" / "workloads"

C11_FILE = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: 1 "
            "all_gpus: {all_gpus} checkpoints: 0 checkpoint_initiates: 0\n"
            "{n}\n"
            "layer_tp\t-1\t3000000000\tALLREDUCE\t1048576\t4294967296\tNONE\t0\t1\tALLREDUCE\t1048576\t1\n"
            "{extra}")


def _scenario(tmp_path, workload_text, iterations=1, leaves=4):
    (tmp_path / "w.txt").write_text(workload_text)
    p = tmp_path / "s.yaml"
    p.write_text(f"fabric: {{spines: 2, leaves: {leaves}, hosts_per_leaf: 2}}\n"
                 f"workload: {{simai: {{path: w.txt, iterations: {iterations}}}}}\n")
    return p


def test_plan_tp_and_dp_scoped_allreduce_on_8_hosts(tmp_path):
    from testbed.workloads.plan import PlannedOp
    from testbed.workloads import plan_workload
    from testbed.workloads.plan import plan_peers
    from testbed.workloads import load_scenario
    spec = load_scenario(_scenario(tmp_path, C11_FILE.format(all_gpus=8, n=1, extra=""), iterations=2))
    plan = plan_workload(spec)
    tp = ((0, 1), (2, 3), (4, 5), (6, 7))
    dp = ((0, 2, 4, 6), (1, 3, 5, 7))
    # each group scope on its own stream (communicator): TP 0, DP 1
    assert plan.ops == tuple(PlannedOp(1048576, it, False, f"layer_tp:{ph}", "allreduce", g, gs, stream=st)
                             for it in (0, 1) for ph, g, gs, st in (("fwd", "TP", tp, 0), ("wg", "DP", dp, 1)))
    assert [(o.group_size, o.n_groups) for o in plan.ops[:2]] == [(2, 4), (4, 2)]
    assert plan.ops[1].meta() == {"size_bytes": 1048576, "iteration": 0, "warmup": False,
                                  "layer": "layer_tp:wg", "collective": "allreduce", "algorithm": "ring", "group": "DP",
                                  "group_size": 4, "n_groups": 2, "stream": 1, "job": ""}
    assert ("1 TP-scoped allreduce/ring (4 concurrent rings of 2 ranks), 1 DP-scoped allreduce/ring (2 concurrent "
            "rings of 4 ranks)") in plan.notes[0]
    # queue pairs: TP ring neighbour plus both DP ring neighbours
    assert plan_peers(plan.ops) == {0: [1, 2, 6], 1: [0, 3, 7], 2: [0, 3, 4], 3: [1, 2, 5],
                                    4: [2, 5, 6], 5: [3, 4, 7], 6: [0, 4, 7], 7: [1, 5, 6]}


def test_plan_of_a_size_sweep_is_one_ring_of_all_hosts():
    from testbed.workloads import plan_workload
    from testbed.spec.scenario import parse_scenario
    spec = parse_scenario({"fabric": {"leaves": 2, "hosts_per_leaf": 2}, "workload": {
        "sizes": {"min_bytes": 1024, "max_bytes": 4096, "factor": 4}, "iterations": 2,
        "warmup_iterations": 1}})
    plan = plan_workload(spec)
    assert [(o.size_bytes, o.iteration, o.warmup) for o in plan.ops] == [
        (1024, -1, True), (1024, 0, False), (1024, 1, False),
        (4096, -1, True), (4096, 0, False), (4096, 1, False)]
    assert {(o.group, o.groups, o.group_size) for o in plan.ops} == {("all", ((0, 1, 2, 3),), 4)}
    assert plan.notes == ()


def test_size_zero_is_skipped_with_a_note_never_run_as_one_byte(tmp_path):
    from testbed.workloads import plan_workload
    from testbed.workloads import load_scenario
    zero = "layer_zero\t-1\t1\tALLREDUCE\t0\t1\tNONE\t0\t1\tALLREDUCE\t0\t1\n"
    spec = load_scenario(_scenario(tmp_path, C11_FILE.format(all_gpus=8, n=2, extra=zero)))
    plan = plan_workload(spec)
    assert [o.size_bytes for o in plan.ops] == [1048576, 1048576]
    assert [o.layer for o in plan.ops] == ["layer_tp:fwd", "layer_tp:wg"]
    (note,) = [m for m in plan.notes if "size 0" in m]
    assert "skipped 2 ALLREDUCE entries of size 0" in note
    assert "line 4 layer_zero:fwd" in note and "line 4 layer_zero:wg" in note
    # a file whose only ALLREDUCE has size 0 is refused: nothing to run
    only_zero = C11_FILE.format(all_gpus=8, n=0, extra="").rsplit("\n", 2)[0].replace("\n0", "\n1") + \
        "\n" + zero
    with pytest.raises(ScenarioError, match=r"has no entry that crosses the fabric.*size 0"):
        load_scenario(_scenario(tmp_path, only_zero))


def test_other_collectives_and_one_rank_groups_are_noted(tmp_path):
    from testbed.workloads import plan_workload
    from testbed.workloads import load_scenario
    text = (OURS / "tiny_moe_tp2_ep2.txt").read_text()
    plan = plan_workload(load_scenario(_scenario(tmp_path, text)))
    tp = ((0, 1), (2, 3), (4, 5), (6, 7))
    # ring all-gather and reduce-scatter are registered: those entries run in their groups; all-to-all has
    # no ring: it runs by its default, pairwise
    assert [(o.layer, o.collective, o.group) for o in plan.ops][:3] == [
        ("embedding_layer:fwd", "allreduce", "TP"), ("attention_column:fwd", "allgather", "TP"),
        ("attention_row:fwd", "reducescatter", "TP")]
    assert plan.ops[0].groups == tp and len(plan.ops) == 12
    assert {(o.group, o.groups) for o in plan.ops if o.group == "DP_EP"} == {("DP_EP", ((0, 4), (1, 5), (2, 6),
                                                                                         (3, 7)))}
    notes = "\n".join(plan.notes)
    assert {(o.layer, o.algorithm, o.groups) for o in plan.ops if o.collective == "alltoall"} == {
        (f"mlp_moelayer:{ph}", "pairwise", ((0, 2), (1, 3), (4, 6), (5, 7))) for ph in ("fwd", "ig")}
    assert "not supported" not in notes
    assert "ALLGATHER (TP)" not in notes
    tp1 = C11_FILE.format(all_gpus=8, n=1, extra="").replace("group: 2", "group: 1")
    plan = plan_workload(load_scenario(_scenario(tmp_path, tp1)))
    assert [(o.group, o.group_size) for o in plan.ops] == [("DP", 8)]
    assert any("skipped 1 ALLREDUCE (TP) entry over groups of 1 rank: no data moves (line 3 layer_tp:fwd)"
               in m for m in plan.notes)


def test_all_gpus_must_be_a_multiple_of_the_hosts(tmp_path):
    from testbed.workloads import load_scenario
    with pytest.raises(ScenarioError) as info:
        load_scenario(_scenario(tmp_path, C11_FILE.format(all_gpus=12, n=1, extra="")))
    msg = str(info.value)
    assert "workload.simai.path" in msg and "w.txt:1: all_gpus: 12 but the fabric has 8 hosts" in msg
    assert "spine_leaf (spines 2, leaves 4, hosts_per_leaf 2" in msg
    # 16 GPUs on 8 hosts: servers of 2 GPUs (TP 2 inside them); 64 GPUs with TP 2 on 8 hosts would put 4
    # ranks of one DP ring on each host: refused, naming the group; on 64 hosts one rank per host
    load_scenario(_scenario(tmp_path, C11_FILE.format(all_gpus=16, n=1, extra="")))
    with pytest.raises(ScenarioError, match=r"all_gpus: 64 on the fabric.s 8 hosts: rank group \(0, 2, 4, .*puts several ranks on one host"):
        load_scenario(_scenario(tmp_path, C11_FILE.format(all_gpus=64, n=1, extra="")))
    load_scenario(_scenario(tmp_path, C11_FILE.format(all_gpus=64, n=1, extra=""), leaves=32))


@pytest.mark.parametrize("change,words", [
    (("pp: 1", "pp: 2"), "w.txt:1: pp 2 but pp_comm is 0 or missing"),
    (("4294967296", str(2**64)), "w.txt:3: column 'ig_compute_ticks' value '18446744073709551616': is larger"),
    (("ALLREDUCE\t1048576\t1\n", "ALLREDUCE\t18446744073709551616\t1\n"), "w.txt:3: column 'wg_size_bytes'"),
])
def test_bad_files_are_refused_when_the_scenario_loads(tmp_path, change, words):
    from testbed.workloads import load_scenario
    text = C11_FILE.format(all_gpus=8, n=1, extra="").replace(*change)
    with pytest.raises(ScenarioError, match="workload.simai.path") as info:
        load_scenario(_scenario(tmp_path, text))
    assert words in str(info.value)


def _objects():
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    netns = sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else []
    return {line.split(":")[1].strip() for line in links.splitlines()}, set(netns)


@pytest.mark.skipif(os.geteuid() != 0, reason="the CLI run path needs root")
def test_cli_refuses_all_gpus_12_on_8_hosts_before_building(tmp_path):
    p = _scenario(tmp_path, C11_FILE.format(all_gpus=12, n=1, extra=""))
    before = _objects()
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(p), "--results", str(tmp_path / "res")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert "testbed: error:" in res.stderr and "all_gpus: 12 but the fabric has 8 hosts" in res.stderr
    links, netns = _objects()
    assert not (links - before[0]) and not (netns - before[1]), "the refused run created objects"
    assert not (tmp_path / "res").exists()


def test_busbw_of_a_group_op_uses_the_group_size():
    """nccl-tests busbw = algbw x 2(g-1)/g with g the ranks of each concurrent ring."""
    from testbed.results import tables as results
    rank_rows = [{"op_id": k, "rank": r, "t_start_ns": 0, "t_end_ns": 1_000_000_000}
                 for k in range(3) for r in range(8)]
    meta = {0: {"size_bytes": 1_000_000, "iteration": 0, "warmup": False, "group": "TP", "group_size": 2},
            1: {"size_bytes": 1_000_000, "iteration": 0, "warmup": False, "group": "DP", "group_size": 4},
            2: {"size_bytes": 1_000_000, "iteration": 0, "warmup": False}}      # a sweep: all 8 ranks
    ops = results.ops_table(rank_rows, meta, 8)
    assert ops["algbw_bps"].tolist() == [8e6, 8e6, 8e6]
    assert ops["busbw_bps"].tolist() == [8e6, 12e6, 14e6]
    sizes = results.size_table(ops, 8, goodput_bps=10e6)
    assert sizes[["group_size", "count", "busbw_bps"]].values.tolist() == [[2, 1, 8e6], [4, 1, 12e6],
                                                                             [8, 1, 14e6]]


def test_agents_run_concurrent_group_rings_over_loopback():
    """Real agents and queue pairs (UDP over loopback, no fabric): TP then DP rings of a TP 2 job on 4 ranks."""
    import threading

    from testbed.workloads.plan import PlannedOp
    from testbed.workloads.plan import plan_peers
    from traffic.agent import Agent
    from traffic.protocol import AgentConfig, RankAddress, RunOp
    from traffic.transport import TransportParams
    tp, dp = rank_groups("TP", 4, 2), rank_groups("DP", 4, 2)
    assert (tp, dp) == (((0, 1), (2, 3)), ((0, 2), (1, 3)))
    plan = [PlannedOp(10_000, 0, False, "l:fwd", group="TP", groups=tp),
            PlannedOp(10_001, 0, False, "l:wg", group="DP", groups=dp)]
    peers = plan_peers(plan)
    ranks = [RankAddress(r, f"127.79.0.{r + 1}", f"h{r + 1}") for r in range(4)]
    agents = [Agent(AgentConfig(rank=r, ranks=ranks, peers=peers[r], seed=1,
                                transport=TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4,
                                                          rto_us=50_000))) for r in range(4)]
    try:
        for k, op in enumerate(plan):
            out = [None] * 4
            cmd = RunOp(op_id=k, collective="allreduce", algorithm="ring", size_bytes=op.size_bytes,
                        groups=[list(g) for g in op.groups], timeout_s=20.0)
            threads = [threading.Thread(target=lambda r=r: out.__setitem__(r, agents[r].run_op(cmd)))
                       for r in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            # a 2-rank ring all-reduce: each rank sends its half-chunk twice (2(g-1) steps of S/g)
            half = [op.size_bytes // 2 + (op.size_bytes % 2), op.size_bytes // 2]
            for r, rec in enumerate(out):
                g = next(i for i, grp in enumerate(op.groups) if r in grp)
                pos = op.groups[g].index(r)
                assert (rec.group_index, rec.group_size) == (g, 2)
                assert rec.sent_bytes == half[pos] + half[(pos - 1) % 2]
        # QPs used: TP neighbours carried op 0, DP neighbours op 1; no traffic between other pairs
        delivered = {(r, q): qp.counters.delivered_bytes for r, a in enumerate(agents)
                     for q, qp in a.recv_qp.items()}
        assert delivered == {(0, 1): 10_000, (1, 0): 10_000, (2, 3): 10_000, (3, 2): 10_000,
                             (0, 2): 10_001, (2, 0): 10_001, (1, 3): 10_001, (3, 1): 10_001}
    finally:
        for a in agents:
            a.close()
