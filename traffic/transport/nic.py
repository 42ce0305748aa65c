"""A host NIC as an RNIC sends: UDP sockets with RoCEv2's header settings, lossless sends, send errors named.

:func:`send_lossless` waits and retries while the NIC queue or socket buffer is full (ENOBUFS,
EAGAIN), like an RNIC, which never drops its own packets; any other error (EMSGSIZE, ENETUNREACH,
EACCES, ...) is raised for the caller to stop its queue pair and name it (:func:`send_error_text`).
"""
from __future__ import annotations

import errno
import socket
import time

SO_NO_CHECK = 11  # <asm-generic/socket.h>: send UDP checksum 0, as RoCEv2 does
IP_MTU_DISCOVER, IP_PMTUDISC_DO, IP_RECVERR = 10, 2, 11  # <linux/in.h>
NIC_FULL_WAIT_S = 200e-6


def rdma_socket(src_ip: str, sport: int, tos: int, sndbuf_bytes: int | None = None) -> socket.socket:
    """A UDP socket as an RNIC sends: DF set, UDP checksum 0, given TOS, bound to its source port.

    IP_RECVERR makes a full NIC queue (qdisc drop) raise ENOBUFS instead of
    silently dropping the packet (net/ipv4/udp.c, udp_send_skb), so the sender
    can wait and retry: like an RNIC, a host never drops its own packets.
    """
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    if sndbuf_bytes:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf_bytes)
    s.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
    s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
    s.bind((src_ip, sport))
    return s


def rdma_raw_socket(sndbuf_bytes: int | None = None) -> socket.socket:
    """A raw IPv4 socket (IPPROTO_RAW: the caller writes the IP and UDP headers) for a QP that sends
    from several UDP source ports (an entropy policy that changes the port per packet or flowlet).

    One socket for all of the QP's ports keeps one send buffer, so the QP is paced by its NIC
    queue as with one UDP socket. Send :meth:`traffic.wire.DataPacketBuilder.ip_packet` to
    ``(dst_ip, 0)``. IP_RECVERR as in :func:`rdma_socket`. Needs CAP_NET_RAW (agents run as root).
    """
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    if sndbuf_bytes:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf_bytes)
    s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
    return s


class TransportError(RuntimeError):
    """A send failed for a reason other than a full queue; the message names QP, peer and errno."""


#: errors that mean "the NIC queue or socket buffer is full, try again": an RNIC waits, never drops
QUEUE_FULL_ERRNOS = (errno.ENOBUFS, errno.EAGAIN)


def send_error_text(qpn: int, peer: tuple, e: OSError) -> str:
    """One line naming the queue pair, the peer and the errno, e.g. ``QP 0x10001 -> 10.0.1.2:4791 ...``."""
    name = errno.errorcode.get(e.errno, "?") if e.errno is not None else "?"
    return (f"QP {qpn:#x} -> {peer[0]}:{peer[1]}: sendto failed with errno {e.errno} ({name}: "
            f"{e.strerror or e}); the run stops")


def send_lossless(sock: socket.socket, pkt, dst: tuple, counters) -> bool:
    """sendto, retrying while the host's NIC queue is full (ENOBUFS/EAGAIN).

    Returns False once the socket was closed (EBADF: the QP is stopping).
    Raises OSError for any other error (EMSGSIZE, ENETUNREACH, ...): the caller names it.
    """
    while True:
        try:
            sock.sendto(pkt, dst)
            return True
        except OSError as e:
            if e.errno == errno.EBADF:
                return False
            if e.errno not in QUEUE_FULL_ERRNOS:
                raise
            if counters is not None:
                counters.nic_full_waits += 1
            time.sleep(NIC_FULL_WAIT_S)
