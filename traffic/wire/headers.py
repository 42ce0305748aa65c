"""RoCEv2 headers on the fast path: constants, opcodes, AETH syndromes, BTH/AETH/RETH packing.

No scapy: standard library only. Packet layout (RoCEv2 over IPv4, IBA Vol. 1 Annex A17 "RoCEv2")::

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
"""

from __future__ import annotations

import operator
import struct
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
#: IRN's NACK extension (ours, selective repeat only; Mittal et al., SIGCOMM 2018, section 3.1):
#: one 32-bit word after the AETH of a PSN-sequence-error NAK, resv8 | the PSN whose out-of-order
#: arrival triggered the NAK (a simplified SACK). Go-back-N NAKs never carry it (plain RoCEv2).
IRN_SACK_BYTES = 4
#: UDP payload of an ACK/NAK without (BTH + AETH + ICRC) and with the IRN extension
ACK_BYTES = BTH_BYTES + AETH_BYTES + ICRC_BYTES
NAK_SACK_BYTES = ACK_BYTES + IRN_SACK_BYTES

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
#: RoCE data of the lossy (best-effort) class: DSCP 0 (CS0, the default PHB of RFC 2474), which RNICs in
#: ``trust dscp`` mode map to priority 0, the priority left without PFC; ECT(0) as every RoCE data packet
DSCP_LOSSY = 0
TOS_LOSSY = (DSCP_LOSSY << 2) | ECN_ECT0   #: 0x02: DSCP 0, ECT(0)
DSCP_CNP = 48
TOS_CNP = (DSCP_CNP << 2) | ECN_ECT0       #: 0xc2: DSCP 48, ECT(0)
TTL_DEFAULT = 64

#: Every data payload starts with (msg_id, pkt_index), both uint32 big-endian;
#: pkt_index = offset in the message / packet payload size (offset/1024 by default).
PAYLOAD_TAG_BYTES = 8
PAYLOAD_TAG = struct.Struct("!II")

#: largest unsigned 32-bit field value (R_Key, DMA length)
U32_MAX = (1 << 32) - 1


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
    check_range("credits", credits, 0, 31)
    return credits


def syndrome_rnr_nak(timer: int) -> int:
    """RNR NAK syndrome with the 5-bit encoded RNR timer (IBA Table 45)."""
    check_range("timer", timer, 0, 31)
    return 0x20 | timer


def syndrome_nak(code: int) -> int:
    """NAK syndrome for a :class:`NakCode` (0-31)."""
    check_range("code", code, 0, 31)
    return 0x60 | code


# --- validation --------------------------------------------------------------

def check_range(name: str, value: int, lo: int, hi: int) -> None:
    """Raise ValueError naming ``name``, the value and the allowed range ``lo..hi``."""
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} {value!r} is not an integer: allowed {lo}..{hi}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{name} {value} out of range: allowed {lo}..{hi}")


def ipv4_bytes(name: str, addr: str) -> bytes:
    """Parse a dotted-quad IPv4 address without importing socket/ipaddress."""
    parts = addr.split(".") if isinstance(addr, str) else ()
    if len(parts) != 4 or not all(p.isdigit() and int(p) <= 255 for p in parts):
        raise ValueError(f"{name} {addr!r} is not a dotted-quad IPv4 address")
    return bytes(int(p) for p in parts)


def ipv4_checksum(header: Buffer) -> int:
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
    check_range("opcode", opcode, 0, 0xFF)
    check_range("dest_qp", dest_qp, 0, QPN_MAX)
    check_range("psn", psn, 0, PSN_MAX)
    check_range("pkey", pkey, 0, 0xFFFF)
    check_range("pad", pad, 0, 3)
    check_range("tver", tver, 0, 15)
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
    check_range("syndrome", syndrome, 0, 0xFF)
    check_range("msn", msn, 0, MSN_MAX)
    _AETH.pack_into(buf, offset, (syndrome << 24) | msn)


def unpack_aeth(buf: Buffer, offset: int = 0) -> AETH:
    """Decode the 4-byte AETH at ``buf[offset:]``; raises ValueError if too short."""
    if len(buf) - offset < AETH_BYTES:
        raise ValueError(f"buffer has {len(buf) - offset} bytes at offset {offset}: "
                         f"an AETH needs {AETH_BYTES}")
    (word,) = _AETH.unpack_from(buf, offset)
    return AETH(word >> 24, word & MSN_MAX)


# --- IRN NACK extension (selective repeat) ------------------------------------

def pack_irn_sack_into(buf: Union[bytearray, memoryview], offset: int, sack_psn: int) -> None:
    """Write IRN's NACK extension (:data:`IRN_SACK_BYTES`: 8 reserved zero bits, 24-bit SACKed PSN)."""
    check_range("sack_psn", sack_psn, 0, PSN_MAX)
    _AETH.pack_into(buf, offset, sack_psn)


def unpack_irn_sack(buf: Buffer, offset: int = 0) -> int:
    """The SACKed PSN of IRN's NACK extension at ``buf[offset:]``; ValueError if too short."""
    if len(buf) - offset < IRN_SACK_BYTES:
        raise ValueError(f"buffer has {len(buf) - offset} bytes at offset {offset}: "
                         f"IRN's NACK extension needs {IRN_SACK_BYTES}")
    return _AETH.unpack_from(buf, offset)[0] & PSN_MAX


# --- RETH --------------------------------------------------------------------

_RETH = struct.Struct("!QII")


def pack_reth_into(buf: Union[bytearray, memoryview], offset: int, va: int,
                   r_key: int, dma_length_bytes: int) -> None:
    """Write a 16-byte RETH (IBA 9.3.3): virtual address (64 bit), R_Key, DMA length."""
    check_range("va", va, 0, (1 << 64) - 1)
    check_range("r_key", r_key, 0, U32_MAX)
    check_range("dma_length_bytes", dma_length_bytes, 0, U32_MAX)
    _RETH.pack_into(buf, offset, va, r_key, dma_length_bytes)


def unpack_reth(buf: Buffer, offset: int = 0) -> Tuple[int, int, int]:
    """Decode a RETH: returns (va, r_key, dma_length_bytes)."""
    return _RETH.unpack_from(buf, offset)


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
    check_range("tos", tos, 0, 0xFF)
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
