"""RoCEv2 invariant CRC (ICRC) and the IPv4/UDP headers it covers.

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

import struct
import zlib

from traffic.wire.headers import *  # noqa: F401,F403
from traffic.wire.headers import U32_MAX, Buffer, check_range, ipv4_bytes, ipv4_checksum  # noqa: F401


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
    src = ipv4_bytes("src_ip", src_ip)
    dst = ipv4_bytes("dst_ip", dst_ip)
    check_range("sport", sport, 0, 0xFFFF)
    check_range("dport", dport, 0, 0xFFFF)
    check_range("udp_len", udp_len, UDP_HEADER_BYTES, 0xFFFF - IPV4_HEADER_BYTES)
    check_range("tos", tos, 0, 0xFF)
    check_range("ttl", ttl, 0, 0xFF)
    check_range("ip_id", ip_id, 0, 0xFFFF)
    check_range("udp_checksum", udp_checksum, 0, 0xFFFF)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, IPV4_HEADER_BYTES + udp_len,
                               ip_id, 0x4000 if df else 0, ttl, 17, 0, src, dst))
    struct.pack_into("!H", ip, 10, ipv4_checksum(ip))
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
