"""The DCQCN notification point (NP) of a responder QP: CE-marked data in, paced CNPs out.

Zhu et al., SIGCOMM 2015, section 3.1 (NP algorithm), and RoCEv2 Annex A17.9.3 (the CNP):
when a data packet arrives with the IP ECN field CE (0b11), the NP sends a CNP (BTH opcode
0x81, BECN set) to the requester QP of that packet, unless it sent one to that QP less than
the CNP interval N ago: at most one CNP per N per QP, however many packets are marked. The
CNP carries DSCP 48 (the control class, like ACKs in deployed RoCE fabrics) and Not-ECT, so no
switch marks it.

Audit record: the NP keeps the time of every CNP it sent (:attr:`NotificationPoint.sent`, a
bounded :class:`~traffic.transport.eventlog.TimeLog`), the same clock reading its pacing compares
with N, so a run's ``cnp_events`` table shows each QP's CNP intervals and the fidelity verdict can
check them against the N the run states (testbed.measure.cnp_audit).
"""
from __future__ import annotations

from typing import Callable

from traffic import wire
from traffic.transport.eventlog import CNP_LOG_CAP, TimeLog

#: CNP IP TOS: DSCP 48 (control class), ECN Not-ECT
CNP_TOS = (wire.DSCP_CNP << 2) | wire.ECN_NOT_ECT


class NotificationPoint:
    """CNP pacing of one responder QP.

    ``interval_ns``: the CNP interval N (> 0); ``send_cnp()``: sends one CNP to the requester
    QP and returns True when it left (False: the QP is stopping). :meth:`on_ce` is the only
    entry: call it with ``time.monotonic_ns()`` (or a synthetic clock in tests) for each
    CE-marked data packet, just before a CNP would be sent. ``cnps_tx`` counts the CNPs sent;
    :attr:`sent` holds the send time of each (that ``now_ns``, ns; the first ``log_cap``, the
    rest counted in ``sent.unrecorded``). Raises ValueError for ``interval_ns`` <= 0.
    """

    def __init__(self, interval_ns: int, send_cnp: Callable[[], bool], log_cap: int = CNP_LOG_CAP):
        if interval_ns <= 0:
            raise ValueError(f"interval_ns={interval_ns}: the CNP interval must be > 0")
        self.interval_ns = int(interval_ns)
        self.send_cnp = send_cnp
        self.cnps_tx = 0
        #: the send time of every CNP, ``time.monotonic_ns()`` (bounded: see TimeLog)
        self.sent = TimeLog(log_cap)
        self._last_ns: int | None = None

    def on_ce(self, now_ns: int) -> bool:
        """A CE-marked data packet arrived at ``now_ns``: send a CNP unless one left within the
        interval. Returns True when a CNP was sent."""
        if self._last_ns is not None and now_ns - self._last_ns < self.interval_ns:
            return False
        if not self.send_cnp():
            return False
        self._last_ns = now_ns
        self.cnps_tx += 1
        self.sent.add(now_ns)
        return True
