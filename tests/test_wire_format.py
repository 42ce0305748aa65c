"""RoCEv2 wire format: case C05, fast path vs scapy, pack/unpack, bad arguments, pcaps.

Unit tests, no root. Case C05 (a user report): a CNP whose
ICRC (82 fd 00 2a) was seen in a capture from real NIC hardware.
"""
from __future__ import annotations

import random
import struct
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from scapy.all import IP, TCP, UDP, Dot1Q, Ether, Raw, raw, wrpcap, wrpcapng

from traffic import roce, wire
from traffic.wire import Opcode

REPO = Path(__file__).resolve().parents[1]

# --- case C05 ----------------------------------------------------------------

C05 = dict(src_ip="10.0.17.1", dst_ip="10.0.18.1", sport=0, opcode=Opcode.CNP,
           dest_qp=0x000118, psn=0, payload=bytes(16), tos=0xC2, ttl=64,
           ip_id=0x718C, df=True, becn=True, udp_checksum=0)
C05_ICRC = bytes.fromhex("82fd002a")


def c05_frame(**changes) -> bytes:
    return raw(roce.frame(**{**C05, **changes}))


def test_c05_scapy_frame_matches_hardware_capture():
    b = c05_frame()
    assert len(b) == 74
    assert struct.unpack_from("!H", b, 14 + 2)[0] == 60          # IP total length
    assert struct.unpack_from("!H", b, 34 + 4)[0] == 40          # UDP length
    assert b[-4:] == C05_ICRC
    p = Ether(b)
    assert (p[IP].tos, p[IP].id, p[IP].ttl, str(p[IP].flags)) == (0xC2, 0x718C, 64, "DF")
    assert (p[UDP].sport, p[UDP].dport, p[UDP].chksum) == (0, 4791, 0)
    bth = p[roce.BTH]
    assert (bth.opcode, bth.becn, bth.fecn, bth.pkey, bth.dqpn, bth.psn) == \
        (0x81, 1, 0, 0xFFFF, 0x118, 0)
    assert raw(p[roce.CNPPadding]) == bytes(16)


def test_c05_fast_path_identical_bytes():
    ref = c05_frame()
    b = wire.CnpPacketBuilder("10.0.17.1", "10.0.18.1", 0, ip_id=0x718C)
    assert bytes(b.build(0x118)) == ref[42:]          # the UDP payload
    assert bytes(b.ip_packet()) == ref[14:]           # and the whole IPv4 packet
    assert wire.icrc_ipv4(ref[14:34], ref[34:42], ref[42:-4]) == C05_ICRC
    assert wire.IcrcPrefix("10.0.17.1", "10.0.18.1", 0, ip_id=0x718C).icrc(ref[42:-4]) \
        == C05_ICRC


@pytest.mark.parametrize("change", [dict(ttl=1), dict(ttl=255), dict(tos=0xC3),
                                    dict(tos=0x00), dict(becn=False, fecn=True)])
def test_c05_icrc_ignores_masked_fields(change):
    """TTL, TOS (ECN=CE included) and FECN/BECN are masked (Annex A17.4.1)."""
    b = c05_frame(**change)
    assert b[-4:] == C05_ICRC
    assert wire.icrc_ipv4(b[14:34], b[34:42], b[42:-4]) == C05_ICRC


@pytest.mark.parametrize("change", [dict(psn=1), dict(psn=0x800000), dict(ip_id=0),
                                    dict(dest_qp=0x119), dict(sport=1)])
def test_c05_icrc_covers_psn_ip_id_qp_port(change):
    b = c05_frame(**change)
    assert b[-4:] != C05_ICRC
    assert wire.icrc_ipv4(b[14:34], b[34:42], b[42:-4]) == b[-4:]


# --- fast path vs scapy for data packets ---------------------------------------

SRC, DST, SPORT, QP = "10.0.1.1", "10.0.2.1", 49152, 0x000011
#: explicit MACs: scapy would otherwise resolve the destination MAC (ARP/routes)
MACS = Ether(src=roce.SRC_MAC_DEFAULT, dst=roce.DST_MAC_DEFAULT)


def expected_payload(msg_id: int, pkt_index: int, n: int) -> bytes:
    """Tag (msg_id, pkt_index) then byte k = k & 0xFF: written independently of wire.py."""
    body = struct.pack("!II", msg_id, pkt_index) + bytes(k & 0xFF for k in range(8, max(n, 8)))
    return body[:n]


def scapy_ip_packet(opcode, psn, payload, ack_req=False, reth=None, ip_id=0) -> bytes:
    return raw(roce.frame(SRC, DST, SPORT, opcode, QP, psn, payload=payload,
                          ack_req=ack_req, reth=reth, ip_id=ip_id))[14:]


DATA_CASES = [
    (Opcode.RC_SEND_ONLY, 1024, True),
    (Opcode.RC_SEND_FIRST, 1024, False),
    (Opcode.RC_SEND_MIDDLE, 1024, False),
    (Opcode.RC_SEND_LAST, 37, True),          # pad 3
    (Opcode.RC_SEND_LAST, 1022, True),        # pad 2
    (Opcode.RC_SEND_ONLY, 5, True),           # shorter than the tag
    (Opcode.RC_SEND_ONLY, 0, True),
    (Opcode.RC_RDMA_WRITE_FIRST, 512, False),
    (Opcode.RC_RDMA_WRITE_MIDDLE, 1024, False),
    (Opcode.RC_RDMA_WRITE_LAST, 301, True),
    (Opcode.RC_RDMA_WRITE_ONLY, 100, True),
]


@pytest.mark.parametrize("opcode,payload_bytes,ack_req", DATA_CASES)
def test_data_packet_equals_scapy(opcode, payload_bytes, ack_req):
    b = wire.DataPacketBuilder(SRC, DST, SPORT, 1024)
    reth = (0x7F00_1234_5000, 0xABCD, 4096) if opcode in (0x06, 0x0A) else None
    if reth:
        b.set_reth(*reth)
    psn, msg_id, idx = 0xFFFFFE, 0x01020304, 77
    udp_payload = bytes(b.build(opcode, QP, psn, ack_req, msg_id, idx, payload_bytes))
    ref = scapy_ip_packet(opcode, psn, expected_payload(msg_id, idx, payload_bytes),
                          ack_req, reth)
    assert bytes(b.ip_packet()) == ref
    assert udp_payload == ref[28:]
    assert len(udp_payload) % 4 == 0


def test_builder_reuse_keeps_pattern_intact():
    """Varying sizes on one buffer: pad and ICRC of earlier packets must not leak."""
    b = wire.DataPacketBuilder(SRC, DST, SPORT, 1024, ip_id=0x1234)
    seq = [1024, 37, 1024, 5, 1021, 1024, 0, 1024, 8, 9, 1024]
    for i, n in enumerate(seq):
        got = bytes(b.build(Opcode.RC_SEND_MIDDLE, QP, i, i % 2 == 0, 9, i, n))
        ref = scapy_ip_packet(Opcode.RC_SEND_MIDDLE, i, expected_payload(9, i, n),
                              i % 2 == 0, ip_id=0x1234)
        assert got == ref[28:], f"packet {i} ({n} bytes)"


def test_ack_and_nak_equal_scapy():
    b = wire.AckPacketBuilder(DST, SRC, SPORT)
    for nak, syndrome in [(False, wire.SYNDROME_ACK),
                          (True, wire.SYNDROME_NAK_PSN_SEQUENCE_ERROR)]:
        got = bytes(b.build(QP, 4242, nak, 17))
        ref = raw(roce.frame(DST, SRC, SPORT, Opcode.RC_ACKNOWLEDGE, QP, 4242,
                             aeth=(syndrome, 17)))[14:]
        assert got == ref[28:]
        assert bytes(b.ip_packet()) == ref
    got = bytes(b.build(QP, 1, syndrome=wire.syndrome_rnr_nak(14), msn=2))
    assert wire.unpack_aeth(got, wire.BTH_BYTES) == (0x2E, 2)


def test_prefix_cache_matches_generic_icrc_for_many_lengths():
    prefix = wire.IcrcPrefix(SRC, DST, SPORT, ip_id=7)
    rng = random.Random(5)
    for n in (12, 16, 28, 100, 1036, 4108):
        ib = bytearray(rng.randbytes(n))
        udp_len = 8 + n + 4
        hdr = wire.ipv4_udp_headers(SRC, DST, SPORT, 4791, udp_len, ip_id=7)
        assert prefix.icrc(ib) == wire.icrc_ipv4(hdr[:20], hdr[20:], ib)


# --- pack / unpack -----------------------------------------------------------------

def test_bth_round_trip_random_fields():
    rng = random.Random(1)
    buf = bytearray(20)
    for _ in range(500):
        f = dict(opcode=rng.randrange(256), dest_qp=rng.randrange(1 << 24),
                 psn=rng.randrange(1 << 24), ack_req=rng.random() < .5,
                 becn=rng.random() < .5, fecn=rng.random() < .5,
                 pkey=rng.randrange(1 << 16), solicited=rng.random() < .5,
                 pad=rng.randrange(4), tver=rng.randrange(16), migreq=rng.random() < .5)
        off = rng.randrange(9)
        wire.pack_bth_into(buf, off, **f)
        assert wire.unpack_bth(buf, off)._asdict() == f


def test_bth_matches_scapy_field_layout():
    buf = bytearray(12)
    wire.pack_bth_into(buf, 0, 0x0A, 0xABCDEF, 0x123456, ack_req=True, becn=True,
                       pkey=0x8001, solicited=True, pad=2, tver=0)
    p = roce.BTH(bytes(buf) + bytes(4))
    assert (p.opcode, p.solicited, p.padcount, p.pkey, p.becn, p.fecn, p.dqpn,
            p.ackreq, p.psn) == (0x0A, 1, 2, 0x8001, 1, 0, 0xABCDEF, 1, 0x123456)


def test_aeth_round_trip_and_kinds():
    buf = bytearray(4)
    for syndrome, kind, code in [(0x1F, wire.AethType.ACK, 31),
                                 (0x60, wire.AethType.NAK, wire.NakCode.PSN_SEQUENCE_ERROR),
                                 (0x63, wire.AethType.NAK, wire.NakCode.REMOTE_OPERATIONAL_ERROR),
                                 (0x2E, wire.AethType.RNR_NAK, 14)]:
        wire.pack_aeth_into(buf, 0, syndrome, 0xFFFFFF)
        a = wire.unpack_aeth(buf)
        assert (a.syndrome, a.msn, a.kind, a.code) == (syndrome, 0xFFFFFF, kind, code)
    assert wire.syndrome_nak(wire.NakCode.PSN_SEQUENCE_ERROR) == 0x60


def test_reth_round_trip():
    buf = bytearray(16)
    wire.pack_reth_into(buf, 0, (1 << 64) - 1, 0xDEADBEEF, 65536)
    assert wire.unpack_reth(buf) == ((1 << 64) - 1, 0xDEADBEEF, 65536)
    assert roce.RETH(bytes(buf)).rkey == 0xDEADBEEF


def test_payload_tag_round_trip():
    b = wire.DataPacketBuilder(SRC, DST, SPORT, 1024)
    pkt = b.build(Opcode.RC_SEND_MIDDLE, QP, 3, False, 0xFFFFFFFF, 123456, 1024)
    assert wire.read_payload_tag(pkt[wire.BTH_BYTES:]) == (0xFFFFFFFF, 123456)
    assert wire.read_payload_tag(b"1234567") is None


def test_constants():
    assert (wire.ROCEV2_UDP_PORT, wire.BTH_BYTES, wire.AETH_BYTES, wire.ICRC_BYTES) == \
        (4791, 12, 4, 4)
    assert (wire.TOS_DATA, wire.TOS_CNP) == (0x6A, 0xC2)
    assert wire.TOS_DATA >> 2 == 26 and wire.TOS_DATA & 3 == wire.ECN_ECT0


# --- bad arguments ---------------------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    (dict(psn=1 << 24), r"psn 16777216 out of range: allowed 0\.\.16777215"),
    (dict(psn=-1), r"psn -1 out of range: allowed 0\.\.16777215"),
    (dict(dest_qp=1 << 24), r"dest_qp 16777216 out of range: allowed 0\.\.16777215"),
    (dict(opcode=256), r"opcode 256 out of range: allowed 0\.\.255"),
    (dict(pkey=0x10000), r"pkey 65536 out of range: allowed 0\.\.65535"),
    (dict(pad=4), r"pad 4 out of range: allowed 0\.\.3"),
    (dict(psn="7"), r"psn '7' is not an integer: allowed 0\.\.16777215"),
])
def test_pack_bth_bad_arguments(kwargs, match):
    args = {**dict(opcode=4, dest_qp=1, psn=1), **kwargs}
    with pytest.raises(ValueError, match=match):
        wire.pack_bth_into(bytearray(12), 0, **args)


@pytest.mark.parametrize("args,match", [
    ((4, QP, 1 << 24, False, 0, 0, 8), r"psn 16777216 out of range: allowed 0\.\.16777215"),
    ((4, 1 << 24, 0, False, 0, 0, 8), r"dest_qp 16777216 out of range: allowed 0\.\.16777215"),
    ((4, QP, 0, False, 0, 0, 1025), r"payload_bytes 1025 out of range: allowed 0\.\.1024"),
    ((4, QP, 0, False, 1 << 32, 0, 8), r"msg_id 4294967296 out of range: allowed 0\.\.4294967295"),
    ((0x11, QP, 0, False, 0, 0, 8), r"opcode .* is not a data opcode: allowed 0x00"),
    ((0x81, QP, 0, False, 0, 0, 8), r"opcode .* is not a data opcode"),
])
def test_data_builder_bad_arguments(args, match):
    b = wire.DataPacketBuilder(SRC, DST, SPORT, 1024)
    with pytest.raises(ValueError, match=match):
        b.build(*args)


def test_other_bad_arguments():
    with pytest.raises(ValueError, match=r"msn 16777216 out of range"):
        wire.AckPacketBuilder(SRC, DST, SPORT).build(QP, 0, msn=1 << 24)
    with pytest.raises(ValueError, match=r"dest_qp 16777216 out of range"):
        wire.CnpPacketBuilder(SRC, DST, SPORT).build(1 << 24)
    with pytest.raises(ValueError, match=r"src_ip '10\.0\.1' is not a dotted-quad"):
        wire.DataPacketBuilder("10.0.1", DST, SPORT)
    with pytest.raises(ValueError, match=r"sport 65536 out of range: allowed 0\.\.65535"):
        wire.DataPacketBuilder(SRC, DST, 65536)
    with pytest.raises(ValueError, match=r"psn 16777216 out of range"):
        roce.frame(SRC, DST, SPORT, 4, QP, 1 << 24)
    with pytest.raises(ValueError, match=r"at least 12 \(a BTH\)"):
        wire.icrc_ipv4(bytes(20), bytes(8), bytes(11))


def test_prepare_udp_socket_sets_what_the_icrc_assumes():
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        wire.prepare_udp_socket(s, wire.TOS_CNP)
        assert s.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == 0xC2
        assert s.getsockopt(socket.IPPROTO_IP, 10) == 2            # IP_PMTUDISC_DO
        assert s.getsockopt(socket.SOL_SOCKET, 11) == 1            # SO_NO_CHECK


# --- module hygiene ------------------------------------------------------------------

def test_wire_does_not_import_scapy():
    code = "import sys, traffic.wire; sys.exit(1 if any(m.startswith('scapy') for m in sys.modules) else 0)"
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO)
    assert r.returncode == 0


# --- pcap round trip -----------------------------------------------------------------

def test_read_roce_pcap_round_trip(tmp_path):
    data = roce.frame(SRC, DST, 49153, Opcode.RC_SEND_LAST, QP, 99,
                      payload=expected_payload(1, 2, 1001), ack_req=True)
    nak = roce.frame(DST, SRC, 49153, Opcode.RC_ACKNOWLEDGE, 0x22, 98, aeth=(0x60, 5),
                     tos=0x6B)                                 # ECN CE
    cnp = roce.frame(**C05)
    bad = roce.frame(SRC, DST, 49154, Opcode.RC_SEND_ONLY, QP, 7, payload=bytes(64))
    bad_bytes = bytearray(raw(bad))
    bad_bytes[-1] ^= 0xFF                                      # corrupt the ICRC
    vlan = Ether(src=roce.SRC_MAC_DEFAULT, dst=roce.DST_MAC_DEFAULT) / Dot1Q(vlan=5) / \
        roce.frame(SRC, DST, 49155, Opcode.RC_RDMA_WRITE_ONLY, QP, 3, payload=bytes(40),
                   reth=(1, 2, 40))[IP]
    dns = MACS / IP(src=SRC, dst=DST) / UDP(sport=1234, dport=53) / Raw(bytes(20))
    tcp = MACS / IP(src=SRC, dst=DST) / TCP(sport=1234, dport=4791)
    pkts = [data, nak, dns, cnp, Ether(bytes(bad_bytes)), tcp, vlan]
    for i, p in enumerate(pkts):
        p.time = 1000.0 + i * 0.25
    path = tmp_path / "roce.pcap"
    wrpcap(str(path), pkts)

    df = roce.read_roce_pcap(str(path))
    assert list(df.columns) == list(roce.PCAP_COLUMNS)
    assert len(df) == 5                                         # not dns, not tcp
    assert df["time_s"].tolist() == pytest.approx([1000.0, 1000.25, 1000.75, 1001.0, 1001.5])
    d, n, c, b, v = (df.iloc[i] for i in range(5))
    assert (d.ip_src, d.ip_dst, d.udp_sport, d.udp_dport) == (SRC, DST, 49153, 4791)
    assert (d.opcode, d.dest_qp, d.psn, d.ack_req, d.becn) == (2, QP, 99, True, False)
    assert (d.dscp, d.ecn, d.payload_bytes, d.frame_bytes) == (26, 2, 1001, 14 + 28 + 12 + 1004 + 4)
    assert d.icrc_ok and pd.isna(d.aeth_syndrome)
    assert (n.opcode, n.ecn, n.aeth_syndrome, n.aeth_msn, n.payload_bytes) == (0x11, 3, 0x60, 5, 0)
    assert n.icrc_ok
    assert (c.opcode, c.becn, c.dest_qp, c.dscp, c.frame_bytes, c.payload_bytes) == \
        (0x81, True, 0x118, 48, 74, 0)
    assert c.icrc_ok
    assert not b.icrc_ok and b.payload_bytes == 64
    assert (v.opcode, v.payload_bytes, v.frame_bytes) == (0x0A, 40, 14 + 4 + 28 + 12 + 16 + 40 + 4)
    assert v.icrc_ok
    assert str(df["icrc_ok"].dtype) == "boolean"

    ng = tmp_path / "roce.pcapng"
    wrpcapng(str(ng), pkts)
    pd.testing.assert_frame_equal(roce.read_roce_pcap(str(ng)), df)


def test_read_roce_pcap_empty(tmp_path):
    path = tmp_path / "empty.pcap"
    wrpcap(str(path), [MACS / IP(src=SRC, dst=DST) / UDP(sport=1, dport=53)])
    df = roce.read_roce_pcap(str(path))
    assert len(df) == 0 and list(df.columns) == list(roce.PCAP_COLUMNS)
