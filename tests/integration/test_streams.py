"""Concurrent collectives on one fabric: streams (testbed.emulation.agents.AgentGroup.submit).

A spine, two leaves, two hosts each, 10 Mbit/s everywhere. Ring all-reduces of 1 MiB:

* two 2-rank jobs on disjoint leaves (h1-h2 on leaf 1, h3-h4 on leaf 2), each on its own stream, submitted
  together: their spans overlap, and each takes about what it takes alone (no link is shared), where running
  them one after the other would take the sum;
* a 4-rank ring on stream 0 and a 2-rank all-gather between two of the same hosts on stream 1, at once: both
  complete with every rank's bytes right (no message of one is taken for the other's: each stream has its own
  queue pairs), and they overlap in time.
"""
import pytest

from testbed.emulation.agents import AgentGroup, transport_params
from testbed.emulation.fabric import Fabric
from testbed.host.runlock import RunLock
from testbed.workloads.plan import PlannedOp, plan_peers
from testbed.spec.scenario import parse_scenario
from topology.naming import new_run_id

pytestmark = pytest.mark.integration

SIZE = 1 << 20


def _spec():
    return parse_scenario({"name": "streams", "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2,
                                                         "host_link_bps": "10M", "fabric_link_bps": "10M",
                                                         "mtu_bytes": 4200},
                           "transport": {"payload_bytes": 4096, "window_pkts": 16, "ack_every_pkts": 4},
                           "workload": {"sizes": {"min_bytes": SIZE, "max_bytes": SIZE}}})


def _span_s(recs) -> float:
    return (max(r.t_end_ns for r in recs) - min(r.t_start_ns for r in recs)) / 1e9


def _overlap_s(a, b) -> float:
    lo = max(min(r.t_start_ns for r in a), min(r.t_start_ns for r in b))
    hi = min(max(r.t_end_ns for r in a), max(r.t_end_ns for r in b))
    return max(0.0, (hi - lo) / 1e9)


def test_streams_run_disjoint_jobs_and_overlapping_groups_concurrently(tmp_path, datapath):
    spec, rid = _spec(), new_run_id()
    ops = [PlannedOp(SIZE, 0, False, "", groups=((0, 1),), stream=0),
           PlannedOp(SIZE, 0, False, "", groups=((2, 3),), stream=1),
           PlannedOp(SIZE, 0, False, "", groups=((0, 1, 2, 3),), stream=0),
           PlannedOp(SIZE, 0, False, "", collective="allgather", groups=((0, 2),), stream=1)]
    peers = plan_peers(ops)
    with RunLock(rid), Fabric(spec, rid, tmp_path, datapath) as fab:
        params = transport_params(spec, rto_us=200_000, streams=2)
        with AgentGroup(fab, params, spec.seed, lambda r: peers.get(r, []), streams=2) as agents:
            solo = agents.run_op(0, SIZE, [[0, 1]], timeout_s=60)
            futs = [agents.submit(1, SIZE, [[0, 1]], 60, stream=0), agents.submit(2, SIZE, [[2, 3]], 60, stream=1)]
            a, b = (agents.wait(f, k, 70) for f, k in zip(futs, (1, 2)))
            futs = [agents.submit(3, SIZE, [[0, 1, 2, 3]], 60, stream=0),
                    agents.submit(4, SIZE, [[0, 2]], 60, collective="allgather", stream=1)]
            ring, gather = (agents.wait(f, k, 70) for f, k in zip(futs, (3, 4)))
            stats = agents.stats()
    print(f"solo {_span_s(solo):.2f} s; together {_span_s(a):.2f} / {_span_s(b):.2f} s, overlap "
          f"{_overlap_s(a, b):.2f} s; ring {_span_s(ring):.2f} s and all-gather {_span_s(gather):.2f} s overlap "
          f"{_overlap_s(ring, gather):.2f} s")
    assert [r.rank for r in a] == [0, 1] and [r.rank for r in b] == [2, 3]
    # disjoint leaves share no link: each as fast as alone (+-15 %), and they ran at the same time
    for recs in (a, b):
        assert abs(_span_s(recs) / _span_s(solo) - 1) < 0.15, (_span_s(recs), _span_s(solo))
    assert _overlap_s(a, b) > 0.8 * min(_span_s(a), _span_s(b))
    # overlapping rank sets on two streams: both complete, every byte where the schedules say
    assert [r.rank for r in ring] == [0, 1, 2, 3] and [r.rank for r in gather] == [0, 2]
    assert all(r.sent_bytes == 2 * 3 * SIZE // 4 for r in ring), ring
    assert all(r.sent_bytes == SIZE // 2 for r in gather), gather
    assert _overlap_s(ring, gather) > 0.5 * _span_s(gather)
    # each stream has its own queue pairs: rank 0's bytes to rank 2 went on stream 1's QP (the all-gather),
    # none on stream 0's (the 4-rank ring sends 0 -> 1 only); rank 0's ring and pair bytes on stream 0
    posted = {(q.peer, q.channel): q.counters.posted_bytes for q in next(s for s in stats if s.rank == 0).requesters}
    assert posted[(2, 1)] == SIZE // 2 and posted[(2, 0)] == 0, posted
    assert posted[(1, 0)] == SIZE + SIZE + 3 * SIZE // 2, posted  # solo, op 1 (2-rank rings), op 3
