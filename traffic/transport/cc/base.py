"""The interface of a congestion control in the transport's reaction point (one object per requester QP).

The requester QP calls the hooks under its lock, from its sender thread (``on_send``,
``on_timeout``, ``next_send_ns``) and from the endpoint's receive thread (``on_ack``,
``on_cnp``); times are ``time.monotonic_ns()``. The pacing decision: before every
transmission the QP asks :meth:`CongestionControl.next_send_ns` and, when the answer lies in
the future, waits until then (a new ACK, CNP or post wakes it to ask again). DCQCN (Zhu et
al., SIGCOMM 2015) needs exactly these: the byte counter from ``on_send``, the rate cut from
``on_cnp``, alpha and the timers from the times passed, the line rate to start from.
"""
from __future__ import annotations

from typing import ClassVar, NamedTuple


class RateChange(NamedTuple):
    """One change of a QP's sending rate (a row of qp_rates.csv once its time is on the run's clock).

    ``time_ns``: ``time.monotonic_ns()`` of the event; ``event``: what changed it (``start``,
    ``cnp``, ``timer``, ``bytes``); ``rate_bps``: the current rate RC after it;
    ``target_rate_bps``: the target rate RT; ``alpha``: the congestion estimate (DCQCN)."""

    time_ns: int
    event: str
    rate_bps: float
    target_rate_bps: float
    alpha: float


class CongestionControl:
    """One QP's sending-rate controller. Subclasses set ``name`` and override the hooks they need.

    ``line_rate_bps``: the host link's rate (the QP's line rate). ``payload_bytes``: the
    path MTU's payload per packet. The defaults do nothing and never hold a packet back.
    """

    name: ClassVar[str] = ""

    def __init__(self, line_rate_bps: float, payload_bytes: int):
        if line_rate_bps <= 0:
            raise ValueError(f"line_rate_bps={line_rate_bps}: must be > 0")
        self.line_rate_bps = float(line_rate_bps)
        self.payload_bytes = payload_bytes
        #: the rate changes so far (:class:`RateChange`); stays empty for a control that never changes it
        self.rate_log: list[RateChange] = []

    @classmethod
    def for_transport(cls, params) -> "CongestionControl":
        """A new controller for one QP of a run with ``params`` (traffic.transport.TransportParams)."""
        return cls(params.line_rate_bps, params.payload_bytes)

    @classmethod
    def cnp_interval_ns(cls, params) -> int | None:
        """The notification point's CNP interval, ns, for a run with ``params``; None: responders
        send no CNPs (the control does not react to ECN)."""
        return None

    @property
    def rate_bps(self) -> float:
        """The rate the QP may send at now, bit/s (the line rate unless the algorithm cut it)."""
        return self.line_rate_bps

    def on_send(self, wire_bytes: int, now_ns: int) -> None:
        """A packet of ``wire_bytes`` frame bytes left the QP at ``now_ns``."""

    def on_ack(self, acked_pkts: int, acked_bytes: int, now_ns: int) -> None:
        """An ACK (or a NAK's implied ACK) newly acknowledged ``acked_pkts`` packets of
        ``acked_bytes`` payload bytes at ``now_ns``."""

    def on_cnp(self, now_ns: int) -> None:
        """A congestion notification packet (BTH opcode 0x81) for this QP arrived at ``now_ns``."""

    def on_timeout(self, now_ns: int) -> None:
        """The retransmission timer fired at ``now_ns`` (go-back-N from the oldest unacknowledged PSN)."""

    def next_send_ns(self, now_ns: int) -> int:
        """The earliest ``time.monotonic_ns()`` at which the next packet may leave; ``<= now_ns`` means now."""
        return now_ns
