"""The RoCEv2-style transport: queue pairs, the host endpoint, the NIC's sockets, parameters.

Rooms: :mod:`~traffic.transport.params` (TransportParams, frame sizes), :mod:`~traffic.transport.qp`
(requester QP), :mod:`~traffic.transport.responder` (responder QP),
:mod:`~traffic.transport.selective` (IRN-style selective repeat, by ``transport.loss_recovery``), :mod:`~traffic.transport.endpoint` (the host's receive socket),
:mod:`~traffic.transport.nic` (sockets as an RNIC sends), :mod:`~traffic.transport.cc`
(congestion controls, by ``transport.congestion_control``), :mod:`~traffic.transport.entropy`
(UDP source port policies, by ``transport.entropy``).
"""
from traffic.transport.endpoint import Endpoint
from traffic.transport.nic import TransportError
from traffic.transport.params import ACK_FRAME_BYTES, L2_L4_BYTES, TransportParams, payload_efficiency, wire_bytes
from traffic.transport.qp import HALF_PSN, PSN_MASK, QPCounters, RequesterQP, initial_psn
from traffic.transport.responder import ResponderCounters, ResponderQP

__all__ = ["ACK_FRAME_BYTES", "Endpoint", "HALF_PSN", "L2_L4_BYTES", "PSN_MASK", "QPCounters", "RequesterQP",
           "ResponderCounters", "ResponderQP", "TransportError", "TransportParams", "initial_psn", "payload_efficiency", "wire_bytes"]
