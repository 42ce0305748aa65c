"""The one clock of a run: Unix-epoch nanoseconds that never jump.

Every time column of every results table (``*_ns``: ``time_ns`` of the
samplers, ``t_start_ns``, ``t_post_ns``, ... of the operation records) comes
from :func:`unix_ns`, in the runner, the samplers and every agent, so the
tables can be joined on time.

``unix_ns()`` = CLOCK_MONOTONIC + (CLOCK_REALTIME - CLOCK_MONOTONIC read once
when this module is imported). It is on the CLOCK_REALTIME (Unix epoch)
scale, which every process and network namespace shares (pcap timestamps are
on it too), and intervals between two readings are CLOCK_MONOTONIC intervals:
a step of the system clock during a run (``date -s``, an NTP step) never
makes a duration negative. NTP slewing changes both clocks alike
(clock_gettime(2)), so processes that import this module at different times
agree to within the anchor's read error (about a microsecond) unless the
system clock was stepped between their starts.
"""
from __future__ import annotations

import time


def _anchor_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC, read around one realtime reading (error: half the read gap)."""
    m0 = time.monotonic_ns()
    r = time.time_ns()
    m1 = time.monotonic_ns()
    return r - (m0 + m1) // 2


_OFFSET_NS = _anchor_ns()


def unix_ns() -> int:
    """Now, in nanoseconds since the Unix epoch, monotonic within this process."""
    return time.monotonic_ns() + _OFFSET_NS


def from_monotonic_ns(t_mono_ns: int) -> int:
    """A CLOCK_MONOTONIC reading (``time.monotonic_ns()``) on the :func:`unix_ns` scale."""
    return t_mono_ns + _OFFSET_NS
