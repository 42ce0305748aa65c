"""The controller supervisor's report: summary.json's ``controller`` block, as records decoded strictly.

The testbed's supervisor (testbed.emulation.controller_supervisor) watches the controller process, records
each death and restart, and collects the OpenFlow errors the app reported in its ready file
(controllers.contract.ControllerReady); its report is a :class:`ControllerReport`, written into summary.json
as its JSON object (:func:`controllers.contract.encode`) and read back, wherever the testbed judges or prints
it, with :func:`decode_report`: every field present (None where not known), no other, each of its type; a
block that is not one raises controllers.contract.ContractError naming the field, the value and what was
expected. Times are Unix-epoch ns (traffic.clock.unix_ns) or seconds as named.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from controllers.contract import ControllerSettings, OpenFlowError, decode


@dataclass(frozen=True)
class Restarted:
    """A restart that brought the switches back: the new controller's ``pid``, the time from its spawn to every
    switch reconnected and resynced (``reconnect_s``) and from the death (``outage_s``), the switches its ready
    file lists, and what their resync changed, summed (controllers.resync counts: flows_unchanged, ...)."""

    pid: int
    reconnect_s: float
    outage_s: float
    switches: int
    resync: dict[str, int]


@dataclass(frozen=True)
class RestartFailed:
    """A restart that did not bring every switch back (``failed``: why), or was not tried again; ``pid``: the
    last controller process."""

    failed: str
    pid: int


@dataclass(frozen=True)
class Death:
    """The controller exiting on its own: its ``pid``, how (the ``signal``'s name, else the ``exit_code``),
    when (``time_ns``, the same instant as ``utc`` text, ``after_start_s`` since the fabric started), and the
    restart (None: restarting is off, or the restart was still under way when the report was taken)."""

    pid: int
    signal: Optional[str]
    exit_code: Optional[int]
    time_ns: int
    utc: str
    after_start_s: float
    restart: Optional[Union[Restarted, RestartFailed]]


@dataclass(frozen=True)
class ControllerReport:
    """summary.json's ``controller`` block (testbed.emulation.controller_supervisor.ControllerSupervisor.report).

    ``framework`` (os_ken or ryu), ``conf`` (controller.conf as {section: {key: value}}), ``settings``
    (controller.settings.json), ``restart`` (controller.restart), ``deaths`` (their count), ``restarts``
    (restarts that brought the switches back), ``switches`` (the topology's), ``reconnect_target_s``, ``events``
    (one per death), ``openflow_errors`` (the larger of the ready files' error count and the log's OFPT_ERROR
    lines), ``errors`` (the first 10 error records), ``log`` (the controller log's path), ``violations`` (empty
    when the controller part is faithful)."""

    framework: str
    conf: dict[str, dict[str, str]]
    settings: ControllerSettings
    restart: bool
    deaths: int
    restarts: int
    switches: int
    reconnect_target_s: float
    events: list[Death]
    openflow_errors: int
    errors: list[OpenFlowError]
    log: str
    violations: list[str]


def decode_report(block: Any) -> ControllerReport:
    """The :class:`ControllerReport` of summary.json's ``controller`` block ``block``. Raises
    controllers.contract.ContractError naming the field path (``controller.events[0].restart``, ...) of an
    unknown, missing or mistyped field."""
    return decode(ControllerReport, block, "controller")


__all__ = ["ControllerReport", "Death", "RestartFailed", "Restarted", "decode_report"]
