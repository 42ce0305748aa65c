"""The messages between the runner (testbed/emulation/agents.py) and the host agents (traffic/agent.py).

One definition, used on both sides: each side builds these dataclasses and reads them, never
string-keyed dicts. On the pipe (and in the agent's config file) each message is one JSON
line: ``{"type": TAG, FIELD: VALUE, ...}`` (:func:`encode`, :func:`decode`).

- start configuration (file given by ``--config``): :class:`AgentConfig`;
- runner -> agent commands: :class:`RunOp`, :class:`RunFlows` (a pattern trial), :class:`GetStats`,
  :class:`Exit`;
- agent -> runner events: :class:`Ready` (QPs up), :class:`OpDone` (after each collective),
  :class:`FlowsDone` (after a pattern trial),
  :class:`Stats` (per-QP counters and per-message records), :class:`ErrorEvent`.

Decoding is strict (:mod:`traffic.codec`): every field must be present (also those with a
default), no other field is allowed, and each value must have the field's type;
:class:`ProtocolError` names the message type and the field path.

Times are Unix-epoch ns (:func:`traffic.clock.unix_ns`), the clock of every table.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass
from typing import Any, Optional, Union

from traffic.codec import DecodeError, from_tagged_line
from traffic.transport.params import TransportParams
from traffic.transport.qp import QPCounters
from traffic.transport.responder import ResponderCounters


class ProtocolError(ValueError):
    """A line that is not a valid message; the text names the type or field at fault."""


# -- start configuration -------------------------------------------------------------------------

@dataclass(frozen=True)
class RankAddress:
    """One rank of the job: its host's IPv4 address and Mininet host name.

    ``plane_ips``: its address in each scale-out plane (plane 0 first; empty: ``ip`` alone, one
    plane); ``server``: index of its server's scale-up domain and ``scale_up_ip`` its address
    there (-1 and "" without one). See :func:`traffic.transport.planes.qp_addresses`."""

    rank: int
    ip: str
    name: str
    plane_ips: list[str] = dataclasses.field(default_factory=list)
    server: int = -1
    scale_up_ip: str = ""


@dataclass(frozen=True)
class PathPorts:
    """The UDP source ports from ``src_ip`` to ``dst_ip`` grouped by the fabric path they take
    (``paths[i]``: the ports of path i), as the testbed traced them (testbed.emulation.entropy_paths)."""

    src_ip: str
    dst_ip: str
    paths: list[list[int]]


@dataclass(frozen=True)
class AgentConfig:
    """What an agent needs to start: its ``rank``, every rank's address (``ranks``), the ranks it
    needs queue pairs with (``peers``), the run's ``seed`` (entropy ports, initial PSNs) and the
    transport parameters (congestion-control and entropy policy names included). ``channels``:
    queue pairs per peer, one per channel (NCCL's parallel rings; traffic.collectives.channels).
    ``path_ports``: for an entropy policy that balances its ports over the paths (``spray``), the
    traced ports of each address pair its QPs send on (empty otherwise). ``streams``: communicators
    (testbed.emulation.agents: each stream has its own ``channels`` queue pairs per peer, and its
    ops run in their own thread, in order). ``stream_tos``: the TOS byte of each stream's data packets
    (a job's traffic class: traffic.transport.qp.class_tos); empty: every stream lossless (DSCP 26, ECT(0))."""

    rank: int
    ranks: list[RankAddress]
    peers: list[int]
    seed: int
    transport: TransportParams
    channels: int = 1
    path_ports: list[PathPorts] = dataclasses.field(default_factory=list)
    streams: int = 1
    stream_tos: list[int] = dataclasses.field(default_factory=list)


# -- commands: runner -> agent -------------------------------------------------------------------

@dataclass(frozen=True)
class RunOp:
    """Run collective ``op_id`` of ``size_bytes`` with ``algorithm``. ``groups`` lists the rank
    groups that run it concurrently, each in ring order (empty: one ring of all ranks); the agent
    runs the group holding its rank, or records an idle op. ``timeout_s``: per-op limit. ``stream``:
    the communicator whose queue pairs carry it (0..AgentConfig.streams-1); the agent runs the ops of
    one stream in order and those of different streams concurrently."""

    op_id: int
    collective: str
    algorithm: str
    size_bytes: int
    groups: list[list[int]]
    timeout_s: float
    stream: int = 0


@dataclass(frozen=True)
class GetStats:
    """Ask for a :class:`Stats` event."""


@dataclass(frozen=True)
class Exit:
    """Stop the QPs and exit."""


# -- events: agent -> runner ---------------------------------------------------------------------

@dataclass(frozen=True)
class Ready:
    """The agent of ``rank`` has its QPs up."""

    rank: int


@dataclass(frozen=True)
class OpDone:
    """One rank's record of one collective (a row of rank_ops.csv). ``group_index`` is None and
    ``group_size`` 0 for a rank in no group of the op (idle: its answer ends the barrier, and the testbed
    drops it, testbed.emulation.agents.taking_part). ``sent_bytes``: payload bytes posted;
    ``rx_msgs``: messages received; ``t_rx_done_ns``: when the last expected chunk arrived."""

    op_id: int
    rank: int
    group_index: Optional[int]
    group_size: int
    t_start_ns: int
    t_end_ns: int
    sent_bytes: int
    rx_msgs: int
    t_rx_done_ns: int


@dataclass(frozen=True)
class RequesterQpStats:
    """Counters of the requester QP of ``rank`` towards ``peer`` on ``channel``; ``udp_sport``: its (first)
    source port; ``dscp``: the DSCP of its data packets (its stream's traffic class)."""

    rank: int
    peer: int
    qpn: int
    udp_sport: int
    first_psn: int
    counters: QPCounters
    channel: int = 0
    dscp: int = 26


@dataclass(frozen=True)
class ResponderQpStats:
    """Counters of the responder QP of ``rank`` for the requester at ``peer`` on ``channel``."""

    rank: int
    peer: int
    qpn: int
    first_psn: int
    counters: ResponderCounters
    channel: int = 0


@dataclass(frozen=True)
class MessageRecord:
    """One message a requester posted: ``t_acked_ns`` is 0 while unacknowledged."""

    rank: int
    peer: int
    msg_seq: int
    size_bytes: int
    t_post_ns: int
    t_acked_ns: int


@dataclass(frozen=True)
class QpRateLog:
    """The rate changes of the requester QP ``qpn`` of ``rank`` towards ``peer`` on ``channel``, column by
    column (rows of qp_rates.csv; traffic.transport.cc.base.RateLog): ``time_ns`` on the run's clock,
    ``event`` (start, cnp, alpha_timer, timer, bytes), ``stage`` (fast_recovery, additive, hyper for an
    increase, else ""), the current rate RC (``rate_bps``) and target rate RT (``target_rate_bps``)
    after it, bit/s, and alpha. The columns have one length; ``unrecorded``: changes past the QP's
    cap, not shipped."""

    rank: int
    peer: int
    qpn: int
    channel: int
    time_ns: list[int]
    event: list[str]
    stage: list[str]
    rate_bps: list[float]
    target_rate_bps: list[float]
    alpha: list[float]
    unrecorded: int = 0

    def rows(self) -> list[dict]:
        """Rows of qp_rates.csv."""
        key = {"rank": self.rank, "peer": self.peer, "qpn": self.qpn, "channel": self.channel}
        return [{**key, "time_ns": t, "event": e, "stage": st, "rate_bps": rc, "target_rate_bps": rt, "alpha": a}
                for t, e, st, rc, rt, a in zip(self.time_ns, self.event, self.stage, self.rate_bps,
                                               self.target_rate_bps, self.alpha)]


#: the two ends of DCQCN's CNP path (cnp_events.csv ``role``)
CNP_ROLES = ("np", "rp")


@dataclass(frozen=True)
class QpCnpLog:
    """The CNPs of one QP end (rows of cnp_events.csv): ``role`` ``np``, the responder QP ``qpn`` of
    ``rank`` for the requester at ``peer`` (its notification point: each CNP's send time), or ``rp``,
    the requester QP ``qpn`` of ``rank`` towards ``peer`` (its reaction point: each CNP's arrival);
    ``time_ns`` on the run's clock, in order. ``unrecorded``: CNPs past the QP's cap, not shipped."""

    rank: int
    peer: int
    qpn: int
    channel: int
    role: str
    time_ns: list[int]
    unrecorded: int = 0

    def __post_init__(self):
        if self.role not in CNP_ROLES:
            raise ProtocolError(f"QpCnpLog.role {self.role!r}: allowed {', '.join(CNP_ROLES)}")

    def rows(self) -> list[dict]:
        """Rows of cnp_events.csv."""
        return [{"rank": self.rank, "peer": self.peer, "qpn": self.qpn, "channel": self.channel, "role": self.role,
                 "time_ns": t} for t in self.time_ns]


@dataclass(frozen=True)
class PfcRxStats:
    """PFC frames one host's NIC received (traffic.transport.pfc_rx): lossless-priority pauses,
    resumes (quanta 0), frames for other priorities only, the time the lossless class was paused,
    and each frame (Unix ns, class-enable vector, lossless quanta)."""

    pause_frames: int = 0
    resume_frames: int = 0
    other_frames: int = 0
    paused_ns: int = 0
    frames: list[list[int]] = dataclasses.field(default_factory=list)


@dataclass(frozen=True)
class Stats:
    """Everything one agent counted: per-QP counters, per-message records, its endpoint's
    received packets (``rx_pkts``; ``rx_unknown_pkts``: too short or for no known QP), its
    requester QPs' rate changes (``rates``; empty when the congestion control never changes one) and
    the CNPs its QPs sent and received (``cnps``: one log per QP end with at least one; DCQCN)."""

    rank: int
    requesters: list[RequesterQpStats]
    responders: list[ResponderQpStats]
    msgs: list[MessageRecord]
    rx_pkts: int
    rx_unknown_pkts: int
    rates: list[QpRateLog] = dataclasses.field(default_factory=list)
    pfc: PfcRxStats = PfcRxStats()
    cnps: list[QpCnpLog] = dataclasses.field(default_factory=list)

    def qp_rows(self) -> list[dict]:
        """Rows of qps.csv: requesters then responders, ``role`` naming which, counters flattened."""
        rows = [{"rank": q.rank, "peer": q.peer, "role": "requester", "qpn": q.qpn, "udp_sport": q.udp_sport,
                 "first_psn": q.first_psn, "channel": q.channel, "dscp": q.dscp, **asdict(q.counters)}
                for q in self.requesters]
        rows += [{"rank": q.rank, "peer": q.peer, "role": "responder", "qpn": q.qpn, "first_psn": q.first_psn,
                  "channel": q.channel, **asdict(q.counters)} for q in self.responders]
        return rows

    def msg_rows(self) -> list[dict]:
        """Rows of msgs.csv (before fct_us is derived)."""
        return [asdict(m) for m in self.msgs]

    def rate_rows(self) -> list[dict]:
        """Rows of qp_rates.csv."""
        return [row for log in self.rates for row in log.rows()]

    def cnp_rows(self) -> list[dict]:
        """Rows of cnp_events.csv."""
        return [row for log in self.cnps for row in log.rows()]

    def unrecorded(self) -> dict:
        """Events past the per-QP caps, not shipped: ``np_cnps``, ``rp_cnps``, ``rate_changes``."""
        return {"np_cnps": sum(c.unrecorded for c in self.cnps if c.role == "np"),
                "rp_cnps": sum(c.unrecorded for c in self.cnps if c.role == "rp"),
                "rate_changes": sum(r.unrecorded for r in self.rates)}

    def pfc_rows(self) -> list[dict]:
        """Rows of pfc_rx.csv: one per PFC frame this host received."""
        return [{"rank": self.rank, "time_ns": t, "class_enable_vector": v, "lossless_quanta": q}
                for t, v, q in self.pfc.frames]


# -- pattern trials (testbed.workloads.pattern, traffic.patterns.executor) ------------------------------
@dataclass(frozen=True)
class FlowOrder:
    """Pattern flow ``flow``: ``size_bytes`` from rank ``src`` to rank ``dst``, posted ``start_ns`` after the
    trial's start, split over ``qps`` queue pairs (channels ``channel``..``channel`` + qps - 1 of the agents'
    QPs with that peer; traffic.patterns.qp_shares). Flows sharing a QP queue on it in (start_ns, flow)
    order (an open-loop workload's lanes, testbed.workloads.open_loop)."""

    flow: int
    src: int
    dst: int
    size_bytes: int
    start_ns: int
    qps: int = 1
    channel: int = 0


@dataclass(frozen=True)
class RunFlows:
    """Run pattern trial ``trial``: ``flows`` start at ``start_at_ns`` + their ``start_ns`` (Unix ns, so every
    agent starts together); receivers sample each flow's delivered bytes every ``sample_period_ns``;
    ``timeout_s``: the whole trial's limit. ``stream``: whose queue pairs carry the flows (a flow's QP c is
    channel c of that stream), run in that stream's worker like a RunOp; ``op_id``: set when the runner
    sent it to some ranks only (a job's pattern, testbed.emulation.agents.AgentGroup.submit_flows): the
    agents' FlowsDone and ErrorEvent carry it; None: every agent got it (one trial of workload.pattern)."""

    trial: int
    flows: list[FlowOrder]
    start_at_ns: int
    sample_period_ns: int
    timeout_s: float
    stream: int = 0
    op_id: Optional[int] = None



@dataclass(frozen=True)
class FlowMessage:
    """One queue pair's message of pattern flow ``flow``: the requester QP of ``rank`` (the source) towards
    ``peer`` (the destination) on ``channel`` (the flow's QP index) posted ``size_bytes`` (its share) at
    ``t_post_ns``; its last byte was acknowledged at ``t_acked_ns`` (0: never). ``msg_seq``: the message's
    number on that QP."""

    flow: int
    channel: int
    rank: int
    peer: int
    msg_seq: int
    size_bytes: int
    t_post_ns: int
    t_acked_ns: int


@dataclass(frozen=True)
class FlowReceived:
    """The receiver's record of a flow: delivered payload bytes (``rx_bytes``, cumulative since the
    trial's start, summed over the flow's queue pairs) at ``time_ns``, sampled every sample period from
    the trial's start until the last byte; ``t_done_ns``: when every QP's message was delivered."""

    flow: int
    time_ns: list[int]
    rx_bytes: list[int]
    t_done_ns: int


@dataclass(frozen=True)
class FlowsDone:
    """One agent's records of pattern trial ``trial``: its sent flows (a :class:`FlowMessage` per flow and
    queue pair: rank = source, peer = destination) and its received flows (one :class:`FlowReceived` each);
    ``op_id``: the RunFlows' op_id."""

    trial: int
    rank: int
    sent: list[FlowMessage]
    received: list[FlowReceived]
    op_id: Optional[int] = None


@dataclass(frozen=True)
class ErrorEvent:
    """The agent failed: ``error`` is one line; ``op_id`` the op it was running (None: none);
    ``trace`` a Python traceback when there is one (empty otherwise)."""

    error: str
    op_id: Optional[int] = None
    trace: str = ""


#: type tag on the wire -> message class
MESSAGES: dict[str, type] = {
    "agent_config": AgentConfig, "run_op": RunOp, "get_stats": GetStats, "exit": Exit,
    "ready": Ready, "op_done": OpDone, "stats": Stats, "error": ErrorEvent,
    "run_flows": RunFlows, "flows_done": FlowsDone,  # pattern trials (testbed.workloads.pattern)
}
_TAGS = {cls: tag for tag, cls in MESSAGES.items()}
Command = Union[RunOp, RunFlows, GetStats, Exit]
Event = Union[Ready, OpDone, FlowsDone, Stats, ErrorEvent]


def encode(msg) -> str:
    """One JSON line (with the trailing newline) for a message of :data:`MESSAGES`.

    Raises ProtocolError for an object that is not one of them."""
    tag = _TAGS.get(type(msg))
    if tag is None:
        raise ProtocolError(f"{type(msg).__name__} is not a protocol message; allowed: "
                            f"{', '.join(c.__name__ for c in MESSAGES.values())}")
    return json.dumps({"type": tag, **asdict(msg)}, separators=(",", ":")) + "\n"


def decode(line: Union[str, bytes]) -> Any:
    """The message in one JSON line. Raises ProtocolError naming the unknown type, or the message
    type and field path of an unknown, missing or mistyped field."""
    try:
        return from_tagged_line(line, "type", MESSAGES, "a message", "message type")
    except DecodeError as e:
        raise ProtocolError(str(e)) from None


__all__ = ["AgentConfig", "CNP_ROLES", "Command", "ErrorEvent", "Event", "Exit", "FlowMessage", "FlowOrder", "FlowReceived", "FlowsDone", "GetStats",
           "MESSAGES", "MessageRecord", "OpDone", "PathPorts", "PfcRxStats", "ProtocolError", "QpCnpLog", "QpRateLog", "RankAddress", "Ready",
           "RequesterQpStats", "ResponderQpStats", "RunFlows", "RunOp", "Stats", "decode", "encode"]
