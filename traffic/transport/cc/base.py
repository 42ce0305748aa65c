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

from array import array
from dataclasses import asdict
from typing import Any, ClassVar, Mapping, NamedTuple

from traffic.registry import NoSettings


#: what changed a QP's reaction-point state (``event`` of :class:`RateChange`, qp_rates.csv): the QP's
#: creation, a CNP (the cut), DCQCN's alpha timer K, its rate-increase timer T, its byte counter B
RATE_EVENTS = ("start", "cnp", "alpha_timer", "timer", "bytes")
#: the increase stage a ``timer`` or ``bytes`` event applied (Zhu et al., SIGCOMM 2015, sec. 3.1);
#: "" for the other events
RATE_STAGES = ("", "fast_recovery", "additive", "hyper")
#: rate changes kept per QP (RateLog); 33 bytes each, about 2.1 MiB per QP when full
RATE_LOG_CAP = 1 << 16

#: (event, stage) -> the one-byte code a RateLog keeps (event index x 4 + stage index)
_CODE = {(e, st): i * 4 + j for i, e in enumerate(RATE_EVENTS) for j, st in enumerate(RATE_STAGES)}


class RateChange(NamedTuple):
    """One change of a QP's reaction-point state (a row of qp_rates.csv once its time is on the run's clock).

    ``time_ns``: ``time.monotonic_ns()`` of the event; ``event``: what changed it (one of
    :data:`RATE_EVENTS`); ``rate_bps``: the current rate RC after it, bit/s; ``target_rate_bps``:
    the target rate RT, bit/s; ``alpha``: the congestion estimate (DCQCN); ``stage``: the increase
    stage applied (one of :data:`RATE_STAGES`; "" unless a rate increase)."""

    time_ns: int
    event: str
    rate_bps: float
    target_rate_bps: float
    alpha: float
    stage: str = ""


class RateLog:
    """Every change of one QP's reaction-point state, column by column, bounded.

    Arrays, no object per change: ``time_ns`` (int64), one code byte for (event, stage) and RC, RT,
    alpha (3 doubles): 33 bytes a change, about 0.35 us to add (cheaper than a tuple in a list). The
    first ``cap`` changes are kept, later ones counted in :attr:`unrecorded`. Reads like a list of
    :class:`RateChange` (``len``, iteration, index). Written under the QP's lock; :meth:`columns`
    copies it. Raises ValueError for an unknown event or stage name in :meth:`add`, for ``cap`` < 0.
    """

    def __init__(self, cap: int = RATE_LOG_CAP):
        if cap < 0:
            raise ValueError(f"cap={cap}: must be >= 0")
        self.cap = int(cap)
        self.unrecorded = 0
        self.time_ns, self.code, self.values = array("q"), array("B"), array("d")

    def add(self, t_ns: int, event: str, rc_bps: float, rt_bps: float, alpha: float, stage: str = "") -> None:
        """Record one change (or count it as unrecorded once ``cap`` are kept)."""
        if len(self.time_ns) >= self.cap:
            self.unrecorded += 1
            return
        try:
            self.code.append(_CODE[event, stage])
        except KeyError:
            raise ValueError(f"rate change ({event!r}, {stage!r}): events {', '.join(RATE_EVENTS)}; stages "
                             f"{', '.join(map(repr, RATE_STAGES))}") from None
        self.time_ns.append(t_ns)
        self.values.extend((rc_bps, rt_bps, alpha))

    def __len__(self) -> int:
        return len(self.values) // 3  # the last column written: complete rows only

    def __getitem__(self, i: int) -> RateChange:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"rate change {i} of {len(self)}")
        c, v = self.code[i], self.values
        return RateChange(self.time_ns[i], RATE_EVENTS[c >> 2], v[3 * i], v[3 * i + 1], v[3 * i + 2],
                          RATE_STAGES[c & 3])

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def columns(self) -> dict:
        """A copy as lists: time_ns (monotonic ns), event, stage (names), rate_bps, target_rate_bps, alpha,
        and ``unrecorded`` (changes not kept)."""
        n = len(self)
        codes, v = self.code[:n], self.values[:3 * n]
        return {"time_ns": self.time_ns[:n].tolist(), "event": [RATE_EVENTS[c >> 2] for c in codes],
                "stage": [RATE_STAGES[c & 3] for c in codes], "rate_bps": v[0::3].tolist(),
                "target_rate_bps": v[1::3].tolist(), "alpha": v[2::3].tolist(), "unrecorded": self.unrecorded}


class CongestionControl:
    """One QP's sending-rate controller. Subclasses set ``name`` and override the hooks they need.

    ``line_rate_bps``: the host link's rate (the QP's line rate). ``payload_bytes``: the
    path MTU's payload per packet. ``settings``: an instance of :attr:`Settings` (None: its
    defaults). The defaults do nothing and never hold a packet back.

    A control with parameters declares them as its ``Settings`` (a frozen dataclass whose fields use
    traffic.registry.setting): the scenario sets them in ``transport.<name>`` (validated against it,
    testbed.spec.plugins), the runner resolves them (:meth:`run_settings`) and hands them to the agents
    in TransportParams.cc_settings, and each QP's control receives the instance.
    """

    name: ClassVar[str] = ""
    #: its settings: a frozen dataclass, one field per key of the scenario's ``transport.<name>`` block
    Settings: ClassVar[type] = NoSettings

    def __init__(self, line_rate_bps: float, payload_bytes: int, settings: Any = None):
        if line_rate_bps <= 0:
            raise ValueError(f"line_rate_bps={line_rate_bps}: must be > 0")
        self.line_rate_bps = float(line_rate_bps)
        self.payload_bytes = payload_bytes
        self.settings = settings if settings is not None else self.Settings()
        #: the rate changes so far (:class:`RateLog` of :class:`RateChange`); stays empty for a control
        #: that never changes it
        self.rate_log = RateLog()

    @classmethod
    def for_transport(cls, params, settings: Any) -> "CongestionControl":
        """A new controller for one QP of a run with ``params`` (traffic.transport.TransportParams) and
        ``settings`` (its :attr:`Settings`, decoded from ``params.cc_settings``)."""
        return cls(params.line_rate_bps, params.payload_bytes, settings)

    @classmethod
    def cnp_interval_ns(cls, settings: Any) -> int | None:
        """The notification point's CNP interval, ns, for a run with ``settings``; None: responders
        send no CNPs (the control does not react to ECN)."""
        return None

    # -- the run's settings (called by the testbed, before anything starts) -----------------------
    @classmethod
    def run_settings(cls, given: Mapping[str, Any], dilation: float) -> Any:
        """The settings of a run: the keys the scenario gave (``given``, checked, in the run's own units)
        over the defaults. ``dilation``: the run's time dilation (reference_link_bps / host_link_bps),
        for a control whose defaults are published values that scale with it (DCQCN)."""
        return cls.Settings(**given)

    @classmethod
    def check_run(cls, settings: Any, line_rate_bps: float, dilation: float) -> None:
        """Raise ValueError naming the ``transport.<name>.KEY`` path when ``settings`` cannot work on a
        fabric whose host links run at ``line_rate_bps``; nothing by default."""

    @classmethod
    def manifest(cls, given: Mapping[str, Any], dilation: float) -> dict:
        """manifest.json's ``congestion_control`` block: the name and, per setting, the value used and its
        ``origin`` (``scenario`` or ``default``)."""
        used = asdict(cls.run_settings(given, dilation))
        params = {k: {"value": v, "origin": "scenario" if k in given else "default"} for k, v in used.items()}
        return {"name": cls.name, **({"parameters": params} if params else {})}

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
