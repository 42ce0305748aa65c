"""The ``transport`` section: RoCEv2 payload, window, ACK and retransmission settings, and the
congestion control's own block (``transport.<name>``, its ``Settings``: traffic.transport.cc)."""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from typing_extensions import Annotated

from testbed.spec import plugins
from testbed.spec.units import Count, SpecModel, refuse_bool
from traffic.transport.selective import LOSS_RECOVERIES

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
    :data:`DEFAULT_ENTROPY_PORTS`. ``<name>`` (e.g. ``dcqcn``): the keys of that congestion control's
    ``Settings`` (traffic.transport.cc.base.CongestionControl; only with ``congestion_control: <name>``;
    validated by testbed.spec.plugins, kept in :attr:`cc_given`; DCQCN's in the run's own, dilated units,
    unset ones scaled from the published values, manifest.json ``congestion_control`` lists each value
    and its source). ``loss_recovery`` (:data:`LOSS_RECOVERIES`): ``go_back_n``, RoCEv2's
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
    loss_recovery: str = "go_back_n"
    #: selective repeat's BDP cap (IRN's BDP-FC): ``auto`` (testbed.spec.rto.bdp_cap), a packet count, or ``off``
    bdp_cap_pkts: Union[Literal["auto", "off"], Annotated[int, BeforeValidator(refuse_bool), Field(ge=1, le=4096)]] = "auto"

    #: the congestion control's block is kept as an extra key named after it (dumped back as written)
    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _cc_block(cls, data):
        """Check every key that is no field: the block of the chosen congestion control (its Settings'
        keys, testbed.spec.plugins.checked); anything else is refused naming the key path."""
        from traffic.transport.cc import CONGESTION_CONTROLS
        blocks = {n: c.Settings for n, c in CONGESTION_CONTROLS.items() if plugins.keys(c.Settings)}
        return plugins.named_blocks(data, "transport", cls.model_fields, blocks, "congestion_control", "none")

    @property
    def cc_given(self) -> dict:
        """The keys the scenario set in the congestion control's block (checked, in the run's units)."""
        return dict((self.model_extra or {}).get(self.congestion_control, {}))

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
        return self


def cc_class(spec):
    """The class of ``transport.congestion_control`` (traffic.transport.cc.CONGESTION_CONTROLS)."""
    from traffic.transport.cc import CONGESTION_CONTROLS
    return CONGESTION_CONTROLS[spec.transport.congestion_control]


def cc_settings(spec):
    """The congestion control's settings for a ScenarioSpec: ``transport.<name>`` over its defaults (DCQCN:
    the published values scaled by ``spec.scale_factor``); an instance of the control's ``Settings``."""
    return cc_class(spec).run_settings(spec.transport.cc_given, spec.scale_factor)


def check_congestion_control(spec) -> None:
    """Refuse congestion-control settings that cannot work on this fabric (ValueError naming the key
    path; DCQCN: a minimum rate above the host link, an alpha timer K not longer than the CNP interval N)."""
    cc_class(spec).check_run(cc_settings(spec), spec.fabric.host_link_bps, spec.scale_factor)


def congestion_control_manifest(spec) -> dict:
    """manifest.json's ``congestion_control`` block: the name and every setting with its value and origin
    (DCQCN: also the dilation, the scaling formula, each published value and its source)."""
    return cc_class(spec).manifest(spec.transport.cc_given, spec.scale_factor)
