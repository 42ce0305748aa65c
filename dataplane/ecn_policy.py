"""ECN marking policy: the RED curve and which ports' marking probability to change (pure, no I/O).

The RED curve (Floyd & Jacobson, "Random Early Detection Gateways",
IEEE/ACM ToN 1993), as DCQCN configures it on the switch (Zhu et al.,
"Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015, 3.1)::

    p(q) = 0                                  q <  Kmin
         = Pmax * (q - Kmin) / (Kmax - Kmin)  Kmin <= q <= Kmax
         = 1                                  q >  Kmax

``q`` is the class's instantaneous egress backlog in bytes (DCQCN marks on
the instantaneous queue, not RED's EWMA average). :class:`MarkingPolicy`
turns sampled backlogs into the probabilities the marker should hold,
quantized to ``step`` so that the actuator changes a port only when its
probability moved (docs/architecture.md: one rule change 0.13 ms; every port every
millisecond would eat a core). Used by the marker (:mod:`dataplane.ecn_marker`) in the
controller's 1 ms congestion loop; the queue backends take the class's :class:`RedCurve`.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RedCurve:
    """Kmin, Kmax in bytes, Pmax in (0, 1]; ValueError naming a bad field."""

    kmin_bytes: int
    kmax_bytes: int
    pmax: float

    def __post_init__(self):
        if not 0 <= self.kmin_bytes < self.kmax_bytes:
            raise ValueError(f"kmin_bytes={self.kmin_bytes!r}, kmax_bytes={self.kmax_bytes!r}: "
                             "need 0 <= kmin_bytes < kmax_bytes")
        if not 0 < self.pmax <= 1:
            raise ValueError(f"pmax={self.pmax!r} must be in (0, 1]")

    def probability(self, backlog_bytes: float) -> float:
        """Marking probability at ``backlog_bytes`` of backlog (module doc formula), in [0, 1]."""
        if backlog_bytes < self.kmin_bytes:
            return 0.0
        if backlog_bytes > self.kmax_bytes:
            return 1.0
        return self.pmax * (backlog_bytes - self.kmin_bytes) / (self.kmax_bytes - self.kmin_bytes)


def quantize(p: float, step: float) -> float:
    """``p`` rounded to a multiple of ``step``; a nonzero ``p`` never rounds to 0 (a queue above Kmin
    always marks a little), and 0 stays 0 (none below Kmin)."""
    if p <= 0:
        return 0.0
    q = round(p / step) * step
    return min(1.0, max(step, q))


class MarkingPolicy:
    """Per-port marking probability from sampled backlogs.

    Args:
        curve: the RED curve of the marked class.
        ports: port names, in the order backlogs are given.
        step: probability quantum (default 0.01: 1 percentage point).

    :meth:`decide` returns only the ports whose quantized probability changed
    since the last call, so the caller acts on few ports per tick.
    """

    def __init__(self, curve: RedCurve, ports: list[str], step: float = 0.01):
        if not 0 < step <= 1:
            raise ValueError(f"step={step!r} must be in (0, 1]")
        self.curve = curve
        self.ports = list(ports)
        self.step = step
        self.current = {p: 0.0 for p in self.ports}

    def decide(self, backlogs_bytes) -> dict[str, float]:
        """``backlogs_bytes``: one backlog per port (bytes, negative = not sampled: left as is).

        Returns: port -> new probability, for the ports whose quantized probability moved.
        """
        changes = {}
        for port, q in zip(self.ports, backlogs_bytes):
            if q < 0:
                continue
            p = quantize(self.curve.probability(q), self.step)
            if p != self.current[port]:
                self.current[port] = changes[port] = p
        return changes
