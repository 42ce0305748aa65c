"""Which addresses a queue pair uses: the scale-up domain, or one scale-out plane per channel.

A host may have several NICs (topology.model.Nic): one per scale-out plane of a dual-plane
fabric, and one in its server's scale-up domain. A QP between two ranks of one server runs
over the scale-up domain (NCCL takes NVLink inside a node); any other QP of channel c runs on
plane ``c mod P`` (P planes), as NCCL spreads its channels over a GPU's NICs. With one
channel and two planes only plane 0 carries traffic: give ``workload.channels`` a multiple of
the planes to use them all.
"""
from __future__ import annotations

from typing import Tuple


def plane_of(channel: int, planes: int) -> int:
    """The scale-out plane of ``channel``: channel mod planes. ValueError if planes < 1 or channel < 0."""
    if planes < 1 or channel < 0:
        raise ValueError(f"need planes >= 1 and channel >= 0, got planes={planes}, channel={channel}")
    return channel % planes


def qp_addresses(me, peer, channel: int) -> Tuple[str, str]:
    """(source, destination) IPv4 addresses of the QP of ``channel`` between ranks ``me`` and ``peer``
    (traffic.protocol.RankAddress): the scale-up addresses when both are in one server's scale-up
    domain, else their addresses in plane :func:`plane_of` (both must have as many planes)."""
    if me.scale_up_ip and peer.scale_up_ip and me.server == peer.server:
        return me.scale_up_ip, peer.scale_up_ip
    mine, theirs = me.plane_ips or [me.ip], peer.plane_ips or [peer.ip]
    if len(mine) != len(theirs):
        raise ValueError(f"rank {me.rank} has {len(mine)} planes, rank {peer.rank} {len(theirs)}")
    p = plane_of(channel, len(mine))
    return mine[p], theirs[p]
