"""Chakra replay: matching nodes across ranks, refusing what cannot run, the dependency order, and the
scheduler keeping it (no fabric: fabric operations are timed waits here; the integration test runs them on one)."""
import json
import threading
import time
from pathlib import Path

import pytest

from testbed.workloads.chakra.plan import ChakraPlan, chakra_plan
from testbed.workloads.chakra.run import dependency_violations, node_table, run_graph
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.workloads import load_scenario
from traffic.clock import unix_ns
from traffic.workloads.chakra.generate import generate, metadata, node, write_trace
from traffic.workloads.chakra.graph import replay_graph
from traffic.workloads.chakra.trace import ChakraFormatError, read_traces

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path, per_rank: list) -> str:
    for r, nodes in enumerate(per_rank):
        write_trace(tmp_path / f"t.{r}.et", metadata(r, len(per_rank)), nodes)
    return str(tmp_path)


def _graph(tmp_path, per_rank, groups=None):
    return replay_graph(read_traces(_write(tmp_path, per_rank)), groups)


def coll(i, comm_type="ALL_REDUCE", size=1000, pg="g", deps=()):
    return node(i, f"c{i}", "COMM_COLL_NODE", deps=deps, comm_type=comm_type, comm_size=size, pg_name=pg)


def comp(i, us=10, deps=()):
    return node(i, f"k{i}", "COMP_NODE", deps=deps, duration_us=us)


def send(i, dst, size=500, tag=0, deps=()):
    return node(i, f"s{i}", "COMM_SEND_NODE", deps=deps, comm_dst=dst, comm_size=size, comm_tag=tag)


def recv(i, src, size=500, tag=0, deps=()):
    return node(i, f"r{i}", "COMM_RECV_NODE", deps=deps, comm_src=src, comm_size=size, comm_tag=tag)


def test_the_shipped_trace_matches_into_collectives_and_a_send_recv_chain():
    g = replay_graph(read_traces(str(ROOT / "scenarios/workloads/chakra")),
                     json.loads((ROOT / "scenarios/workloads/chakra/comm_groups.json").read_text()))
    fabric = [(u.kind, u.collective, u.ranks) for u in g.fabric_units]
    assert fabric == [("coll", "allreduce", (0, 1)), ("coll", "allreduce", (2, 3)), ("coll", "alltoall", (0, 1, 2, 3)),
                      ("p2p", "broadcast", (0, 1)), ("p2p", "broadcast", (1, 2)), ("p2p", "broadcast", (2, 3)),
                      ("coll", "allreduce", (0, 1, 2, 3))]
    assert g.groups == {"dp": (0, 1, 2, 3), "ep": (0, 1, 2, 3), "tp0": (0, 1), "tp1": (2, 3)}
    # the run order is topological: every unit comes after all the units it depends on
    for u in g.units:
        assert all(p < u.index for p in g.preds[u.index])
    # the chain: rank 1's send to 2 waits for its recv from 0 (through its stage compute)
    p2p = [u for u in g.units if u.kind == "p2p"]
    assert p2p[0].index < p2p[1].index < p2p[2].index
    send_recv = {u.index: u for u in p2p}
    stage1 = next(u for u in g.units if u.kind == "comp" and u.ranks == (1,) and u.nodes[0].name == "stage")
    assert p2p[0].index in g.preds[stage1.index] and stage1.index in g.preds[p2p[1].index]
    assert set(send_recv) and g.notes == ()


def test_kth_collective_of_a_group_is_matched_in_each_ranks_dependency_order(tmp_path):
    # rank 1 lists its two collectives on g in the other order but its deps order them as rank 0 does
    r0 = [coll(0, size=100), coll(1, "ALL_GATHER", size=200, deps=[0])]
    r1 = [coll(5, "ALL_GATHER", size=200, deps=[6]), coll(6, size=100)]
    g = _graph(tmp_path, [r0, r1])
    assert [[(n.rank, n.node_id) for n in u.nodes] for u in g.units] == [[(0, 0), (1, 6)], [(0, 1), (1, 5)]]
    assert g.preds == {0: frozenset(), 1: frozenset({0})}


@pytest.mark.parametrize("per_rank,groups,message", [
    ([[coll(0)], [coll(0, "ALL_TO_ALL")]], None,
     "t.1.et: node 0 (c0): collective #1 of process group 'g' is ALL_TO_ALL of 1000 B, but on rank 0"),
    ([[coll(0)], [coll(0, size=999)]], None, "is ALL_REDUCE of 999 B, but on rank 0"),
    ([[coll(0), coll(1, deps=[0])], [coll(0)]], None,
     "t.0.et: node 1 (c1): collective #2 of process group 'g' on rank 0 has no partner on rank 1"),
    ([[coll(0)], [coll(0)], [comp(0)]], {"g": [0, 1, 2]},
     "collective #1 of process group 'g' on rank 0 has no partner on rank 2"),
    ([[coll(0)], [coll(0)]], {"h": [0, 1]}, "process group 'g' is not in comm_groups"),
    ([[coll(0)], [coll(0)], [coll(0)]], {"g": [0, 1]}, "t.2.et: node 0 (c0): rank 2 runs a collective on process "
                                                       "group 'g', whose members are [0, 1]"),
    ([[send(0, 1)], [comp(0)]], None, "t.0.et: node 0 (s0): send #1 from rank 0 to rank 1 with tag 0 has no "
                                      "matching recv"),
    ([[send(0, 1, tag=1)], [recv(0, 0, tag=2)]], None, "has no matching recv"),
    ([[send(0, 1)], [recv(0, 0, size=400)]], None, "t.1.et: node 0 (r0): recv of 400 B, but its send"),
    ([[send(0, 5)], [comp(0)]], None, "send to rank 5, but the trace has ranks 0..1"),
    ([[comp(0, deps=[1]), comp(1, deps=[0])], [comp(0)]], None,
     "t.0.et: node 0 (k0): dependency cycle inside the file: node 0 -> node 1 -> node 0"),
    # crossing blocking sends (NCCL: both ends must reach a send/recv): a deadlock across ranks
    ([[send(0, 1), recv(1, 1, deps=[0])], [send(0, 0), recv(1, 0, deps=[0])]], None,
     "dependency cycle across ranks (the matched operations would deadlock)"),
    ([[coll(0, pg="a"), coll(1, pg="b", deps=[0])], [coll(0, pg="b"), coll(1, pg="a", deps=[0])]], None,
     "dependency cycle across ranks"),
])
def test_what_cannot_be_replayed_is_refused_naming_file_and_node(tmp_path, per_rank, groups, message):
    with pytest.raises(ChakraFormatError) as e:
        _graph(tmp_path, per_rank, groups)
    assert message in str(e.value)


def test_one_rank_groups_take_no_time(tmp_path):
    g = _graph(tmp_path, [[coll(0, pg="solo"), send(1, 1, deps=[0])], [recv(0, 0)]])
    assert [u.kind for u in g.units] == ["local", "p2p"] and "one rank" in g.notes[0]


def _plan(graph, scale=1.0):
    fabric = [u.index for u in graph.units if u.on_fabric]
    return ChakraPlan(path="x", graph=graph, op_of={i: k for k, i in enumerate(fabric)},
                      sizes={i: graph.units[i].size_bytes for i in fabric}, compute_scale=scale, size_scale=1.0,
                      n_ranks=1 + max(r for u in graph.units for r in u.ranks))


class _Lanes:
    """compute: sleep the node's duration; fabric: a timed wait per operation; both record what overlapped."""

    def __init__(self, plan, fabric_s=0.02):
        self.plan, self.fabric_s = plan, fabric_s
        self.active, self.lock, self.max_compute_overlap, self.fabric_threads = set(), threading.Lock(), 0, set()
        self.same_rank_overlap = False

    def compute(self, u):
        rank = u.ranks[0]
        with self.lock:
            self.same_rank_overlap |= rank in self.active
            self.active.add(rank)
            self.max_compute_overlap = max(self.max_compute_overlap, len(self.active))
        t0 = unix_ns()
        time.sleep(self.plan.compute_s(u))
        t1 = unix_ns()
        with self.lock:
            self.active.discard(rank)
        return {rank: (t0, t1)}

    def fabric(self, u, token=None):
        self.fabric_threads.add(threading.current_thread().name)
        t0 = unix_ns()
        time.sleep(self.fabric_s)
        return {r: (t0 + k, unix_ns() - k) for k, r in enumerate(u.ranks)}


def test_the_scheduler_starts_every_node_after_its_dependencies_ended(tmp_path):
    generate(tmp_path, ranks=4)
    plan = _plan(replay_graph(read_traces(str(tmp_path))), scale=1000)   # 20 us -> 20 ms
    lanes = _Lanes(plan)
    times = run_graph(plan.graph, lanes.compute, lanes.fabric)
    nodes = node_table(plan, times, {})
    assert len(nodes) == 41 and dependency_violations(nodes) == []
    # the ranks' compute ran concurrently (4 fwd nodes at once), never two on one rank; one fabric lane
    assert lanes.max_compute_overlap == 4 and not lanes.same_rank_overlap
    assert len(lanes.fabric_threads) == 1
    # the chain: rank 3's recv started after rank 2's recv and rank 1's recv ended
    row = {(r.rank, r.name): r for r in nodes.itertuples()}
    assert row[(3, "recv_from_2")].t_start_ns >= row[(2, "recv_from_1")].t_end_ns >= row[(1, "recv_from_0")].t_end_ns
    assert row[(0, "dp_allreduce")].t_start_ns >= max(row[(r, "bwd")].t_end_ns for r in range(4))


def test_with_streams_ready_operations_are_issued_in_replay_order_and_overlap(tmp_path):
    generate(tmp_path, ranks=4)
    plan = _plan(replay_graph(read_traces(str(tmp_path))), scale=1000)
    lanes, issued = _Lanes(plan, fabric_s=0.4), []  # 0.4 s: long enough to overlap on a loaded machine

    def issue(u):
        issued.append((u.index, threading.current_thread() is threading.main_thread()))
        return u.index
    times = run_graph(plan.graph, lanes.compute, lanes.fabric, issue)
    nodes = node_table(plan, times, {})
    assert dependency_violations(nodes) == []
    assert [i for i, _ in issued] == sorted(i for i, _ in issued) == [u.index for u in plan.graph.fabric_units]
    assert all(main for _, main in issued) and len(lanes.fabric_threads) > 1
    tp = nodes[nodes["name"] == "tp_allreduce"].groupby("pg_name").agg(start=("t_start_ns", "min"),
                                                                        end=("t_end_ns", "max"))
    assert tp.loc["tp0", "start"] < tp.loc["tp1", "end"] and tp.loc["tp1", "start"] < tp.loc["tp0", "end"]


def test_the_dependency_check_catches_a_replay_that_ignores_dependencies(tmp_path):
    generate(tmp_path, ranks=2)
    graph = replay_graph(read_traces(str(tmp_path)))
    plan = _plan(graph, scale=1000)
    unordered = type(graph)(units=graph.units, preds={i: frozenset() for i in graph.preds}, groups=graph.groups,
                            notes=())
    lanes = _Lanes(plan)
    nodes = node_table(plan, run_graph(unordered, lanes.compute, lanes.fabric), {})
    assert len(dependency_violations(nodes)) > 0


def test_a_failing_unit_stops_the_replay(tmp_path):
    generate(tmp_path, ranks=2)
    plan = _plan(replay_graph(read_traces(str(tmp_path))), scale=100)
    lanes = _Lanes(plan)

    def broken(u, token):
        raise RuntimeError("agent died")
    with pytest.raises(RuntimeError, match="agent died"):
        run_graph(plan.graph, lanes.compute, broken)


SCENARIO = """
name: chakra-unit
fabric: {{spines: 1, leaves: 2, hosts_per_leaf: {hpl}, host_link_bps: 10M, fabric_link_bps: 10M}}
workload:
  chakra: {{path: {path}, size_scale: 0.5, compute_scale: {cs}}}
"""


def test_plan_of_a_scenario(tmp_path):
    generate(tmp_path / "tr", ranks=4)
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO.format(hpl=3, path="tr", cs="auto"))
    spec = load_scenario(f)
    assert spec.workload.chakra.path == str((tmp_path / "tr").resolve())
    plan = chakra_plan(spec)
    assert [op.size_bytes for op in plan.ops] == [1 << 20, 1 << 20, 2 << 20, 1 << 20, 1 << 20, 1 << 20, 2 << 20]
    assert [op.algorithm for op in plan.ops] == ["ring", "ring", "pairwise", "ring", "ring", "ring", "ring"]
    assert plan.replay.compute_scale == 40000 * 0.5   # dilation 400G / 10M x size_scale
    # streams: one per process group in name order (dp 0, ep 1, tp0 2, tp1 3), send/recv on 4
    assert [op.stream for op in plan.ops] == [2, 3, 1, 4, 4, 4, 0] and plan.replay.streams_on
    f.write_text(SCENARIO.format(hpl=3, path="tr", cs="auto").replace("compute_scale: auto", "compute_scale: auto, "
                                                                                            "streams: off"))
    off = chakra_plan(load_scenario(f))
    assert [op.stream for op in off.ops] == [0] * 7 and not off.replay.streams_on
    assert "one fabric operation at a time" in off.notes[0]
    assert plan.replay.compute_s_per_rank[1] == pytest.approx((20 + 10 + 10 + 10 + 20 + 10) * 20000 / 1e6)
    assert "process groups: dp [0, 1, 2, 3], ep [0, 1, 2, 3], tp0 [0, 1], tp1 [2, 3] (inferred" in plan.notes[0]


def test_bad_scenarios_are_refused_before_anything_runs(tmp_path):
    generate(tmp_path / "tr", ranks=4)
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO.format(hpl=1, path="tr", cs="off"))
    with pytest.raises(ScenarioError, match=r"workload.chakra.path: .* has 4 ranks but the fabric has 2 hosts"):
        load_scenario(f)
    f.write_text(SCENARIO.format(hpl=2, path="nope", cs="off"))
    with pytest.raises(ScenarioError, match=r"s.yaml: workload.chakra.path: .*nope: no Chakra trace files"):
        load_scenario(f)
    (tmp_path / "tr" / "trace.1.et").write_bytes(b"\x02\x08")
    f.write_text(SCENARIO.format(hpl=2, path="tr", cs="off"))
    with pytest.raises(ScenarioError, match=r"trace.1.et: byte 0: a frame of 2 bytes"):
        load_scenario(f)
    for bad, msg in (({"compute_scale": -1}, "allowed auto, off or a number > 0"),
                     ({"size_scale": 2}, "size_scale"), ({"paht": "x"}, "paht")):
        with pytest.raises(ScenarioError, match=msg):
            parse_scenario({"fabric": {"leaves": 2, "hosts_per_leaf": 2}, "workload": {"chakra": {"path": "x", **bad}}})
    with pytest.raises(ScenarioError, match="workload.ranks = 2 applies to a size sweep.*a Chakra replay"):
        parse_scenario({"fabric": {"leaves": 2, "hosts_per_leaf": 2}, "workload": {"ranks": 2, "chakra": {"path": "x"}}})
    with pytest.raises(ScenarioError, match="exactly one of"):
        parse_scenario({"workload": {"chakra": {"path": "x"}, "sizes": {}}})
    (tmp_path / "g.json").write_text('{"tp0": [0, 0]}')
    spec = parse_scenario({"fabric": {"leaves": 2, "hosts_per_leaf": 2},
                           "workload": {"chakra": {"path": str(tmp_path / "tr"), "comm_groups": str(tmp_path / "g.json")}}})
    with pytest.raises(ScenarioError, match=r"workload.chakra.comm_groups: .*group 'tp0': \[0, 0\]; allowed a list"):
        chakra_plan(spec)
