"""Prebuilt RoCEv2 packets (data, ACK/NAK, CNP): one buffer per flow, headers and ICRC prefix computed once."""
from __future__ import annotations

import struct
import zlib

from traffic.wire.headers import *  # noqa: F401,F403
from traffic.wire.headers import U32_MAX, Buffer, check_range, ipv4_bytes, ipv4_checksum  # noqa: F401
from traffic.wire.icrc import IcrcPrefix, icrc_ipv4, ipv4_udp_headers  # noqa: F401


# --- builders ----------------------------------------------------------------

_ICRC = struct.Struct("<I")
_BTH_HEAD = struct.Struct("!BBHI")   # opcode, SE/M/PadCnt/TVer, P_Key, (byte4 << 24 | dest_qp)
_U32 = struct.Struct("!I")
_ZEROS = (b"", b"\0", b"\0\0", b"\0\0\0")


class _Builder:
    """One preallocated buffer per flow: [IPv4 | UDP | BTH | ext | payload | pad | ICRC].

    The payload starts at a fixed buffer offset; headers are written right
    before it, so a packet without extension header starts later in the
    buffer. Returned views stay valid only until the next build.
    """

    _EXT_MAX = RETH_BYTES

    def __init__(self, src_ip: str, dst_ip: str, sport: int, max_payload_bytes: int,
                 dport: int, tos: int, ttl: int, ip_id: int, df: bool, pkey: int):
        check_range("pkey", pkey, 0, 0xFFFF)
        check_range("tos", tos, 0, 0xFF)
        check_range("ttl", ttl, 0, 0xFF)
        check_range("max_payload_bytes", max_payload_bytes, 0,
                     0xFFFF - IPV4_HEADER_BYTES - UDP_HEADER_BYTES - BTH_BYTES
                     - self._EXT_MAX - 3 - ICRC_BYTES)
        self.prefix = IcrcPrefix(src_ip, dst_ip, sport, dport, ip_id, df)
        self.pkey, self.tos, self.ttl = pkey, tos, ttl
        self.max_payload_bytes = max_payload_bytes
        self._pay = IPV4_HEADER_BYTES + UDP_HEADER_BYTES + BTH_BYTES + self._EXT_MAX
        self.buf = bytearray(self._pay + max_payload_bytes + 3 + ICRC_BYTES)
        self._mv = memoryview(self.buf)
        self._hdrs: dict = {}
        self._ip_start = 0
        self._end = 0

    def _headers(self, udp_len: int) -> Tuple[bytes, int]:
        entry = self._hdrs.get(udp_len)
        if entry is None:
            entry = (self.prefix.headers(udp_len, self.tos, self.ttl),
                     self.prefix.state(udp_len))
            self._hdrs[udp_len] = entry
        return entry

    def _finish(self, bth: int, byte4: int, end: int) -> memoryview:
        """IP/UDP headers and ICRC for the packet whose BTH (byte 4 = 0xFF) is at ``bth``."""
        buf = self.buf
        hdr, state = self._headers(end + ICRC_BYTES - bth + UDP_HEADER_BYTES)
        ip = bth - UDP_HEADER_BYTES - IPV4_HEADER_BYTES
        buf[ip:bth] = hdr
        crc = zlib.crc32(self._mv[bth:end], state)      # BTH byte 4 still all ones
        buf[bth + 4] = byte4
        _ICRC.pack_into(buf, end, crc)
        self._ip_start, self._end = ip, end + ICRC_BYTES
        return self._mv[bth:end + ICRC_BYTES]

    def ip_packet(self) -> memoryview:
        """IPv4 + UDP headers + the UDP payload of the last build, for a raw socket.

        Send it with ``socket(AF_INET, SOCK_RAW, IPPROTO_RAW).sendto(view,
        (dst_ip, 0))``: the kernel then keeps the IP id written here, so the
        ICRC stays valid (see the module docstring). Valid until the next build.
        """
        return self._mv[self._ip_start:self._end]


class DataPacketBuilder(_Builder):
    """Builds the RC data packets of one flow (src, dst, UDP source port) in one buffer.

    Per packet it writes the BTH (opcode, DestQP, PSN, AckReq, PadCnt), the
    8-byte payload tag (msg_id, pkt_index: uint32 big-endian each; pkt_index =
    byte offset in the message / max_payload_bytes, i.e. offset/1024 with
    1024-byte packets), zero pad to a 4-byte boundary (IBA 9.2 PadCnt) and the
    ICRC (Annex A17.4.1) finished from the cached :class:`IcrcPrefix` state.
    The rest of the payload is the fixed :func:`payload_pattern`, written once.

    :meth:`build` returns a memoryview of the UDP payload (BTH .. ICRC) for
    ``socket.sendto``; :meth:`ip_packet` the whole IPv4 packet of the same
    build. Views are valid until the next build.

    Args: src_ip, dst_ip dotted quads; sport UDP source port (ECMP entropy);
    max_payload_bytes the largest payload (path MTU payload, e.g. 1024);
    tos, ttl, ip_id, df as they will appear on the wire (ip_id and DF enter the
    ICRC; tos and ttl only the bytes of ip_packet()); pkey the P_Key.
    Raises ValueError for out-of-range arguments.
    """

    _WRITE_RETH = frozenset((Opcode.RC_RDMA_WRITE_FIRST, Opcode.RC_RDMA_WRITE_ONLY))
    _DATA_OPCODES = frozenset((Opcode.RC_SEND_FIRST, Opcode.RC_SEND_MIDDLE,
                               Opcode.RC_SEND_LAST, Opcode.RC_SEND_ONLY,
                               Opcode.RC_RDMA_WRITE_FIRST, Opcode.RC_RDMA_WRITE_MIDDLE,
                               Opcode.RC_RDMA_WRITE_LAST, Opcode.RC_RDMA_WRITE_ONLY))
    #: bytes after the payload that a build may overwrite (pad up to 3 + ICRC)
    _TAIL = 3 + ICRC_BYTES

    def __init__(self, src_ip: str, dst_ip: str, sport: int, max_payload_bytes: int = 1024,
                 *, dport: int = ROCEV2_UDP_PORT, tos: int = TOS_DATA,
                 ttl: int = TTL_DEFAULT, ip_id: int = 0, df: bool = True,
                 pkey: int = PKEY_DEFAULT):
        super().__init__(src_ip, dst_ip, sport, max_payload_bytes, dport, tos, ttl,
                         ip_id, df, pkey)
        self._pattern = payload_pattern(max_payload_bytes + self._TAIL)
        self.buf[self._pay:] = self._pattern
        self._last_payload_bytes = -1
        self._reth = bytes(RETH_BYTES)

    def set_reth(self, va: int, r_key: int, dma_length_bytes: int) -> None:
        """RETH carried by the following RDMA WRITE FIRST/ONLY packets (IBA 9.3.3)."""
        tmp = bytearray(RETH_BYTES)
        pack_reth_into(tmp, 0, va, r_key, dma_length_bytes)
        self._reth = bytes(tmp)

    def build(self, opcode: int, dest_qp: int, psn: int, ack_req: bool, msg_id: int,
              pkt_index: int, payload_bytes: int) -> memoryview:
        """Fill one data packet; return the UDP payload view (BTH .. ICRC).

        opcode: RC SEND or RDMA WRITE FIRST/MIDDLE/LAST/ONLY (:class:`Opcode`;
        WRITE FIRST/ONLY carry the RETH of :meth:`set_reth`); dest_qp and psn
        0..2**24-1; msg_id and pkt_index 0..2**32-1 (the payload tag; payloads
        under 8 bytes carry only its first bytes); payload_bytes
        0..max_payload_bytes. Raises ValueError naming the bad value and the
        allowed range.
        """
        if not (0 <= psn <= PSN_MAX and 0 <= dest_qp <= QPN_MAX):
            check_range("psn", psn, 0, PSN_MAX)
            check_range("dest_qp", dest_qp, 0, QPN_MAX)
        if not 0 <= payload_bytes <= self.max_payload_bytes:
            check_range("payload_bytes", payload_bytes, 0, self.max_payload_bytes)
        if opcode not in self._DATA_OPCODES:
            raise ValueError(f"opcode {opcode!r} is not a data opcode: allowed "
                             f"{', '.join(f'{o:#04x}' for o in sorted(self._DATA_OPCODES))}"
                             f" (RC SEND / RDMA WRITE FIRST, MIDDLE, LAST, ONLY)")
        if not (0 <= msg_id <= U32_MAX and 0 <= pkt_index <= U32_MAX):
            check_range("msg_id", msg_id, 0, U32_MAX)
            check_range("pkt_index", pkt_index, 0, U32_MAX)
        buf, p = self.buf, self._pay
        if payload_bytes != self._last_payload_bytes:
            last = self._last_payload_bytes
            if last >= 0:          # put the pattern back under the old pad + ICRC
                buf[p + last:p + last + self._TAIL] = self._pattern[last:last + self._TAIL]
            self._last_payload_bytes = payload_bytes
        if opcode in self._WRITE_RETH:
            bth = p - BTH_BYTES - RETH_BYTES
            buf[bth + BTH_BYTES:p] = self._reth
        else:
            bth = p - BTH_BYTES
        end = p + payload_bytes
        pad = -payload_bytes & 3
        if pad:
            buf[end:end + pad] = _ZEROS[pad]
            end += pad
        _BTH_HEAD.pack_into(buf, bth, opcode, pad << 4, self.pkey, 0xFF000000 | dest_qp)
        _U32.pack_into(buf, bth + 8, (0x80000000 | psn) if ack_req else psn)
        if payload_bytes >= PAYLOAD_TAG_BYTES:
            PAYLOAD_TAG.pack_into(buf, p, msg_id, pkt_index)
        elif payload_bytes:
            buf[p:p + payload_bytes] = PAYLOAD_TAG.pack(msg_id, pkt_index)[:payload_bytes]
        return self._finish(bth, 0, end)


class AckPacketBuilder(_Builder):
    """Builds RC ACKNOWLEDGE packets (BTH + AETH, IBA 9.7.5) of one flow.

    :meth:`build` returns the 20-byte UDP payload view (BTH, AETH, ICRC); :meth:`build_nak_sack`
    the 24 bytes of a selective-repeat NAK with IRN's extension (:data:`IRN_SACK_BYTES`);
    constructor arguments as for :class:`DataPacketBuilder`.
    """

    def __init__(self, src_ip: str, dst_ip: str, sport: int, *,
                 dport: int = ROCEV2_UDP_PORT, tos: int = TOS_DATA,
                 ttl: int = TTL_DEFAULT, ip_id: int = 0, df: bool = True,
                 pkey: int = PKEY_DEFAULT):
        super().__init__(src_ip, dst_ip, sport, AETH_BYTES + IRN_SACK_BYTES, dport, tos, ttl, ip_id, df, pkey)

    def build(self, dest_qp: int, psn: int, nak: bool = False, msn: int = 0,
              syndrome: Optional[int] = None) -> memoryview:
        """ACK (or NAK) for ``psn`` to ``dest_qp`` (both 0..2**24-1), MSN 0..2**24-1.

        syndrome: None = :data:`SYNDROME_NAK_PSN_SEQUENCE_ERROR` if ``nak``
        else :data:`SYNDROME_ACK`; any 0..255 otherwise (e.g. :func:`syndrome_rnr_nak`).
        Raises ValueError naming the bad value and the allowed range.
        """
        if syndrome is None:
            syndrome = SYNDROME_NAK_PSN_SEQUENCE_ERROR if nak else SYNDROME_ACK
        if not (0 <= psn <= PSN_MAX and 0 <= dest_qp <= QPN_MAX and 0 <= msn <= MSN_MAX
                and 0 <= syndrome <= 0xFF):
            check_range("psn", psn, 0, PSN_MAX)
            check_range("dest_qp", dest_qp, 0, QPN_MAX)
            pack_aeth_into(bytearray(AETH_BYTES), 0, syndrome, msn)     # raises
        buf, p = self.buf, self._pay
        bth = p - BTH_BYTES
        _BTH_HEAD.pack_into(buf, bth, Opcode.RC_ACKNOWLEDGE, 0, self.pkey, 0xFF000000 | dest_qp)
        _U32.pack_into(buf, bth + 8, psn)
        _U32.pack_into(buf, p, (syndrome << 24) | msn)
        return self._finish(bth, 0, p + AETH_BYTES)

    def build_nak_sack(self, dest_qp: int, psn: int, msn: int, sack_psn: int) -> memoryview:
        """Selective repeat's NAK (PSN sequence error) for expected PSN ``psn`` with IRN's extension: the
        PSN ``sack_psn`` whose out-of-order arrival triggered it (:data:`IRN_SACK_BYTES` after the AETH).
        All values 0..2**24-1; ValueError naming a bad one."""
        if not (0 <= psn <= PSN_MAX and 0 <= dest_qp <= QPN_MAX and 0 <= msn <= MSN_MAX
                and 0 <= sack_psn <= PSN_MAX):
            check_range("psn", psn, 0, PSN_MAX)
            check_range("dest_qp", dest_qp, 0, QPN_MAX)
            check_range("msn", msn, 0, MSN_MAX)
            check_range("sack_psn", sack_psn, 0, PSN_MAX)
        buf, p = self.buf, self._pay
        bth = p - BTH_BYTES
        _BTH_HEAD.pack_into(buf, bth, Opcode.RC_ACKNOWLEDGE, 0, self.pkey, 0xFF000000 | dest_qp)
        _U32.pack_into(buf, bth + 8, psn)
        _U32.pack_into(buf, p, (SYNDROME_NAK_PSN_SEQUENCE_ERROR << 24) | msn)
        _U32.pack_into(buf, p + AETH_BYTES, sack_psn)
        return self._finish(bth, 0, p + AETH_BYTES + IRN_SACK_BYTES)


class CnpPacketBuilder(_Builder):
    """Builds RoCEv2 CNPs (Annex A17.9.3): opcode 0x81, BECN=1, PSN 0, 16 zero bytes.

    ``dest_qp`` of :meth:`build` is the QP being notified (the data sender's
    QP). The default TOS is :data:`TOS_CNP` (0xc2). build() returns
    the 32-byte UDP payload view. Constructor arguments as for
    :class:`DataPacketBuilder`.
    """

    def __init__(self, src_ip: str, dst_ip: str, sport: int, *,
                 dport: int = ROCEV2_UDP_PORT, tos: int = TOS_CNP,
                 ttl: int = TTL_DEFAULT, ip_id: int = 0, df: bool = True,
                 pkey: int = PKEY_DEFAULT):
        super().__init__(src_ip, dst_ip, sport, CNP_RESERVED_BYTES, dport, tos, ttl,
                         ip_id, df, pkey)
        p = self._pay
        self.buf[p:p + CNP_RESERVED_BYTES] = bytes(CNP_RESERVED_BYTES)

    def build(self, dest_qp: int) -> memoryview:
        """The CNP to ``dest_qp`` (0..2**24-1): UDP payload view (BTH + 16 bytes + ICRC)."""
        if not 0 <= dest_qp <= QPN_MAX:
            check_range("dest_qp", dest_qp, 0, QPN_MAX)
        bth = self._pay - BTH_BYTES
        _BTH_HEAD.pack_into(self.buf, bth, Opcode.CNP, 0, self.pkey, 0xFF000000 | dest_qp)
        _U32.pack_into(self.buf, bth + 8, 0)
        return self._finish(bth, 0x40, self._pay + CNP_RESERVED_BYTES)    # BECN
