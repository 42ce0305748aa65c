"""One host's RoCEv2 endpoint: the UDP socket on port 4791 that receives for every QP of the host.

As in RoCEv2, the destination QP in the BTH, not the UDP port, selects the QP: ACK/NAK and CNP
go to the requester QP named, everything else to the responder QP named; packets for no known
QP are counted in ``rx_unknown_pkts``. A NAK longer than plain RoCEv2's (24 bytes instead of 20) carries
IRN's extension (selective repeat; :data:`traffic.wire.IRN_SACK_BYTES`): its SACKed PSN goes to the
requester with the NAK. With ``read_ecn`` (the run's congestion control reacts
to ECN) the endpoint reads each packet's IP TOS byte too (IP_RECVTOS) and tells the responder QP
whether a data packet arrived CE-marked; otherwise it receives with plain ``recv_into``.

The socket blocks without a timeout: a socket with one makes Python poll() before every recv, a
second system call per packet. :meth:`Endpoint.stop` wakes the blocked receive with
``shutdown(SHUT_RD)``: on Linux that marks even an unconnected UDP socket shut and wakes its
readers, whose receive then returns 0 bytes (inet_shutdown, net/ipv4/af_inet.c).
"""
from __future__ import annotations

import socket
import struct
import threading

from traffic import wire
from traffic.transport.qp import RequesterQP
from traffic.transport.responder import ResponderQP


#: the BTH as the receive loop reads it: opcode, flags (SE, M, PadCnt, TVer), P_Key, reserved + DestQP,
#: AckReq + reserved + PSN (IBA vol. 1, 9.2): one unpack per packet instead of byte slices
_BTH = struct.Struct(">BBHII")


class Endpoint:
    """All QPs of one host and the thread that receives on UDP port 4791 (``read_ecn``: see module)."""

    def __init__(self, ip: str, rcvbuf_bytes: int = 4 * 1024 * 1024, read_ecn: bool = False):
        self.ip = ip
        self.read_ecn = read_ecn
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, rcvbuf_bytes)  # SO_RCVBUFFORCE (root)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf_bytes)
        if read_ecn:
            self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        self.sock.bind((ip, wire.ROCEV2_UDP_PORT))
        self.requesters: dict[int, RequesterQP] = {}
        self.responders: dict[int, ResponderQP] = {}
        self.rx_pkts = 0
        self.rx_unknown_pkts = 0
        self._stop = False
        self.thread = threading.Thread(target=self._run, name="rx", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop = True
        try:  # wakes the receive thread (see module docstring); "not connected" is raised, yet it wakes
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass
        if self.thread.is_alive():
            self.thread.join(timeout=2)
        for qp in self.requesters.values():
            qp.stop()
        for qp in self.responders.values():
            qp.close()
        self.sock.close()

    def _run(self) -> None:
        buf = bytearray(9000)
        view = memoryview(buf)
        recv_into, recvmsg_into, bufs = self.sock.recv_into, self.sock.recvmsg_into, [buf]
        read_ecn, anc_bytes = self.read_ecn, socket.CMSG_SPACE(4)
        ack_op, cnp_op = int(wire.Opcode.RC_ACKNOWLEDGE), int(wire.Opcode.CNP)
        sack_at, nak_sack_bytes = wire.BTH_BYTES + wire.AETH_BYTES, wire.NAK_SACK_BYTES
        ce = False
        min_bytes, bth = wire.BTH_BYTES + wire.ICRC_BYTES, _BTH.unpack_from
        while not self._stop:
            try:
                if read_ecn:  # the TOS byte comes as one IP_TOS control message
                    n, anc, _, _ = recvmsg_into(bufs, anc_bytes)
                    ce = bool(anc) and (anc[0][2][0] & 0x3) == wire.ECN_CE
                else:
                    n = recv_into(buf)
            except OSError:
                return
            if n < min_bytes:
                if self._stop:  # shut down by stop(): the receive returned 0 bytes
                    return
                self.rx_unknown_pkts += 1
                continue
            self.rx_pkts += 1
            opcode, flags, _, dqp, psn24 = bth(buf)
            pad = (flags >> 4) & 0x3
            dqp &= 0xFFFFFF
            ack_req = psn24 >= 0x80000000
            psn24 &= 0xFFFFFF
            if opcode == ack_op:
                qp = self.requesters.get(dqp)
                if qp is None:
                    self.rx_unknown_pkts += 1
                    continue
                if (buf[wire.BTH_BYTES] & 0xE0) != 0x60:
                    qp.on_ack(psn24, False)
                elif n >= nak_sack_bytes:  # IRN's NACK: cumulative ACK + the PSN that triggered it
                    qp.on_ack(psn24, True, int.from_bytes(buf[sack_at + 1:sack_at + 4], "big"))
                else:
                    qp.on_ack(psn24, True)
            elif opcode == cnp_op:  # to the requester QP whose packets were CE-marked (Annex A17.9.3)
                qp = self.requesters.get(dqp)
                if qp is None:
                    self.rx_unknown_pkts += 1
                    continue
                qp.on_cnp()
            else:
                rqp = self.responders.get(dqp)
                if rqp is None:
                    self.rx_unknown_pkts += 1
                    continue
                rqp.on_data(view, n, opcode, psn24, ack_req, pad, ce)
