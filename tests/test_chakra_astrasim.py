"""Chakra traces as ASTRA-sim means them (issue 29 item 2): comm_size is the data one rank holds when the
collective starts (ASTRA-sim's Ring.cc), the bytes each rank sends equal ASTRA-sim's; nodes a network replay
cannot run are skipped with one warning; the exposed communication and overlap figures of a replay."""
import pytest

from shared_files import needs, shared
from testbed.workloads.chakra.plan import chakra_plan, fabric_size_bytes
from testbed.workloads.chakra.run import compute_only_s, overlap_figures
from testbed.workloads.replay.run import SAVING_FORMULA
from testbed.spec.scenario import ScenarioError, parse_scenario
from traffic import collectives
from traffic.workloads.chakra.generate import metadata, node, write_trace
from traffic.workloads.chakra.graph import replay_graph
from traffic.workloads.chakra.trace import read_traces

SHARED = shared("chakra_astrasim")
C = 5040  # divisible by every n in 2..8: ASTRA-sim's messages of C / n are whole bytes

#: bytes one rank sends in ASTRA-sim (Ring.cc: messages x msg_size; all-to-all: AllToAll.cc), n ranks, comm_size c
ASTRA_SIM_SENT = {"allreduce": lambda n, c: 2 * (n - 1) * c // n, "reducescatter": lambda n, c: (n - 1) * c // n,
                  "allgather": lambda n, c: (n - 1) * c, "alltoall": lambda n, c: (n - 1) * c // n}


def _sent_per_rank(collective: str, algorithm: str, n: int, size: int) -> list[int]:
    alg = collectives.get(collective, algorithm)
    return [sum(t.nbytes for st in alg.schedule(p, n, size) for t in st.sends) for p in range(n)]


@pytest.mark.parametrize("collective,algorithm", [("allreduce", "ring"), ("reducescatter", "ring"),
                                                  ("allgather", "ring"), ("alltoall", "pairwise"),
                                                  ("alltoall", "direct")])
@pytest.mark.parametrize("n", range(2, 9))
def test_each_rank_sends_what_astra_sims_ring_sends(collective, algorithm, n):
    s = fabric_size_bytes(collective, C, n)
    assert _sent_per_rank(collective, algorithm, n, s) == [ASTRA_SIM_SENT[collective](n, C)] * n
    # nccl-tests' S: every collective runs comm_size as its S (an all-gather's output: (n-1)/n of it per rank)
    assert fabric_size_bytes(collective, C, n, means="nccl-tests") == C


def test_sizes_scale_per_rank_before_the_all_gather_multiplies():
    assert fabric_size_bytes("allgather", 1 << 20, 4, 1 / 64) == 4 * 16384
    assert fabric_size_bytes("allgather", 3, 4, 0.1) == 4            # at least 1 byte per rank
    assert fabric_size_bytes("allreduce", 1 << 20, 4, 0.25) == 1 << 18
    assert fabric_size_bytes("broadcast", 1000, 8) == 1000            # the root's buffer
    with pytest.raises(ValueError, match="comm_size_means = 'bytes': allowed astra-sim, nccl-tests"):
        fabric_size_bytes("allreduce", 8, 2, means="bytes")


def _spec(path, hosts=4, **chakra):
    return parse_scenario({"fabric": {"leaves": 1, "hosts_per_leaf": hosts},
                           "workload": {"chakra": {"path": str(path), "compute_scale": "off", **chakra}}})


def _coll(i, comm_type, size, deps=(), name=None):
    return node(i, name or f"c{i}", "COMM_COLL_NODE", deps=deps, comm_type=comm_type, comm_size=size, pg_name="0")


def test_a_plan_runs_an_all_gather_with_ranks_x_comm_size_unless_nccl_tests_is_asked(tmp_path):
    for r in range(4):
        write_trace(tmp_path / f"ag.{r}.et", metadata(r, 4), [_coll(1, "ALL_GATHER", 1 << 20),
                                                              _coll(2, "REDUCE_SCATTER", 1 << 20, deps=[1])])
    plan = chakra_plan(_spec(tmp_path, size_scale=0.25))
    assert [(op.collective, op.size_bytes) for op in plan.ops] == [("allgather", 1 << 20), ("reducescatter", 1 << 18)]
    assert plan.replay.sizes == {0: 1 << 18, 1: 1 << 18} and plan.replay.comm_size_means == "astra-sim"
    plan = chakra_plan(_spec(tmp_path, size_scale=0.25, comm_size_means="nccl-tests"))
    assert [op.size_bytes for op in plan.ops] == [1 << 18, 1 << 18]
    with pytest.raises(ScenarioError, match=r"workload.chakra.comm_size_means: Input should be 'astra-sim' or "
                                            r"'nccl-tests' \(got 'output'\)"):
        _spec(tmp_path, comm_size_means="output")


@needs(SHARED)
@pytest.mark.parametrize("name,collective,n", [("all_reduce_4npus_1MB", "allreduce", 4),
                                               ("reduce_scatter_4npus_1MB", "reducescatter", 4),
                                               ("all_to_all_8npus_1MB", "alltoall", 8)])
def test_astra_sims_example_traces_plan_one_collective_of_1_mib(name, collective, n):
    plan = chakra_plan(_spec(SHARED / name, hosts=8))
    (op,) = plan.ops
    assert (op.collective, op.groups, op.size_bytes) == (collective, (tuple(range(n)),), 1 << 20)
    assert not plan.replay.skipped and not any(x.startswith("warning: ") for x in plan.notes)


def test_skipped_nodes_are_counted_in_one_warning_listing_their_kinds(tmp_path):
    for r in range(2):
        write_trace(tmp_path / f"t.{r}.et", metadata(r, 2), [
            node(1, "## process_group:init ##", "METADATA_NODE"),
            node(2, "c10d::allreduce_(0)", "COMM_COLL_NODE", deps=[1]),
            _coll(3, "ALL_REDUCE", 4096, deps=[2], name="ncclDevKernel_AllReduce"),
            node(4, "c10d::broadcast_(1)", "COMM_COLL_NODE", deps=[3]),
            node(5, "c10d::broadcast_(2)", "COMM_COLL_NODE", deps=[4])])
    plan = chakra_plan(_spec(tmp_path, hosts=2))
    warnings = [x for x in plan.notes if x.startswith("warning: ")]
    assert warnings == [f"warning: {tmp_path}: skipped 8 nodes a network replay cannot run (kinds: "
                        "## process_group:init ## (METADATA_NODE) x 2; c10d::allreduce_ (COMM_COLL_NODE without "
                        "comm_type or comm_size) x 2; c10d::broadcast_ (COMM_COLL_NODE without comm_type or "
                        "comm_size) x 4); the nodes that depended on them wait for what they depended on"]
    assert len(plan.ops) == 1 and plan.ops[0].size_bytes == 4096


def _graph(tmp_path, per_rank):
    for r, nodes in enumerate(per_rank):
        write_trace(tmp_path / f"t.{r}.et", metadata(r, len(per_rank)), nodes)
    return replay_graph(read_traces(str(tmp_path)))


def test_compute_only_time_is_the_graph_with_free_communication(tmp_path):
    """Rank 0: A (100 us) -> all-reduce -> B (50 us); rank 1: C (300 us) -> all-reduce, D (20 us, no deps).
    Free communication: the all-reduce ends when C does (300), B runs 300-350; D waits behind C on rank 1's
    lane (300-320): W = 350 us."""
    comp = lambda i, us, deps=(): node(i, f"k{i}", "COMP_NODE", deps=deps, duration_us=us)  # noqa: E731
    g = _graph(tmp_path, [[comp(1, 100), _coll(2, "ALL_REDUCE", 64, deps=[1]), comp(3, 50, deps=[2])],
                          [comp(1, 300), _coll(2, "ALL_REDUCE", 64, deps=[1]), comp(3, 20)]])
    assert compute_only_s(g, lambda u: u.nodes[0].duration_us / 1e6) == pytest.approx(350e-6, abs=1e-12)
    assert compute_only_s(g, lambda u: 0.0) == 0.0


def test_overlap_figures_are_the_simai_replays():
    ops = [{"group": "dp", "t_start_s": 1.0, "t_end_s": 3.0}, {"group": "dp", "t_start_s": 2.0, "t_end_s": 4.0},
           {"group": "p2p", "t_start_s": 5.0, "t_end_s": 5.5}]
    f = overlap_figures(makespan_s=10.0, compute_only=7.0, ops=ops)
    assert f["exposed_comm_s"] == 3.0 and f["exposed_share"] == 0.3 and f["compute_only_s"] == 7.0
    assert f["overhead_s"] == 0.0        # T - W = 3 s < C = 4.5 s: all of it communication
    assert f["comm_s"] == 4.5 and f["comm_busy_s"] == 3.5
    assert f["groups"] == {"dp": {"comm_s": 4.0, "ops": 2, "busy_s": 3.0}, "p2p": {"comm_s": 0.5, "ops": 1, "busy_s": 0.5}}
    assert f["saving"] == {"formula": SAVING_FORMULA, "serialized_comm_s": 4.5, "exposed_comm_on_s": 3.0,
                           "formula_s": 1.5, "hidden_share": 1.5 / 4.5}


def test_time_beyond_compute_and_communication_is_overhead_not_negative_hiding():
    """One all-reduce spanning 0.25-0.75 s (C = 0.5 s), no compute (W = 0), makespan 1 s: the 0.5 s
    outside the span is dispatch, not communication: exposed 0.5 s (min(T - W, C)), overhead 0.5 s,
    hidden 0 (was -0.5 s, -100 %, before)."""
    f = overlap_figures(makespan_s=1.0, compute_only=0.0, ops=[{"group": "", "t_start_s": 0.25, "t_end_s": 0.75}])
    assert (f["exposed_comm_s"], f["overhead_s"], f["exposed_share"]) == (0.5, 0.5, 0.5)
    assert (f["saving"]["formula_s"], f["saving"]["hidden_share"]) == (0.0, 0.0)


def test_cpu_side_compute_runs_on_its_own_lane(tmp_path):
    """A host-side node (is_cpu_op: c10d::allreduce_ as Chakra's converter writes it, 40 us) runs beside the GPU's
    kernel (100 us), as ASTRA-sim's HardwareResource: W = 100 us, not 140."""
    g = _graph(tmp_path, [[node(1, "gemm", "COMP_NODE", duration_us=100),
                           node(2, "c10d::allreduce_", "COMP_NODE", duration_us=40, is_cpu_op=True)]] * 2)
    assert [u.nodes[0].cpu for u in g.units if u.ranks == (0,)] == [False, True]
    assert compute_only_s(g, lambda u: u.nodes[0].duration_us / 1e6) == pytest.approx(100e-6, abs=1e-12)


def test_the_printed_op_table_shows_whole_labels():
    """A label longer than the old 44-character column ("ALL_REDUCE #1 of the process group with no pg_name")
    is printed whole, the columns after it aligned."""
    from testbed.workloads.chakra.workload import ChakraReplay
    label = "ALL_REDUCE #1 of the process group with no pg_name"
    op = {"op_id": 0, "label": label, "ranks": [0, 1, 2, 3], "size_bytes": 16384, "time_us": 5000.0,
          "busbw_bps": 9.5e6}
    b = {"path": "t", "ranks": 4, "nodes": 4, "fabric_ops": 2, "makespan_s": 0.01, "compute_scale": 1.0,
         "dependency_violations": 0, "compute_only_s": 0.0, "comm_s": 0.005, "exposed_comm_s": 0.005,
         "exposed_share": 0.5, "overhead_s": 0.005, "saving": {"formula_s": 0.0, "hidden_share": 0.0},
         "skipped_nodes": 0, "ops": [op, {**op, "op_id": 1, "label": "ALL_TO_ALL #1 of process group 'ep'"}]}
    w = ChakraReplay.__new__(ChakraReplay)
    w.block = b
    lines = w.lines_after(None, {})[0].splitlines()
    assert "overhead (not compute, not communication) max(0, T - W - C) 0.005 s" in lines[1]
    assert lines[3] == f"   0 {label} 0,1,2,3        16384       5000         9.500"
    assert lines[4].index("0,1,2,3") == lines[3].index("0,1,2,3") == lines[2].index("ranks")
