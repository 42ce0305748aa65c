"""PFC watchdog policy: detect pause storms per (port, class), stop honouring them, restore (pure, no I/O).

A PFC storm is a queue kept paused far longer than congestion ever keeps one: a receiver that stopped
draining (a hung NIC or host) keeps asking to pause, the pause spreads upstream hop by hop and can
deadlock the fabric. Deployed switches run a watchdog per port and priority (SONiC ``pfcwd``:
``detection_time``, ``restoration_time``, action ``drop``; Cisco NX-OS / Arista EOS "PFC watchdog"
likewise): when a queue has been paused for the detection time it is declared in storm and, with the
drop action, the switch stops honouring that queue's pauses and drops its lossless packets instead, so
the rest of the fabric keeps moving; when no pause was asked for the restoration time, the queue is
restored and pauses are honoured again.

State machine of one (port, class), fed the pause demand (``True``: the device downstream asks this
queue to be paused) at each tick of the controller's loop::

    normal --(demand held without a break for detect_ms)--> storm      (storms += 1)
    storm  --(no demand for restore_ms)-------------------> normal     (restores += 1)

No flapping: a storm needs ``detect_ms`` of continuous demand counted afresh after every restore,
and a restore needs ``restore_ms`` of silence counted afresh after every demand, so a queue
changes state at most once per ``min(detect_ms, restore_ms)`` whatever the demand does between
ticks. :meth:`PfcWatchdog.honour` is the decision the actuator applies: the demand itself in the
normal state, and in storm ``False`` when the watchdog mitigates (``mitigate``; else it only reports).

Times are the run's wall-clock (the controller loop's monotonic clock), not scaled by the dilation:
a normal pause lasts a few frame times of the emulated link (4 KiB at 10 Mbit/s: 3.4 ms per frame),
so defaults of 200 ms (SONiC's default detection and restoration times, unscaled) are tens of frame
times, far above a congestion pause and well below a run's length.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

NORMAL, STORM = "normal", "storm"


@dataclass(frozen=True)
class WatchdogEvent:
    """A state change: ``kind`` ``storm`` or ``restore`` of ``key`` (port, class) at ``time_ns``."""

    time_ns: int
    key: Hashable
    kind: str


@dataclass
class _QueueState:
    state: str = NORMAL
    demand_since_ns: int | None = None   # start of the current unbroken pause demand
    last_demand_ns: int | None = None    # last tick with demand (storm: restore counts from it)
    last_tick_ns: int | None = None
    storm_since_ns: int = 0
    storm_ns: int = 0                    # time spent in storm, closed storms


@dataclass
class PfcWatchdog:
    """Per (port, class) storm detection and restore (module doc); times in ns of one monotonic clock.

    ``detect_ms``, ``restore_ms``: > 0 (ValueError otherwise); ``mitigate``: stop honouring pauses of
    a queue in storm (the drop action); False: detect and report only. Keys are any hashable
    (port, class), e.g. ``("tb12abl1-eth3", "lossless")``.
    """

    detect_ms: float = 200.0
    restore_ms: float = 200.0
    mitigate: bool = True
    storms: int = 0
    restores: int = 0
    events: list = field(default_factory=list)
    _queues: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        for name in ("detect_ms", "restore_ms"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"watchdog.{name}={v!r}: must be a number of milliseconds > 0")

    @classmethod
    def from_spec(cls, spec) -> "PfcWatchdog":
        """From the scenario's ``congestion.pfc.watchdog`` (testbed.spec.pfc_watchdog.WatchdogSpec)."""
        return cls(detect_ms=spec.detect_ms, restore_ms=spec.restore_ms, mitigate=spec.enabled)

    def update(self, key: Hashable, now_ns: int, demand: bool) -> WatchdogEvent | None:
        """Feed one tick of ``key``'s pause demand at ``now_ns``; return the state change, if any.

        Ticks of one key must come in time order (ValueError otherwise)."""
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = _QueueState()
        if q.last_tick_ns is not None and now_ns < q.last_tick_ns:
            raise ValueError(f"watchdog tick for {key!r} at {now_ns} ns is before the last one ({q.last_tick_ns})")
        q.last_tick_ns = now_ns
        event = None
        if q.state == NORMAL:
            if not demand:
                q.demand_since_ns = None
            else:
                if q.demand_since_ns is None:
                    q.demand_since_ns = now_ns
                if now_ns - q.demand_since_ns >= self.detect_ms * 1e6:
                    q.state, q.storm_since_ns = STORM, now_ns
                    self.storms += 1
                    event = WatchdogEvent(now_ns, key, "storm")
        elif not demand and now_ns - q.last_demand_ns >= self.restore_ms * 1e6:
            q.state, q.demand_since_ns = NORMAL, None
            q.storm_ns += now_ns - q.storm_since_ns
            self.restores += 1
            event = WatchdogEvent(now_ns, key, "restore")
        if demand:
            q.last_demand_ns = now_ns
        if event is not None:
            self.events.append(event)
        return event

    def update_all(self, now_ns: int, demands: dict) -> list[WatchdogEvent]:
        """:meth:`update` every key of ``demands`` (key -> pause demand) at ``now_ns``; the changes."""
        return [e for e in (self.update(k, now_ns, d) for k, d in demands.items()) if e is not None]

    def in_storm(self, key: Hashable) -> bool:
        q = self._queues.get(key)
        return q is not None and q.state == STORM

    def honour(self, key: Hashable, demand: bool) -> bool:
        """Whether the actuator should pause ``key`` now given the pause ``demand`` (module doc)."""
        return demand and not (self.mitigate and self.in_storm(key))

    def storm_time_ns(self, key: Hashable, now_ns: int) -> int:
        """Time ``key`` spent in storm up to ``now_ns``."""
        q = self._queues.get(key)
        if q is None:
            return 0
        return q.storm_ns + (now_ns - q.storm_since_ns if q.state == STORM else 0)

    def summary(self) -> dict:
        """controllers.loop_result.WatchdogResult's fields: storms, restores, mitigate, queues in storm now."""
        return {"storms": self.storms, "restores": self.restores, "mitigate": self.mitigate,
                "in_storm_now": sorted(str(k) for k, q in self._queues.items() if q.state == STORM)}
