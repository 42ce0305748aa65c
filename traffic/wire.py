"""RoCEv2 wire format on the fast path: BTH/AETH packing, ICRC, packet builders.

No scapy here: this module imports only the standard library (``operator``,
``struct``, ``zlib``, ``enum``, ``typing``) and loads in a few milliseconds. The scapy
side (dissection, pcaps, tests) lives in :mod:`traffic.roce`.

Packet layout (RoCEv2 over IPv4, IBA Vol. 1 Annex A17 "RoCEv2")::

    IPv4 (20) | UDP (8, dport 4791) | BTH (12) | [RETH 16 | AETH 4] | payload | pad (0-3) | ICRC (4)

BTH, IBA Vol. 1 section 9.2 (big-endian)::

    byte 0      opcode
    byte 1      SE(1) M(1) PadCnt(2) TVer(4)
    bytes 2-3   P_Key
    byte 4      FECN(1) BECN(1) resv6        (RoCEv2 Annex A17.9: FECN/BECN;
                                              the whole byte is "resv8a" in 9.2)
    bytes 5-7   DestQP (24 bits)
    byte 8      AckReq(1) resv7
    bytes 9-11  PSN (24 bits)

ICRC (IBA Vol. 1 Annex A17.4.1, as implemented by Linux rdma_rxe
``rxe_icrc_hdr`` and scapy ``scapy.contrib.roce.BTH.compute_icrc``): CRC-32
(the Ethernet/zlib polynomial) over

    8 bytes of 0xFF (stand-in for the IB LRH)
    + IPv4 header with TOS, TTL and header checksum set to all ones
    + UDP header with the checksum set to all ones
    + BTH with byte 4 (FECN, BECN, resv6) set to all ones
    + everything after the BTH up to, not including, the ICRC (pad included).

The 32-bit CRC value goes on the wire least-significant byte first (scapy
``BTH.pack_icrc``). Everything else in the IPv4 header is covered, in
particular the IP identification and the DF flag, so a sender can only
precompute the ICRC if it knows the IP id the kernel will write.

IP id of UDP sockets (captured on Linux 6.18 in network namespaces; consistent with
``ip_select_ident_segs``, where ``skb->ignore_df`` is set for every PMTU mode
below IP_PMTUDISC_DO):

- unconnected socket, ``IP_MTU_DISCOVER = IP_PMTUDISC_DO`` (or PROBE),
  ``sendto``: DF set, IP id 0. This is what :func:`prepare_udp_socket` sets
  and what the builders assume by default (``ip_id=0``, ``df=True``).
- unconnected socket with the default IP_PMTUDISC_WANT: DF is still set on
  the wire but the id comes from the kernel's shared hashed counter
  (22143, 22144, ...): the ICRC would be wrong.
- connected socket: a per-socket counter, also unpredictable.
- raw socket (``IPPROTO_RAW``): the kernel keeps the id written in
  :meth:`DataPacketBuilder.ip_packet` (0 with DF, or any fixed value).

The emulated switches never look at the ICRC; receivers and pcap analysis
(:func:`traffic.roce.read_roce_pcap`, column ``icrc_ok``) do.
"""
from __future__ import annotations

import operator
import struct
import zlib
from enum import IntEnum
from typing import NamedTuple, Optional, Tuple, Union

Buffer = Union[bytes, bytearray, memoryview]

# --- constants -------------------------------------------------------------

ROCEV2_UDP_PORT = 4791          #: IANA port for RoCEv2 (Annex A17.2.1)
IPV4_HEADER_BYTES = 20
UDP_HEADER_BYTES = 8
BTH_BYTES = 12                  #: Base Transport Header, IBA 9.2
RETH_BYTES = 16                 #: RDMA Extended Transport Header, IBA 9.3.3
AETH_BYTES = 4                  #: ACK Extended Transport Header, IBA 9.3.5
ICRC_BYTES = 4                  #: invariant CRC, IBA 7.8.1 / Annex A17.4.1
CNP_RESERVED_BYTES = 16         #: CNP body after the BTH (Annex A17.9.3)

#: Pseudo-LRH that starts the ICRC input for RoCEv2 (Annex A17.4.1).
ICRC_LRH_STANDIN = b"\xff" * 8

PSN_MODULUS = 1 << 24           #: PSNs are 24-bit and wrap (IBA 9.7.1)
PSN_MAX = PSN_MODULUS - 1
QPN_MAX = (1 << 24) - 1
MSN_MAX = (1 << 24) - 1
PKEY_DEFAULT = 0xFFFF           #: default full-membership partition key

ECN_NOT_ECT = 0b00
ECN_ECT1 = 0b01
ECN_ECT0 = 0b10
ECN_CE = 0b11

DSCP_DATA = 26                  #: RoCE data class (lossless priority 3 in our scenarios)
TOS_DATA = (DSCP_DATA << 2) | ECN_ECT0     #: 0x6a: DSCP 26, ECT(0)
DSCP_CNP = 48
TOS_CNP = (DSCP_CNP << 2) | ECN_ECT0       #: 0xc2: DSCP 48, ECT(0), as in case C05
TTL_DEFAULT = 64

#: Every data payload starts with (msg_id, pkt_index), both uint32 big-endian;
#: pkt_index = offset in the message / packet payload size (offset/1024 by default).
PAYLOAD_TAG_BYTES = 8
PAYLOAD_TAG = struct.Struct("!II")

_U32_MAX = (1 << 32) - 1


class Opcode(IntEnum):
    """BTH opcodes used by the testbed (IBA Vol. 1 Table 38; CNP: Annex A17.9.3)."""

    RC_SEND_FIRST = 0x00
    RC_SEND_MIDDLE = 0x01
    RC_SEND_LAST = 0x02
    RC_SEND_ONLY = 0x04
    RC_RDMA_WRITE_FIRST = 0x06
    RC_RDMA_WRITE_MIDDLE = 0x07
    RC_RDMA_WRITE_LAST = 0x08
    RC_RDMA_WRITE_ONLY = 0x0A
    RC_ACKNOWLEDGE = 0x11
    CNP = 0x81


#: Bytes of extended transport headers that follow the BTH, per opcode
#: (IBA Vol. 1 Table 38; RC/UC/RD with their ImmDt, RETH, AETH, AtomicETH;
#: RD opcodes also carry RDETH+DETH, 12 bytes). For CNP the 16 reserved bytes
#: are counted here, so a CNP has 0 payload bytes. Opcodes missing: 0.
EXT_HEADER_BYTES = {
    # RC
    0x03: 4, 0x05: 4,                   # SEND_LAST/ONLY with immediate: ImmDt
    0x06: RETH_BYTES, 0x09: 4, 0x0A: RETH_BYTES, 0x0B: RETH_BYTES + 4,
    0x0C: RETH_BYTES,                   # RDMA READ request
    0x0D: AETH_BYTES, 0x0F: AETH_BYTES, 0x10: AETH_BYTES,   # READ responses
    0x11: AETH_BYTES,                   # ACKNOWLEDGE
    0x12: AETH_BYTES + 8,               # ATOMIC ACKNOWLEDGE: AETH + AtomicAckETH
    0x13: 28, 0x14: 28,                 # COMPARE_SWAP / FETCH_ADD: AtomicETH
    # UC
    0x23: 4, 0x25: 4, 0x26: RETH_BYTES, 0x29: 4, 0x2A: RETH_BYTES, 0x2B: RETH_BYTES + 4,
    # UD: DETH (8), + ImmDt
    0x64: 8, 0x65: 12,
    # CNP
    0x81: CNP_RESERVED_BYTES,
}


# --- AETH syndromes (IBA Vol. 1 section 9.7.5.1, Tables 42-44) --------------

class AethType(IntEnum):
    """Bits 6-5 of the AETH syndrome."""

    ACK = 0b00
    RNR_NAK = 0b01
    NAK = 0b11


class NakCode(IntEnum):
    """Bits 4-0 of a NAK syndrome (IBA Table 44)."""

    PSN_SEQUENCE_ERROR = 0
    INVALID_REQUEST = 1
    REMOTE_ACCESS_ERROR = 2
    REMOTE_OPERATIONAL_ERROR = 3
    INVALID_RD_REQUEST = 4


#: ACK whose credit field is 0b11111, "invalid credit count": the responder
#: does not advertise end-to-end credits (what RoCE NICs send for RC).
SYNDROME_ACK = 0x1F
SYNDROME_NAK_PSN_SEQUENCE_ERROR = 0x60
SYNDROME_NAK_INVALID_REQUEST = 0x61
SYNDROME_NAK_REMOTE_ACCESS_ERROR = 0x62
SYNDROME_NAK_REMOTE_OPERATIONAL_ERROR = 0x63


def syndrome_ack(credits: int = 31) -> int:
    """ACK syndrome with a 5-bit credit count (0-30, or 31 = no credit information)."""
    _check_range("credits", credits, 0, 31)
    return credits


def syndrome_rnr_nak(timer: int) -> int:
    """RNR NAK syndrome with the 5-bit encoded RNR timer (IBA Table 45)."""
    _check_range("timer", timer, 0, 31)
    return 0x20 | timer


def syndrome_nak(code: int) -> int:
    """NAK syndrome for a :class:`NakCode` (0-31)."""
    _check_range("code", code, 0, 31)
    return 0x60 | code


# --- validation --------------------------------------------------------------

def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    """Raise ValueError naming ``name``, the value and the allowed range ``lo..hi``."""
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} {value!r} is not an integer: allowed {lo}..{hi}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{name} {value} out of range: allowed {lo}..{hi}")


def _ipv4_bytes(name: str, addr: str) -> bytes:
    """Parse a dotted-quad IPv4 address without importing socket/ipaddress."""
    parts = addr.split(".") if isinstance(addr, str) else ()
    if len(parts) != 4 or not all(p.isdigit() and int(p) <= 255 for p in parts):
        raise ValueError(f"{name} {addr!r} is not a dotted-quad IPv4 address")
    return bytes(int(p) for p in parts)


def _ipv4_checksum(header: Buffer) -> int:
    """RFC 791 / RFC 1071 one's-complement sum over the header (checksum field 0)."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


# --- BTH ---------------------------------------------------------------------

class BTH(NamedTuple):
    """A decoded Base Transport Header (IBA 9.2). All fields are ints or bools."""

    opcode: int
    solicited: bool
    migreq: bool
    pad: int
    tver: int
    pkey: int
    fecn: bool
    becn: bool
    dest_qp: int
    ack_req: bool
    psn: int


_BTH = struct.Struct("!BBHII")


def pack_bth_into(buf: Union[bytearray, memoryview], offset: int, opcode: int,
                  dest_qp: int, psn: int, ack_req: bool = False,
                  becn: bool = False, fecn: bool = False, pkey: int = PKEY_DEFAULT,
                  solicited: bool = False, pad: int = 0, tver: int = 0,
                  migreq: bool = False) -> None:
    """Write a 12-byte BTH (IBA 9.2) at ``buf[offset:offset + 12]``.

    Raises ValueError naming the value and its allowed range when opcode is not
    0..255, dest_qp or psn not 0..2**24-1, pkey not 0..0xFFFF, pad not 0..3,
    tver not 0..15.
    """
    _check_range("opcode", opcode, 0, 0xFF)
    _check_range("dest_qp", dest_qp, 0, QPN_MAX)
    _check_range("psn", psn, 0, PSN_MAX)
    _check_range("pkey", pkey, 0, 0xFFFF)
    _check_range("pad", pad, 0, 3)
    _check_range("tver", tver, 0, 15)
    _BTH.pack_into(
        buf, offset, opcode,
        (bool(solicited) << 7) | (bool(migreq) << 6) | (pad << 4) | tver,
        pkey,
        (bool(fecn) << 31) | (bool(becn) << 30) | dest_qp,
        (bool(ack_req) << 31) | psn)


def unpack_bth(buf: Buffer, offset: int = 0) -> BTH:
    """Decode the 12-byte BTH at ``buf[offset:]``; raises ValueError if too short."""
    if len(buf) - offset < BTH_BYTES:
        raise ValueError(f"buffer has {len(buf) - offset} bytes at offset {offset}: "
                         f"a BTH needs {BTH_BYTES}")
    opcode, b1, pkey, w1, w2 = _BTH.unpack_from(buf, offset)
    return BTH(opcode, bool(b1 & 0x80), bool(b1 & 0x40), (b1 >> 4) & 3, b1 & 0xF,
               pkey, bool(w1 >> 31), bool((w1 >> 30) & 1), w1 & QPN_MAX,
               bool(w2 >> 31), w2 & PSN_MAX)


# --- AETH --------------------------------------------------------------------

class AETH(NamedTuple):
    """A decoded ACK Extended Transport Header (IBA 9.3.5, 9.7.5.1)."""

    syndrome: int
    msn: int

    @property
    def kind(self) -> AethType:
        """ACK, RNR_NAK or NAK (syndrome bits 6-5); ValueError for the reserved 0b10."""
        return AethType((self.syndrome >> 5) & 3)

    @property
    def code(self) -> int:
        """Syndrome bits 4-0: credits (ACK), timer (RNR NAK) or :class:`NakCode`."""
        return self.syndrome & 0x1F


_AETH = struct.Struct("!I")


def pack_aeth_into(buf: Union[bytearray, memoryview], offset: int, syndrome: int,
                   msn: int) -> None:
    """Write a 4-byte AETH (syndrome 0..255, MSN 0..2**24-1) at ``buf[offset:]``."""
    _check_range("syndrome", syndrome, 0, 0xFF)
    _check_range("msn", msn, 0, MSN_MAX)
    _AETH.pack_into(buf, offset, (syndrome << 24) | msn)


def unpack_aeth(buf: Buffer, offset: int = 0) -> AETH:
    """Decode the 4-byte AETH at ``buf[offset:]``; raises ValueError if too short."""
    if len(buf) - offset < AETH_BYTES:
        raise ValueError(f"buffer has {len(buf) - offset} bytes at offset {offset}: "
                         f"an AETH needs {AETH_BYTES}")
    (word,) = _AETH.unpack_from(buf, offset)
    return AETH(word >> 24, word & MSN_MAX)


# --- RETH --------------------------------------------------------------------

_RETH = struct.Struct("!QII")


def pack_reth_into(buf: Union[bytearray, memoryview], offset: int, va: int,
                   r_key: int, dma_length_bytes: int) -> None:
    """Write a 16-byte RETH (IBA 9.3.3): virtual address (64 bit), R_Key, DMA length."""
    _check_range("va", va, 0, (1 << 64) - 1)
    _check_range("r_key", r_key, 0, _U32_MAX)
    _check_range("dma_length_bytes", dma_length_bytes, 0, _U32_MAX)
    _RETH.pack_into(buf, offset, va, r_key, dma_length_bytes)


def unpack_reth(buf: Buffer, offset: int = 0) -> Tuple[int, int, int]:
    """Decode a RETH: returns (va, r_key, dma_length_bytes)."""
    return _RETH.unpack_from(buf, offset)


# --- ICRC --------------------------------------------------------------------

def _masked_ip_udp(ip_header: Buffer, udp_header: Buffer) -> bytearray:
    ihl_bytes = (ip_header[0] & 0x0F) * 4
    if ip_header[0] >> 4 != 4 or ihl_bytes < IPV4_HEADER_BYTES or len(ip_header) != ihl_bytes:
        raise ValueError(f"ip_header of {len(ip_header)} bytes (first byte "
                         f"{ip_header[0]:#04x}) is not one whole IPv4 header")
    if len(udp_header) != UDP_HEADER_BYTES:
        raise ValueError(f"udp_header has {len(udp_header)} bytes: allowed {UDP_HEADER_BYTES}")
    m = bytearray(ICRC_LRH_STANDIN)
    m += ip_header
    m += udp_header
    base = len(ICRC_LRH_STANDIN)
    m[base + 1] = 0xFF                       # TOS (DSCP + ECN)
    m[base + 8] = 0xFF                       # TTL
    m[base + 10:base + 12] = b"\xff\xff"     # header checksum
    u = base + ihl_bytes
    m[u + 6:u + 8] = b"\xff\xff"             # UDP checksum
    return m


def icrc_ipv4(ip_header: Buffer, udp_header: Buffer, ib_payload: Buffer) -> bytes:
    """ICRC of a RoCEv2 packet over IPv4, as the 4 bytes that go on the wire.

    ip_header: the whole IPv4 header as sent (20 bytes, or more with options);
    udp_header: the 8-byte UDP header, its length field including the ICRC;
    ib_payload: BTH + extension headers + payload + pad, without the ICRC.
    The masked fields (TOS, TTL, IP checksum, UDP checksum, BTH byte 4) may hold
    anything. Formula: IBA Vol. 1 Annex A17.4.1; see the module docstring.
    Raises ValueError for a malformed header or an ib_payload shorter than a BTH.
    """
    if len(ib_payload) < BTH_BYTES:
        raise ValueError(f"ib_payload has {len(ib_payload)} bytes: at least "
                         f"{BTH_BYTES} (a BTH) required")
    crc = zlib.crc32(_masked_ip_udp(ip_header, udp_header))
    crc = zlib.crc32(memoryview(ib_payload)[:4], crc)
    crc = zlib.crc32(b"\xff", crc)
    crc = zlib.crc32(memoryview(ib_payload)[5:], crc)
    return crc.to_bytes(4, "little")


def ipv4_udp_headers(src_ip: str, dst_ip: str, sport: int, dport: int, udp_len: int,
                     tos: int = TOS_DATA, ttl: int = TTL_DEFAULT, ip_id: int = 0,
                     df: bool = True, udp_checksum: int = 0) -> bytes:
    """IPv4 (20 bytes, no options, valid header checksum) + UDP (8) headers.

    udp_len: UDP length field in bytes (8 + UDP payload), 8..65515. The UDP
    checksum is written as given (0 = none, what RoCE NICs send; RFC 768).
    Raises ValueError for out-of-range values or malformed addresses.
    """
    src = _ipv4_bytes("src_ip", src_ip)
    dst = _ipv4_bytes("dst_ip", dst_ip)
    _check_range("sport", sport, 0, 0xFFFF)
    _check_range("dport", dport, 0, 0xFFFF)
    _check_range("udp_len", udp_len, UDP_HEADER_BYTES, 0xFFFF - IPV4_HEADER_BYTES)
    _check_range("tos", tos, 0, 0xFF)
    _check_range("ttl", ttl, 0, 0xFF)
    _check_range("ip_id", ip_id, 0, 0xFFFF)
    _check_range("udp_checksum", udp_checksum, 0, 0xFFFF)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, IPV4_HEADER_BYTES + udp_len,
                               ip_id, 0x4000 if df else 0, ttl, 17, 0, src, dst))
    struct.pack_into("!H", ip, 10, _ipv4_checksum(ip))
    return bytes(ip) + struct.pack("!HHHH", sport, dport, udp_len, udp_checksum)


class IcrcPrefix:
    """CRC state of the constant ICRC prefix of one flow, cached per UDP length.

    For a sender, everything the ICRC covers before the BTH is constant per
    (src, dst, sport, dport, ip_id, DF) except the IP total length and UDP
    length, so the CRC over ``0xFF*8 + masked IPv4 + masked UDP`` is computed
    once per UDP length and the per-packet work is one ``zlib.crc32`` over
    BTH + payload (Annex A17.4.1). ip_id and df must be what the kernel really
    sends: see the module docstring (:func:`prepare_udp_socket`, or a raw socket).
    Raises ValueError for malformed addresses or out-of-range ports / ip_id.
    """

    __slots__ = ("src_ip", "dst_ip", "sport", "dport", "ip_id", "df", "_states")

    def __init__(self, src_ip: str, dst_ip: str, sport: int,
                 dport: int = ROCEV2_UDP_PORT, ip_id: int = 0, df: bool = True):
        ipv4_udp_headers(src_ip, dst_ip, sport, dport, UDP_HEADER_BYTES, ip_id=ip_id)
        self.src_ip, self.dst_ip, self.sport, self.dport = src_ip, dst_ip, sport, dport
        self.ip_id, self.df = ip_id, df
        self._states: dict = {}

    def headers(self, udp_len: int, tos: int = TOS_DATA, ttl: int = TTL_DEFAULT,
                udp_checksum: int = 0) -> bytes:
        """The 28 bytes of IPv4 + UDP headers of this flow for a UDP length."""
        return ipv4_udp_headers(self.src_ip, self.dst_ip, self.sport, self.dport,
                                udp_len, tos, ttl, self.ip_id, self.df, udp_checksum)

    def state(self, udp_len: int) -> int:
        """CRC-32 state (zlib convention) after the masked prefix, for this UDP length."""
        st = self._states.get(udp_len)
        if st is None:
            hdr = self.headers(udp_len)
            st = zlib.crc32(_masked_ip_udp(hdr[:IPV4_HEADER_BYTES], hdr[IPV4_HEADER_BYTES:]))
            self._states[udp_len] = st
        return st

    def icrc(self, ib_payload: Buffer) -> bytes:
        """ICRC bytes (wire order) for BTH+...+pad; the UDP length is derived from it."""
        mv = memoryview(ib_payload)
        crc = self.state(UDP_HEADER_BYTES + len(mv) + ICRC_BYTES)
        crc = zlib.crc32(mv[:4], crc)
        crc = zlib.crc32(b"\xff", crc)
        return zlib.crc32(mv[5:], crc).to_bytes(4, "little")


# --- sockets -------------------------------------------------------------------

# Linux socket option numbers (the socket module lacks some on Python 3.11).
_SOL_SOCKET, _SO_NO_CHECK = 1, 11
_IPPROTO_IP, _IP_TOS, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO = 0, 1, 10, 2


def prepare_udp_socket(sock, tos: int = TOS_DATA) -> None:
    """Make an AF_INET UDP socket send what the builders' ICRC assumes (Linux).

    Sets IP_TOS, ``SO_NO_CHECK`` (UDP checksum 0, as RoCE NICs send) and
    ``IP_MTU_DISCOVER = IP_PMTUDISC_DO`` (DF set and, for unconnected sockets
    sending with ``sendto``, IP id 0; see the module docstring). Do not
    ``connect()`` the socket: connected sockets number their IP ids.
    """
    _check_range("tos", tos, 0, 0xFF)
    sock.setsockopt(_IPPROTO_IP, _IP_TOS, tos)
    sock.setsockopt(_SOL_SOCKET, _SO_NO_CHECK, 1)
    sock.setsockopt(_IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO)


# --- payload tag -------------------------------------------------------------

def payload_pattern(n_bytes: int) -> bytes:
    """The fixed payload filler: byte k of a payload is ``k & 0xFF`` (for k >= 8)."""
    return bytes(k & 0xFF for k in range(n_bytes))


def read_payload_tag(payload: Buffer) -> Optional[Tuple[int, int]]:
    """Return (msg_id, pkt_index) from the start of a data payload, None if < 8 bytes."""
    if len(payload) < PAYLOAD_TAG_BYTES:
        return None
    return PAYLOAD_TAG.unpack_from(payload, 0)


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
        _check_range("pkey", pkey, 0, 0xFFFF)
        _check_range("tos", tos, 0, 0xFF)
        _check_range("ttl", ttl, 0, 0xFF)
        _check_range("max_payload_bytes", max_payload_bytes, 0,
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
            _check_range("psn", psn, 0, PSN_MAX)
            _check_range("dest_qp", dest_qp, 0, QPN_MAX)
        if not 0 <= payload_bytes <= self.max_payload_bytes:
            _check_range("payload_bytes", payload_bytes, 0, self.max_payload_bytes)
        if opcode not in self._DATA_OPCODES:
            raise ValueError(f"opcode {opcode!r} is not a data opcode: allowed "
                             f"{', '.join(f'{o:#04x}' for o in sorted(self._DATA_OPCODES))}"
                             f" (RC SEND / RDMA WRITE FIRST, MIDDLE, LAST, ONLY)")
        if not (0 <= msg_id <= _U32_MAX and 0 <= pkt_index <= _U32_MAX):
            _check_range("msg_id", msg_id, 0, _U32_MAX)
            _check_range("pkt_index", pkt_index, 0, _U32_MAX)
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

    :meth:`build` returns the 20-byte UDP payload view (BTH, AETH, ICRC);
    constructor arguments as for :class:`DataPacketBuilder`.
    """

    def __init__(self, src_ip: str, dst_ip: str, sport: int, *,
                 dport: int = ROCEV2_UDP_PORT, tos: int = TOS_DATA,
                 ttl: int = TTL_DEFAULT, ip_id: int = 0, df: bool = True,
                 pkey: int = PKEY_DEFAULT):
        super().__init__(src_ip, dst_ip, sport, AETH_BYTES, dport, tos, ttl, ip_id, df, pkey)

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
            _check_range("psn", psn, 0, PSN_MAX)
            _check_range("dest_qp", dest_qp, 0, QPN_MAX)
            pack_aeth_into(bytearray(AETH_BYTES), 0, syndrome, msn)     # raises
        buf, p = self.buf, self._pay
        bth = p - BTH_BYTES
        _BTH_HEAD.pack_into(buf, bth, Opcode.RC_ACKNOWLEDGE, 0, self.pkey, 0xFF000000 | dest_qp)
        _U32.pack_into(buf, bth + 8, psn)
        _U32.pack_into(buf, p, (syndrome << 24) | msn)
        return self._finish(bth, 0, p + AETH_BYTES)


class CnpPacketBuilder(_Builder):
    """Builds RoCEv2 CNPs (Annex A17.9.3): opcode 0x81, BECN=1, PSN 0, 16 zero bytes.

    ``dest_qp`` of :meth:`build` is the QP being notified (the data sender's
    QP). The default TOS is :data:`TOS_CNP` (0xc2, case C05). build() returns
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
            _check_range("dest_qp", dest_qp, 0, QPN_MAX)
        bth = self._pay - BTH_BYTES
        _BTH_HEAD.pack_into(self.buf, bth, Opcode.CNP, 0, self.pkey, 0xFF000000 | dest_qp)
        _U32.pack_into(self.buf, bth + 8, 0)
        return self._finish(bth, 0x40, self._pay + CNP_RESERVED_BYTES)    # BECN
