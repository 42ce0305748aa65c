"""Run one agent's part of a pattern trial (:class:`traffic.protocol.RunFlows`).

Sends: each flow of this rank is split over its ``qps`` queue pairs to its destination
(traffic.patterns.qp_shares; QP c is channel c of the agent's QPs with that peer) and posted as one
message on each at ``start_at_ns + start_ns`` (a thread per start time is not needed: posts are
non-blocking, so one loop sleeps until each start in turn), then every message is waited for until
acknowledged. Receives: a sampler thread reads the delivered bytes of each expected flow's responder
QPs (summed over the flow's QPs) every sample period (the receiver's view of goodput over time) until
every message has arrived. The agent's ``rx_consumed`` (as for collectives, one map per channel)
counts the messages of each peer that earlier work consumed. Several flows may share a QP (an open-loop
workload's lanes: FlowOrder.channel): they queue on it in (start_ns, flow) order and each is complete when
its own message is; a shared QP's delivered-byte samples then count every flow on it.
"""
from __future__ import annotations

import threading
import time

from traffic.clock import unix_ns
from traffic.patterns import qp_shares
from traffic.protocol import FlowMessage, FlowReceived, FlowsDone, RunFlows


class FlowTimeout(RuntimeError):
    """A flow did not complete within the trial's time limit."""


def _sleep_until(t_ns: int) -> None:
    while True:
        left = (t_ns - unix_ns()) / 1e9
        if left <= 0:
            return
        time.sleep(min(left, 0.05))


def _channels(f) -> range:
    """The channels (QP indices per peer) flow order ``f`` runs on: ``f.channel`` .. ``f.channel + f.qps - 1``."""
    return range(f.channel, f.channel + f.qps)


def _message_numbers(incoming, rx_consumed) -> dict[int, list[int]]:
    """flow -> the number each of its QPs' messages has at the receiver, one per channel of the flow: flows
    sharing a QP (the same sender and channel) arrive in (start_ns, flow) order, the order ``incoming`` is in
    and their sender posts them in; numbering continues after the ``rx_consumed`` messages of earlier work."""
    nth: dict[tuple[int, int], int] = {}
    want: dict[int, list[int]] = {}
    for f in incoming:
        want[f.flow] = []
        for c in _channels(f):
            nth[(f.src, c)] = nth.get((f.src, c), 0) + 1
            want[f.flow].append(rx_consumed[c].get(f.src, 0) + nth[(f.src, c)])
    return want


def run_flows(rank: int, cmd: RunFlows, send_qps, recv_qps, rx_consumed) -> FlowsDone:
    """Post this rank's flows of ``cmd``, wait for their ACKs and for the flows sent to it.

    ``send_qps[c][q]``/``recv_qps[c][q]``: requester/responder QP of channel c with rank q
    (traffic.agent.Agent); ``rx_consumed[c]``: messages of each peer on channel c that earlier work
    consumed. Returns a FlowsDone with one FlowMessage per sent flow and QP (in flow start order, QP
    order within a flow) and one FlowReceived per incoming flow. Raises ValueError when a flow names a
    peer without a QP or needs more QPs than the agent has channels, FlowTimeout past ``cmd.timeout_s``."""
    mine = sorted((f for f in cmd.flows if f.src == rank), key=lambda f: (f.start_ns, f.flow))
    incoming = sorted((f for f in cmd.flows if f.dst == rank), key=lambda f: (f.start_ns, f.flow))
    missing = sorted({f.dst for f in mine} - set(send_qps[0]) | {f.src for f in incoming} - set(recv_qps[0]))
    if missing:
        raise ValueError(f"rank {rank} has no queue pair with rank(s) {missing}: the agent was started without "
                         "them as peers")
    wide = [f.flow for f in mine + incoming if f.channel + f.qps > len(send_qps)]
    if wide:
        raise ValueError(f"rank {rank}: flow(s) {wide} need more queue pairs per peer than the agent's "
                         f"{len(send_qps)} channel(s): start the agents with channels >= the flows' qps")
    shares = {f.flow: qp_shares(f.size_bytes, f.qps) for f in mine + incoming}
    deadline = time.monotonic() + cmd.timeout_s + max(0.0, (cmd.start_at_ns - unix_ns()) / 1e9)
    want = _message_numbers(incoming, rx_consumed)
    base = {f.flow: sum(recv_qps[c][f.src].counters.delivered_bytes for c in _channels(f)) for f in incoming}
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
                qps = [recv_qps[c][f.src] for c in _channels(f)]
                # read first: the bytes read next include every completed message
                complete = all(qp.counters.messages >= w for qp, w in zip(qps, want[f.flow]))
                samples[f.flow][0].append(now)
                samples[f.flow][1].append(sum(qp.counters.delivered_bytes for qp in qps) - base[f.flow])
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
        posted += [(f, c, send_qps[c][f.dst].post_send(size)) for c, size in zip(_channels(f), shares[f.flow])]
    sent = []
    for f, c, seq in posted:
        qp = send_qps[c][f.dst]
        if not qp.wait_acked(seq, max(0.0, deadline - time.monotonic())):
            stop.set()
            raise FlowTimeout(f"rank {rank}: flow {f.flow} ({f.size_bytes} B to rank {f.dst}, queue pair {c} of "
                              f"{f.qps}) not acknowledged within {cmd.timeout_s:.1f} s")
        m = qp.messages[seq]
        sent.append(FlowMessage(flow=f.flow, channel=c, rank=rank, peer=f.dst, msg_seq=seq,
                                size_bytes=shares[f.flow][c - f.channel], t_post_ns=m.t_post_ns,
                                t_acked_ns=m.t_acked_ns))
    for f in incoming:
        for i, c in enumerate(_channels(f)):
            if not recv_qps[c][f.src].wait_messages(want[f.flow][i], max(0.0, deadline - time.monotonic())):
                stop.set()
                raise FlowTimeout(f"rank {rank}: flow {f.flow} ({f.size_bytes} B from rank {f.src}, queue pair {c} "
                                  f"of {f.qps}) not delivered within {cmd.timeout_s:.1f} s")
    sampler.join(timeout=max(1.0, 3 * cmd.sample_period_ns / 1e9))
    stop.set()
    for f in incoming:
        for i, c in enumerate(_channels(f)):
            rx_consumed[c][f.src] = max(rx_consumed[c].get(f.src, 0), want[f.flow][i])
    received = [FlowReceived(flow=f.flow, time_ns=samples[f.flow][0], rx_bytes=samples[f.flow][1],
                             t_done_ns=done_ns.get(f.flow, unix_ns())) for f in incoming]
    return FlowsDone(trial=cmd.trial, rank=rank, sent=sent, received=received, op_id=cmd.op_id)
