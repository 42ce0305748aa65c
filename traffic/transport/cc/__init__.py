"""Congestion controls of the transport, chosen by ``transport.congestion_control`` in the scenario.

To add one: write ``traffic/transport/cc/NAME.py`` with a subclass of
:class:`~traffic.transport.cc.base.CongestionControl` (hooks on send, ACK, CNP and timeout, the
pacing decision ``next_send_ns``, and its ``Settings`` if it has parameters: the scenario's
``transport.NAME`` block) and add it to :data:`CONGESTION_CONTROLS` below. A control defined
elsewhere registers itself with :func:`register` in its own module; the agents import that module
(TransportParams.cc_module) before looking the name up.
"""
from __future__ import annotations

import importlib
from dataclasses import asdict

from traffic.registry import pick, settings_from
from traffic.transport.cc.base import CongestionControl, RateChange
from traffic.transport.cc.dcqcn import Dcqcn
from traffic.transport.cc.dcqcn_params import DcqcnSettings
from traffic.transport.cc.none import NoCongestionControl

#: name (as written in the scenario) -> class; one object per requester QP
CONGESTION_CONTROLS: dict[str, type[CongestionControl]] = {
    NoCongestionControl.name: NoCongestionControl,
    Dcqcn.name: Dcqcn,
}


def register(cls: type[CongestionControl]) -> type[CongestionControl]:
    """Add ``cls`` to :data:`CONGESTION_CONTROLS` under its ``name`` (a control outside this package);
    returns it. Raises ValueError when the name is empty or taken by another class."""
    if not cls.name or CONGESTION_CONTROLS.get(cls.name, cls) is not cls:
        raise ValueError(f"congestion control {cls.__qualname__}: name {cls.name!r} is empty or already registered")
    CONGESTION_CONTROLS[cls.name] = cls
    return cls


def congestion_control(name: str, line_rate_bps: float, payload_bytes: int) -> CongestionControl:
    """A new controller of kind ``name`` with its default settings for one QP. Raises ValueError naming
    the registered names."""
    cls = pick(CONGESTION_CONTROLS, name, "congestion control", "transport.congestion_control")
    return cls(line_rate_bps, payload_bytes)


def control_class(params) -> type[CongestionControl]:
    """The class of ``params.congestion_control`` (traffic.transport.TransportParams), importing
    ``params.cc_module`` first when the name is not registered here. Raises ValueError naming the
    registered names."""
    if params.congestion_control not in CONGESTION_CONTROLS and params.cc_module:
        importlib.import_module(params.cc_module)
    return pick(CONGESTION_CONTROLS, params.congestion_control, "congestion control", "transport.congestion_control")


def settings_of(params):
    """The typed settings of the run's congestion control: its ``Settings`` from ``params.cc_settings``.
    Raises ValueError naming an unknown or mistyped key."""
    return settings_from(control_class(params).Settings, params.cc_settings, "transport.cc_settings")


def transport_fields(cls: type[CongestionControl], settings) -> dict:
    """The congestion-control fields of TransportParams for ``cls`` with ``settings`` (one of its
    ``Settings``): ``congestion_control``, ``cc_settings``, ``cc_module``."""
    return {"congestion_control": cls.name, "cc_settings": asdict(settings), "cc_module": cls.__module__}


def for_transport(params) -> CongestionControl:
    """A new controller of kind ``params.congestion_control`` for one QP of a run with ``params``
    (traffic.transport.TransportParams), with the settings of ``params.cc_settings``. Raises ValueError
    naming the registered names, or an unknown or mistyped setting."""
    return control_class(params).for_transport(params, settings_of(params))


def cnp_interval_ns(params) -> int | None:
    """The CNP interval of the run's notification points, ns; None when its congestion control
    does not react to ECN (responders then send no CNPs and the endpoint does not read ECN bits)."""
    return control_class(params).cnp_interval_ns(settings_of(params))


__all__ = ["CONGESTION_CONTROLS", "CongestionControl", "Dcqcn", "DcqcnSettings", "NoCongestionControl", "RateChange",
           "cnp_interval_ns", "congestion_control", "control_class", "for_transport", "register", "settings_of",
           "transport_fields"]
