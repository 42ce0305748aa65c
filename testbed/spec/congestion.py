"""The ``congestion`` section: per-class switch buffers, the ECN marking curve and PFC.

Every switch egress has three classes when ``fabric.queue_backend`` is
``htb_classes`` (:mod:`dataplane.queues.htb_classes`): ``control``
(DSCP 48: CNPs and ACKs, strict priority), ``lossless`` (DSCP 26, RoCE
priority 3) and ``lossy`` (everything else: the RoCE data of a job of traffic class ``lossy``, DSCP 0,
testbed.spec.jobs, and background traffic). Their buffers default to
``fabric.buffer_bytes`` each. ``ecn`` switches on RED-curve marking of ECT
packets of the lossless class (:mod:`dataplane.ecn_policy`); thresholds
in bytes, in packets of one full frame (``fabric.mtu_bytes + 14``), or in fractions of the
bandwidth-delay product (``*_bdp``; :func:`bdp_basis` gives the BDP: host link rate x computed base
RTT, set on the spec when the scenario is checked)::

    congestion:
      buffers: {control_bytes: 30000, lossless_bytes: 150000, lossy_bytes: 100000}
      ecn: {kmin_bytes: 20000, kmax_bytes: 80000, pmax: 0.2,     # or kmin_pkts / kmax_pkts, kmin_bdp / kmax_bdp
            marker: auto}                                        # red (sch_red) | nftables | auto
      pfc: {xoff_bytes: 100000, xon_bytes: 70000,                # or *_pkts, *_bdp; enabled: true
            watchdog: {enabled: true, detect_ms: 200, restore_ms: 200}}   # optional

``ecn`` and ``pfc`` are run by the controller's congestion loop
(:mod:`controllers.congestion.loop`), in the os-ken process.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, PrivateAttr, StrictBool, create_model, model_validator

from testbed.spec.pfc_watchdog import WatchdogSpec
from testbed.spec.units import Count, SizeBytes, SpecModel
from traffic import wire
from traffic.transport import ACK_FRAME_BYTES

#: DSCP of the classes (RoCE deployments: CNP 48, RoCE data 26 = priority 3)
DSCP_CONTROL = 48
DSCP_LOSSLESS = 26
#: DSCP of a lossy job's RoCE data (CS0, best effort: traffic.wire.DSCP_LOSSY); the lossy class takes it
DSCP_LOSSY = wire.DSCP_LOSSY
#: class names in priority order (0 is served first); the lossy class takes every other DSCP
CLASS_NAMES = ("control", "lossless", "lossy")
#: the DSCPs each class takes, as text (class_queues.csv ``dscp``)
CLASS_DSCP_TEXT = {"control": str(DSCP_CONTROL), "lossless": str(DSCP_LOSSLESS), "lossy": "other"}
#: units a threshold may be given in
THRESHOLD_UNITS = ("bytes", "pkts", "bdp")


def bdp_basis(fabric) -> dict:
    """Bandwidth-delay product of the longest path, computed (no queues): a FabricSpec -> dict.

    base RTT = sum over the path's links (2 host links at ``host_link_bps`` + hops - 1 switch links
    at ``fabric_link_bps``, hops = ``fabric.max_switch_hops``) of one full data frame
    (``mtu_bytes + 14``) and one ACK frame (:data:`traffic.transport.ACK_FRAME_BYTES`, 62 B) serialized, store and forward,
    plus the path's propagation each way (``fabric.path_delay_us``: ``link_delay_us`` on every link, a
    link's own delay where it has one, e.g. a dci link's ``dci_delay_us``); BDP = host_link_bps x base RTT / 8. Keys ``base_rtt_us``,
    ``bdp_bytes``, ``link_bps``, ``hops``, ``formula``.
    """
    hops = fabric.max_switch_hops
    rates = [fabric.host_link_bps] * 2 + [fabric.fabric_link_bps] * (hops - 1)
    frame_bits = ((fabric.mtu_bytes + 14) + ACK_FRAME_BYTES) * 8
    rtt_s = sum(frame_bits / r for r in rates) + 2 * fabric.path_delay_us / 1e6
    return {"base_rtt_us": round(rtt_s * 1e6, 1), "bdp_bytes": int(fabric.host_link_bps * rtt_s / 8),
            "link_bps": fabric.host_link_bps, "hops": hops,
            "formula": f"host_link_bps x (sum over links of (mtu_bytes + 14 + {ACK_FRAME_BYTES}) x 8 / link_bps"
                       " + 2 x path_delay_us) / 8"}


class BuffersSpec(SpecModel):
    """Per-class egress buffer of every switch port, frame bytes; None: ``fabric.buffer_bytes``."""

    control_bytes: Optional[SizeBytes] = None
    lossless_bytes: Optional[SizeBytes] = None
    lossy_bytes: Optional[SizeBytes] = None


class _Thresholds(SpecModel):
    """Two queue thresholds, each given in bytes, full-frame packets or BDP fractions (one of each triple)."""

    #: (section name, low threshold, high threshold), set by subclasses
    _SECTION, _LOW, _HIGH = "", "", ""
    #: the fabric's BDP in bytes (:func:`bdp_basis`), set when the scenario is checked
    _bdp_bytes: Optional[int] = PrivateAttr(None)

    @model_validator(mode="after")
    def _one_of_each(self):
        for k in (self._LOW, self._HIGH):
            given = [f"{k}_{u}" for u in THRESHOLD_UNITS if getattr(self, f"{k}_{u}") is not None]
            if len(given) != 1:
                raise ValueError(f"congestion.{self._SECTION}: give exactly one of "
                                 f"{', '.join(f'{k}_{u}' for u in THRESHOLD_UNITS)} (got {', '.join(given) or 'none'})")
        return self

    @property
    def uses_bdp(self) -> bool:
        """True when a threshold is a BDP fraction."""
        return any(getattr(self, f"{k}_bdp") is not None for k in (self._LOW, self._HIGH))

    def thresholds_bytes(self, frame_bytes: int) -> tuple[int, int]:
        """(low, high) in bytes; packets count ``frame_bytes`` each, BDP fractions the fabric's BDP
        (ValueError when the BDP was not set: the spec did not come through parse_scenario)."""
        if self.uses_bdp and self._bdp_bytes is None:
            raise ValueError(f"congestion.{self._SECTION}: thresholds in BDP fractions need the fabric's BDP; "
                             f"parse the whole scenario (testbed.spec.scenario.parse_scenario)")
        out = []
        for k in (self._LOW, self._HIGH):
            b, p, f = (getattr(self, f"{k}_{u}") for u in THRESHOLD_UNITS)
            out.append(int(b if b is not None else p * frame_bytes if p is not None else round(f * self._bdp_bytes)))
        return tuple(out)


def _pair(low: str, high: str) -> type:
    """A _Thresholds model with the pair's fields: ``<k>_bytes``, ``<k>_pkts`` (full frames) and
    ``<k>_bdp`` (fractions of the BDP, at most 100) for k in (low, high); the high one may not be 0."""
    fields = {}
    for k, floor in ((low, "ge"), (high, "gt")):
        fields[f"{k}_bytes"] = (Optional[SizeBytes], None)
        fields[f"{k}_pkts"] = (Optional[Count], Field(None, **{floor: 0}))
        fields[f"{k}_bdp"] = (Optional[float], Field(None, le=100, allow_inf_nan=False, **{floor: 0}))
    return create_model(f"_{low}_{high}", __base__=_Thresholds, **fields)


#: who marks: ``auto`` resolves to one of the others when the run probes the machine (:func:`resolve_marker`)
ECN_MARKERS = ("auto", "red", "nftables")


class EcnSpec(_pair("kmin", "kmax")):
    """RED marking curve of the lossless class: Kmin and Kmax in bytes, full-frame packets or BDP fractions
    (give one of each pair), Pmax in (0, 1] (Floyd & Jacobson 1993; Zhu et al. SIGCOMM 2015).

    ``marker``: ``red``, the kernel's sch_red as the lossless class's leaf (dataplane.queues.sch_red;
    marks at enqueue from the class backlog; needs sch_red, and refused with ``pfc``, whose gate pauses
    the class's tbf leaf); ``nftables``, the controller loop's egress marker with the probability it
    sets from 1 ms samples of the backlog (dataplane.ecn_marker); ``auto`` (default): ``red`` where the
    kernel has sch_red and PFC is off, else ``nftables``."""

    _SECTION, _LOW, _HIGH = "ecn", "kmin", "kmax"
    pmax: float = Field(0.2, gt=0, le=1, allow_inf_nan=False)
    marker: Literal["auto", "red", "nftables"] = "auto"


def resolve_marker(congestion: "CongestionSpec", machine_marker: str) -> str:
    """The ECN marker a run uses: ``congestion.ecn.marker`` with ``auto`` resolved (``red`` where the machine
    offers it, ``machine_marker`` = the capability probe's ``ecn_marker``, and PFC is off; else ``nftables``).
    ScenarioError-worthy ValueError when ``red`` is asked for on a kernel without sch_red."""
    asked = congestion.ecn.marker
    if asked == "red" and machine_marker != "red":
        raise ValueError("congestion.ecn.marker = 'red': this kernel has no sch_red; allowed here: auto, nftables "
                         "(run on a kernel with sch_red, e.g. the Vagrant VM or a scripts/vm guest)")
    if asked == "auto":
        return "red" if machine_marker == "red" and not congestion.pfc_on else "nftables"
    return asked


class PfcSpec(_pair("xon", "xoff")):
    """PFC on the lossless class, hop by hop (IEEE 802.1Qbb): when the lossless bytes charged to an
    ingress port pass Xoff, the device upstream of it stops sending that class until they fall below
    Xon (:mod:`controllers.congestion.pfc` says how ingress bytes are charged). Xon < Xoff <= the
    lossless buffer; each in bytes or full-frame packets. ``enabled: false`` keeps the block, pauses
    nothing."""

    _SECTION, _LOW, _HIGH = "pfc", "xon", "xoff"
    enabled: StrictBool = True
    #: storm detection and mitigation (testbed.spec.pfc_watchdog); absent: every pause is honoured
    watchdog: Optional[WatchdogSpec] = None


class CongestionSpec(SpecModel):
    """Priority classes and ECN marking; needs ``fabric.queue_backend: htb_classes`` (checked in the scenario)."""

    buffers: BuffersSpec = BuffersSpec()
    ecn: Optional[EcnSpec] = None
    pfc: Optional[PfcSpec] = None
    #: marking probability step: the marker changes a port's rule only when its quantized probability moves
    ecn_probability_step: float = Field(0.01, gt=0, le=0.1, allow_inf_nan=False)

    @model_validator(mode="after")
    def _red_without_pfc(self):
        if self.ecn is not None and self.ecn.marker == "red" and self.pfc_on:
            raise ValueError("congestion.ecn.marker = 'red' with congestion.pfc: PFC pauses the lossless class's "
                             "tbf leaf, which sch_red replaces; allowed with pfc: auto, nftables")
        return self

    @property
    def pfc_on(self) -> bool:
        """True when ``pfc`` is given and enabled."""
        return self.pfc is not None and self.pfc.enabled

    def class_buffers_bytes(self, default_bytes: int) -> dict[str, int]:
        """class name -> buffer bytes, ``default_bytes`` where not given."""
        b = self.buffers
        return {name: int(getattr(b, f"{name}_bytes") or default_bytes) for name in CLASS_NAMES}

    def traffic_classes(self, default_bytes: int, frame_bytes: int, switch_port: bool = True) -> tuple:
        """The three egress classes as queue-backend input (dataplane.queues.base.TrafficClass).

        Switch ports take the class buffers (``default_bytes`` where not given) and the lossless
        class carries the ECN curve; a host NIC (``switch_port=False``) gets ``default_bytes`` per
        class and no marking.
        """
        from dataplane.queues.base import RedCurve, TrafficClass

        buffers = self.class_buffers_bytes(default_bytes) if switch_port else dict.fromkeys(CLASS_NAMES, default_bytes)
        marking, marker = None, "nftables"
        if switch_port and self.ecn is not None:
            marking = RedCurve(*self.ecn.thresholds_bytes(frame_bytes), self.ecn.pmax)
            marker = "red" if self.ecn.marker == "red" else "nftables"  # auto is resolved by the run's probe
        return (TrafficClass(buffers["control"], dscp=(DSCP_CONTROL,), priority=0),
                TrafficClass(buffers["lossless"], dscp=(DSCP_LOSSLESS,), priority=1, marking=marking,
                             marker=marker),
                TrafficClass(buffers["lossy"], priority=2))
