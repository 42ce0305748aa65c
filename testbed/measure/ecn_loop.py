"""The ECN marking loop run in the measuring process, for instruments that read its samples while it runs.

A run's marking loop is the controller's (controllers/congestion/loop.py); the
ECN curve measurement (testbed.measure.ecn_curve) runs its own instead, built
from the scenario by :meth:`EcnLoop.for_run`.
"""
from __future__ import annotations

from dataplane.ecn_marker import NftEcnMarker
from dataplane.ecn_policy import MarkingPolicy
from dataplane.qdisc_sampler import QdiscSampler
from testbed.spec.congestion import CLASS_NAMES, DSCP_LOSSLESS


class EcnLoop:
    """A marking loop in THIS process: a 1 ms sampler of the marked class's leaf on every switch port,
    feeding :class:`~dataplane.ecn_marker.NftEcnMarker` (context manager), for measurements that read its samples while it
    runs (testbed.measure.ecn_curve). A run's loop is the controller's (controllers/congestion/loop.py).
    :meth:`for_run` builds it from a scenario, or returns None when ``congestion.ecn`` is absent."""

    #: period of the marking loop's sampler, s (DESIGN.md: ~10 % of a core for 24 ports)
    PERIOD_S = 0.001

    def __init__(self, marker: NftEcnMarker, sampler):
        self.marker, self.sampler = marker, sampler

    @classmethod
    def for_run(cls, spec, run_id: str, ports: list[str], backend) -> "EcnLoop | None":
        """``spec``: the ScenarioSpec; ``ports``: switch ports; ``backend``: the fabric's queue backend."""
        ecn = spec.congestion.ecn
        if ecn is None:
            return None
        lossless = spec.congestion.traffic_classes(spec.fabric.buffer_bytes, spec.fabric.mtu_bytes + 14)[1]
        policy = MarkingPolicy(lossless.marking, ports, spec.congestion.ecn_probability_step)
        marker = NftEcnMarker(run_id, policy, (DSCP_LOSSLESS,))
        sampler = QdiscSampler(ports, cls.PERIOD_S, parent=backend.class_parent(CLASS_NAMES.index("lossless")),
                               on_sample=marker.on_sample)
        return cls(marker, sampler)

    def __enter__(self) -> "EcnLoop":
        self.marker.start()
        try:
            self.sampler.start()
        except BaseException:
            self.marker.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.sampler.stop()
        finally:
            self.marker.stop()
