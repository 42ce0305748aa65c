"""The transport's parameters (one typed definition, built by the runner from the scenario) and frame sizes."""
from __future__ import annotations

from dataclasses import dataclass, field

from traffic import wire

#: Ethernet + IPv4 + UDP header bytes in front of every RoCEv2 packet (no FCS: tc counts frames without it)
L2_L4_BYTES = 14 + 20 + 8
#: frame bytes of an RC ACK on the emulated link: Ethernet 14, IPv4 20, UDP 8, BTH 12, AETH 4, ICRC 4 (62)
ACK_FRAME_BYTES = L2_L4_BYTES + wire.ACK_BYTES


def wire_bytes(ib_bytes: int) -> int:
    """Frame bytes on the emulated link for an InfiniBand transport payload of ``ib_bytes``."""
    return L2_L4_BYTES + ib_bytes


def payload_efficiency(payload_bytes: int) -> float:
    """Payload bytes / frame bytes for full data packets: payload / (L2..L4 + BTH + payload + ICRC)."""
    return payload_bytes / wire_bytes(wire.BTH_BYTES + payload_bytes + wire.ICRC_BYTES)


@dataclass
class TransportParams:
    """Settings of every queue pair of a run (the scenario's ``transport`` section, resolved).

    - ``payload_bytes``: RoCE path MTU (payload per packet);
    - ``window_pkts``: most unacknowledged packets per QP;
    - ``ack_every_pkts``: the requester sets AckReq on every such packet (and the last of a message);
    - ``rto_us``: go-back-N retransmission timeout (``auto`` already resolved by the runner);
    - ``sndbuf_bytes``: send buffer of each data socket. It must stay well below the host NIC queue
      (64 KiB, testbed.emulation.fabric): the sockets of a host together must not overflow it, or
      sends fail with ENOBUFS, counted as host qdisc drops (measured: 64 KiB per socket at path MTU
      4096 gave ~2,900 such drops per host per MiB);
    - ``line_rate_bps``: the host link's rate, the rate a congestion control starts from and
      never exceeds;
    - ``congestion_control``: name in :data:`traffic.transport.cc.CONGESTION_CONTROLS`;
    - ``entropy``: name in :data:`traffic.transport.entropy.ENTROPY_POLICIES`;
    - ``entropy_ports``: UDP source ports per QP of a policy that uses several (``spray``, ``flowlet``);
    - ``flowlet_gap_us``: with ``flowlet``, the idle gap after which a QP may change its port;
    - ``loss_recovery``: ``go_back_n`` (RoCEv2, IBA vol. 1 9.7.5.1.1) or ``selective_repeat``
      (IRN-style, :mod:`traffic.transport.selective`; always for a policy whose packets overtake
      each other);
    - ``reorder_window_us``: with selective repeat, how long a gap may last before the
      responder reports it lost (longer than any path's extra queueing delay); 0: a gap is a
      loss at once (a policy that does not reorder);
    - ``rto_low_us``, ``rto_low_pkts``: with selective repeat, IRN's RTO_low: the timeout when
      ``rto_low_pkts`` or fewer packets are in flight (sent, neither acknowledged nor SACKed);
      0: ``rto_us`` always (go-back-N);
    - ``bdp_cap_pkts``: with selective repeat, IRN's BDP-FC: at most this many packets past the
      cumulative ACK (and at most ``window_pkts``); 0: the window alone.
    - ``cc_settings``: the congestion control's settings, field name -> value of its ``Settings``
      dataclass (traffic.transport.cc.settings_of decodes them; DCQCN's in the run's dilated units);
      a field left out takes its default (DCQCN: the published values undilated);
    - ``cc_module``: the module that defines and registers the congestion control, imported by the
      agent when the name is not registered (a control outside traffic.transport.cc).
    """

    payload_bytes: int = 1024
    window_pkts: int = 64
    ack_every_pkts: int = 8
    rto_us: int = 200_000
    sndbuf_bytes: int = 16 * 1024
    line_rate_bps: float = 10_000_000.0
    congestion_control: str = "none"
    entropy: str = "per_flow"
    entropy_ports: int = 1
    flowlet_gap_us: int = 0
    loss_recovery: str = "go_back_n"
    reorder_window_us: int = 0
    rto_low_us: int = 0
    rto_low_pkts: int = 0
    bdp_cap_pkts: int = 0
    cc_settings: dict = field(default_factory=dict)
    cc_module: str = ""
