"""Selective repeat: queue pairs that tolerate reordering, for entropy policies that spray packets.

When a QP's packets take several paths (``transport.entropy: spray``), they
arrive out of order although none was lost. Go-back-N (:mod:`traffic.transport.qp`)
would NAK every such gap and resend the whole window. Here, as in IRN-style
RoCE (Mittal et al., "Revisiting Network Support for RDMA", SIGCOMM 2018):

- the responder places packets that arrive ahead of the expected PSN (within
  the window) and hands them to the application in PSN order once the gap is
  filled; its cumulative ACK covers everything delivered. It NAKs the expected
  PSN only when a gap is older than the reorder window (``reorder_window_us``:
  a packet that late was lost, not overtaken), once per expected PSN;
- the requester resends only the NAKed PSN, and on a timeout only the oldest
  unacknowledged one (not the whole window), each with AckReq set; the
  responder acknowledges every duplicate and every jump of its cumulative ACK.

Exactly-once delivery and the in-order check of the payload tags are those of
go-back-N (``order_errors`` counts a packet handed over out of order).
``out_of_order_pkts`` counts packets placed ahead of a gap and
``max_reorder_pkts`` the farthest one arrived ahead: the degree of reordering.
"""
from __future__ import annotations

import time

from traffic.transport.qp import HALF_PSN, PSN_MASK, RequesterQP
from traffic.transport.responder import ResponderQP, packet_tag

#: ``TransportParams.loss_recovery`` values
GO_BACK_N, SELECTIVE_REPEAT = "go_back_n", "selective_repeat"


class SelectiveRequesterQP(RequesterQP):
    """Requester that resends only what the responder reports missing (see module docstring);
    every resent packet asks for an ACK."""

    ACK_EVERY_RETRANSMISSION = True

    def __init__(self, *args, **kwargs):
        self._resend: set[int] = set()
        super().__init__(*args, **kwargs)

    def _recover_nak(self, psn: int) -> None:
        if self.una <= psn < self.high_psn:
            self._resend.add(psn)

    def _recover_timeout(self) -> None:
        if self.una < self.high_psn:
            self._resend.add(self.una)

    def _can_send(self) -> bool:
        if self._resend:  # asked before every packet: touch the set only when something waits for a resend
            self._resend = {p for p in self._resend if p >= self.una}
        return bool(self._resend) or super()._can_send()

    def _take_psn(self) -> int:
        if self._resend:
            psn = min(self._resend)
            self._resend.discard(psn)
            return psn
        return super()._take_psn()


class SelectiveResponderQP(ResponderQP):
    """Responder that places out-of-order packets and delivers them in PSN order (see module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ahead: dict[int, tuple[int, int, int, int, bool]] = {}  # psn -> opcode, plen, seq, idx, ack_req
        self._gap_since_ns = 0  # when the current gap was first seen (0: none)
        self._nak_psn = -1      # expected PSN already NAKed
        self._reorder_ns = int(self.params.reorder_window_us * 1000)
        self._span = max(self.params.window_pkts, 1)

    def _on_psn(self, d: int, buf: memoryview, n: int, opcode: int, ack_req: bool, pad: int) -> None:
        c = self.counters
        if d == 0:
            ack = ack_req
            self._deliver(opcode, *packet_tag(buf, n, pad, self.msg_seq, self.pkt_idx))
            while self.epsn in self._ahead:  # the gap is filled: hand over what waited behind it
                op, plen, seq, idx, _ = self._ahead.pop(self.epsn)
                ack = True  # the cumulative ACK jumps: say so at once
                self._deliver(op, plen, seq, idx)
            self._gap_since_ns = time.monotonic_ns() if self._ahead else 0
            if ack:
                self._send_ack((self.epsn - 1) & PSN_MASK, nak=False)
        elif d < HALF_PSN:  # ahead: overtaken (another path) or a loss before it
            psn = self.epsn + d
            if psn in self._ahead or d >= 2 * self._span:
                c.dup_pkts += 1
                return
            c.out_of_order_pkts += 1
            c.max_reorder_pkts = max(c.max_reorder_pkts, d)
            self._ahead[psn] = (opcode, *packet_tag(buf, n, pad, self.msg_seq, self.pkt_idx), ack_req)
            now = time.monotonic_ns()
            if not self._gap_since_ns:
                self._gap_since_ns = now
            elif now - self._gap_since_ns > self._reorder_ns and self._nak_psn != self.epsn:
                self._nak_psn = self.epsn  # the gap outlived any reordering: a loss
                self._send_ack(self.epsn & PSN_MASK, nak=True)
        else:  # behind: a duplicate (a resend whose ACK was lost or late): acknowledge again
            c.dup_pkts += 1
            self._send_ack((self.epsn - 1) & PSN_MASK, nak=False)


def qp_classes(loss_recovery: str) -> tuple[type[RequesterQP], type[ResponderQP]]:
    """(requester, responder) classes for ``loss_recovery``: ``go_back_n`` or ``selective_repeat``.

    Raises ValueError naming the allowed values."""
    if loss_recovery == GO_BACK_N:
        return RequesterQP, ResponderQP
    if loss_recovery == SELECTIVE_REPEAT:
        return SelectiveRequesterQP, SelectiveResponderQP
    raise ValueError(f"loss_recovery {loss_recovery!r}: allowed {GO_BACK_N}, {SELECTIVE_REPEAT}")
