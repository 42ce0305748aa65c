"""The ``congestion`` section: per-class switch buffers and the ECN marking curve (issue 7, items 1-2).

Every switch egress has three classes when ``fabric.queue_backend`` is
``htb_classes`` (:mod:`testbed.emulation.queues.htb_classes`): ``control``
(DSCP 48: CNPs and ACKs, strict priority), ``lossless`` (DSCP 26, RoCE
priority 3) and ``lossy`` (everything else). Their buffers default to
``fabric.buffer_bytes`` each. ``ecn`` switches on RED-curve marking of ECT
packets of the lossless class (:mod:`controllers.congestion.ecn`); thresholds
in bytes, or in packets of one full frame (``fabric.mtu_bytes + 14``)::

    congestion:
      buffers: {control_bytes: 30000, lossless_bytes: 150000, lossy_bytes: 100000}
      ecn: {kmin_bytes: 20000, kmax_bytes: 80000, pmax: 0.2}     # or kmin_pkts / kmax_pkts
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from testbed.spec.units import Count, SizeBytes, _Spec

#: DSCP of the classes (RoCE deployments: CNP 48, RoCE data 26 = priority 3)
DSCP_CONTROL = 48
DSCP_LOSSLESS = 26
#: class names in priority order (0 is served first); the lossy class takes every other DSCP
CLASS_NAMES = ("control", "lossless", "lossy")


class BuffersSpec(_Spec):
    """Per-class egress buffer of every switch port, frame bytes; None: ``fabric.buffer_bytes``."""

    control_bytes: Optional[SizeBytes] = None
    lossless_bytes: Optional[SizeBytes] = None
    lossy_bytes: Optional[SizeBytes] = None


class EcnSpec(_Spec):
    """RED marking curve of the lossless class: Kmin and Kmax in bytes or in full-frame packets
    (give one of each pair), Pmax in (0, 1] (Floyd & Jacobson 1993; Zhu et al. SIGCOMM 2015)."""

    kmin_bytes: Optional[SizeBytes] = None
    kmax_bytes: Optional[SizeBytes] = None
    kmin_pkts: Optional[Count] = Field(None, ge=0)
    kmax_pkts: Optional[Count] = Field(None, ge=1)
    pmax: float = Field(0.2, gt=0, le=1, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_of_each(self) -> "EcnSpec":
        for k in ("kmin", "kmax"):
            given = [f"{k}_{u}" for u in ("bytes", "pkts") if getattr(self, f"{k}_{u}") is not None]
            if len(given) != 1:
                raise ValueError(f"congestion.ecn: give exactly one of {k}_bytes, {k}_pkts (got "
                                 f"{', '.join(given) or 'neither'})")
        return self

    def thresholds_bytes(self, frame_bytes: int) -> tuple[int, int]:
        """(Kmin, Kmax) in bytes; packets count ``frame_bytes`` each."""
        kmin = self.kmin_bytes if self.kmin_bytes is not None else self.kmin_pkts * frame_bytes
        kmax = self.kmax_bytes if self.kmax_bytes is not None else self.kmax_pkts * frame_bytes
        return int(kmin), int(kmax)


class CongestionSpec(_Spec):
    """Priority classes and ECN marking; needs ``fabric.queue_backend: htb_classes`` (checked in the scenario)."""

    buffers: BuffersSpec = BuffersSpec()
    ecn: Optional[EcnSpec] = None
    #: marking probability step: the marker changes a port's rule only when its quantized probability moves
    ecn_probability_step: float = Field(0.01, gt=0, le=0.1, allow_inf_nan=False)

    def class_buffers_bytes(self, default_bytes: int) -> dict[str, int]:
        """class name -> buffer bytes, ``default_bytes`` where not given."""
        b = self.buffers
        return {name: int(getattr(b, f"{name}_bytes") or default_bytes) for name in CLASS_NAMES}

    def traffic_classes(self, default_bytes: int, frame_bytes: int, switch_port: bool = True) -> tuple:
        """The three egress classes as queue-backend input (testbed.emulation.queues.base.TrafficClass).

        Switch ports take the class buffers (``default_bytes`` where not given) and the lossless
        class carries the ECN curve; a host NIC (``switch_port=False``) gets ``default_bytes`` per
        class and no marking.
        """
        from testbed.emulation.queues.base import RedCurve, TrafficClass

        buffers = self.class_buffers_bytes(default_bytes) if switch_port else dict.fromkeys(CLASS_NAMES, default_bytes)
        marking = None
        if switch_port and self.ecn is not None:
            marking = RedCurve(*self.ecn.thresholds_bytes(frame_bytes), self.ecn.pmax)
        return (TrafficClass(buffers["control"], dscp=(DSCP_CONTROL,), priority=0),
                TrafficClass(buffers["lossless"], dscp=(DSCP_LOSSLESS,), priority=1, marking=marking),
                TrafficClass(buffers["lossy"], priority=2))
