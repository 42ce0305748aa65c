"""The ``congestion.pfc.watchdog`` sub-block: PFC storm detection and mitigation.

Policy: :class:`controllers.congestion.watchdog.PfcWatchdog` (times, state machine, why the defaults)::

    congestion:
      pfc:
        watchdog: {enabled: true, detect_ms: 200, restore_ms: 200}

``enabled``: while a (port, class) is in storm the controller stops honouring its pauses (drops
instead); ``false``: storms are detected and reported only. ``detect_ms``: a queue paused without a
break this long is in storm; ``restore_ms``: a queue in storm with no pause demand this long is
restored. Both are wall-clock milliseconds of the run (not scaled by the dilation), 1 .. 60000.
"""
from __future__ import annotations

from pydantic import Field, StrictBool

from testbed.spec.units import SpecModel


class WatchdogSpec(SpecModel):
    """PFC watchdog settings (module doc); unknown keys and values out of range are refused by key path."""

    enabled: StrictBool = True
    detect_ms: float = Field(200.0, ge=1, le=60_000, allow_inf_nan=False)
    restore_ms: float = Field(200.0, ge=1, le=60_000, allow_inf_nan=False)
