"""Run one agent's part of a pattern trial (:class:`traffic.protocol.RunFlows`).

Sends: each flow of this rank is posted as one message on the requester QP to its destination at
``start_at_ns + start_ns`` (a thread per start time is not needed: posts are non-blocking, so one loop
sleeps until each start in turn), then every message is waited for until acknowledged. Receives: a
sampler thread reads the delivered bytes of each expected flow's responder QP every sample period (the
receiver's view of goodput over time) until every message has arrived. The agent's ``rx_consumed`` (as
for collectives) counts the messages of each peer that earlier work consumed.
"""
from __future__ import annotations

import threading
import time

from traffic.clock import unix_ns
from traffic.protocol import FlowReceived, FlowsDone, MessageRecord, RunFlows


class FlowTimeout(RuntimeError):
    """A flow did not complete within the trial's time limit."""


def _sleep_until(t_ns: int) -> None:
    while True:
        left = (t_ns - unix_ns()) / 1e9
        if left <= 0:
            return
        time.sleep(min(left, 0.05))


def run_flows(rank: int, cmd: RunFlows, send_qp, recv_qp, rx_consumed: dict) -> FlowsDone:
    """Post this rank's flows of ``cmd``, wait for their ACKs and for the flows sent to it.

    ``send_qp[q]``/``recv_qp[q]``: requester/responder QP with rank q (traffic.agent.Agent). Raises
    ValueError when a flow names a peer without a QP, FlowTimeout past ``cmd.timeout_s``."""
    mine = sorted((f for f in cmd.flows if f.src == rank), key=lambda f: f.start_ns)
    incoming = [f for f in cmd.flows if f.dst == rank]
    missing = sorted({f.dst for f in mine} - set(send_qp) | {f.src for f in incoming} - set(recv_qp))
    if missing:
        raise ValueError(f"rank {rank} has no queue pair with rank(s) {missing}: the agent was started without "
                         "them as peers")
    deadline = time.monotonic() + cmd.timeout_s + max(0.0, (cmd.start_at_ns - unix_ns()) / 1e9)
    want = {f.flow: rx_consumed.get(f.src, 0) + 1 for f in incoming}
    base = {f.flow: recv_qp[f.src].counters.delivered_bytes for f in incoming}
    samples: dict[int, tuple[list, list]] = {f.flow: ([], []) for f in incoming}
    done_ns: dict[int, int] = {}
    stop = threading.Event()

    def sample() -> None:  # the receiver's goodput over time, until every incoming flow is in
        _sleep_until(cmd.start_at_ns)
        t = cmd.start_at_ns
        while True:
            now = unix_ns()
            for f in incoming:
                if f.flow in done_ns and samples[f.flow][0] and samples[f.flow][0][-1] >= done_ns[f.flow]:
                    continue
                qp = recv_qp[f.src]
                complete = qp.counters.messages >= want[f.flow]  # read first: the bytes read next include it all
                samples[f.flow][0].append(now)
                samples[f.flow][1].append(qp.counters.delivered_bytes - base[f.flow])
                if f.flow not in done_ns and complete:
                    done_ns[f.flow] = now
            if len(done_ns) == len(incoming) or stop.is_set():
                return
            t += cmd.sample_period_ns
            _sleep_until(t)

    sampler = threading.Thread(target=sample, name="flow-rx-sampler", daemon=True)
    sampler.start()
    posted = []
    for f in mine:
        _sleep_until(cmd.start_at_ns + f.start_ns)
        posted.append((f, send_qp[f.dst].post_send(f.size_bytes)))
    sent = []
    for f, seq in posted:
        qp = send_qp[f.dst]
        if not qp.wait_acked(seq, max(0.0, deadline - time.monotonic())):
            stop.set()
            raise FlowTimeout(f"rank {rank}: flow {f.flow} ({f.size_bytes} B to rank {f.dst}) not acknowledged "
                              f"within {cmd.timeout_s:.1f} s")
        m = qp.messages[seq]
        sent.append(MessageRecord(rank=rank, peer=f.dst, msg_seq=seq, size_bytes=f.size_bytes, t_post_ns=m.t_post_ns,
                                  t_acked_ns=m.t_acked_ns))
    for f in incoming:
        if not recv_qp[f.src].wait_messages(want[f.flow], max(0.0, deadline - time.monotonic())):
            stop.set()
            raise FlowTimeout(f"rank {rank}: flow {f.flow} ({f.size_bytes} B from rank {f.src}) not delivered "
                              f"within {cmd.timeout_s:.1f} s")
    sampler.join(timeout=max(1.0, 3 * cmd.sample_period_ns / 1e9))
    stop.set()
    for f in incoming:
        rx_consumed[f.src] = want[f.flow]
    received = [FlowReceived(flow=f.flow, time_ns=samples[f.flow][0], rx_bytes=samples[f.flow][1],
                             t_done_ns=done_ns.get(f.flow, unix_ns())) for f in incoming]
    return FlowsDone(trial=cmd.trial, rank=rank, sent=sent, received=received)
