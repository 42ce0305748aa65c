"""The ``transport`` section: RoCEv2 payload, window, ACK and retransmission settings."""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field, ValidationInfo, field_validator, model_validator
from typing_extensions import Annotated

from testbed.spec.units import Count, _Spec


#: ports per QP when ``transport.entropy_ports`` is not given: spray covers the paths evenly with many
#: (benchmarks/ecmp_collisions.py: 128 ports, 4 paths -> 0.936 of capacity), a flowlet needs a few choices
DEFAULT_ENTROPY_PORTS = {"spray": 128, "flowlet": 8}


class TransportSpec(_Spec):
    """RoCEv2-style reliable connection (RC) transport.

    ``payload_bytes`` is the RoCE path MTU (payload per packet); ``window_pkts``
    the most unacknowledged packets per QP; ``ack_every_pkts`` how often the
    responder acknowledges (AckReq is set on every such packet and on the last
    of each message); ``rto_us`` the go-back-N retransmission timeout, ``auto``
    derives it from the fabric's buffers and rates. ``congestion_control`` names the
    requester QPs' congestion control (:data:`traffic.transport.cc.CONGESTION_CONTROLS`;
    ``none``: the window and the link's shaping alone), ``entropy`` the policy choosing their
    UDP source ports (:data:`traffic.transport.entropy.ENTROPY_POLICIES`; ``per_flow``: one
    seeded port per QP; ``spray``: a random one of ``entropy_ports`` ports per packet, with
    selective repeat; ``flowlet``: a random one of ``entropy_ports`` after an idle gap of
    ``flowlet_gap_us``, default half the retransmission timeout, longer than any path's extra
    queueing, so no packet overtakes another). ``entropy_ports`` defaults per policy:
    :data:`DEFAULT_ENTROPY_PORTS`.
    """

    payload_bytes: Literal[256, 512, 1024, 2048, 4096] = 1024
    window_pkts: Count = Field(64, ge=1, le=4096)
    ack_every_pkts: Count = Field(8, ge=1, le=1024)
    rto_us: Union[Literal["auto"], Annotated[int, Field(ge=100, le=10_000_000)]] = "auto"
    congestion_control: str = "none"
    entropy: str = "per_flow"
    entropy_ports: Optional[Annotated[Count, Field(ge=2, le=1024)]] = None  # ports per QP: spray, flowlet
    flowlet_gap_us: Optional[Annotated[int, Field(ge=1, le=10_000_000)]] = None  # flowlet only

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
        return self
