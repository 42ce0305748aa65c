"""The receive side of an RC queue pair: :class:`ResponderQP` (go-back-N; see :mod:`traffic.transport.qp`
for the protocol) and its counters."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from traffic import wire
from traffic.clock import unix_ns
from traffic.transport.cc import cnp_interval_ns
from traffic.transport.nic import rdma_socket, send_error_text, send_lossless
from traffic.transport.np import CNP_TOS, NotificationPoint
from traffic.transport.params import TransportParams
from traffic.transport.qp import ACK_TOS, HALF_PSN, MSG_HDR, PSN_MASK


def packet_tag(buf: memoryview, n: int, pad: int, msg_seq: int, pkt_idx: int) -> tuple[int, int, int]:
    """(payload bytes, message sequence, packet index) of the data packet in ``buf[:n]``; a payload
    shorter than the tag counts as carrying the expected (``msg_seq``, ``pkt_idx``)."""
    plen = n - wire.BTH_BYTES - wire.ICRC_BYTES - pad
    seq, idx = MSG_HDR.unpack_from(buf, wire.BTH_BYTES) if plen >= MSG_HDR.size else (msg_seq, pkt_idx)
    return plen, seq, idx


@dataclass
class ResponderCounters:
    rx_pkts: int = 0
    delivered_bytes: int = 0
    dup_pkts: int = 0
    out_of_order_pkts: int = 0
    naks_tx: int = 0
    acks_tx: int = 0
    order_errors: int = 0
    messages: int = 0
    max_reorder_pkts: int = 0  # farthest a packet arrived ahead of the expected PSN (selective repeat)
    ce_pkts: int = 0      # data packets that arrived with ECN CE (0b11)
    cnps_tx: int = 0      # CNPs sent by this QP's notification point
    nic_full_waits: int = 0  # ACK/NAK/CNP sends retried because the host NIC's queue was full (ENOBUFS)


class ResponderQP:
    """Receive side of one RC queue pair (see module docstring); ``first_psn`` is the requester's.

    When ``params``' congestion control reacts to ECN, :attr:`np` is its notification point
    (CNPs to ``requester_qpn`` from a socket of their own, DSCP 48, Not-ECT; ``np.sent`` the send
    time of each, the audit record of cnp_events.csv); else None."""

    def __init__(self, qpn: int, requester_qpn: int, src_ip: str, peer_ip: str, sport: int,
                 params: TransportParams, first_psn: int = 0, on_error=None):
        if not 0 <= first_psn <= PSN_MASK:
            raise ValueError(f"first_psn={first_psn}: a PSN is 24 bits, allowed 0..{PSN_MASK}")
        self.first_psn = first_psn
        self.qpn, self.requester_qpn = qpn, requester_qpn
        self.error: str | None = None
        self.on_error = on_error
        self.peer = (peer_ip, wire.ROCEV2_UDP_PORT)
        self.params = params
        self.counters = ResponderCounters()
        self.sock = rdma_socket(src_ip, sport, ACK_TOS)
        bound_sport = self.sock.getsockname()[1]  # sport 0 = any: the ICRC covers the real one
        self.ack_builder = wire.AckPacketBuilder(src_ip, peer_ip, bound_sport, tos=ACK_TOS)
        interval_ns = cnp_interval_ns(params)
        self.np: NotificationPoint | None = None
        if interval_ns is not None:
            self.cnp_sock = rdma_socket(src_ip, 0, CNP_TOS)
            self.cnp_pkt = bytes(wire.CnpPacketBuilder(src_ip, peer_ip, self.cnp_sock.getsockname()[1],
                                                       tos=CNP_TOS).build(requester_qpn))
            self.np = NotificationPoint(interval_ns, self._send_cnp)
        self.epsn = first_psn  # expected PSN, unbounded (compared mod 2^24)
        self.nak_sent = False
        self.msg_seq = 0
        self.pkt_idx = 0
        self.cond = threading.Condition()
        self.msg_done_ns: list[int] = []
        self.msg_bytes: list[int] = []
        self._msg_bytes_acc = 0

    def wait_messages(self, count: int, timeout_s: float | None = None) -> bool:
        """Block until ``count`` messages have arrived complete; False on timeout."""
        with self.cond:
            return self.cond.wait_for(lambda: self.counters.messages >= count, timeout_s)

    def on_data(self, buf: memoryview, n: int, opcode: int, psn24: int, ack_req: bool, pad: int,
                ce: bool = False) -> None:
        """A data packet: ``ce`` when its IP ECN field was CE (the endpoint reads it when there is a
        notification point)."""
        self.counters.rx_pkts += 1
        if ce:
            self._on_ce()
        self._on_psn((psn24 - self.epsn) & PSN_MASK, buf, n, opcode, ack_req, pad)

    def _on_psn(self, d: int, buf: memoryview, n: int, opcode: int, ack_req: bool, pad: int) -> None:
        """Go-back-N: the packet ``d`` PSNs after the expected one (mod 2^24) is taken, NAKed or re-ACKed."""
        c = self.counters
        if d == 0:
            self.nak_sent = False
            self._deliver(opcode, *packet_tag(buf, n, pad, self.msg_seq, self.pkt_idx))
            if ack_req:
                self._send_ack((self.epsn - 1) & PSN_MASK, nak=False)
        elif d < HALF_PSN:  # ahead of the expected PSN: a gap, packets were lost
            c.out_of_order_pkts += 1
            if not self.nak_sent:
                self.nak_sent = True
                self._send_ack(self.epsn & PSN_MASK, nak=True)
        else:  # behind: a duplicate of something already delivered
            c.dup_pkts += 1
            if ack_req:
                self._send_ack((self.epsn - 1) & PSN_MASK, nak=False)

    def _on_ce(self) -> None:
        """A CE-marked data packet arrived: count it; the notification point may send a CNP."""
        self.counters.ce_pkts += 1
        if self.np is not None and self.np.on_ce(time.monotonic_ns()):
            self.counters.cnps_tx += 1

    def _deliver(self, opcode: int, plen: int, seq: int, idx: int) -> None:
        """Hand the packet at ``epsn`` to the application: check its tag, count it, complete its message."""
        c = self.counters
        if seq != self.msg_seq or idx != self.pkt_idx:
            c.order_errors += 1
        self.epsn += 1
        c.delivered_bytes += plen
        self._msg_bytes_acc += plen
        self.pkt_idx += 1
        if opcode in (wire.Opcode.RC_SEND_LAST, wire.Opcode.RC_SEND_ONLY):
            with self.cond:
                self.msg_done_ns.append(unix_ns())
                self.msg_bytes.append(self._msg_bytes_acc)
                self._msg_bytes_acc = 0
                self.msg_seq += 1
                self.pkt_idx = 0
                c.messages += 1
                self.cond.notify_all()

    def _send_cnp(self) -> bool:
        """Send this QP's CNP (prebuilt: a CNP names only the destination QP); False once closed."""
        try:
            return send_lossless(self.cnp_sock, self.cnp_pkt, self.peer, self.counters)
        except OSError as e:
            self._send_failed(e)
            return False

    def close(self) -> None:
        """Close the QP's sockets."""
        self.sock.close()
        if self.np is not None:
            self.cnp_sock.close()

    def _send_failed(self, e: OSError) -> None:
        if self.error is None:
            self.error = send_error_text(self.qpn, self.peer, e)
            if self.on_error is not None:
                self.on_error(self.error)

    def _send_ack(self, psn24: int, nak: bool, sack24: int = -1) -> None:
        """ACK ``psn24`` or NAK it (expected PSN); ``sack24`` >= 0 adds IRN's NACK extension (selective repeat)."""
        if sack24 < 0:
            pkt = self.ack_builder.build(self.requester_qpn, psn24, nak, self.msg_seq & wire.MSN_MAX)
        else:
            pkt = self.ack_builder.build_nak_sack(self.requester_qpn, psn24, self.msg_seq & wire.MSN_MAX, sack24)
        try:
            if not send_lossless(self.sock, pkt, self.peer, self.counters):
                return
        except OSError as e:
            self._send_failed(e)
            return
        if nak:
            self.counters.naks_tx += 1
        else:
            self.counters.acks_tx += 1
