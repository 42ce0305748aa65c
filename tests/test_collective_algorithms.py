"""The algorithms beyond ring all-reduce, one by one: NCCL's double binary tree, recursive
halving-doubling (Thakur et al. 2005, with the non-power-of-two pre/post step), ring reduce-scatter and
all-gather, pairwise and direct all-to-all, the pipelined chain broadcast and nccl-tests' send/recv; the
busbw worked values of each collective; and tree and halving-doubling over real loopback queue pairs.

The generic checks (every send matched by a receive of the same size, in order, for n = 2..8 and sizes
not divisible by n; exact byte totals; the in-memory executor) run for every registered algorithm in
tests/test_collectives.py.
"""
import threading
from collections import Counter

import pytest

from traffic.collectives import ALGORITHMS, chunk_sizes, execute
from traffic.collectives.halving_doubling import kept_ranges
from traffic.collectives import tree
from traffic.collectives.tree import btree_parent, dtree_parents
from traffic.transport import Endpoint, RequesterQP, ResponderQP, TransportParams, initial_psn

TREE = ALGORITHMS[("allreduce", "tree")]
HD = ALGORITHMS[("allreduce", "halving_doubling")]


def _sent_by(alg, p, n, size):
    return sum(t.nbytes for s in alg.schedule(p, n, size) for t in s.sends)


# ---------------------------------------------------------------- double binary tree

def test_btree_is_nccls():
    """NCCL trees.cc's illustration for 14 ranks: 0 -> 8; 8 -> 4, 12; 4 -> 2, 6; 12 -> 10, 13; odd -> leaves."""
    parent = [btree_parent(p, 14) for p in range(14)]
    assert parent == [-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12]


def test_dtree_mirror_and_shift_are_nccls():
    """n even: tree 1 mirrors tree 0 (12 ranks: root 11); n odd: tree 0 shifted by one (NCCL's 13-rank
    illustration: 1 -> 9; 9 -> 5, 0; 0 -> 11; 11 -> 10, 12)."""
    t0, t1 = dtree_parents(12)
    assert t1 == [12 - 1 - t0[11 - p] if t0[11 - p] >= 0 else -1 for p in range(12)] and t1.index(-1) == 11
    _, s1 = dtree_parents(13)
    assert s1[1] == -1 and s1[9] == 1 and s1[5] == 9 and s1[0] == 9 and s1[11] == 0 and {s1[10], s1[12]} == {11}


@pytest.mark.parametrize("n", range(2, 17))
def test_both_trees_span_the_group_with_at_most_two_children(n):
    for parent in dtree_parents(n):
        assert parent.count(-1) == 1
        assert max(Counter(p for p in parent if p >= 0).values()) <= 2
        for p in range(n):                       # every position reaches the root without a cycle
            seen = set()
            while parent[p] >= 0:
                assert p not in seen
                seen.add(p)
                p = parent[p]


@pytest.mark.parametrize("n", [3, 8])
def test_tree_pipeline_reduces_before_sending_up_and_broadcasts_after(n):
    """A node sends chunk k up only in a step after every child's chunk k arrived, and down only after its
    parent's chunk k arrived (the root: after every child's); one chunk per edge per step."""
    chunks = [5, 4, 4]
    tree5 = type("Tree5", (tree.TreeAllreduce,), {"chunk_bytes": 5})()  # 5-byte pipeline chunks
    assert sum(m.nbytes for m in tree5.messages(n, 26)) == 2 * (n - 1) * 26
    for parent in dtree_parents(n):
        msgs = tree.tree_messages(parent, chunks)
        root = parent.index(-1)
        edge = {}
        for m in msgs:                               # k-th message on an edge carries chunk k
            edge.setdefault((m.src, m.dst), []).append(m.step)
        assert all(len(v) == 3 and v == sorted(set(v)) for v in edge.values())
        kids = {p: [c for c in range(n) if parent[c] == p] for p in range(n)}
        for p in range(n):
            for k in range(3):
                got = max([edge[(c, p)][k] for c in kids[p]], default=-1)
                if p != root:
                    assert edge[(p, parent[p])][k] > got
                    got = edge[(parent[p], p)][k]
                assert all(edge[(p, c)][k] > got for c in kids[p])


def test_tree_takes_log_steps_where_ring_takes_2n_minus_2():
    """8 ranks, 4 KiB (one chunk per tree): 3 steps up and 3 down (6), ring 14, halving-doubling 6."""
    ring = ALGORITHMS[("allreduce", "ring")]
    assert max(len(TREE.schedule(p, 8, 4096)) for p in range(8)) == 6
    assert len(ring.schedule(0, 8, 4096)) == 14 and len(HD.schedule(0, 8, 4096)) == 6
    # each rank is an inner node in one tree (half h = S/2 once up, twice down) and a leaf in the other (h
    # up): 4h = 2 S; the roots 0 and 7 have one child and send 2h
    assert [_sent_by(TREE, p, 8, 4096) for p in range(8)] == [4096] + [8192] * 6 + [4096]


# ---------------------------------------------------------------- halving-doubling

def test_halving_doubling_power_of_two_exchanges():
    """8 ranks: partners p^1, p^2, p^4 with halves S/2, S/4, S/8, then the same in reverse."""
    steps = HD.schedule(5, 8, 8000)
    assert [(s.sends[0].peer, s.sends[0].nbytes) for s in steps] == [(4, 4000), (7, 2000), (1, 1000), (1, 1000),
                                                                      (7, 2000), (4, 4000)]
    assert all(s.sends[0].peer == s.recvs[0].peer and s.sends[0].nbytes == s.recvs[0].nbytes for s in steps)
    assert sum(_sent_by(HD, p, 8, 8000) for p in range(8)) == 2 * 7 * 8000


def test_halving_doubling_non_power_of_two_pre_and_post_step():
    """6 ranks (p' = 4, r = 2): positions 0 and 2 hand S to 1 and 3 and get the result back (2 steps);
    1, 3, 4, 5 run the 4-rank algorithm (MPICH: participant v sits at 2v+1 for v < r, else v + r)."""
    size = 1001
    assert [tuple(s) for s in HD.schedule(0, 6, size)] == [(((1, size),), ()), ((), ((1, size),))]
    assert HD.schedule(2, 6, size)[0].sends == ((3, size),)
    one = HD.schedule(1, 6, size)
    assert one[0].recvs == ((0, size),) and one[-1].sends == ((0, size),) and len(one) == 6
    chunks = chunk_sizes(size, 4)
    assert [s.sends[0] for s in one[1:3]] == [(3, chunks[2] + chunks[3]), (4, chunks[1])]
    assert HD.peers(4, 6) == {1, 5} and HD.peers(1, 6) == {0, 3, 4}
    assert sum(m.nbytes for m in HD.messages(6, size)) == 2 * 5 * size


@pytest.mark.parametrize("n", range(2, 9))
def test_halving_doubling_reduces_every_contribution_exactly_once(n):
    """Replay the exchanges on contributions: each participant's chunk range holds every rank's data once
    after the reduce-scatter, and every position holds every chunk after the all-gather."""
    pof2 = 1 << (n.bit_length() - 1)
    rem = n - pof2
    pos = [2 * v + 1 if v < rem else v + rem for v in range(pof2)]
    held = {p: [Counter({p: 1}) for _ in range(pof2)] for p in range(n)}   # held[position][chunk]
    for i in range(rem):                                   # pre-step
        held[2 * i + 1] = [a + b for a, b in zip(held[2 * i + 1], held[2 * i])]
    levels = kept_ranges(pof2)
    for j, kept in enumerate(levels):
        snap = {v: list(held[pos[v]]) for v in range(pof2)}
        for v in range(pof2):
            for c in range(*kept[v]):
                held[pos[v]][c] = snap[v][c] + snap[v ^ (1 << j)][c]
    rng = levels[-1] if levels else {0: (0, 1)}
    everyone = Counter(range(n))
    assert sorted(c for v in range(pof2) for c in range(*rng[v])) == list(range(pof2))
    assert all(held[pos[v]][c] == everyone for v in range(pof2) for c in range(*rng[v]))
    # the schedule's message sizes follow these ranges: halving sends all but the finally kept chunks,
    # doubling sends the range kept at each level; the odd ones of the first 2r also send S back
    size = 100_003
    chunks = chunk_sizes(size, pof2)
    for v in range(pof2):
        doubling = sum(sum(chunks[slice(*lv[v])]) for lv in levels)
        extra = size if pos[v] < 2 * rem else 0
        assert _sent_by(HD, pos[v], n, size) == size - sum(chunks[slice(*rng[v])]) + doubling + extra


# ---------------------------------------------------------------- ring halves, all-to-all, broadcast, send/recv

@pytest.mark.parametrize("collective", ["reducescatter", "allgather"])
def test_ring_halves_send_every_chunk_but_one(collective):
    """n-1 steps to p+1; reduce-scatter: chunks p, p-1, ..., all but p+1; all-gather: starts with its own p."""
    alg, n, size = ALGORITHMS[(collective, "ring")], 5, 1003
    chunks = chunk_sizes(size, n)
    for p in range(n):
        steps = alg.schedule(p, n, size)
        assert len(steps) == n - 1 and {s.sends[0].peer for s in steps} == {(p + 1) % n}
        assert steps[0].sends[0].nbytes == chunks[p]
        assert _sent_by(alg, p, n, size) == size - chunks[(p + 1) % n]


@pytest.mark.parametrize("name", ["pairwise", "direct"])
def test_alltoall_sends_block_q_to_each_q(name):
    alg, n, size = ALGORITHMS[("alltoall", name)], 5, 1003
    blocks = chunk_sizes(size, n)
    for p in range(n):
        steps = alg.schedule(p, n, size)
        assert len(steps) == (n - 1 if name == "pairwise" else 1)
        sends = [t for s in steps for t in s.sends]
        assert sorted(sends) == sorted((q, blocks[q]) for q in range(n) if q != p)
        assert sorted(t for s in steps for t in s.recvs) == sorted((q, blocks[p]) for q in range(n) if q != p)
    assert [s.sends[0].peer for s in ALGORITHMS[("alltoall", "pairwise")].schedule(3, 5, 10)] == [4, 0, 1, 2]


def test_broadcast_is_a_pipelined_chain_from_position_0():
    alg, n = ALGORITHMS[("broadcast", "ring")], 4
    size = 3 * alg.chunk_bytes + 2                  # 4 chunks
    chunks = chunk_sizes(size, 4)
    assert [s.sends for s in alg.schedule(0, n, size)] == [((1, b),) for b in chunks]
    mid = alg.schedule(1, n, size)                  # receives chunk k at step k, forwards it at step k+1
    assert [(s.sends, s.recvs) for s in mid] == [((), ((0, chunks[0]),))] + [
        (((2, chunks[k]),), ((0, chunks[k + 1]),)) for k in range(3)] + [(((2, chunks[3]),), ())]
    assert _sent_by(alg, n - 1, n, size) == 0 and alg.peers(n - 1, n) == {n - 2} and alg.peers(0, n) == {1}


def test_sendrecv_shifts_by_one():
    alg = ALGORITHMS[("sendrecv", "ring")]
    assert alg.schedule(2, 4, 100) == ((((3, 100),), ((1, 100),)),)
    assert alg.schedule(0, 2, 100) == ((((1, 100),), ((1, 100),)),)


# ---------------------------------------------------------------- busbw worked values (nccl-tests PERFORMANCE.md)

@pytest.mark.parametrize("collective, algorithm, n, size, time_s, algbw_bps, busbw_bps", [
    # all-reduce: busbw = algbw x 2(n-1)/n, whichever algorithm: 1 MiB on 8 ranks in 1 s
    ("allreduce", "tree", 8, 1 << 20, 1.0, 8_388_608, 14_680_064),
    ("allreduce", "halving_doubling", 6, 1 << 20, 1.0, 8_388_608, 13_981_013.33),
    # reduce-scatter, all-gather, all-to-all: (n-1)/n
    ("reducescatter", "ring", 4, 1 << 20, 2.0, 4_194_304, 3_145_728),
    ("allgather", "ring", 8, 4 << 20, 4.0, 8_388_608, 7_340_032),
    ("alltoall", "pairwise", 8, 1 << 20, 0.5, 16_777_216, 14_680_064),
    # broadcast and send/recv: 1
    ("broadcast", "ring", 8, 1 << 20, 1.0, 8_388_608, 8_388_608),
    ("sendrecv", "ring", 2, 1 << 20, 1.0, 8_388_608, 8_388_608),
])
def test_busbw_worked_values(collective, algorithm, n, size, time_s, algbw_bps, busbw_bps):
    from testbed.results import tables
    rows = [{"op_id": 0, "rank": r, "t_start_ns": 0, "t_end_ns": int(time_s * 1e9)} for r in range(n)]
    ops = tables.ops_table(rows, {0: {"size_bytes": size, "iteration": 0, "warmup": False, "group_size": n,
                                      "collective": collective, "algorithm": algorithm}}, n)
    assert ops.loc[0, "algbw_bps"] == pytest.approx(algbw_bps, rel=1e-9)
    assert ops.loc[0, "busbw_bps"] == pytest.approx(busbw_bps, rel=1e-9)


# ---------------------------------------------------------------- real loopback queue pairs

def run_on_loopback(alg, n: int, size: int, subnet: int = 79):
    """Run ``alg`` on n ranks in threads over real RC queue pairs on loopback UDP (no root), one QP pair per
    pair of peers the algorithm names. Returns (each rank's execute() result, recv_qp[rank][peer]).
    Raises AssertionError listing the ranks' errors."""
    params = TransportParams(payload_bytes=1024, window_pkts=32, ack_every_pkts=8, rto_us=200_000)
    ips = [f"127.{subnet}.{n}.{r + 1}" for r in range(n)]
    eps = [Endpoint(ip) for ip in ips]
    send_qp, recv_qp = {r: {} for r in range(n)}, {r: {} for r in range(n)}
    port = 53000
    for r in range(n):
        for q in sorted(alg.peers(r, n)):
            req = RequesterQP(0x10000 + q, 0x20000 + r, ips[r], ips[q], port, params,
                              first_psn=initial_psn(3, r, q))
            resp = ResponderQP(0x20000 + r, 0x10000 + q, ips[q], ips[r], port + 1, params,
                               first_psn=initial_psn(3, r, q))
            port += 2
            eps[r].requesters[req.qpn] = req
            eps[q].responders[resp.qpn] = resp
            send_qp[r][q], recv_qp[q][r] = req, resp
    for ep in eps:
        ep.start()
    out, errors = {}, []

    def rank(r):
        try:
            out[r] = execute(alg, r, list(range(n)), size, send_qp[r], recv_qp[r], {}, timeout_s=30)
        except Exception as e:  # surfaced below
            errors.append(e)
    try:
        threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(40)
        assert not errors, errors
        return out, recv_qp
    finally:
        for ep in eps:
            ep.stop()


@pytest.mark.parametrize("key, n, size", [
    (("allreduce", "tree"), 5, 200_003), (("allreduce", "halving_doubling"), 6, 10_001),
    (("alltoall", "direct"), 4, 9_999), (("broadcast", "ring"), 3, 150_001)])
def test_algorithm_on_real_qps_delivers_its_schedule_exactly(key, n, size):
    """Every responder receives exactly the messages the sender's schedule lists, in order, each once."""
    alg = ALGORITHMS[key]
    out, recv_qp = run_on_loopback(alg, n, size)
    for r in range(n):
        for q, qp in recv_qp[r].items():
            want = [t.nbytes for s in alg.schedule(q, n, size) for t in s.sends if t.peer == r]
            assert qp.msg_bytes == want and qp.counters.order_errors == 0
            assert qp.counters.delivered_bytes == sum(want)
    assert sum(o["sent_bytes"] for o in out.values()) == {"allreduce": 2 * (n - 1) * size}.get(
        key[0], (n - 1) * size)
