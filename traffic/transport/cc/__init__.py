"""Congestion controls of the transport, chosen by ``transport.congestion_control`` in the scenario.

To add one: write ``traffic/transport/cc/NAME.py`` with a subclass of
:class:`~traffic.transport.cc.base.CongestionControl` (hooks on send, ACK, CNP and timeout,
and the pacing decision ``next_send_ns``) and add it to :data:`CONGESTION_CONTROLS` below.
"""
from __future__ import annotations

from traffic.registry import pick
from traffic.transport.cc.base import CongestionControl
from traffic.transport.cc.none import NoCongestionControl

#: name (as written in the scenario) -> class; one object per requester QP
CONGESTION_CONTROLS: dict[str, type[CongestionControl]] = {
    NoCongestionControl.name: NoCongestionControl,
}


def congestion_control(name: str, line_rate_bps: float, payload_bytes: int) -> CongestionControl:
    """A new controller of kind ``name`` for one QP. Raises ValueError naming the registered names."""
    cls = pick(CONGESTION_CONTROLS, name, "congestion control", "transport.congestion_control")
    return cls(line_rate_bps, payload_bytes)


__all__ = ["CONGESTION_CONTROLS", "CongestionControl", "NoCongestionControl", "congestion_control"]
