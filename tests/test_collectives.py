"""Collective algorithms: the registry, schedules (every byte sent exactly as scheduled, every send
matched by a receive), the executor over in-memory and real loopback queue pairs, busbw factors.

Ring all-reduce is checked by replaying its chunk steps on contributions (which rank's data each
chunk holds); every registered algorithm by pairing its sends and receives for n = 2..8 and sizes
not divisible by n; the executor by running all ranks in threads.
"""
import threading
from collections import Counter, defaultdict

import pytest

from testbed.spec.scenario import ScenarioError, parse_scenario
from traffic import collectives
from traffic.collectives import (ALGORITHMS, COLLECTIVES, CollectiveTimeout, ScheduleMismatch, Step, Transfer,
                                 chunk_sizes, execute)
from traffic.collectives.ring import RingAllreduce, ring_allreduce_steps
from test_collective_algorithms import run_on_loopback

SIZES = [0, 1, 7, 1000, 100_003, 4 * 1024 * 1024 + 5]
RING = ALGORITHMS[("allreduce", "ring")]
#: bytes all ranks of a group of n send together, by collective, for a collective of S bytes
TOTAL_BYTES = {"allreduce": lambda n, s: 2 * (n - 1) * s, "reducescatter": lambda n, s: (n - 1) * s,
               "allgather": lambda n, s: (n - 1) * s, "alltoall": lambda n, s: (n - 1) * s,
               "broadcast": lambda n, s: (n - 1) * s, "sendrecv": lambda n, s: n * s,
               "send": lambda n, s: (n - 1) * s}
#: algorithms whose busiest rank sends more than the busbw factor x S (tree: about 2 S; halving-doubling
#: when n is not a power of two: its extra ranks' partners send S more)
NOT_BANDWIDTH_OPTIMAL = {("allreduce", "tree")}


@pytest.mark.parametrize("size, n, want", [
    (10, 3, [4, 3, 3]), (100_003, 8, [12501] * 3 + [12500] * 5), (2, 3, [1, 1, 0]), (0, 4, [0, 0, 0, 0]),
    (4 * 1024 * 1024, 8, [524288] * 8),
])
def test_chunk_sizes(size, n, want):
    assert chunk_sizes(size, n) == want and sum(want) == size


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_ring_schedule_reduces_every_contribution_exactly_once(n):
    # held[r][c]: whose contributions rank r's chunk c holds (a multiset)
    held = [[Counter({r: 1}) for _ in range(n)] for r in range(n)]
    steps = [ring_allreduce_steps(r, n) for r in range(n)]
    assert all(len(s) == 2 * (n - 1) for s in steps)
    for s in range(2 * (n - 1)):
        sent = [(steps[r][s][0], Counter(held[r][steps[r][s][0]])) for r in range(n)]  # all send at once
        for r in range(n):
            chunk, data = sent[(r - 1) % n]
            assert chunk == steps[r][s][1], "a rank must receive the chunk its predecessor sends"
            held[r][chunk] = held[r][chunk] + data if s < n - 1 else data  # reduce-scatter, then all-gather
    everyone = Counter(range(n))
    assert all(held[r][c] == everyone for r in range(n) for c in range(n))


def _flows(alg, n, size):
    """(sender, receiver) -> sizes sent in order, and the same as the receiver's schedule expects."""
    sent, expected = defaultdict(list), defaultdict(list)
    for p in range(n):
        for step in alg.schedule(p, n, size):
            for t in step.sends:
                sent[(p, t.peer)].append(t.nbytes)
            for t in step.recvs:
                expected[(t.peer, p)].append(t.nbytes)
    return sent, expected


@pytest.mark.parametrize("key", sorted(ALGORITHMS))
@pytest.mark.parametrize("n", range(2, 9))
@pytest.mark.parametrize("size", SIZES)
def test_every_send_is_matched_by_a_receive_and_peers_cover_the_schedule(key, n, size):
    alg = ALGORITHMS[key]
    sent, expected = _flows(alg, n, size)
    assert sent == expected, "each message a rank sends must be a receive, in order and size, at its peer"
    for p in range(n):
        steps = alg.schedule(p, n, size)
        used = {t.peer for s in steps for t in s.sends + s.recvs}
        assert used <= alg.peers(p, n) and p not in alg.peers(p, n)
        assert all(t.nbytes > 0 for s in steps for t in s.sends + s.recvs), "0-byte transfers are left out"
    # all ranks together move exactly what the collective needs: 2(n-1) S for all-reduce, (n-1) S for
    # reduce-scatter, all-gather, all-to-all and broadcast, n S for send/recv (n x the busbw factor x S but
    # for broadcast, whose last rank sends nothing)
    assert sum(map(sum, sent.values())) == TOTAL_BYTES[alg.collective.name](n, size)
    # the busiest rank sends at least the busbw factor x S (nccl-tests), exactly that when bandwidth-optimal
    busiest = max(sum(b for (src, _), v in sent.items() if src == p for b in v) for p in range(n))
    assert busiest >= alg.busbw_factor(n) * size - n
    if key not in NOT_BANDWIDTH_OPTIMAL and not (key[1] == "halving_doubling" and n & (n - 1)):
        assert abs(busiest - alg.busbw_factor(n) * size) <= n


@pytest.mark.parametrize("n", range(2, 9))
@pytest.mark.parametrize("size", SIZES)
def test_ring_sends_exactly_its_chunks(n, size):
    """Rank p sends 2(n-1) chunks to p+1 (0-byte ones skipped), all ranks together 2(n-1) x S:
    n x the busbw factor 2(n-1)/n x S."""
    chunks = chunk_sizes(size, n)
    sent, _ = _flows(RING, n, size)
    for p in range(n):
        assert sent.get((p, (p + 1) % n), []) == [chunks[c] for c, _ in ring_allreduce_steps(p, n) if chunks[c]]
        assert len(RING.schedule(p, n, size)) == 2 * (n - 1)
    assert set(sent) <= {(p, (p + 1) % n) for p in range(n)}
    assert sum(map(sum, sent.values())) == 2 * (n - 1) * size == round(n * RING.busbw_factor(n) * size)
    assert RING.peers(0, n) == {1, n - 1}


def test_schedule_refuses_bad_positions():
    for pos, n, size in ((3, 3, 10), (-1, 3, 10), (0, 1, 10), (0, 3, -1)):
        with pytest.raises(ValueError, match="ring all-reduce: need n >= 2"):
            RING.schedule(pos, n, size)


# ---------------------------------------------------------------- busbw factors (nccl-tests)

@pytest.mark.parametrize("collective, n, factor", [
    ("allreduce", 8, 1.75), ("allreduce", 4, 1.5), ("allreduce", 2, 1.0), ("allreduce", 1, 0.0),
    ("reducescatter", 8, 0.875), ("allgather", 4, 0.75), ("alltoall", 2, 0.5),
    ("broadcast", 8, 1.0), ("broadcast", 1, 1.0), ("sendrecv", 2, 1.0),
])
def test_busbw_factor_worked_values(collective, n, factor):
    assert COLLECTIVES[collective].busbw_factor(n) == factor


def test_busbw_worked_value_in_the_ops_table():
    """4 MiB all-reduce on 8 ranks in 3.6 s: algbw = 4194304 x 8 / 3.6 = 9.3207 Mbit/s,
    busbw = algbw x 1.75 = 16.3112 Mbit/s (nccl-tests doc/PERFORMANCE.md)."""
    from testbed.results import tables
    rows = [{"op_id": 0, "rank": r, "t_start_ns": 0, "t_end_ns": 3_600_000_000} for r in range(8)]
    ops = tables.ops_table(rows, {0: {"size_bytes": 4 << 20, "iteration": 0, "warmup": False,
                                      "collective": "allreduce", "algorithm": "ring"}}, 8)
    assert ops.loc[0, "algbw_bps"] == pytest.approx(9.320676e6, rel=1e-6)
    assert ops.loc[0, "busbw_bps"] == pytest.approx(16.311182e6, rel=1e-6)
    assert ops.loc[0, "busbw_factor"] == 1.75 and ops.loc[0, "algorithm"] == "ring"


def test_every_collective_states_factor_and_size_convention():
    for c in COLLECTIVES.values():
        assert c.factor_text and c.size_convention.startswith("S = ")
    with pytest.raises(ValueError, match="n_ranks=0"):
        COLLECTIVES["alltoall"].busbw_factor(0)


# ---------------------------------------------------------------- registry and scenario keys

def test_registry_errors_name_the_allowed_values():
    assert collectives.get("allreduce", "ring") is RING and isinstance(RING, RingAllreduce)
    assert RING.title == "ring all-reduce"
    with pytest.raises(collectives.UnknownAlgorithm, match=r"collective 'gather' has no registered "
                                                           r"algorithm: allowed allgather, allreduce, alltoall, "
                                                           r"broadcast, reducescatter, send, sendrecv"):
        collectives.get("gather", "ring")
    with pytest.raises(collectives.UnknownAlgorithm, match=r"algorithm 'bruck' is not registered for "
                                                           r"collective 'alltoall': allowed direct, pairwise"):
        collectives.get("alltoall", "bruck")
    assert collectives.names() == ["allgather/pat", "allgather/ring", "allreduce/halving_doubling",
                                   "allreduce/ring", "allreduce/tree", "alltoall/direct", "alltoall/pairwise",
                                   "broadcast/ring", "reducescatter/pat", "reducescatter/ring", "send/chain",
                                   "sendrecv/ring"]
    assert collectives.names("allreduce") == ["halving_doubling", "ring", "tree"]


@pytest.mark.parametrize("workload, words", [
    ({"collective": "gather"}, "workload.collective = 'gather' has no registered algorithm: allowed allgather, "
                               "allreduce, alltoall, broadcast, reducescatter, send, sendrecv"),
    ({"algorithm": "bruck"}, "workload.algorithm = 'bruck' is not registered for workload.collective "
                             "'allreduce': allowed halving_doubling, ring, tree"),
    ({"collective": "alltoall"}, "workload.algorithm = 'ring' is not registered for workload.collective "
                                 "'alltoall': allowed direct, pairwise"),
    ({"algorithm": "bruck", "sizes": None, "simai": {"path": "w.txt"}},
     "workload.algorithm = 'bruck' is not registered for any collective: allowed chain, direct, halving_doubling, "
     "pairwise, pat, ring, tree"),
    ({"collective": "allreduce", "sizes": None, "simai": {"path": "w.txt"}},
     "workload.collective = 'allreduce' applies to a size sweep"),
])
def test_scenario_refuses_unregistered_names(workload, words):
    w = {"sizes": {"min_bytes": 1024, "max_bytes": 1024}, **workload}
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"workload": {k: v for k, v in w.items() if v is not None}})
    assert words in str(info.value)


def test_sweep_plan_carries_the_algorithm_peers_and_manifest_entry():
    from testbed.workloads.plan import plan_algorithms, plan_peers
    from testbed.workloads import plan_workload
    spec = parse_scenario({"fabric": {"leaves": 2, "hosts_per_leaf": 2}, "workload": {
        "collective": "allreduce", "algorithm": "ring", "sizes": {"min_bytes": 1000, "max_bytes": 1000}}})
    ops = plan_workload(spec).ops
    assert {(o.collective, o.algorithm, o.busbw_factor) for o in ops} == {("allreduce", "ring", 1.5)}
    assert plan_peers(ops) == {0: [1, 3], 1: [0, 2], 2: [1, 3], 3: [0, 2]}
    (entry,) = plan_algorithms(ops)
    assert entry["title"] == "ring all-reduce" and entry["busbw_factor"] == "2(n-1)/n"
    assert "each rank's buffer" in entry["size_convention"]


# ---------------------------------------------------------------- executor

class MemQP:
    """An in-memory RC queue pair, both ends: messages arrive in order, at once, and are acknowledged."""

    def __init__(self, drop_sizes=False):
        self.cond = threading.Condition()
        self.msg_bytes: list[int] = []
        self.drop_sizes = drop_sizes

    def post_send(self, nbytes: int) -> int:
        with self.cond:
            self.msg_bytes.append(nbytes + 1 if self.drop_sizes else nbytes)
            self.cond.notify_all()
            return len(self.msg_bytes) - 1

    def wait_acked(self, seq: int, timeout_s: float) -> bool:
        return seq < len(self.msg_bytes)

    def wait_messages(self, count: int, timeout_s: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: len(self.msg_bytes) >= count, timeout_s)


def _run_ranks(alg, group, size, links, consumed, timeout_s=10.0):
    """Run every rank of ``group`` in a thread; ``links[(a, b)]`` carries a's messages to b."""
    out, errors = {}, []

    def rank(pos):
        me = group[pos]
        send = {b: q for (a, b), q in links.items() if a == me}
        recv = {a: q for (a, b), q in links.items() if b == me}
        try:
            out[me] = execute(alg, pos, group, size, send, recv, consumed[me], timeout_s)
        except Exception as e:  # surfaced by the caller
            errors.append(e)
    threads = [threading.Thread(target=rank, args=(p,)) for p in range(len(group))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out, errors


@pytest.mark.parametrize("key", sorted(ALGORITHMS))
@pytest.mark.parametrize("n", range(2, 9))
def test_executor_completes_over_in_memory_queue_pairs(key, n):
    """Two operations back to back (sizes not divisible by n) on a group of job ranks in shuffled order:
    every rank sends and receives exactly its schedule; receive counts carry over between operations."""
    alg = ALGORITHMS[key]
    group = [(3 * i + 1) % n for i in range(n)] if n % 3 else list(reversed(range(n)))
    links = {(group[p], group[q]): MemQP() for p in range(n) for q in alg.peers(p, n)}
    consumed = {r: {} for r in group}
    want = defaultdict(list)
    for size in (100_003, 7):
        out, errors = _run_ranks(alg, group, size, links, consumed)
        assert not errors, errors
        for p, r in enumerate(group):
            steps = alg.schedule(p, n, size)
            assert out[r]["sent_bytes"] == sum(t.nbytes for s in steps for t in s.sends)
            assert out[r]["rx_msgs"] == sum(len(s.recvs) for s in steps)
            for s in steps:
                for t in s.sends:
                    want[(r, group[t.peer])].append(t.nbytes)
    assert {k: q.msg_bytes for k, q in links.items() if q.msg_bytes} == dict(want)
    assert {r: sum(c.values()) for r, c in consumed.items()} == {
        r: sum(len(s.recvs) for size in (100_003, 7) for s in alg.schedule(p, n, size)) for p, r in enumerate(group)}


def test_executor_timeout_names_the_step_and_the_peer():
    """Rank 7 of the group never sends: rank 2 (position 0) waits for it at step 0 and gives up."""
    group = [2, 5, 7]
    links = {(a, b): MemQP() for a in group for b in group if a != b}
    with pytest.raises(CollectiveTimeout, match=r"rank 2: step 0 of ring all-reduce \(300 B\) got no chunk "
                                                r"from rank 7 within 0.2 s"):
        execute(RING, 0, group, 300, {5: links[(2, 5)], 7: links[(2, 7)]},
                {5: links[(5, 2)], 7: links[(7, 2)]}, {}, timeout_s=0.2)


def test_executor_refuses_a_wrong_size_and_missing_queue_pairs():
    group = [0, 1]
    links = {(0, 1): MemQP(drop_sizes=True), (1, 0): MemQP(drop_sizes=True)}
    out, errors = _run_ranks(RING, group, 1000, links, {0: {}, 1: {}}, timeout_s=2)
    assert errors and all(isinstance(e, ScheduleMismatch) for e in errors)
    assert "expected 500 B from rank" in str(errors[0]) and "got a message of 501 B" in str(errors[0])
    with pytest.raises(ValueError, match=r"rank 4 has no queue pair with rank\(s\) \[6\] of group \[5, 4, 6\]"):
        execute(RING, 1, [5, 4, 6], 10, {5: MemQP()}, {5: MemQP()}, {}, timeout_s=1)


def test_steps_are_plain_data():
    s = Step(sends=(Transfer(1, 10),), recvs=(Transfer(2, 10),))
    assert s == Step((Transfer(1, 10),), (Transfer(2, 10),)) and hash(s)


@pytest.mark.parametrize("size, n", [(100_003, 3), (2, 3), (10_000, 4), (9_999, 2)])
def test_ring_allreduce_on_real_qps_sends_each_chunk_once(size, n):
    """Real queue pairs over loopback UDP (no root): each rank sends its 2(n-1) chunks (zero-byte chunks
    are skipped on both sides) and receives exactly the chunks its predecessor sent; all ranks together
    move 2(n-1) x size bytes."""
    out, recv_qp = run_on_loopback(RING, n, size, subnet=78)
    chunks = chunk_sizes(size, n)
    for r in range(n):
        sends = [chunks[c] for c, _ in ring_allreduce_steps(r, n)]
        assert out[r]["sent_bytes"] == sum(sends) == 2 * size - chunks[(r + 1) % n] - chunks[(r + 2) % n]
        assert recv_qp[(r + 1) % n][r].msg_bytes == [b for b in sends if b]   # what r sent, in order, once
        assert out[r]["rx_msgs"] == sum(1 for _, c in ring_allreduce_steps(r, n) if chunks[c])
    assert sum(o["sent_bytes"] for o in out.values()) == 2 * (n - 1) * size
    assert sum(q.counters.delivered_bytes for per in recv_qp.values() for q in per.values()) == 2 * (n - 1) * size
    assert all(q.counters.order_errors == 0 for per in recv_qp.values() for q in per.values())
