"""The runner<->agent messages (traffic.protocol): every type round-trips through its JSON line;
decoding names the unknown type, or the message and field path of an unknown, missing or
mistyped field."""
import json

import pytest

from traffic.protocol import (MESSAGES, AgentConfig, ErrorEvent, Exit, GetStats, MessageRecord, OpDone,
                              ProtocolError, QpCnpLog, QpRateLog, RankAddress, Ready, RequesterQpStats,
                              ResponderQpStats, RunOp, Stats, decode, encode)
from traffic.protocol import FlowMessage, FlowOrder, FlowReceived, FlowsDone, RunFlows
from traffic.transport import QPCounters, ResponderCounters, TransportParams

CONFIG = AgentConfig(rank=1, ranks=[RankAddress(0, "10.0.0.1", "h1"), RankAddress(1, "10.0.0.2", "h2")], peers=[0],
                     seed=7, transport=TransportParams(payload_bytes=4096, window_pkts=16, ack_every_pkts=4,
                                                       rto_us=493_849, line_rate_bps=20e6))
STATS = Stats(rank=1,
              requesters=[RequesterQpStats(rank=1, peer=0, qpn=0x10000, udp_sport=50123, first_psn=0xFFFFFE,
                                           counters=QPCounters(tx_pkts=20, tx_wire_bytes=21_640, acks_rx=3,
                                                               posted_bytes=20_000, acked_bytes=20_000))],
              responders=[ResponderQpStats(rank=1, peer=0, qpn=0x20000, first_psn=12,
                                           counters=ResponderCounters(rx_pkts=20, delivered_bytes=20_000,
                                                                      acks_tx=3, messages=1))],
              msgs=[MessageRecord(rank=1, peer=0, msg_seq=0, size_bytes=20_000, t_post_ns=1_764_000_000_000_000_000,
                                  t_acked_ns=0)],
              rx_pkts=23, rx_unknown_pkts=0,
              rates=[QpRateLog(rank=1, peer=0, qpn=0x10000, channel=0, time_ns=[100, 200, 300],
                               event=["start", "cnp", "timer"], stage=["", "", "fast_recovery"],
                               rate_bps=[20e6, 10e6, 15e6], target_rate_bps=[20e6, 20e6, 20e6],
                               alpha=[1.0, 1.0, 1.0], unrecorded=0)],
              cnps=[QpCnpLog(rank=1, peer=0, qpn=0x10000, channel=0, role="rp", time_ns=[200], unrecorded=0),
                    QpCnpLog(rank=1, peer=0, qpn=0x20000, channel=0, role="np", time_ns=[150, 5150], unrecorded=3)])
EXAMPLES = [
    CONFIG,
    RunOp(op_id=3, collective="allreduce", algorithm="ring", size_bytes=65_536, groups=[[0, 1], [2, 3]],
          timeout_s=20.5),
    GetStats(), Exit(), Ready(rank=1),
    OpDone(op_id=3, rank=1, group_index=0, group_size=2, t_start_ns=10, t_end_ns=20, sent_bytes=65_536, rx_msgs=2,
           t_rx_done_ns=19),
    OpDone(op_id=4, rank=5, group_index=None, group_size=0, t_start_ns=10, t_end_ns=10, sent_bytes=0, rx_msgs=0,
           t_rx_done_ns=10),
    STATS,
    ErrorEvent(error="rank 1: QP 0x10000 -> 10.0.0.1:4791: sendto failed", op_id=3, trace=""),
    RunFlows(trial=1, flows=[FlowOrder(flow=0, src=1, dst=0, size_bytes=4096, start_ns=0, qps=2)], start_at_ns=5,
             sample_period_ns=10_000_000, timeout_s=30.0),
    FlowsDone(trial=1, rank=0, sent=[FlowMessage(flow=3, channel=1, rank=0, peer=1, msg_seq=0, size_bytes=2048,
                                                 t_post_ns=5, t_acked_ns=9)],
              received=[FlowReceived(flow=2, time_ns=[5, 6], rx_bytes=[0, 4096], t_done_ns=6)]),
]


def test_every_message_type_has_an_example():
    assert {type(m) for m in EXAMPLES} == set(MESSAGES.values())


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    line = encode(msg)
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line)["type"] == next(t for t, c in MESSAGES.items() if c is type(msg))
    back = decode(line)
    assert back == msg and type(back) is type(msg)
    assert decode(line.encode()) == msg  # bytes from the pipe decode the same


def test_stats_rows_are_the_qps_and_msgs_tables():
    rows = STATS.qp_rows()
    assert [r["role"] for r in rows] == ["requester", "responder"]
    assert list(rows[0])[:6] == ["rank", "peer", "role", "qpn", "udp_sport", "first_psn"]
    assert rows[0]["tx_pkts"] == 20 and rows[0]["udp_sport"] == 50123 and "udp_sport" not in rows[1]
    assert rows[1]["delivered_bytes"] == 20_000
    assert STATS.msg_rows() == [{"rank": 1, "peer": 0, "msg_seq": 0, "size_bytes": 20_000,
                                 "t_post_ns": 1_764_000_000_000_000_000, "t_acked_ns": 0}]


def test_stats_rows_are_the_qp_rates_and_cnp_events_tables():
    assert STATS.rate_rows()[2] == {"rank": 1, "peer": 0, "qpn": 0x10000, "channel": 0, "time_ns": 300,
                                    "event": "timer", "stage": "fast_recovery", "rate_bps": 15e6,
                                    "target_rate_bps": 20e6, "alpha": 1.0}
    assert [(r["role"], r["qpn"], r["time_ns"]) for r in STATS.cnp_rows()] == \
        [("rp", 0x10000, 200), ("np", 0x20000, 150), ("np", 0x20000, 5150)]
    assert STATS.unrecorded() == {"np_cnps": 3, "rp_cnps": 0, "rate_changes": 0}
    o = _obj(STATS)
    o["cnps"][0]["time_ns"] = [1.5]
    with pytest.raises(ProtocolError, match=r"^stats\.cnps\[0\]\.time_ns\[0\]: expected int, got float"):
        decode(json.dumps(o))
    o = _obj(STATS)
    o["cnps"][0]["role"] = "sender"
    with pytest.raises(ProtocolError, match=r"QpCnpLog.role 'sender': allowed np, rp"):
        decode(json.dumps(o))


def _obj(msg) -> dict:
    return json.loads(encode(msg))


def test_unknown_type_is_named():
    with pytest.raises(ProtocolError, match=r"unknown message type 'op'; allowed: agent_config, run_op"):
        decode('{"type": "op", "op_id": 1}')


@pytest.mark.parametrize("line, match", [
    ("not json", "not a JSON line"),
    ('{"op_id": 1}', "with a 'type' key"),
    ('[1, 2]', "with a 'type' key"),
])
def test_not_a_message(line, match):
    with pytest.raises(ProtocolError, match=match):
        decode(line)


def test_unknown_field_is_named():
    o = _obj(EXAMPLES[1])
    o["priority"] = 3
    with pytest.raises(ProtocolError, match=r"^run_op\.priority: unknown field of RunOp; allowed: algorithm, "):
        decode(json.dumps(o))


def test_unknown_nested_field_is_named():
    o = _obj(STATS)
    o["requesters"][0]["counters"]["ecn_marks"] = 1
    with pytest.raises(ProtocolError, match=r"^stats\.requesters\[0\]\.counters\.ecn_marks: unknown field of "
                                            r"QPCounters"):
        decode(json.dumps(o))


def test_missing_field_is_named_even_with_a_default():
    o = _obj(CONFIG)
    del o["transport"]["congestion_control"]  # TransportParams has a default: still required on the wire
    with pytest.raises(ProtocolError, match=r"^agent_config\.transport\.congestion_control: missing field of "
                                            r"TransportParams"):
        decode(json.dumps(o))
    o = _obj(EXAMPLES[5])
    del o["t_end_ns"]
    with pytest.raises(ProtocolError, match=r"^op_done\.t_end_ns: missing field of OpDone"):
        decode(json.dumps(o))


@pytest.mark.parametrize("path, value, match", [
    (("size_bytes",), "64KiB", r"run_op\.size_bytes: expected int, got str '64KiB'"),
    (("size_bytes",), True, r"run_op\.size_bytes: expected int, got bool"),
    (("groups",), [[0, "1"]], r"run_op\.groups\[0\]\[1\]: expected int, got str"),
    (("groups",), 5, r"run_op\.groups: expected a list, got int"),
    (("timeout_s",), None, r"run_op\.timeout_s: expected float, got NoneType"),
])
def test_mistyped_field_is_named(path, value, match):
    o = _obj(EXAMPLES[1])
    o[path[0]] = value
    with pytest.raises(ProtocolError, match=match):
        decode(json.dumps(o))


def test_float_field_takes_an_int_and_stays_float():
    o = _obj(EXAMPLES[1])
    o["timeout_s"] = 20
    got = decode(json.dumps(o))
    assert got.timeout_s == 20.0 and isinstance(got.timeout_s, float)


def test_encode_refuses_what_is_no_message():
    with pytest.raises(ProtocolError, match="dict is not a protocol message"):
        encode({"cmd": "exit"})


def test_the_runner_builds_the_agents_transport_params_from_the_spec():
    from testbed.emulation.agents import transport_params
    from testbed.spec.scenario import parse_scenario

    spec = parse_scenario({"fabric": {"host_link_bps": "20M", "mtu_bytes": 9000},
                           "transport": {"payload_bytes": 4096, "window_pkts": 16, "ack_every_pkts": 4,
                                         "congestion_control": "none", "entropy": "per_flow"},
                           "workload": {"sizes": {"min_bytes": "64KiB", "max_bytes": "64KiB"}}})
    p = transport_params(spec, 493_849)
    assert p == TransportParams(payload_bytes=4096, window_pkts=16, ack_every_pkts=4, rto_us=493_849,
                                sndbuf_bytes=16 * 1024, line_rate_bps=20e6, congestion_control="none",
                                cc_module="traffic.transport.cc.none", entropy="per_flow")
    cfg = AgentConfig(rank=0, ranks=[RankAddress(0, "10.0.0.1", "h1")], peers=[], seed=1, transport=p)
    assert decode(encode(cfg)).transport == p
    # a rank with 7 peers (all-to-all on 8 hosts) shares the 64 KiB host NIC queue: 65536 // 8 per socket;
    # a ring's 2 peers keep the default (65536 // 3 > 16 KiB)
    assert transport_params(spec, 493_849, peers_per_rank=7).sndbuf_bytes == 8192
    assert transport_params(spec, 493_849, peers_per_rank=2).sndbuf_bytes == 16 * 1024
