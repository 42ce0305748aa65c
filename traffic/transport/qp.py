"""RoCEv2-style reliable connection (RC) queue pairs over UDP sockets in a host namespace: the
requester here, the responder in :mod:`traffic.transport.responder`.

The host's :class:`~traffic.transport.endpoint.Endpoint` receives for every QP and calls
:meth:`RequesterQP.on_ack`, :meth:`RequesterQP.on_cnp` and :meth:`ResponderQP.on_data`.

- :class:`RequesterQP` (send side): messages are split into packets of
  ``payload_bytes`` with SEND FIRST/MIDDLE/LAST/ONLY opcodes and consecutive
  24-bit PSNs, starting at the QP's initial PSN and wrapping from 2^24 - 1 to
  0 (IBA vol. 1, 9.7.1: PSNs are modulo 2^24; RNICs start each QP at a random
  initial PSN, which :func:`initial_psn` draws from a seed); at most ``window_pkts`` are unacknowledged; recovery is
  go-back-N (IBA vol. 1, 9.7.5.1.1 "PSN sequence error NAK" and 9.7.6.1.3
  "retry on transport timer"): on a NAK the requester resends from the NAK's
  PSN, on a timeout (``rto_us`` without ACK progress since the last
  transmission) from the oldest unacknowledged PSN (``transport.loss_recovery: go_back_n``; selective
  repeat: :mod:`traffic.transport.selective`). Each requester QP sends from the UDP source
  port(s) its entropy policy gives (:mod:`traffic.transport.entropy`), at the pace its congestion
  control allows (:mod:`traffic.transport.cc`). Data packets carry the TOS of the QP's traffic class
  (:data:`CLASS_TOS`): DSCP 26 (lossless, the default) or DSCP 0 (lossy), both with ECT(0).
- :class:`ResponderQP` (receive side): accepts only the expected PSN, sends one
  NAK (PSN sequence error, AETH syndrome 0x60) per gap, drops out-of-order and
  duplicate packets (re-acknowledging duplicates that ask for an ACK), and
  acknowledges every packet with AckReq set (the requester sets it on every
  ``ack_every_pkts``-th packet counted from the QP's initial PSN, and on the
  last of each message: a 20-packet message on a fresh QP with
  ``ack_every_pkts`` 8 asks for 3 ACKs, after its packets 8, 16 and 20). When the run's
  congestion control reacts to ECN (DCQCN), each responder QP is also a notification point
  (:mod:`traffic.transport.np`): CE-marked data packets make it send CNPs, paced per QP.

Exactly-once check: the first 8 payload bytes of every packet carry
(message sequence, packet index in message); the responder checks each
accepted packet against what it expects next and counts ``order_errors``.

The host's egress is shaped by HTB at link rate and data sockets have a small
send buffer, so a blocking ``sendto`` is paced by the kernel: with congestion control
``none`` there is no per-packet sleeping in Python.
"""
from __future__ import annotations

import bisect
import random
import threading
import time
from dataclasses import dataclass

from traffic import wire
from traffic.clock import unix_ns
from traffic.transport.cc import CongestionControl, for_transport
from traffic.transport.entropy import QpEntropy
from traffic.transport.eventlog import TimeLog
from traffic.transport.nic import (TransportError, rdma_raw_socket, rdma_socket, send_error_text,  # noqa: F401
                                   send_lossless)
from traffic.transport.params import TransportParams, wire_bytes

PSN_MASK = 0xFFFFFF
HALF_PSN = 1 << 23
MSG_HDR = wire.PAYLOAD_TAG  # (message sequence, packet index) at the start of each payload
DATA_TOS = wire.TOS_DATA  # DSCP 26, ECT(0)
LOSSY_TOS = wire.TOS_LOSSY  # DSCP 0, ECT(0)
#: TOS byte of a traffic class's RoCE data packets (testbed.spec.congestion: control 48, lossless 26, lossy the rest)
CLASS_TOS = {"lossless": DATA_TOS, "lossy": LOSSY_TOS}
ACK_TOS = wire.DSCP_CNP << 2  # 0xc0: DSCP 48, Not-ECT: ACKs ride the control class with CNPs (htb_classes)


def class_tos(traffic_class: str) -> int:
    """TOS byte of ``traffic_class``'s data packets (:data:`CLASS_TOS`). ValueError naming the allowed classes."""
    try:
        return CLASS_TOS[traffic_class]
    except KeyError:
        raise ValueError(f"traffic class {traffic_class!r}: allowed {' | '.join(CLASS_TOS)}") from None


def is_lossless_tos(tos: int) -> bool:
    """Whether a data packet with TOS byte ``tos`` is in the lossless class (DSCP 26), the class PFC pauses."""
    return tos >> 2 == wire.DSCP_DATA


def initial_psn(seed, requester: object, responder: object) -> int:
    """Initial 24-bit PSN of the queue pair from ``requester`` to ``responder``, drawn from ``seed``.

    Both ends compute it (the requester sends from it, the responder expects
    it), as RC connection setup exchanges it. Deterministic for a seed, so
    runs are reproducible; uniform over 0..2^24-1, so the 2^24 wrap happens.
    """
    return random.Random(f"ipsn-{seed}-{requester}-{responder}").randrange(1 << 24)


@dataclass
class _Message:
    seq: int
    size_bytes: int
    first_psn: int
    npkts: int
    t_post_ns: int
    t_acked_ns: int = 0

    @property
    def end_psn(self) -> int:  # one past the last PSN
        return self.first_psn + self.npkts


@dataclass
class QPCounters:
    """Per-QP counters (packets unless named otherwise)."""

    tx_pkts: int = 0
    tx_wire_bytes: int = 0
    retx_pkts: int = 0
    retx_bytes: int = 0   # payload bytes retransmitted
    naks_rx: int = 0
    acks_rx: int = 0
    timeouts: int = 0     # retransmission timer expiries (with selective repeat, RTO_low's included)
    tx_busy_ns: int = 0   # time with a packet ready to send and the window open
    tx_work_ns: int = 0   # time with posted data not yet acknowledged (an RNIC with work to do)
    tx_paced_ns: int = 0  # time a ready packet was held back by the congestion control's pacing
    nic_full_waits: int = 0
    posted_bytes: int = 0
    acked_bytes: int = 0
    cnps_rx: int = 0      # congestion notification packets received (BTH opcode 0x81)
    pfc_paused_ns: int = 0  # time a ready packet was held back by a PFC pause of the lossless class


class RequesterQP:
    """Send side of one RC queue pair (see module docstring).

    ``post_send(size_bytes)`` queues a message and returns its sequence number;
    ``wait_acked(seq)`` blocks until that message and all before it are
    acknowledged. PSNs are kept as unbounded ints counted from ``first_psn``
    (0 to 2^24 - 1) and put on the wire mod 2^24. Raises ValueError for a
    ``first_psn`` outside 0..2^24-1, or for an unknown ``params.congestion_control``.

    ``entropy``: the QP's source ports and the choice among them (default: ``sport`` only,
    per flow); ``cc``: its congestion control (default: a new ``params.congestion_control``),
    whose hooks the QP calls on send, ACK, CNP and timeout and whose pacing decision
    (``next_send_ns``) it waits for before each packet; ``pause``: the NIC's PFC state
    (:class:`traffic.transport.pfc_rx.PfcReceiver`, ``paused_until_ns(now_ns)``), asked before
    each packet: while the lossless class is paused the QP sends nothing (its owner notifies
    ``cond`` when a frame changes the pause). ``tos``: the TOS byte of its data packets (default
    DSCP 26 with ECT(0), the lossless class; :func:`class_tos`); a QP outside the lossless class ignores
    ``pause`` (PFC pauses the lossless priority only).

    :attr:`cnp_rx`: the arrival time of every CNP for this QP (its reaction point's record,
    ``time.monotonic_ns()`` read as the QP takes the CNP, the time its congestion control is
    told; bounded: :class:`~traffic.transport.eventlog.TimeLog`).
    """

    #: set AckReq on every resent packet (selective repeat resends single packets, which must be answered)
    ACK_EVERY_RETRANSMISSION = False

    def __init__(self, qpn: int, dest_qpn: int, src_ip: str, dst_ip: str, sport: int,
                 params: TransportParams, first_psn: int = 0, on_error=None,
                 entropy: QpEntropy | None = None, cc: CongestionControl | None = None, pause=None,
                 tos: int = DATA_TOS):
        if not 0 <= first_psn <= PSN_MASK:
            raise ValueError(f"first_psn={first_psn}: a PSN is 24 bits, allowed 0..{PSN_MASK}")
        self.first_psn = first_psn
        self.qpn, self.dest_qpn = qpn, dest_qpn
        #: text of the send error that stopped this QP (see :func:`send_error_text`), else None
        self.error: str | None = None
        self.on_error = on_error
        self.dst = (dst_ip, wire.ROCEV2_UDP_PORT)
        self.params = params
        self.counters = QPCounters()
        self.cnp_rx = TimeLog()
        self.cc = cc if cc is not None else for_transport(params)
        self.entropy = entropy if entropy is not None else QpEntropy([sport])
        self.tos = tos
        self.pause = pause if is_lossless_tos(tos) else None
        #: one packet builder per source port of the entropy policy; one UDP socket for one port (per
        #: flow), else one raw socket sending the builders' IP packets (the port chosen per packet)
        if len(self.entropy.ports) == 1:
            self.socks = [rdma_socket(src_ip, self.entropy.ports[0], tos, params.sndbuf_bytes)]
            ports = [self.socks[0].getsockname()[1]]  # port 0 = any: the builder needs the bound one
        else:
            self.socks = [rdma_raw_socket(params.sndbuf_bytes)]
            ports = self.entropy.ports
        self.sock = self.socks[0]
        self.udp_sport = ports[0]
        self.builders = [wire.DataPacketBuilder(src_ip, dst_ip, port, params.payload_bytes, tos=tos)
                         for port in ports]
        self.builder = self.builders[0]
        #: the QP's lock and its condition; the hot paths hold ``_lock`` itself (a C-level ``with``, where
        #: ``with cond`` runs two Python-level calls), the same lock as ``cond``'s
        self._lock = threading.RLock()
        self.cond = threading.Condition(self._lock)
        self.messages: list[_Message] = []
        self._first_psns: list[int] = []
        self.una = first_psn       # oldest unacknowledged PSN
        self.next_psn = first_psn  # next PSN to (re)send
        self.tail_psn = first_psn  # one past the last posted PSN
        self.high_psn = first_psn  # one past the highest PSN ever sent
        self.done_msgs = 0    # messages fully acknowledged
        self._low_fired = False  # RTO_low expired since the last ACK progress (selective repeat)
        self._rtt_sent: dict[int, int] = {}  # selective repeat: PSN -> send ns of first transmissions asking for an ACK
        self._rto_low_s = params.rto_low_us / 1e6  # selective repeat adapts it to the measured RTT
        self._work_since_ns = 0
        self._last_progress = time.monotonic()
        self._stop = False
        self._sender_waiting = False  # the sender thread waits on cond (see _wake)
        self._acked_waits: list[int] = []  # the message each wait_acked caller waits for
        self.thread = threading.Thread(target=self._run, name=f"qp{qpn:#x}", daemon=True)
        self.thread.start()

    # -- API ---------------------------------------------------------------
    def post_send(self, size_bytes: int) -> int:
        if size_bytes <= 0:
            raise ValueError(f"size_bytes must be > 0, got {size_bytes}")
        npkts = -(-size_bytes // self.params.payload_bytes)
        with self.cond:
            seq = len(self.messages)
            m = _Message(seq, size_bytes, self.tail_psn, npkts, unix_ns())
            self.messages.append(m)
            self._first_psns.append(m.first_psn)
            if self.una == self.tail_psn:  # idle -> work
                self._work_since_ns = time.monotonic_ns()
                self._last_progress = time.monotonic()
            self.tail_psn += npkts
            self.counters.posted_bytes += size_bytes
            self.cond.notify_all()
        return seq

    def wait_acked(self, seq: int, timeout_s: float | None = None) -> bool:
        """True once message ``seq`` and all before it are acknowledged, False on timeout.

        Raises TransportError when a send error stopped the QP (see :func:`send_error_text`).
        """
        with self.cond:
            self._acked_waits.append(seq)
            try:
                ok = self.cond.wait_for(lambda: self.done_msgs > seq or self._stop or self.error, timeout_s)
            finally:
                self._acked_waits.remove(seq)
            if self.error:
                raise TransportError(self.error)
            return ok

    def _fail(self, e: OSError) -> None:
        """Stop this QP on a send error other than a full queue and tell the owner at once."""
        with self.cond:
            self.error = send_error_text(self.qpn, self.dst, e)
            self.cond.notify_all()
        if self.on_error is not None:
            self.on_error(self.error)

    def stop(self) -> None:
        with self.cond:
            self._stop = True
            self.cond.notify_all()
        self.thread.join(timeout=2)
        for s in self.socks:
            s.close()

    # -- called by the Endpoint's receive thread ------------------------------
    def on_cnp(self) -> None:
        """A CNP for this QP arrived: count it, record its arrival and tell the congestion control."""
        with self._lock:
            now_ns = time.monotonic_ns()
            self.counters.cnps_rx += 1
            self.cnp_rx.add(now_ns)
            self.cc.on_cnp(now_ns)
            self._wake()

    def on_ack(self, psn24: int, nak: bool, sack24: int = -1) -> None:
        """An ACK of ``psn24`` (and everything before it) or a NAK whose PSN is the responder's
        expected one. ``sack24``: the PSN of IRN's NACK extension (selective repeat only), else -1."""
        with self._lock:
            psn = self._unwrap(psn24)
            # an ACK acknowledges psn and all before; a NAK's PSN is the responder's
            # expected PSN: everything before it arrived, resend from it (go-back-N)
            new_una = psn if nak else psn + 1
            if new_una > self.una:
                self.cc.on_ack(new_una - self.una, self._payload_bytes(self.una, new_una), time.monotonic_ns())
                self.una = new_una
                self._last_progress = time.monotonic()
                self._complete_messages()
                if self.una >= self.tail_psn:  # work -> idle
                    self.counters.tx_work_ns += time.monotonic_ns() - self._work_since_ns
            if not nak:
                self.counters.acks_rx += 1
            else:
                self.counters.naks_rx += 1
                self._recover_nak(psn)
            if self.next_psn < self.una:
                self.next_psn = self.una
            self._wake()

    def _wake(self) -> None:
        """After an ACK or CNP: wake the sender thread if it waits on ``cond`` (the window may have
        opened, the pacing changed), and ``wait_acked`` callers only once a message they wait for is
        acknowledged, not on every ACK (a woken waiter would take the lock and sleep again). Under ``cond``."""
        if self._sender_waiting or (self._acked_waits and self.done_msgs > min(self._acked_waits)):
            self.cond.notify_all()

    def _wait(self, timeout_s: float) -> None:
        """The sender thread waits on ``cond`` (at most ``timeout_s``) and says so to :meth:`_wake`. Under ``cond``."""
        self._sender_waiting = True
        self.cond.wait(timeout_s)
        self._sender_waiting = False

    # -- loss recovery (go-back-N here; traffic.transport.selective overrides) --------
    def _recover_nak(self, psn: int) -> None:
        """A NAK says ``psn`` is the responder's expected PSN: resend from it (go-back-N). Under ``cond``."""
        if self.una <= psn < self.next_psn:
            self.next_psn = psn

    @staticmethod
    def ack_interval(params: TransportParams) -> int:
        """AckReq on every this-many-th packet (counted from the initial PSN): ``ack_every_pkts``."""
        return params.ack_every_pkts

    def _recover_timeout(self) -> None:
        """No ACK progress for ``rto_us``: resend from the oldest unacknowledged PSN. Under ``cond``."""
        self.next_psn = self.una

    def _can_send(self) -> bool:
        """A packet may leave now: posted and not yet sent (or to resend), within the window. Under ``cond``."""
        return self.next_psn < self.tail_psn and self.next_psn - self.una < self.params.window_pkts

    def _take_psn(self) -> int:
        """The PSN to send now (after :meth:`_can_send`). Under ``cond``."""
        psn = self.next_psn
        self.next_psn += 1
        return psn

    def _in_flight(self) -> int:
        """Packets sent and not yet acknowledged. Under ``cond``."""
        return self.high_psn - self.una

    def _unwrap(self, psn24: int) -> int:
        """The unbounded PSN nearest to ``una`` whose low 24 bits are ``psn24``."""
        d = (psn24 - self.una) & PSN_MASK
        if d >= HALF_PSN:
            d -= 1 << 24
        return self.una + d

    def _payload_bytes(self, lo_psn: int, hi_psn: int) -> int:
        """Payload bytes of the packets with PSNs lo_psn..hi_psn-1 (all posted)."""
        total, i = 0, bisect.bisect_right(self._first_psns, lo_psn) - 1
        while lo_psn < hi_psn:
            m = self.messages[i]
            end = min(hi_psn, m.end_psn)
            total += min(m.size_bytes, (end - m.first_psn) * self.params.payload_bytes) - \
                (lo_psn - m.first_psn) * self.params.payload_bytes
            lo_psn, i = end, i + 1
        return total

    def _complete_messages(self) -> None:
        now = unix_ns()
        while self.done_msgs < len(self.messages) and self.messages[self.done_msgs].end_psn <= self.una:
            m = self.messages[self.done_msgs]
            m.t_acked_ns = now
            self.counters.acked_bytes += m.size_bytes
            self.done_msgs += 1

    # -- sender thread --------------------------------------------------------
    def _run(self) -> None:
        p = self.params
        rto_s = p.rto_us / 1e6
        # IRN's RTO_low (selective repeat): with few packets in flight, a shorter timeout, once per ACK progress
        use_low, low_pkts = p.rto_low_us > 0, p.rto_low_pkts
        busy_since = None
        c, cc, ent, pause = self.counters, self.cc, self.entropy, self.pause
        ack_every = self.ack_interval(p)
        port_choice = len(self.builders) > 1
        payload_bytes, first_psn, dest_qpn = p.payload_bytes, self.first_psn, self.dest_qpn
        ack_every_retx = self.ACK_EVERY_RETRANSMISSION
        send_only, send_first, send_last, send_middle = (int(o) for o in (
            wire.Opcode.RC_SEND_ONLY, wire.Opcode.RC_SEND_FIRST, wire.Opcode.RC_SEND_LAST, wire.Opcode.RC_SEND_MIDDLE))
        m, m_first, m_end = None, 0, 0  # the message of the last packet sent, its PSNs m_first..m_end-1
        sent_bytes = sent_ns = 0  # frame bytes and decision time of the packet just sent: cc.on_send under the
        # next hold of the lock
        lock = self._lock
        while True:
            with lock:  # one hold per packet: the receive thread calls on_ack/on_cnp under it too
                if sent_bytes:
                    cc.on_send(sent_bytes, sent_ns)
                    # the retransmission timer runs from the last transmission or ACK progress, whichever
                    # is later: a QP that is still sending (slowly, sharing its NIC) is not timed out
                    self._last_progress = time.monotonic()
                    sent_bytes = 0
                while True:
                    if self._stop:
                        return
                    now = time.monotonic()
                    outstanding = self.una < self.high_psn
                    low = use_low and not self._low_fired and self._in_flight() <= low_pkts
                    rto = self._rto_low_s if low else rto_s
                    if outstanding and now - self._last_progress > rto:
                        c.timeouts += 1
                        self._low_fired = low
                        self._recover_timeout()
                        self._last_progress = now
                        cc.on_timeout(time.monotonic_ns())
                    if self._can_send():
                        now_ns = time.monotonic_ns()
                        paused_until_ns = pause.paused_until_ns(now_ns) if pause is not None else 0
                        if paused_until_ns:  # PFC: the lossless class is paused, as an RNIC obeys it
                            self._wait((paused_until_ns - now_ns) / 1e9)
                            c.pfc_paused_ns += time.monotonic_ns() - now_ns
                            self._last_progress = time.monotonic()  # a paused QP is not timed out
                            continue
                        at_ns = cc.next_send_ns(now_ns)
                        if at_ns <= now_ns:  # the pacing decision: send now
                            break
                        self._wait((at_ns - now_ns) / 1e9)
                        c.tx_paced_ns += time.monotonic_ns() - now_ns
                        # a QP held back by its pacing is still sending: the timer runs from here
                        self._last_progress = time.monotonic()
                        continue
                    if busy_since is not None:
                        c.tx_busy_ns += time.monotonic_ns() - busy_since
                        busy_since = None
                    self._wait(rto if outstanding else 1.0)
                if busy_since is None:
                    busy_since = time.monotonic_ns()
                psn = self._take_psn()
                retx = psn < self.high_psn
                if retx:
                    c.retx_pkts += 1
                else:
                    self.high_psn = psn + 1
                if not m_first <= psn < m_end:
                    m = self.messages[bisect.bisect_right(self._first_psns, psn) - 1]
                    m_first, m_end = m.first_psn, m.end_psn
            idx = psn - m_first
            last = psn == m_end - 1
            plen = m.size_bytes - idx * payload_bytes if last else payload_bytes
            if retx:
                c.retx_bytes += plen
            if idx == 0:
                opcode = send_only if last else send_first
            else:
                opcode = send_last if last else send_middle
            ack_req = (last or (psn - first_psn) % ack_every == ack_every - 1 or (retx and ack_every_retx))
            if ack_req and use_low and not retx:  # an RTT sample when its ACK comes (never a resend: Karn)
                self._rtt_sent[psn] = now_ns
            # payload tag = (message sequence, packet index): what the responder checks
            if port_choice:  # the entropy policy picks this packet's source port; whole IP packet, raw socket
                builder = self.builders[ent.port_index(now_ns)]
                pkt = builder.build(opcode, dest_qpn, psn & PSN_MASK, ack_req, m.seq, idx, plen)
                out, dst = builder.ip_packet(), (self.dst[0], 0)
            else:
                pkt = out = self.builder.build(opcode, dest_qpn, psn & PSN_MASK, ack_req, m.seq, idx, plen)
                dst = self.dst
            try:
                if not send_lossless(self.sock, out, dst, c):
                    return
            except OSError as e:
                self._fail(e)
                return
            c.tx_pkts += 1
            sent_bytes, sent_ns = wire_bytes(len(pkt)), now_ns
            c.tx_wire_bytes += sent_bytes
