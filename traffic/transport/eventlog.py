"""Bounded per-QP event records of the transport: cheap to append on the fast path, capped in memory.

A :class:`TimeLog` keeps the times of one kind of event of one QP end (each CNP a notification
point sent, each CNP a reaction point received) in a growable ``array('q')``: 8 bytes an event,
amortized O(1) per append, no logging and no object per event. It keeps the first ``cap`` events
and counts the rest in ``unrecorded``, so a long or pathological run cannot grow an agent without
bound and the record says how much it left out. The rate changes of a reaction point are kept the
same way, column by column (:class:`traffic.transport.cc.base.RateLog`).

Times are ``time.monotonic_ns()`` readings; the agent moves them onto the run's clock
(:func:`traffic.clock.from_monotonic_ns`) when it ships them.
"""
from __future__ import annotations

from array import array

#: events kept per QP end and kind; 65,536 CNPs = 3.3 s of a CNP every 50 us (DCQCN's published N,
#: undilated), hours at the dilated N of the scenarios; 512 KiB per QP end when full
CNP_LOG_CAP = 1 << 16


class TimeLog:
    """The times of one kind of event of one QP end, ns (``time.monotonic_ns()``), at most ``cap``.

    :meth:`add` appends a time while fewer than ``cap`` are kept, else counts it in
    :attr:`unrecorded` (the first ``cap`` events are kept). :meth:`snapshot` copies them.
    One writer thread; a reader copies with :meth:`snapshot` (a single C call under the GIL).
    Raises ValueError for ``cap`` < 0.
    """

    __slots__ = ("times_ns", "cap", "unrecorded")

    def __init__(self, cap: int = CNP_LOG_CAP):
        if cap < 0:
            raise ValueError(f"cap={cap}: must be >= 0")
        self.times_ns = array("q")
        self.cap = int(cap)
        self.unrecorded = 0

    def add(self, t_ns: int) -> None:
        """Record one event at ``t_ns`` (or count it as unrecorded once ``cap`` are kept)."""
        if len(self.times_ns) < self.cap:
            self.times_ns.append(t_ns)
        else:
            self.unrecorded += 1

    def __len__(self) -> int:
        return len(self.times_ns)

    def snapshot(self) -> tuple[list[int], int]:
        """(the recorded times in order, ns; the number of events not recorded)."""
        return self.times_ns.tolist(), self.unrecorded
