"""summary.json's one shape: the typed :class:`RunSummary` every run writes, complete, cut short or refused.

Every summary.json has every key of :data:`SUMMARY_KEYS` (the fields of :class:`RunSummary`, in that order), one
JSON type per key in every run (testbed.results.summary_schema generates the JSON schema and docs/tables.md's
summary.json section from these types):

- ``status`` says how the run ended (:data:`STATUSES`: ``complete``, ``interrupted``, ``failed``, ``refused``)
  and ``status_reason`` why (None for a complete run);
- a block a run did not reach or did not have is ``null`` (``faults`` without failures, ``controller`` of a run
  refused before its fabric, ...); ``transport`` is always an object with every key of :data:`TRANSPORT_KEYS`
  (``null``: not measured), ``fidelity`` and ``checks`` always objects (``{}``: nothing judged), ``congestion``
  always an object (testbed.results.congestion.stable_congestion);
- a run cut short or refused has ``verdict`` ``"incomplete"`` (:data:`INCOMPLETE`) and ``faithful`` ``null``.

:meth:`RunSummary.from_dict` decodes a summary strictly (an unknown key or a value of the wrong JSON type raises
SummaryShapeError naming it); :meth:`RunSummary.to_json` gives the JSON object in key order.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Optional, Union

#: summary.json ``verdict`` of a run cut short or refused (beside testbed.measure.verdict's faithful,
#: not_faithful, not_judged): nothing was judged.
INCOMPLETE = "incomplete"

#: summary.json ``status`` values: how the run ended.
STATUSES = ("complete", "interrupted", "failed", "refused")


class SummaryShapeError(ValueError):
    """A summary.json (or the dict meant to become one) that does not have :class:`RunSummary`'s shape."""


def _doc(text: str, default: Any = None) -> Any:
    """A field with its description (docs/tables.md) and a default of None."""
    return field(default=default, metadata={"doc": text})


@dataclass(frozen=True)
class Transport:
    """summary.json ``transport``: the queue pairs' totals (testbed.measure.transport_totals.transport_totals, then
    testbed.pipeline.judge); every key in every run, ``null`` where the run did not measure it."""

    posted_bytes: Optional[int] = _doc("payload bytes the requesters posted")
    acked_bytes: Optional[int] = _doc("payload bytes acknowledged to the requesters")
    delivered_bytes: Optional[int] = _doc("payload bytes the responders delivered in order")
    order_errors: Optional[int] = _doc("responders' out-of-order deliveries (0 in a correct run)")
    dup_pkts: Optional[int] = _doc("duplicate packets the responders received")
    retx_pkts: Optional[int] = _doc("packets the requesters retransmitted")
    retx_bytes: Optional[int] = _doc("payload bytes the requesters retransmitted")
    resent_share: Optional[float] = _doc("retx_bytes / posted_bytes (0-1)")
    spurious_retx_pkts: Optional[int] = _doc("retransmitted packets whose original had arrived")
    timeouts: Optional[int] = _doc("retransmission timeouts")
    naks: Optional[int] = _doc("NAKs the requesters received")
    ce_marked_rx_pkts: Optional[int] = _doc("CE-marked packets the responders received")
    cnps_tx: Optional[int] = _doc("CNPs the responders sent")
    cnps_rx: Optional[int] = _doc("CNPs the requesters received")
    sent_pkts: Optional[int] = _doc("packets the requesters sent")
    received_pkts: Optional[int] = _doc("packets the responders received")
    switch_drops_pkts: Optional[int] = _doc("packets the switches dropped")
    unexplained_lost_pkts: Optional[int] = _doc("packets lost that no drop counter or fault explains")
    loss_recovery: Optional[str] = _doc("the agents' loss recovery (go_back_n, selective_repeat)")
    host_nic_retries: Optional[int] = _doc("send retries at the hosts' NICs")
    lost_to_faults_pkts: Optional[int] = _doc("packets lost to the scenario's faults")


#: summary.json ``transport``'s keys (testbed.measure.transport_totals.transport_totals, then testbed.pipeline.judge).
TRANSPORT_KEYS = tuple(f.name for f in dataclasses.fields(Transport))

_BLOCK = Optional[dict]


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """summary.json: the run, how it ended, its verdict, its measurement, then the blocks only some runs fill
    (``null`` in the others). Field order is the file's key order."""

    run_id: str = _doc("the run id: tb + 4 hex digits")
    run_dir: str = _doc("the run directory, absolute")
    scenario: str = _doc("the scenario's name")
    n_ranks: int = _doc("ranks (hosts) of the fabric")
    status: str = _doc("how the run ended: complete, interrupted (a signal), failed (an error) or refused "
                       "(before its fabric was built: the machine or the controller framework)", dataclasses.MISSING)
    status_reason: Optional[str] = _doc("why the run did not complete (null when complete)")
    complete: bool = _doc("every measurement is in", False)
    incomplete_reason: Optional[str] = _doc("what stopped the run, where and after how many collectives")
    interrupted: Optional[str] = _doc("the signal that stopped the run, or what happened after the "
                                      "measurements (an interrupt during the teardown)")
    teardown: Optional[str] = _doc("pending (written before the teardown), then done")
    ops_done: int = _doc("collectives done", 0)
    ops_planned: int = _doc("collectives planned", 0)
    faithful: Optional[bool] = _doc("every judged fidelity check passed (null: not judged)")
    verdict: str = _doc("faithful, not_faithful, not_judged or incomplete", INCOMPLETE)
    violations: list = _doc("failed fidelity checks, one line each", dataclasses.MISSING)
    not_judged: list = _doc("fidelity checks that could not be judged, one line each", dataclasses.MISSING)
    checks: dict = _doc("status of each fidelity check ({}: nothing judged)", dataclasses.MISSING)
    fidelity: dict = _doc("the fidelity figures ({}: nothing judged)", dataclasses.MISSING)
    controller: _BLOCK = _doc("the controller supervisor's report (null before the fabric was up)")
    host_link_bps: float = _doc("host link rate, bit/s", 0)
    payload_efficiency: float = _doc("payload bytes / frame bytes of a full data packet", 0)
    scale_factor: float = _doc("the fabric's rate scale factor", 0)
    transport: Transport = _doc("the queue pairs' totals (every key, null where not measured)",
                                dataclasses.MISSING)
    percentile_method: str = _doc("how the percentiles are taken", "")
    sizes: list = _doc("sizes.csv's rows", dataclasses.MISSING)
    congestion: dict = _doc("the controller's ECN/PFC loop (testbed.results.congestion.CONGESTION_KEYS)",
                            dataclasses.MISSING)
    faults: _BLOCK = _doc("each injected fault and its timings")
    traffic_classes: _BLOCK = _doc("per traffic class queue counters")
    background: _BLOCK = _doc("the background flows")
    pfc_hosts: _BLOCK = _doc("PFC frames the hosts' NICs received and obeyed")
    load_balance: _BLOCK = _doc("a pattern workload's flow figures; the adaptive policy's moves")
    open_loop: _BLOCK = _doc("an open-loop workload's flows, load and FCT slowdown by size bucket (slowdown.csv)")
    fit: Optional[list] = _doc("the linear fit of time against size (3 or more sizes)")
    tenants: _BLOCK = _doc("per tenant figures and isolation probes")
    jobs: _BLOCK = _doc("a jobs list's jobs and tenants")
    chakra: _BLOCK = _doc("a Chakra replay's exposed communication and overlap")
    replay: _BLOCK = _doc("a SimAI replay's model and figures")
    perftest: _BLOCK = _doc("the perftest runs over Soft-RoCE")
    nccl_json: Optional[str] = _doc("the nccl-tests JSON file written (testbed nccl -J)")

    @classmethod
    def from_dict(cls, doc: dict) -> "RunSummary":
        """Decode ``doc`` (summary.json's content, or the assembler's dict: missing optional blocks become None,
        a missing ``transport`` has every key None). Raises SummaryShapeError for an unknown key, a missing
        required key or a value of the wrong JSON type."""
        unknown = [k for k in doc if k not in SUMMARY_KEYS]
        if unknown:
            raise SummaryShapeError(f"summary.json: unknown key(s) {', '.join(map(repr, unknown))}; "
                                    f"add them to testbed.results.shape.RunSummary")
        doc = {**doc, "transport": _transport(doc.get("transport"))}
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in doc and f.default is dataclasses.MISSING:
                raise SummaryShapeError(f"summary.json: missing key {f.name!r}")
            value = doc.get(f.name, f.default)
            _check(f.name, value, _HINTS[f.name])
            values[f.name] = value
        if values["status"] not in STATUSES:
            raise SummaryShapeError(f"summary.json status: {values['status']!r}; allowed: {', '.join(STATUSES)}")
        return cls(**values)

    def to_json(self) -> dict:
        """summary.json's object: every key in :data:`SUMMARY_KEYS` order, ``transport`` in TRANSPORT_KEYS order."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["transport"] = dataclasses.asdict(self.transport)
        return out


#: The keys of every summary.json, in order (:class:`RunSummary`'s fields).
SUMMARY_KEYS = tuple(f.name for f in dataclasses.fields(RunSummary))
_HINTS = typing.get_type_hints(RunSummary)
_TRANSPORT_HINTS = typing.get_type_hints(Transport)


def _transport(block) -> Transport:
    if isinstance(block, Transport):
        return block
    if block is None:
        return Transport()
    if not isinstance(block, dict):
        raise SummaryShapeError(f"summary.json transport: an object expected, got {type(block).__name__}")
    unknown = [k for k in block if k not in TRANSPORT_KEYS]
    if unknown:
        raise SummaryShapeError(f"summary.json transport: unknown key(s) {', '.join(map(repr, unknown))}; "
                                f"add them to testbed.results.shape.Transport")
    for k, v in block.items():
        _check(f"transport.{k}", v, _TRANSPORT_HINTS[k])
    return Transport(**block)


#: Python type -> the JSON values it admits (bool is not a number here).
_JSON_OK = {str: lambda v: isinstance(v, str), bool: lambda v: isinstance(v, bool),
            int: lambda v: isinstance(v, int) and not isinstance(v, bool),
            float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            list: lambda v: isinstance(v, (list, tuple)), dict: lambda v: isinstance(v, dict),
            Transport: lambda v: isinstance(v, Transport)}


def json_types(hint) -> tuple[type, ...]:
    """The Python types a field's hint admits, ``type(None)`` for an Optional one (e.g. ``(dict, NoneType)``)."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in json_types(arg))
    return (typing.get_origin(hint) or hint,)


def _check(name: str, value, hint) -> None:
    allowed = json_types(hint)
    if value is None and type(None) in allowed:
        return
    if not any(t is not type(None) and _JSON_OK[t](value) for t in allowed):
        names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
        raise SummaryShapeError(f"summary.json {name}: {names} expected, got {type(value).__name__} {value!r:.80}")


def stable_summary(summary: dict) -> dict:
    """``summary`` (the assembler's dict) decoded into :class:`RunSummary` and back: every key of
    :data:`SUMMARY_KEYS` in that order. Raises SummaryShapeError (:meth:`RunSummary.from_dict`)."""
    return RunSummary.from_dict(summary).to_json()
