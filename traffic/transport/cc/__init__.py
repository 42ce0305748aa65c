"""Congestion controls of the transport, chosen by ``transport.congestion_control`` in the scenario.

To add one: write ``traffic/transport/cc/NAME.py`` with a subclass of
:class:`~traffic.transport.cc.base.CongestionControl` (hooks on send, ACK, CNP and timeout,
and the pacing decision ``next_send_ns``) and add it to :data:`CONGESTION_CONTROLS` below.
"""
from __future__ import annotations

from traffic.registry import pick
from traffic.transport.cc.base import CongestionControl, RateChange
from traffic.transport.cc.dcqcn import Dcqcn
from traffic.transport.cc.dcqcn_params import DcqcnSettings
from traffic.transport.cc.none import NoCongestionControl

#: name (as written in the scenario) -> class; one object per requester QP
CONGESTION_CONTROLS: dict[str, type[CongestionControl]] = {
    NoCongestionControl.name: NoCongestionControl,
    Dcqcn.name: Dcqcn,
}


def congestion_control(name: str, line_rate_bps: float, payload_bytes: int) -> CongestionControl:
    """A new controller of kind ``name`` for one QP. Raises ValueError naming the registered names."""
    cls = pick(CONGESTION_CONTROLS, name, "congestion control", "transport.congestion_control")
    return cls(line_rate_bps, payload_bytes)


def for_transport(params) -> CongestionControl:
    """A new controller of kind ``params.congestion_control`` for one QP of a run with ``params``
    (traffic.transport.TransportParams; DCQCN reads ``params.dcqcn``). Raises ValueError naming
    the registered names."""
    cls = pick(CONGESTION_CONTROLS, params.congestion_control, "congestion control", "transport.congestion_control")
    return cls.for_transport(params)


def cnp_interval_ns(params) -> int | None:
    """The CNP interval of the run's notification points, ns; None when its congestion control
    does not react to ECN (responders then send no CNPs and the endpoint does not read ECN bits)."""
    cls = pick(CONGESTION_CONTROLS, params.congestion_control, "congestion control", "transport.congestion_control")
    return cls.cnp_interval_ns(params)


__all__ = ["CONGESTION_CONTROLS", "CongestionControl", "Dcqcn", "DcqcnSettings", "NoCongestionControl", "RateChange",
           "cnp_interval_ns", "congestion_control", "for_transport"]
