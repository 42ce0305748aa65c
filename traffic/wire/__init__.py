"""RoCEv2 wire format on the fast path: BTH/AETH packing, ICRC, packet builders.

No scapy here: this module imports only the standard library (``operator``,
``struct``, ``zlib``, ``enum``, ``typing``) and loads in a few milliseconds. The scapy
side (dissection, pcaps, tests) lives in :mod:`traffic.roce`.


Rooms: :mod:`traffic.wire.headers` (constants, opcodes, BTH/AETH/RETH), :mod:`traffic.wire.icrc`
(ICRC and the IPv4/UDP headers it covers), :mod:`traffic.wire.builders` (prebuilt packets).
Everything public is re-exported here: ``from traffic import wire; wire.DataPacketBuilder``.
"""
from traffic.wire.headers import *  # noqa: F401,F403
from traffic.wire.headers import Buffer  # noqa: F401
from traffic.wire.icrc import IcrcPrefix, icrc_ipv4, ipv4_udp_headers  # noqa: F401
from traffic.wire.builders import AckPacketBuilder, CnpPacketBuilder, DataPacketBuilder  # noqa: F401
