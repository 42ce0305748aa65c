"""PAT all-gather and reduce-scatter (traffic/collectives/pat.py): steps, peers, which chunks each message
carries and its bytes, replays on contributions (every rank ends with every chunk, each byte delivered once),
busbw against nccl-tests' formula, and a run over real loopback queue pairs.

The generic checks of every registered algorithm (sends matched by receives for n = 2..8, (n-1) S in all,
the in-memory executor) run in tests/test_collectives.py.
"""
from collections import Counter

import pytest

from traffic.collectives import ALGORITHMS, chunk_sizes
from traffic.collectives.pat import dims, n_steps, offsets, pieces, step_chunks
from test_collective_algorithms import run_on_loopback

AG = ALGORITHMS[("allgather", "pat")]
RS = ALGORITHMS[("reducescatter", "pat")]


def _sent(alg, p, n, size):
    return [t for s in alg.schedule(p, n, size) for t in s.sends]


@pytest.mark.parametrize("n, steps", [(2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4), (16, 4), (17, 5), (64, 6)])
def test_step_count_is_log2_n_rounded_up(n, steps):
    """NCCL: log2(n) steps for n a power of two; otherwise ceil(log2 n), the offsets >= n left out."""
    assert n_steps(n) == steps
    one_round = n * AG.chunk_bytes                 # each rank's chunk fits one pipeline piece
    for alg in (AG, RS):
        assert max(len(alg.schedule(p, n, one_round)) for p in range(n)) == steps


def test_pipeline_rounds_overlap_as_nccls_step_buffers():
    """8 ranks, each chunk 4 pieces + 1 byte -> 5 rounds: 3 + 5 - 1 = 7 steps; in the middle steps a rank
    sends at every distance at once (4, 2, 1: rounds j, j-1, j-2), each message the pieces of its round."""
    cb = AG.chunk_bytes
    size = 8 * (4 * cb + 1)
    cut = pieces(size, 8, cb)
    assert len(cut[0]) == 5 and all(sum(p) == 4 * cb + 1 for p in cut) and cut[0][0] == cut[0][4] + 1
    steps = AG.schedule(0, 8, size)
    assert len(steps) == 7
    assert [sorted(t.peer for t in s.sends) for s in steps] == [[4], [4, 6], [4, 6, 7], [4, 6, 7], [4, 6, 7],
                                                                 [6, 7], [7]]
    assert dict(steps[2].sends) == {4: cut[0][2], 6: 2 * cut[0][1], 7: 4 * cut[0][0]}
    assert sum(t.nbytes for s in steps for t in s.recvs) == size - size // 8


def test_eight_ranks_all_gather_peers_and_bytes():
    """8 ranks, S = 8000 (1000 per chunk): distances 4, 2, 1 down (to p-4, p-2, p-1), 1, 2, 4 chunks."""
    for p in range(8):
        steps = AG.schedule(p, 8, 8000)
        assert [(s.sends, s.recvs) for s in steps] == [
            ((((p - d) % 8, 1000 * k),), (((p + d) % 8, 1000 * k),)) for d, k in ((4, 1), (2, 2), (1, 4))]
        assert AG.peers(p, 8) == {(p + d) % 8 for d in (-4, -2, -1, 1, 2, 4)}


def test_eight_ranks_reduce_scatter_is_the_all_gather_reversed():
    """Distances 1, 2, 4 up (to p+1, p+2, p+4), carrying 4, 2, 1 chunks' partial sums."""
    for p in range(8):
        steps = RS.schedule(p, 8, 8000)
        assert [(s.sends, s.recvs) for s in steps] == [
            ((((p + d) % 8, 1000 * k),), (((p - d) % 8, 1000 * k),)) for d, k in ((1, 4), (2, 2), (4, 1))]


@pytest.mark.parametrize("n, d, want", [
    (8, 2, (0,)), (8, 1, (0, 4)), (8, 0, (0, 2, 4, 6)),
    (6, 2, (0,)), (6, 1, (0,)), (6, 0, (0, 2, 4)),       # 4 + 2 = 6 is not an offset of 6 ranks
    (5, 2, (0,)), (5, 1, (0,)), (5, 0, (0, 2)),
])
def test_offsets_per_dimension(n, d, want):
    assert offsets(n, d) == want


def test_chunk_offsets_with_uneven_chunks():
    """6 ranks, 1003 B: chunks 168,167,... ; rank 3 sends at d=0 the chunks of ranks 3, 5, 1 to rank 2
    (all-gather) and, reduce-scatter, the partials of ranks 4, 0, 2 to rank 4."""
    chunks = chunk_sizes(1003, 6)
    assert chunks == [168, 167, 167, 167, 167, 167]
    assert step_chunks(3, 6, 0, True) == (2, (3, 5, 1))
    assert step_chunks(3, 6, 0, False) == (4, (4, 0, 2))
    assert _sent(AG, 3, 6, 1003)[-1] == (2, 167 + 167 + 167)
    assert _sent(RS, 3, 6, 1003)[0] == (4, 167 + 168 + 167)
    assert _sent(AG, 4, 6, 1003)[-1] == (3, 167 + 168 + 167)        # ranks 4, 0, 2


@pytest.mark.parametrize("n", range(2, 18))
def test_all_gather_replay_every_rank_ends_with_every_chunk_each_once(n):
    """Replay the messages on chunk ownership: a rank only sends chunks it holds, never receives one twice,
    ends with all n; so it receives S - S/n bytes, and all ranks send (n-1) S."""
    held = [{p} for p in range(n)]
    for d in dims(n, True):
        out = [step_chunks(p, n, d, True) for p in range(n)]
        for p, (peer, ranks) in enumerate(out):
            assert set(ranks) <= held[p] and len(set(ranks)) == len(ranks)
        for p, (peer, ranks) in enumerate(out):
            assert not held[peer] & set(ranks), "a chunk arrives once"
            held[peer] |= set(ranks)
    assert all(h == set(range(n)) for h in held)
    size = 10 * n + 3
    chunks = chunk_sizes(size, n)
    for p in range(n):
        assert sum(t.nbytes for s in AG.schedule(p, n, size) for t in s.recvs) == size - chunks[p]
    assert sum(t.nbytes for p in range(n) for t in _sent(AG, p, n, size)) == (n - 1) * size


@pytest.mark.parametrize("n", range(2, 18))
def test_reduce_scatter_replay_reduces_every_contribution_once(n):
    """partial[p][q]: whose contributions rank p holds for chunk q. A rank sends a partial once, only after
    every contribution of its subtree arrived, never its own chunk; rank p ends with chunk p over all n."""
    partial = [{q: Counter({p: 1}) for q in range(n)} for p in range(n)]
    for d in dims(n, False):
        out = [(step_chunks(p, n, d, False), p) for p in range(n)]
        assert all(p not in ranks for (_, ranks), p in out), "a rank keeps its own chunk"
        moved = [(peer, {q: partial[p].pop(q) for q in ranks}) for (peer, ranks), p in out]
        for peer, parts in moved:
            for q, c in parts.items():
                partial[peer][q] = partial[peer][q] + c
                assert max(partial[peer][q].values()) == 1, "each contribution reduced once"
    everyone = Counter(range(n))
    assert all(partial[p] == {p: everyone} for p in range(n))


@pytest.mark.parametrize("collective, n, size, time_s, algbw_bps, busbw_bps", [
    # nccl-tests doc/PERFORMANCE.md: all-gather and reduce-scatter busbw = algbw x (n-1)/n
    ("allgather", 8, 4 << 20, 4.0, 8_388_608, 7_340_032),
    ("reducescatter", 8, 1 << 20, 1.0, 8_388_608, 7_340_032),
    ("allgather", 6, 1 << 20, 2.0, 4_194_304, 3_495_253.33),
])
def test_busbw_is_nccl_tests_formula(collective, n, size, time_s, algbw_bps, busbw_bps):
    from testbed.results import tables
    assert ALGORITHMS[(collective, "pat")].busbw_factor(n) == pytest.approx((n - 1) / n)
    rows = [{"op_id": 0, "rank": r, "t_start_ns": 0, "t_end_ns": int(time_s * 1e9)} for r in range(n)]
    ops = tables.ops_table(rows, {0: {"size_bytes": size, "iteration": 0, "warmup": False, "group_size": n,
                                      "collective": collective, "algorithm": "pat"}}, n)
    assert ops.loc[0, "algbw_bps"] == pytest.approx(algbw_bps, rel=1e-9)
    assert ops.loc[0, "busbw_bps"] == pytest.approx(busbw_bps, rel=1e-9)


@pytest.mark.parametrize("alg, n, size", [(AG, 5, 100_003), (RS, 4, 65_537)])
def test_pat_on_real_qps_delivers_its_schedule_exactly(alg, n, size):
    """Over real RC queue pairs on loopback: each responder gets exactly the sender's messages, in order,
    once; all ranks together send (n-1) S."""
    out, recv_qp = run_on_loopback(alg, n, size, subnet=81)
    for r in range(n):
        for q, qp in recv_qp[r].items():
            want = [t.nbytes for t in _sent(alg, q, n, size) if t.peer == r]
            assert qp.msg_bytes == want and qp.counters.order_errors == 0
            assert qp.counters.delivered_bytes == sum(want)
    assert sum(o["sent_bytes"] for o in out.values()) == (n - 1) * size
