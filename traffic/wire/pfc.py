"""IEEE 802.1Qbb priority-based flow control (PFC) frames: build and parse, standard library only.

A PFC frame is a MAC control frame (IEEE 802.3 Annex 31D):

    dst 01:80:c2:00:00:01 | src | ethertype 0x8808 | opcode 0x0101 | class-enable vector (2 bytes,
    bit i = priority i) | 8 x pause time (2 bytes each, priority 0 first, in quanta) | zero pad to 60 bytes

A quantum is 512 bit times at the link's rate (802.3 31B.2), so a pause of ``q`` quanta on a link of
``link_bps`` lasts ``q * 512 / link_bps`` seconds; a frame with quanta 0 for an enabled priority
resumes it at once. On an emulated (slowed-down) link the quanta are emulated bit times: the wall-clock
pause is ``q * 512 / host_link_bps`` of the run. The scapy layer
``scapy.contrib.mac_control.MACControlClassBasedFlowControl`` decodes these bytes (tests check it).

The lossless class of this testbed (DSCP 26) is RoCE priority 3 (:data:`LOSSLESS_PRIORITY`).
"""
from __future__ import annotations

import struct
from typing import Optional, Sequence

ETH_P_MAC_CONTROL = 0x8808
OPCODE_PFC = 0x0101
PFC_DST_MAC = bytes.fromhex("0180c2000001")
#: bit times per pause quantum (IEEE 802.3 31B.2)
QUANTUM_BITS = 512
MAX_QUANTA = 0xFFFF
PRIORITIES = 8
#: RoCE priority of the lossless class (DSCP 26 -> priority 3 in deployed RoCE fabrics)
LOSSLESS_PRIORITY = 3
#: minimum Ethernet frame without FCS
MIN_FRAME_BYTES = 60
_BODY = struct.Struct("!6s6sHHH8H")


def class_vector(priorities: Sequence[int]) -> int:
    """Class-enable vector with a bit set per priority in ``priorities`` (each 0..7; ValueError otherwise)."""
    v = 0
    for p in priorities:
        if not 0 <= int(p) < PRIORITIES:
            raise ValueError(f"priority {p!r}: allowed 0..{PRIORITIES - 1}")
        v |= 1 << int(p)
    return v


def pfc_frame(src_mac: bytes, class_enable_vector: int, quanta: Sequence[int]) -> bytes:
    """The 60-byte PFC frame from ``src_mac`` (6 bytes) pausing the enabled priorities.

    ``class_enable_vector``: 0..0xFF, bit i enables priority i; ``quanta``: 8 pause times
    (0..65535 quanta each, priority 0 first; 0 = resume). Raises ValueError for anything else.
    """
    if len(src_mac) != 6:
        raise ValueError(f"src_mac must be 6 bytes, got {len(src_mac)}")
    if not 0 <= class_enable_vector <= 0xFF:
        raise ValueError(f"class_enable_vector={class_enable_vector!r}: allowed 0..0xff (bit i = priority i)")
    quanta = [int(q) for q in quanta]
    if len(quanta) != PRIORITIES or not all(0 <= q <= MAX_QUANTA for q in quanta):
        raise ValueError(f"quanta={quanta!r}: give {PRIORITIES} pause times, each 0..{MAX_QUANTA}")
    body = _BODY.pack(PFC_DST_MAC, src_mac, ETH_P_MAC_CONTROL, OPCODE_PFC, class_enable_vector, *quanta)
    return body.ljust(MIN_FRAME_BYTES, b"\0")


def parse_pfc(frame: bytes) -> Optional[tuple[int, tuple[int, ...]]]:
    """(class_enable_vector, 8 quanta) of a PFC frame, None for any other frame (other ethertype or
    opcode, e.g. an 802.3x PAUSE, or too short)."""
    if len(frame) < _BODY.size:
        return None
    _, _, ethertype, opcode, vector, *quanta = _BODY.unpack_from(frame)
    if ethertype != ETH_P_MAC_CONTROL or opcode != OPCODE_PFC:
        return None
    return vector & 0xFF, tuple(quanta)


def quanta_s(quanta: int, link_bps: float) -> float:
    """Seconds that ``quanta`` pause quanta last on a link of ``link_bps`` (quanta x 512 / rate)."""
    return quanta * QUANTUM_BITS / link_bps


def quanta_for_s(seconds: float, link_bps: float) -> int:
    """Pause quanta closest to ``seconds`` on a link of ``link_bps``, clamped to 1..65535."""
    return max(1, min(MAX_QUANTA, round(seconds * link_bps / QUANTUM_BITS)))
