"""Selective repeat, IRN-style: queue pairs that resend only what was lost (``transport.loss_recovery``).

Go-back-N (:mod:`traffic.transport.qp`) resends everything from the first gap:
one lost packet costs up to a window. Here, as IRN recovers (Mittal et al.,
"Revisiting Network Support for RDMA", SIGCOMM 2018, section 3.1; NVIDIA
ConnectX's selective repeat and the UEC transport recover the same way):

- the responder places packets that arrive ahead of the expected PSN (within
  the window) and hands them to the application in PSN order once the gap is
  filled; its cumulative ACK covers everything delivered. For every
  out-of-order arrival it sends a NACK (AETH syndrome 0x60, PSN = its expected
  PSN, the cumulative ACK) carrying IRN's extension: the PSN that triggered it
  (a simplified SACK; one 32-bit word after the AETH,
  :data:`traffic.wire.IRN_SACK_BYTES`; go-back-N's NAKs stay plain RoCEv2).
  With an entropy policy whose packets overtake each other (``spray``) a gap is
  not a loss until it outlives the reorder window (``reorder_window_us``, longer
  than any path's extra queueing): the NACK then waits for that and SACKs the
  first PSN placed beyond the gap (every PSN from the expected one up to it is
  missing, so lost; its SACKs are sparse); with ``reorder_window_us`` 0 (``per_flow``, ``flowlet``: nothing
  overtakes) a gap is a loss at once, as in IRN;
- the requester enters loss recovery on a NACK and keeps the SACKed PSNs (IRN's
  bitmap). In recovery it resends, before any new packet, the cumulative ACK's
  PSN and then every PSN below the highest SACKed one that was not SACKed, each
  once per recovery episode, and new packets after them while the window
  allows. It leaves recovery when the cumulative ACK passes the recovery PSN
  (one past the highest PSN sent when the episode began). Without a reorder
  window packets arrive in the order sent, so a resend still missing when a
  packet sent after it is SACKed was lost: it goes again at once (lost
  retransmission detection, RACK's idea, RFC 8985). Timeouts are for what no
  SACK can reveal, a lost last retransmission or a tail loss: ``rto_us``
  without ACK progress or transmission starts a new episode that resends the
  holes below the highest SACK again and then, as a tail loss probe, the
  highest unSACKed PSN sent (RACK-TLP: it fills a tail hole, or arrives beyond
  one and is NACKed with its SACK; a probe of a packet already placed is
  answered with a NACK too); spraying, the oldest unacknowledged PSN instead,
  as before. With ``rto_low_pkts`` or fewer packets in flight (sent, neither
  ACKed nor SACKed) and no reorder window, IRN's RTO_low replaces ``rto_us``,
  once per ACK progress: 2 x the smoothed RTT of the QP's ACKed packets
  (RACK-TLP's probe timeout), at least ``rto_low_us``, at most ``rto_us``.
  Every resent packet asks for an ACK;
- IRN's BDP-FC: new packets only while fewer than ``bdp_cap_pkts`` are past the
  cumulative ACK (and fewer than ``window_pkts``), so a QP does not put more in
  flight than its path holds (the testbed derives the cap:
  testbed.spec.rto.bdp_cap); AckReq then comes at least every cap packets
  (:meth:`SelectiveRequesterQP.ack_interval`).

Exactly-once delivery and the in-order check of the payload tags are those of
go-back-N (``order_errors`` counts a packet handed over out of order).
``out_of_order_pkts`` counts packets placed ahead of a gap and
``max_reorder_pkts`` the farthest one arrived ahead.
"""
from __future__ import annotations

import time

from traffic.transport.qp import HALF_PSN, PSN_MASK, RequesterQP
from traffic.transport.responder import ResponderQP, packet_tag

#: ``TransportParams.loss_recovery`` values
GO_BACK_N, SELECTIVE_REPEAT = "go_back_n", "selective_repeat"
LOSS_RECOVERIES = (GO_BACK_N, SELECTIVE_REPEAT)


class SelectiveRequesterQP(RequesterQP):
    """Requester that resends only what the responder reports missing (see module docstring);
    every resent packet asks for an ACK."""

    ACK_EVERY_RETRANSMISSION = True

    def __init__(self, *args, **kwargs):
        self._sacked: set[int] = set()  # PSNs above una the responder reported received (IRN's bitmap)
        self._recovery = False    # in a loss recovery episode
        self._recovery_psn = 0    # the episode ends when una reaches this (one past the highest PSN sent at its start)
        self._rtx_next = 0        # next PSN the episode may resend (each hole once per episode)
        self._lost_below = 0      # one past the highest SACKed PSN: unSACKed PSNs below it are lost
        self._probe = -1          # PSN to resend as a tail loss probe after a timeout (-1: none)
        self._srtt_s = None       # smoothed RTT of ACKed first transmissions (sets RTO_low)
        self._resent: dict[int, int] = {}  # without a reorder window: resent PSN -> first new PSN sent after it
        self._again: set[int] = set()      # resends found lost (a later packet was SACKed first): resend again
        self._window = 1 << 30    # set below: the thread starts in the base constructor, before any post
        self._reorder = False     # set below: whether the responder waits for a reorder window
        super().__init__(*args, **kwargs)
        p = self.params
        self._reorder = p.reorder_window_us > 0
        # IRN's BDP-FC: new packets only while fewer than the BDP cap are past the cumulative ACK
        self._window = min(p.window_pkts, p.bdp_cap_pkts) if p.bdp_cap_pkts else p.window_pkts

    @staticmethod
    def ack_interval(params) -> int:
        """``ack_every_pkts``, but at most ``bdp_cap_pkts``: a window below the ACK interval would close
        before any packet asked for an ACK and wait for a timeout."""
        if params.bdp_cap_pkts:
            return max(1, min(params.ack_every_pkts, params.bdp_cap_pkts))
        return params.ack_every_pkts

    def on_ack(self, psn24: int, nak: bool, sack24: int = -1) -> None:
        with self._lock:
            una = self.una
            psn = self._unwrap(psn24)
            new_una = psn if nak else psn + 1
            if new_una > una:
                self.cc.on_ack(new_una - una, self._payload_bytes(una, new_una), time.monotonic_ns())
                self.una = una = new_una
                self._low_fired = False
                self._last_progress = time.monotonic()
                self._complete_messages()
                if una >= self.tail_psn:  # work -> idle
                    self.counters.tx_work_ns += time.monotonic_ns() - self._work_since_ns
                if self.next_psn < una:
                    self.next_psn = una
                if self._sacked:
                    self._sacked = {p for p in self._sacked if p >= una}
            if nak:
                self.counters.naks_rx += 1
                # SACKed PSN; a NAK without IRN's extension says only that the expected PSN is lost
                s = self._unwrap(sack24) if sack24 >= 0 else psn
                if una <= s < self.high_psn:
                    self._sacked.add(s)
                    if s >= self._lost_below:
                        self._lost_below = s + 1
                    if self._resent:
                        self._lost_retransmissions(s)
                if not self._recovery:
                    self._enter_recovery()
            else:
                self.counters.acks_rx += 1
                if self._rtt_sent and not self._recovery:  # a hole's fill ACKs late packets: no sample
                    self._rtt_sample(psn)
            if self._recovery and una >= self._recovery_psn:
                self._recovery = False
                self._resent.clear()
            self._wake()

    def _rtt_sample(self, psn: int) -> None:
        """An ACK of ``psn``: when its first transmission asked for it, an RTT sample; RTO_low becomes
        2 x the smoothed RTT (RACK-TLP's probe timeout, RFC 8985 section 7.2; 1/8 gain as RFC 6298),
        at least ``rto_low_us`` (the base RTT) and at most ``rto_us``: queueing behind other QPs, in the
        host's NIC or at a fan-in, is measured rather than guessed. Under ``cond``."""
        sent = self._rtt_sent.pop(psn, 0)
        if len(self._rtt_sent) > 64:  # those never answered (lost, resent) below the cumulative ACK
            self._rtt_sent = {k: v for k, v in self._rtt_sent.items() if k >= self.una}
        if not sent:
            return
        sample = (time.monotonic_ns() - sent) / 1e9
        self._srtt_s = sample if self._srtt_s is None else self._srtt_s + (sample - self._srtt_s) / 8
        p = self.params
        self._rto_low_s = min(p.rto_us / 1e6, max(p.rto_low_us / 1e6, 2 * self._srtt_s))

    def _lost_retransmissions(self, sack: int) -> None:
        """Without a reorder window packets arrive in the order sent: a resend still missing when a
        packet sent after it is SACKed was lost, so resend it again now rather than after a timeout
        (lost retransmission detection, as RACK, RFC 8985 section 6.2). Under ``cond``."""
        una, sacked = self.una, self._sacked
        for h, after in list(self._resent.items()):
            if h < una or h in sacked:
                del self._resent[h]
            elif sack >= after:
                del self._resent[h]
                self._again.add(h)

    def _enter_recovery(self) -> None:
        """Start a loss recovery episode: resend from the cumulative ACK. Under ``cond``."""
        self._recovery = True
        self._recovery_psn = self.high_psn
        self._rtx_next = self.una

    def _recover_timeout(self) -> None:
        """A timeout (RTO, or RTO_low with few packets in flight): a lost retransmission or a tail loss.
        A new episode resends the holes below the highest SACK again, then the highest unSACKed PSN
        sent as a tail loss probe (RACK-TLP, RFC 8985: a tail loss has nothing after it to be NACKed
        by; the probe fills the tail hole, or arrives beyond a hole and is NACKed with its SACK; a
        probe of a packet already placed is NACKed too). With a reorder window (spraying: SACKs are
        sparse, a probe would likely be a duplicate) the oldest unacknowledged PSN instead of the
        probe. Under ``cond``."""
        if self.una < self.high_psn:
            self._enter_recovery()
            if self._reorder:
                self._lost_below = max(self._lost_below, self.una + 1)
                return
            p = self.high_psn - 1
            while p > self.una and p in self._sacked:
                p -= 1
            if p >= self._lost_below:  # not a hole the episode resends anyway
                self._probe = p

    def _next_hole(self) -> int:
        """The next PSN this episode must resend, or -1. Under ``cond``."""
        p = self._rtx_next if self._rtx_next > self.una else self.una
        end = self._lost_below if self._lost_below < self.high_psn else self.high_psn
        sacked = self._sacked
        while p < end and p in sacked:
            p += 1
        self._rtx_next = p
        return p if p < end else -1

    def _can_send(self) -> bool:
        """A resend is due (in this order: a resend found lost, a hole of the episode, the probe), or a
        new packet fits the window and the BDP cap. Under ``cond``."""
        if self._again:
            una, sacked = self.una, self._sacked
            self._again = {p for p in self._again if p >= una and p not in sacked}
            if self._again:
                return True
        if self._probe >= self.una or self._recovery and self._next_hole() >= 0:
            return True
        return self.next_psn < self.tail_psn and self.next_psn - self.una < self._window

    def _take_psn(self) -> int:
        """The PSN :meth:`_can_send` found due. Under ``cond``."""
        if self._again:
            p = min(self._again)
            self._again.discard(p)
            return self._resend(p)
        if self._recovery:
            p = self._next_hole()
            if p >= 0:
                self._rtx_next = p + 1
                return self._resend(p)
        if self._probe >= self.una:
            p, self._probe = self._probe, -1
            return self._resend(p)
        psn = self.next_psn
        self.next_psn += 1
        return psn

    def _resend(self, psn: int) -> int:
        """``psn`` is resent now: remember the first new PSN that will follow it (lost retransmission
        detection, without a reorder window). Under ``cond``."""
        if not self._reorder:
            self._resent[psn] = self.next_psn
        self._rtt_sent.pop(psn, None)  # Karn: no RTT sample from a PSN sent twice
        return psn

    def _in_flight(self) -> int:
        """Packets sent and neither acknowledged nor SACKed. Under ``cond``."""
        return self.high_psn - self.una - len(self._sacked)


class SelectiveResponderQP(ResponderQP):
    """Responder that places out-of-order packets, delivers them in PSN order and NACKs each
    out-of-order arrival with IRN's SACK (see module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # psn -> opcode, plen, seq, idx, arrival ns (the arrival only matters with a reorder window)
        self._ahead: dict[int, tuple[int, int, int, int, int]] = {}
        self._reorder_ns = int(self.params.reorder_window_us * 1000)
        self._gap_since_ns = 0   # with a reorder window: when the current gap was first seen (0: none)
        self._naked = (-1, -1)   # with a reorder window: (expected PSN, SACKed PSN) of the last NACK
        self._span = max(self.params.window_pkts, 1)

    def _on_psn(self, d: int, buf: memoryview, n: int, opcode: int, ack_req: bool, pad: int) -> None:
        c = self.counters
        if d == 0:
            ack = ack_req
            self._deliver(opcode, *packet_tag(buf, n, pad, self.msg_seq, self.pkt_idx))
            ahead = self._ahead
            if ahead:
                while self.epsn in ahead:  # the gap is filled: hand over what waited behind it
                    op, plen, seq, idx, _ = ahead.pop(self.epsn)
                    ack = True  # the cumulative ACK jumps: say so at once
                    self._deliver(op, plen, seq, idx)
                if self._reorder_ns:  # the next gap is as old as the first packet placed beyond it
                    self._gap_since_ns = ahead[min(ahead)][4] if ahead else 0
            if ack:
                self._send_ack((self.epsn - 1) & PSN_MASK, nak=False)
        elif d < HALF_PSN:  # ahead: a loss before it (or, spraying, overtaken on another path)
            psn = self.epsn + d
            if psn in self._ahead or d >= 2 * self._span:
                c.dup_pkts += 1
                if ack_req and psn in self._ahead:  # a probe or resend of a placed packet: say what is missing
                    if not self._reorder_ns:
                        self._send_ack(self.epsn & PSN_MASK, nak=True, sack24=psn & PSN_MASK)
                    else:
                        self._naked = (-1, -1)
                        self._nak_old_gap(time.monotonic_ns())
                return
            c.out_of_order_pkts += 1
            if d > c.max_reorder_pkts:
                c.max_reorder_pkts = d
            plen, seq, idx = packet_tag(buf, n, pad, self.msg_seq, self.pkt_idx)
            if not self._reorder_ns:  # nothing overtakes: the gap is a loss; NACK with this PSN SACKed
                self._ahead[psn] = (opcode, plen, seq, idx, 0)
                self._send_ack(self.epsn & PSN_MASK, nak=True, sack24=psn & PSN_MASK)
                return
            now = time.monotonic_ns()
            self._ahead[psn] = (opcode, plen, seq, idx, now)
            if not self._gap_since_ns:
                self._gap_since_ns = now
            elif now - self._gap_since_ns > self._reorder_ns:
                self._nak_old_gap(now)
        else:  # behind: a duplicate (a resend whose ACK was lost or late): acknowledge again
            c.dup_pkts += 1
            self._send_ack((self.epsn - 1) & PSN_MASK, nak=False)

    def _nak_old_gap(self, now: int) -> None:
        """The gap outlived the reorder window: NACK it, SACKing the first PSN placed beyond it. Every
        PSN from the expected one up to it is missing, and it arrived more than the window ago (checked
        here): they were overtaken by more than any reordering, so lost. Once per (expected PSN, SACKed
        PSN); further gaps are NACKed when the expected PSN reaches them."""
        sack = min(self._ahead)
        if now - self._ahead[sack][4] <= self._reorder_ns or (self.epsn, sack) == self._naked:
            return
        self._naked = (self.epsn, sack)
        self._send_ack(self.epsn & PSN_MASK, nak=True, sack24=sack & PSN_MASK)


def qp_classes(loss_recovery: str) -> tuple[type[RequesterQP], type[ResponderQP]]:
    """(requester, responder) classes for ``loss_recovery``: ``go_back_n`` or ``selective_repeat``.

    Raises ValueError naming the allowed values."""
    if loss_recovery == GO_BACK_N:
        return RequesterQP, ResponderQP
    if loss_recovery == SELECTIVE_REPEAT:
        return SelectiveRequesterQP, SelectiveResponderQP
    raise ValueError(f"loss_recovery {loss_recovery!r}: allowed {GO_BACK_N}, {SELECTIVE_REPEAT}")
