"""RoCEv2 with scapy: frames for tests and pcaps, RETH layer, pcap reader.

Slow path only (building one packet takes tens of microseconds); the sender's
fast path is :mod:`traffic.wire`. Uses ``scapy.contrib.roce`` (BTH, AETH,
CNP padding, ICRC computed in ``BTH.post_build``), which also binds UDP
destination port 4791 to BTH. scapy has no RETH; :class:`RETH` is defined here
(IBA Vol. 1 section 9.3.3) and bound after BTH for the opcodes that carry it.
"""
from __future__ import annotations

import os
import struct
from typing import Optional, Tuple

import pandas as pd
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.fields import IntField, XIntField, XLongField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers
from scapy.utils import RawPcapNgReader, RawPcapReader

from traffic import wire

__all__ = ["RETH", "BTH", "AETH", "CNPPadding", "frame", "read_roce_pcap",
           "PCAP_COLUMNS"]


class RETH(Packet):
    """RDMA Extended Transport Header, 16 bytes (IBA Vol. 1 section 9.3.3)."""

    name = "RETH"
    fields_desc = [
        XLongField("va", 0),            # virtual address, 64 bit
        XIntField("rkey", 0),           # R_Key, 32 bit
        IntField("dma_length", 0),      # DMA length in bytes, 32 bit
    ]


#: Opcodes followed by a RETH (IBA Table 38): RC/UC RDMA WRITE FIRST and
#: ONLY (+ ONLY with immediate), RC RDMA READ request.
RETH_OPCODES = (0x06, 0x0A, 0x0B, 0x0C, 0x26, 0x2A, 0x2B)
for _op in RETH_OPCODES:
    bind_layers(BTH, RETH, opcode=_op)
bind_layers(UDP, BTH, dport=wire.ROCEV2_UDP_PORT)    # also done by scapy.contrib.roce

#: Locally administered MACs used when none are given (no ARP lookups).
SRC_MAC_DEFAULT = "02:00:00:00:00:01"
DST_MAC_DEFAULT = "02:00:00:00:00:02"


def frame(src_ip: str, dst_ip: str, sport: int, opcode: int, dest_qp: int, psn: int,
          payload: bytes = b"", tos: int = wire.TOS_DATA, ttl: int = wire.TTL_DEFAULT,
          ip_id: int = 0, df: bool = True, becn: bool = False, fecn: bool = False,
          ack_req: bool = False, pkey: int = wire.PKEY_DEFAULT, solicited: bool = False,
          pad: Optional[int] = None, udp_checksum: Optional[int] = 0,
          dport: int = wire.ROCEV2_UDP_PORT,
          aeth: Optional[Tuple[int, int]] = None,
          reth: Optional[Tuple[int, int, int]] = None,
          src_mac: str = SRC_MAC_DEFAULT, dst_mac: str = DST_MAC_DEFAULT) -> Packet:
    """Ether / IPv4 / UDP / BTH [/ RETH | AETH | CNP padding] / payload, ICRC by scapy.

    opcode: BTH opcode (:class:`traffic.wire.Opcode` or any int); dest_qp and
    psn 24-bit; payload: raw bytes after the transport headers. For a CNP
    (opcode 0x81) an empty payload becomes the 16 reserved zero bytes.
    pad: PadCnt; None = pad the payload with zeros to a 4-byte boundary.
    udp_checksum: 0 = none (as RoCE NICs send), None = let scapy compute it.
    aeth: (syndrome, msn) for ACKNOWLEDGE; reth: (va, r_key, dma_length_bytes)
    for RDMA WRITE FIRST/ONLY. ip_id, DF and the addresses enter the ICRC;
    TOS, TTL and checksums do not (IBA Annex A17.4.1).
    Raises ValueError (from :func:`traffic.wire.pack_bth_into`) for
    out-of-range BTH fields.
    """
    wire.pack_bth_into(bytearray(wire.BTH_BYTES), 0, opcode, dest_qp, psn, ack_req,
                       becn, fecn, pkey, solicited, pad or 0)      # validates ranges
    if pad is None:
        pad = -len(payload) & 3 if opcode != wire.Opcode.CNP else 0
    bth = BTH(opcode=opcode, solicited=int(solicited), padcount=pad, pkey=pkey,
              fecn=int(fecn), becn=int(becn), dqpn=dest_qp, ackreq=int(ack_req), psn=psn)
    pkt = bth
    if aeth is not None:
        pkt = pkt / AETH(syndrome=aeth[0], msn=aeth[1])
    if reth is not None:
        pkt = pkt / RETH(va=reth[0], rkey=reth[1], dma_length=reth[2])
    if opcode == wire.Opcode.CNP and not payload:
        pkt = pkt / CNPPadding()
    elif payload or pad:
        pkt = pkt / Raw(bytes(payload) + bytes(pad))
    ip = IP(src=src_ip, dst=dst_ip, tos=tos, ttl=ttl, id=ip_id, flags="DF" if df else 0)
    return Ether(src=src_mac, dst=dst_mac) / ip / UDP(
        sport=sport, dport=dport, chksum=udp_checksum) / pkt


# --- pcap reader -------------------------------------------------------------

#: Columns of :func:`read_roce_pcap`, in order, with their pandas dtypes.
PCAP_COLUMNS = {
    "time_s": "float64",        # capture timestamp, seconds since the epoch
    "ip_src": "object",
    "ip_dst": "object",
    "udp_sport": "int64",
    "udp_dport": "int64",
    "ecn": "int64",             # IP ECN codepoint 0..3 (3 = CE)
    "dscp": "int64",
    "opcode": "int64",
    "dest_qp": "int64",
    "psn": "int64",
    "ack_req": "bool",
    "becn": "bool",
    "payload_bytes": "int64",   # after BTH and extension headers, without pad and ICRC
    "frame_bytes": "int64",     # original frame length on the wire (pcap wirelen)
    "icrc_ok": "boolean",       # NA when the capture is truncated
    "aeth_syndrome": "Int64",   # NA unless the opcode carries an AETH
    "aeth_msn": "Int64",
}

_DLT_EN10MB, _DLT_RAW, _DLT_LINUX_SLL, _DLT_LINUX_SLL2 = 1, 101, 113, 276
_AETH_OPCODES = frozenset((0x0D, 0x0F, 0x10, 0x11, 0x12))
_ETH_VLAN = (0x8100, 0x88A8, 0x9100)


def _l3_offset(data: bytes, linktype: int) -> Optional[int]:
    """Offset of the IPv4 header in a captured frame, or None if it is not IPv4."""
    if linktype == _DLT_EN10MB:
        off, ethertype = 14, struct.unpack_from("!H", data, 12)[0] if len(data) >= 14 else 0
        while ethertype in _ETH_VLAN and len(data) >= off + 4:
            ethertype = struct.unpack_from("!H", data, off + 2)[0]
            off += 4
    elif linktype == _DLT_LINUX_SLL:
        off, ethertype = 16, struct.unpack_from("!H", data, 14)[0] if len(data) >= 16 else 0
    elif linktype == _DLT_LINUX_SLL2:
        off, ethertype = 20, struct.unpack_from("!H", data, 0)[0] if len(data) >= 20 else 0
    elif linktype in (_DLT_RAW, 12, 14):
        off, ethertype = 0, 0x0800
    else:
        return None
    return off if ethertype == 0x0800 else None


def _parse(data: bytes, linktype: int, wirelen: int, time_s: float) -> Optional[tuple]:
    """One pcap record -> a row tuple in PCAP_COLUMNS order, or None if not RoCEv2/IPv4."""
    ip = _l3_offset(data, linktype)
    if ip is None or len(data) < ip + 20 or data[ip] >> 4 != 4:
        return None
    ihl = (data[ip] & 0x0F) * 4
    tos, frag, proto = data[ip + 1], struct.unpack_from("!H", data, ip + 6)[0], data[ip + 9]
    udp = ip + ihl
    if proto != 17 or frag & 0x3FFF or len(data) < udp + 8 + wire.BTH_BYTES:
        return None
    sport, dport, udp_len = struct.unpack_from("!HHH", data, udp)
    if dport != wire.ROCEV2_UDP_PORT:
        return None
    b = wire.unpack_bth(data, udp + 8)
    ext = wire.EXT_HEADER_BYTES.get(b.opcode, 0)
    payload_bytes = max(0, udp_len - 8 - wire.BTH_BYTES - ext - b.pad - wire.ICRC_BYTES)
    syndrome = msn = None
    if b.opcode in _AETH_OPCODES and len(data) >= udp + 8 + wire.BTH_BYTES + 4:
        syndrome, msn = wire.unpack_aeth(data, udp + 8 + wire.BTH_BYTES)
    end = udp + udp_len
    icrc_ok = None
    if len(data) >= end and udp_len >= 8 + wire.BTH_BYTES + wire.ICRC_BYTES:
        icrc_ok = wire.icrc_ipv4(data[ip:udp], data[udp:udp + 8],
                                 data[udp + 8:end - 4]) == data[end - 4:end]
    src = ".".join(map(str, data[ip + 12:ip + 16]))
    dst = ".".join(map(str, data[ip + 16:ip + 20]))
    return (time_s, src, dst, sport, dport, tos & 3, tos >> 2, b.opcode, b.dest_qp,
            b.psn, b.ack_req, b.becn, payload_bytes, wirelen, icrc_ok, syndrome, msn)


def read_roce_pcap(path: "str | os.PathLike") -> pd.DataFrame:
    """Read a pcap or pcapng file: one row per RoCEv2-over-IPv4 packet.

    A packet counts as RoCEv2 when it is an unfragmented IPv4/UDP datagram to
    port 4791. Link types: Ethernet (with 802.1Q/QinQ tags), Linux cooked
    (SLL, SLL2, as ``tcpdump -i any`` writes) and raw IP. Columns and dtypes:
    :data:`PCAP_COLUMNS`; ``icrc_ok`` compares the packet's ICRC with
    :func:`traffic.wire.icrc_ipv4` (NA when truncated). Other packets are
    skipped. Raises scapy's ``Scapy_Exception`` for a file that is not a
    capture, OSError when it cannot be opened.
    """
    rows = []
    with RawPcapReader(os.fspath(path)) as reader:
        ng = isinstance(reader, RawPcapNgReader)
        scale = 1e-9 if getattr(reader, "nano", False) else 1e-6
        for data, meta in reader:
            if ng:
                linktype = meta.linktype
                time_s = ((meta.tshigh << 32) + meta.tslow) / meta.tsresol
            else:
                linktype = reader.linktype
                time_s = meta.sec + meta.usec * scale
            row = _parse(data, linktype, meta.wirelen, time_s)
            if row is not None:
                rows.append(row)
    df = pd.DataFrame.from_records(rows, columns=list(PCAP_COLUMNS))
    return df.astype(PCAP_COLUMNS)
