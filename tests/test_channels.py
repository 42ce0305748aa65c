"""Channels (NCCL's parallel rings): shares, per-channel bytes, concurrent execution, real agents on loopback."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from traffic.collectives import ALGORITHMS
from traffic.collectives.channels import MAX_CHANNELS, channel_schedules, channel_sizes, execute_channels

from test_collectives import MemQP

RING_KEYS = [("allreduce", "ring"), ("allgather", "ring"), ("reducescatter", "ring")]
#: sends over all ranks per byte of a channel's share: all-reduce 2(n-1), the ring halves n-1
SENDS_PER_BYTE = {"allreduce": lambda n: 2 * (n - 1), "allgather": lambda n: n - 1,
                  "reducescatter": lambda n: n - 1}


@pytest.mark.parametrize("size, channels, want", [(10, 3, [4, 3, 3]), (7, 1, [7]), (2, 4, [1, 1, 0, 0]),
                                                  (1_000_003, 2, [500_002, 500_001])])
def test_channel_sizes_split_to_the_byte_larger_first(size, channels, want):
    assert channel_sizes(size, channels) == want


def test_channel_sizes_refuse_bad_counts():
    for bad in (0, MAX_CHANNELS + 1):
        with pytest.raises(ValueError, match=rf"channels = {bad} is outside 1..{MAX_CHANNELS}"):
            channel_sizes(100, bad)


@pytest.mark.parametrize("key", RING_KEYS)
@pytest.mark.parametrize("n", range(2, 9))
@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_bytes_per_channel_are_the_rings_on_each_share(key, n, channels):
    """Sizes not divisible by n x C: channel c's ranks together send exactly SENDS_PER_BYTE x share_c,
    every channel's sends are matched by receives of the same size, and the channels add up to S."""
    alg = ALGORITHMS[key]
    size = n * channels * 1000 + 7 * n + 3            # not divisible by n, C or n x C
    shares = channel_sizes(size, channels)
    assert sum(shares) == size and max(shares) - min(shares) <= 1
    total = 0
    for c, share in enumerate(shares):
        scheds = [channel_schedules(alg, pos, n, size, channels)[c] for pos in range(n)]
        sent = sum(t.nbytes for s in scheds for step in s for t in step.sends)
        recvd = sum(t.nbytes for s in scheds for step in s for t in step.recvs)
        assert sent == recvd == SENDS_PER_BYTE[key[0]](n) * share
        total += sent
    assert total == SENDS_PER_BYTE[key[0]](n) * size


@pytest.mark.parametrize("channels", [1, 2, 3])
def test_channels_run_concurrently_over_their_own_queue_pairs(channels):
    """Ring all-reduce of 10,007 B on 5 ranks in C channels over in-memory QPs: each channel's QPs carry
    exactly its share's chunks, and the sent bytes add up to 2(n-1)/n of S per rank on average."""
    alg, n, size = ALGORITHMS[("allreduce", "ring")], 5, 10_007
    links = [{(a, (a + 1) % n): MemQP() for a in range(n)} for _ in range(channels)]

    def rank(pos):
        send = [{b: q for (a, b), q in ch.items() if a == pos} for ch in links]
        recv = [{a: q for (a, b), q in ch.items() if b == pos} for ch in links]
        return execute_channels(alg, pos, list(range(n)), size, send, recv, [{} for _ in range(channels)], 10.0)
    with ThreadPoolExecutor(n) as pool:            # every rank at once; a rank's error is raised here
        out = dict(enumerate(pool.map(rank, range(n))))
    for c, share in enumerate(channel_sizes(size, channels)):
        assert sum(sum(q.msg_bytes) for q in links[c].values()) == 2 * (n - 1) * share
    assert sum(r["sent_bytes"] for r in out.values()) == 2 * (n - 1) * size
    assert all(r["rx_msgs"] == 2 * (n - 1) * channels for r in out.values())


def test_a_failing_channel_fails_the_operation():
    alg = ALGORITHMS[("allreduce", "ring")]
    send = [{1: MemQP()}, {1: MemQP()}]
    recv = [{1: MemQP()}, {1: MemQP()}]
    with pytest.raises(Exception, match="got no chunk from rank 1"):
        execute_channels(alg, 0, [0, 1], 1000, send, recv, [{}, {}], 0.2)


def test_agents_open_one_qp_per_channel_and_each_carries_its_share():
    """Real agents on loopback (no root): 3 ranks, 2 channels, a ring all-reduce of 30,001 B. Each
    (peer, channel) has its own QP number and UDP source port; channel c's QPs deliver 2(n-1) x share_c
    over all ranks; stats rows carry the channel."""
    from traffic.agent import Agent, qpn, REQ_QPN_BASE
    from traffic.protocol import AgentConfig, RankAddress, RunOp
    from traffic.transport import TransportParams
    n, size, channels = 3, 30_001, 2
    ranks = [RankAddress(r, f"127.81.0.{r + 1}", f"h{r + 1}") for r in range(n)]
    params = TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4, rto_us=50_000)
    agents = [Agent(AgentConfig(rank=r, ranks=ranks, peers=[(r + 1) % n, (r - 1) % n], seed=1, transport=params,
                                channels=channels)) for r in range(n)]
    try:
        cmd = RunOp(op_id=0, collective="allreduce", algorithm="ring", size_bytes=size, groups=[], timeout_s=20.0)
        with ThreadPoolExecutor(n) as pool:
            out = list(pool.map(lambda a: a.run_op(cmd), agents))
        assert sum(o.sent_bytes for o in out) == 2 * (n - 1) * size
        for c, share in enumerate(channel_sizes(size, channels)):
            assert sum(qp.counters.delivered_bytes for a in agents for qp in a.recv_qps[c].values()) \
                == 2 * (n - 1) * share
        qpns = {qp.qpn for a in agents for qps in a.send_qps for qp in qps.values()}
        assert qpn(REQ_QPN_BASE, 1, 1) in qpns and len(qpns) == n * channels and len(agents[0].ep.requesters) == 4
        sports = [qp.udp_sport for qps in agents[0].send_qps for qp in qps.values()]
        assert len(set(sports)) == len(sports) == 4
        rows = agents[0].stats().qp_rows()
        assert sorted((r["role"], r["channel"]) for r in rows) == [("requester", 0)] * 2 + [("requester", 1)] * 2 \
            + [("responder", 0)] * 2 + [("responder", 1)] * 2
    finally:
        for a in agents:
            a.close()
