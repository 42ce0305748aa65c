"""The interface of a queue backend: what it is told (:class:`QueueConfig`), what it reads back
(:class:`ShapedLink`), and the hooks it implements (:class:`QueueBackend`).

A backend owns the egress queue of one interface (a switch port in the root
namespace, or a host NIC in the host's namespace): it installs it with a
rate, buffer and MTU, reads it back from the kernel, and names the qdisc the
telemetry sampler reads (:attr:`QueueBackend.sampled_parent`).

Room for what comes next (not built here): per-class queues
(:attr:`QueueConfig.classes`, each with its DSCP values, priority and buffer)
and ECN marking thresholds per class (:class:`RedCurve`: Kmin, Kmax, Pmax, the
RED curve of Floyd & Jacobson 1993). A backend states how many classes it
can build (:attr:`QueueBackend.max_classes`) and whether it marks
(:attr:`QueueBackend.marks_ecn`); :meth:`QueueBackend.check` refuses a
configuration it cannot install, naming what and why, before the kernel is
touched. Kernel RED with ``ecn`` would be a backend with RED leaves; the
nftables marker one whose marking probability the 1 ms sampler updates.
"""
from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Optional

from dataplane.ecn_policy import RedCurve  # noqa: F401  (the marking curve lives with its policy)
from dataplane.queues import delay, tc
from traffic.registry import NoSettings

ETH_HLEN_BYTES = 14
#: one request to the kernel: (command, qdisc kind, attributes) as pyroute2's ``IPRoute.tc`` takes them
TcRequest = tuple


def frame_bytes(mtu_bytes: int) -> int:
    """Bytes the qdiscs count for a full-size frame: ``mtu_bytes + 14``."""
    return mtu_bytes + ETH_HLEN_BYTES


@dataclass(frozen=True)
class TrafficClass:
    """One egress class: ``buffer_bytes`` of frame bytes (tail drop beyond), the DSCP values it
    takes (empty: everything no other class takes), ``priority`` (0 is served first) and optional
    ECN ``marking``, done by ``marker``: ``nftables`` (the controller loop's egress marker,
    dataplane.ecn_marker) or ``red`` (a sch_red leaf, :mod:`dataplane.queues.sch_red`)."""

    buffer_bytes: int
    dscp: tuple[int, ...] = ()
    priority: int = 0
    marking: Optional[RedCurve] = None
    marker: str = "nftables"


@dataclass(frozen=True)
class QueueConfig:
    """The egress queue of one interface: line rate ``rate_bps`` (frame bytes x 8), link ``mtu_bytes``
    (L3), and its ``classes`` (today one). ``peak_rate_bps``: the highest rate the shaper will be set to
    during the run (testbed.emulation.clock_wander; None: ``rate_bps``): what sits below the shaper
    (class ceilings, tbf leaves) is installed at it, so that only the shaper binds. Raises ValueError
    naming the bad value: rate <= 0 or above the kernel's 64-bit bytes/s, a peak below the rate, MTU
    outside [68, 65535], a class buffer below one full frame."""

    rate_bps: float
    mtu_bytes: int
    classes: tuple[TrafficClass, ...]
    peak_rate_bps: Optional[float] = None

    def __post_init__(self):
        if not isinstance(self.mtu_bytes, numbers.Integral) or not 68 <= self.mtu_bytes <= 65535:
            raise ValueError(f"mtu_bytes={self.mtu_bytes!r} must be an integer in [68, 65535]")
        if not self.rate_bps > 0:
            raise ValueError(f"rate_bps={self.rate_bps!r} must be > 0")
        if self.rate_bps / 8 >= 1 << 64:
            raise ValueError(f"rate_bps={self.rate_bps!r} exceeds the kernel's 64-bit bytes/s")
        if self.peak_rate_bps is not None and not self.peak_rate_bps >= self.rate_bps:
            raise ValueError(f"peak_rate_bps={self.peak_rate_bps!r} is below rate_bps={self.rate_bps!r}")
        if not self.classes:
            raise ValueError("classes is empty: a queue needs at least one class")
        for c in self.classes:
            if not isinstance(c.buffer_bytes, numbers.Integral) or c.buffer_bytes < frame_bytes(self.mtu_bytes):
                raise ValueError(
                    f"buffer_bytes={c.buffer_bytes!r} must be an integer >= one full frame "
                    f"(mtu_bytes + 14 = {frame_bytes(self.mtu_bytes)}); bfifo would drop every "
                    f"full-size frame otherwise")

    @classmethod
    def single(cls, rate_bps: float, buffer_bytes: int, mtu_bytes: int = 1500,
               peak_rate_bps: Optional[float] = None) -> "QueueConfig":
        """One class taking every packet: today's link."""
        return cls(rate_bps=rate_bps, mtu_bytes=mtu_bytes, classes=(TrafficClass(buffer_bytes=buffer_bytes),),
                   peak_rate_bps=peak_rate_bps)

    @property
    def leaf_rate_bps(self) -> float:
        """The rate of what sits below the shaper: ``peak_rate_bps``, else ``rate_bps``."""
        return self.peak_rate_bps if self.peak_rate_bps is not None else self.rate_bps


@dataclass(frozen=True)
class ShapedLink:
    """The kernel's view of one shaped interface (:meth:`QueueBackend.read_back`).

    rate_bps, ceil_bps: the shaper's rate and ceil in bit/s (frame bytes x 8).
    buffer_bytes: the queue's limit in frame bytes.
    quantum_bytes: the shaper's DRR quantum in bytes.
    burst_bytes: the shaper's token bucket depth in bytes, converted back from
        the kernel's ticks (rounded; within a few bytes of what was set).
    delay_us: the netem stage's delay in microseconds (:mod:`dataplane.queues.delay`; 0: none).
    """

    rate_bps: int
    ceil_bps: int
    buffer_bytes: int
    quantum_bytes: int
    burst_bytes: int
    delay_us: int = 0


class QueueBackend(ABC):
    """One way to build an egress queue; registered by :attr:`name` in ``dataplane.queues.BACKENDS``."""

    #: the key ``fabric.queue_backend`` selects it by
    name: ClassVar[str]
    #: most classes one interface may have
    max_classes: ClassVar[int] = 1
    #: whether the backend can mark ECN (a class with ``marking``)
    marks_ecn: ClassVar[bool] = False
    #: its settings: a frozen dataclass (fields by traffic.registry.setting), one field per key of the
    #: scenario's ``fabric.<name>`` block (testbed.spec.fabric.FabricSpec.queue_settings)
    Settings: ClassVar[type] = NoSettings

    def __init__(self, settings: Any = None, delay_us: int = 0, netem: Optional[bool] = None):
        """``settings``: an instance of :attr:`Settings` (None: its defaults); ``delay_us``: the propagation
        delay of every link it shapes unless :meth:`install` is given the link's own (a netem stage above the
        backend's tree, :mod:`dataplane.queues.delay`; 0: none); ``netem``: whether every egress gets the
        netem stage, default ``delay_us > 0``. A fabric whose links have delays of their own (a dci
        fabric's long-haul links) sets it when any link is delayed: every egress then has the same tree (a
        netem stage of 0 on the links without delay), so the sampler reads one parent everywhere.
        ValueError for a negative delay."""
        if delay_us < 0:
            raise ValueError(f"delay_us={delay_us!r} must be >= 0")
        self.settings = settings if settings is not None else self.Settings()
        self.delay_us = int(delay_us)
        #: whether every egress it shapes has the netem stage (its delay may be 0)
        self.netem = self.delay_us > 0 if netem is None else bool(netem)
        if self.delay_us and not self.netem:
            raise ValueError(f"delay_us={delay_us!r} needs the netem stage (netem=False given)")
        #: where the backend's tree hangs: the egress root, or netem's child slot when links are delayed
        self.root_parent = delay.CHILD_PARENT if self.netem else tc.TC_H_ROOT
        #: the telemetry sampler reads the counters of the qdisc whose parent is this handle: the
        #: backend's root qdisc, whose counters aggregate every class below it (never netem's: its
        #: frames are on the wire, not in the port buffer)
        self.sampled_parent = self.root_parent

    def check(self, cfg: QueueConfig) -> None:
        """Raise ValueError when ``cfg`` asks for what this backend cannot build (naming it)."""
        if len(cfg.classes) > self.max_classes:
            raise ValueError(f"queue backend {self.name!r} builds at most {self.max_classes} class(es), "
                             f"asked for {len(cfg.classes)}")
        if not self.marks_ecn and any(c.marking for c in cfg.classes):
            raise ValueError(f"queue backend {self.name!r} does not mark ECN")

    @abstractmethod
    def plan(self, ifindex: int, cfg: QueueConfig) -> list[TcRequest]:
        """The backend's own tc requests, rooted at the egress root (TC_H_ROOT), in order (no kernel access)."""

    def full_plan(self, ifindex: int, cfg: QueueConfig, delay_us: Optional[int] = None) -> list[TcRequest]:
        """What :meth:`install` sends after clearing the egress root: :meth:`plan`, under the netem stage of
        ``delay_us`` (None: the backend's :attr:`delay_us`) when the backend has one
        (:func:`dataplane.queues.delay.under_delay`). ValueError for a delay without the netem stage."""
        d = self.delay_us if delay_us is None else int(delay_us)
        if d and not self.netem:
            raise ValueError(f"delay_us={d!r}: this backend was made without the netem stage (netem=False)")
        return delay.under_delay(self.plan(ifindex, cfg), ifindex, d, stage=self.netem)

    @abstractmethod
    def read_back(self, ipr, ifname: str) -> ShapedLink:
        """Read the installed queue of ``ifname`` from the kernel; ValueError when it is not this backend's."""

    def install(self, ipr, ifname: str, cfg: QueueConfig, delay_us: Optional[int] = None) -> ShapedLink:
        """Replace the egress qdisc tree of ``ifname`` with this backend's, under a netem stage of ``delay_us``
        (the link's own; None: :attr:`delay_us`) when the backend has one; return it read back.

        ``ipr``: pyroute2 ``IPRoute`` bound to the namespace that holds ``ifname`` (kernel
        extended-ACK warnings, with ``IPRoute(ext_ack=True)``, are logged at WARNING).
        Raises ValueError (:meth:`check`, or ``ifname`` missing) or pyroute2.NetlinkError.
        """
        self.check(cfg)
        index = tc.ifindex(ipr, ifname)
        tc.clear_root(ipr, index)
        for command, kind, attrs in self.full_plan(index, cfg, delay_us):
            tc.request(ipr, ifname, command, kind, **attrs)
        link = self.read_back(ipr, ifname)
        return replace(link, delay_us=delay.read_delay_us(ipr, index)) if self.netem else link
