"""The ``transport`` section: RoCEv2 payload, window, ACK and retransmission settings."""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator
from typing_extensions import Annotated

from testbed.spec.units import Count, SizeBytes, SpecModel, parse_rate, refuse_bool
from traffic.transport.selective import LOSS_RECOVERIES

#: a DCQCN time constant, us (up to 60 s: the dilated value of a published one can be seconds)
_TimeUs = Annotated[float, BeforeValidator(refuse_bool), Field(gt=0, le=60e6, allow_inf_nan=False)]
#: a DCQCN rate, bit/s: a number or '10k', '1M' (dilated rates can be far below the link's 100 kbit/s floor)
_RateBps = Annotated[float, BeforeValidator(parse_rate), BeforeValidator(refuse_bool), Field(gt=0, le=100e9, allow_inf_nan=False)]
_Fraction = Annotated[float, BeforeValidator(refuse_bool), Field(gt=0, le=1, allow_inf_nan=False)]


class DcqcnSpec(SpecModel):
    """``transport.dcqcn``: overrides of DCQCN's settings, each in the run's own (dilated) units.

    Unset keys take the published value scaled by the run's dilation
    (traffic.transport.cc.dcqcn_params; manifest.json ``congestion_control`` lists every value,
    its source and whether it was scaled or set here). Names after Zhu et al., SIGCOMM 2015:
    ``cnp_interval_us`` N, ``g``, ``initial_alpha``, ``alpha_timer_us`` K, ``rate_timer_us`` T,
    ``byte_counter_bytes`` B, ``fast_recovery_stages`` F, ``rai_bps`` R_AI, ``rhai_bps`` R_HAI,
    ``min_rate_bps`` (the lowest rate a cut may reach), ``clamp_target_rate`` (true: RT <- RC on every
    cut, as the paper; false: only after a timer increase, as NVIDIA ConnectX's default).
    """

    cnp_interval_us: Optional[_TimeUs] = None
    g: Optional[_Fraction] = None
    initial_alpha: Optional[_Fraction] = None
    alpha_timer_us: Optional[_TimeUs] = None
    rate_timer_us: Optional[_TimeUs] = None
    byte_counter_bytes: Optional[SizeBytes] = None
    fast_recovery_stages: Optional[Annotated[Count, Field(ge=1, le=1000)]] = None
    rai_bps: Optional[_RateBps] = None
    rhai_bps: Optional[_RateBps] = None
    min_rate_bps: Optional[_RateBps] = None
    clamp_target_rate: Optional[bool] = None

    def overrides(self) -> dict:
        """The keys the scenario set: name -> value."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


#: ports per QP when ``transport.entropy_ports`` is not given: spray splits them evenly over the traced
#: paths (testbed.emulation.entropy_paths; k paths need k, more spread a path's datapath flows), a flowlet
#: needs a few choices
DEFAULT_ENTROPY_PORTS = {"spray": 128, "flowlet": 8}


class TransportSpec(SpecModel):
    """RoCEv2-style reliable connection (RC) transport.

    ``payload_bytes`` is the RoCE path MTU (payload per packet); ``window_pkts``
    the most unacknowledged packets per QP; ``ack_every_pkts`` how often the
    responder acknowledges (AckReq is set on every such packet and on the last
    of each message); ``rto_us`` the go-back-N retransmission timeout, ``auto``
    derives it from the fabric's buffers and rates. ``congestion_control`` names the
    requester QPs' congestion control (:data:`traffic.transport.cc.CONGESTION_CONTROLS`;
    ``none``: the window and the link's shaping alone), ``entropy`` the policy choosing their
    UDP source ports (:data:`traffic.transport.entropy.ENTROPY_POLICIES`; ``per_flow``: one
    seeded port per QP; ``spray``: the next of ``entropy_ports`` ports per packet, split evenly
    over the paths the testbed traced, with selective repeat; ``flowlet``: a random one of ``entropy_ports`` after an idle gap of
    ``flowlet_gap_us``, default half the retransmission timeout, longer than any path's extra
    queueing, so no packet overtakes another). ``entropy_ports`` defaults per policy:
    :data:`DEFAULT_ENTROPY_PORTS`. ``dcqcn`` overrides DCQCN's settings (:class:`DcqcnSpec`; only with
    ``congestion_control: dcqcn``). ``loss_recovery`` (:data:`LOSS_RECOVERIES`): ``go_back_n``, RoCEv2's
    recovery (IBA vol. 1 9.7.5.1.1: one NAK per PSN sequence error, resend from it; timeouts for the
    rest), or ``selective_repeat``, IRN-style (Mittal et al., SIGCOMM 2018; NVIDIA ConnectX's selective
    repeat, the UEC transport): every out-of-order arrival NACKed with a SACK, only the holes resent
    (:mod:`traffic.transport.selective`). Default: ``selective_repeat`` for a policy whose packets
    overtake each other (``spray``, which go-back-N cannot serve: refused), else ``go_back_n``.
    ``bdp_cap_pkts`` (selective repeat only): IRN's BDP-FC, the most packets past the cumulative ACK
    (besides ``window_pkts``): ``auto`` derives it from the fabric (:func:`testbed.spec.rto.bdp_cap`),
    a count sets it, ``off`` leaves the window alone.
    """

    payload_bytes: Literal[256, 512, 1024, 2048, 4096] = 1024
    window_pkts: Count = Field(64, ge=1, le=4096)
    ack_every_pkts: Count = Field(8, ge=1, le=1024)
    rto_us: Union[Literal["auto"], Annotated[int, Field(ge=100, le=10_000_000)]] = "auto"
    congestion_control: str = "none"
    entropy: str = "per_flow"
    entropy_ports: Optional[Annotated[Count, Field(ge=2, le=1024)]] = None  # ports per QP: spray, flowlet
    flowlet_gap_us: Optional[Annotated[int, Field(ge=1, le=10_000_000)]] = None  # flowlet only
    dcqcn: Optional[DcqcnSpec] = None
    loss_recovery: str = "go_back_n"
    #: selective repeat's BDP cap (IRN's BDP-FC): ``auto`` (testbed.spec.rto.bdp_cap), a packet count, or ``off``
    bdp_cap_pkts: Union[Literal["auto", "off"], Annotated[int, BeforeValidator(refuse_bool), Field(ge=1, le=4096)]] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _default_loss_recovery(cls, data):
        """Unset ``loss_recovery``: ``selective_repeat`` under a policy whose packets overtake each other."""
        if isinstance(data, dict) and data.get("loss_recovery") is None:
            from traffic.transport.entropy import ENTROPY_POLICIES
            entropy = data.get("entropy", "per_flow")
            policy = ENTROPY_POLICIES.get(entropy) if isinstance(entropy, str) else None
            data = {**data, "loss_recovery": "selective_repeat" if policy is not None and policy.reorders
                    else "go_back_n"}
        return data

    @field_validator("loss_recovery")
    @classmethod
    def _known_recovery(cls, v: str) -> str:
        if v not in LOSS_RECOVERIES:
            raise ValueError(f"unknown loss recovery {v!r}; allowed: {', '.join(LOSS_RECOVERIES)}")
        return v

    @field_validator("congestion_control", "entropy")
    @classmethod
    def _registered(cls, v: str, info: ValidationInfo) -> str:
        from traffic.registry import pick
        from traffic.transport.cc import CONGESTION_CONTROLS
        from traffic.transport.entropy import ENTROPY_POLICIES
        registry, what = {"congestion_control": (CONGESTION_CONTROLS, "congestion control"),
                          "entropy": (ENTROPY_POLICIES, "entropy policy")}[info.field_name]
        pick(registry, v, what)
        return v

    @model_validator(mode="after")
    def _acks_within_window(self) -> "TransportSpec":
        from traffic.transport.entropy import MULTI_PORT_POLICIES
        if self.entropy_ports is not None and self.entropy not in MULTI_PORT_POLICIES:
            raise ValueError(f"transport.entropy_ports is for transport.entropy: {' or '.join(MULTI_PORT_POLICIES)}, "
                             f"not {self.entropy!r}")
        if self.flowlet_gap_us is not None and self.entropy != "flowlet":
            raise ValueError(f"transport.flowlet_gap_us is for transport.entropy: flowlet, not {self.entropy!r}")
        if self.ack_every_pkts > self.window_pkts:
            raise ValueError(f"transport.ack_every_pkts = {self.ack_every_pkts} exceeds transport.window_pkts = "
                             f"{self.window_pkts}: a full window would never be acknowledged")
        from traffic.transport.entropy import ENTROPY_POLICIES
        if self.loss_recovery == "go_back_n" and ENTROPY_POLICIES[self.entropy].reorders:
            raise ValueError(f"transport.loss_recovery: go_back_n cannot serve transport.entropy: {self.entropy}: its "
                             "packets overtake each other on different paths, and go-back-N would NAK and resend a "
                             "window for every overtaken packet; use loss_recovery: selective_repeat (the default "
                             f"with {self.entropy})")
        if self.bdp_cap_pkts != "auto" and self.loss_recovery != "selective_repeat":
            raise ValueError(f"transport.bdp_cap_pkts = {self.bdp_cap_pkts!r} applies only with transport.loss_recovery: "
                             f"selective_repeat (here {self.loss_recovery}): go-back-N is limited by window_pkts alone")
        if self.dcqcn is not None and self.congestion_control != "dcqcn":
            raise ValueError(f"transport.dcqcn applies only with transport.congestion_control: dcqcn (here "
                             f"{self.congestion_control!r}): remove the block or choose dcqcn")
        return self


def dcqcn_settings(spec):
    """DCQCN's settings for a ScenarioSpec: published values scaled by ``spec.scale_factor``, then
    ``transport.dcqcn``; None unless ``transport.congestion_control`` is ``dcqcn``."""
    from traffic.transport.cc.dcqcn_params import settings_for
    t = spec.transport
    if t.congestion_control != "dcqcn":
        return None
    return settings_for(spec.scale_factor, t.dcqcn.overrides() if t.dcqcn is not None else {})


def check_dcqcn(spec) -> None:
    """Refuse DCQCN settings that cannot work on this fabric (ValueError naming the key path): a
    minimum rate above the host link, or an alpha timer K not longer than the CNP interval N
    (Zhu et al.: K must exceed N, else alpha decays between the CNPs of a lasting congestion)."""
    s = dcqcn_settings(spec)
    if s is None:
        return
    if s.min_rate_bps > spec.fabric.host_link_bps:
        raise ValueError(f"transport.dcqcn.min_rate_bps = {s.min_rate_bps:g} is above fabric.host_link_bps = "
                         f"{spec.fabric.host_link_bps:g}: allowed up to the line rate")
    if s.alpha_timer_us <= s.cnp_interval_us:
        raise ValueError(f"transport.dcqcn.alpha_timer_us = {s.alpha_timer_us:g} us is not longer than "
                         f"cnp_interval_us = {s.cnp_interval_us:g} us (at dilation {spec.scale_factor:g}): the alpha "
                         "timer K must exceed the CNP interval N; set both")


def congestion_control_manifest(spec) -> dict:
    """manifest.json's ``congestion_control`` block: the name, and for DCQCN the dilation, the
    scaling formula and every setting with its published value and source."""
    from traffic.transport.cc.dcqcn_params import manifest_block
    t = spec.transport
    if t.congestion_control != "dcqcn":
        return {"name": t.congestion_control}
    return manifest_block(spec.scale_factor, t.dcqcn.overrides() if t.dcqcn is not None else {})
