"""Per-host traffic agent: runs in a host's network namespace, driven over stdin/stdout.

Started by the testbed as ``python -m traffic.agent --run-id RID --config FILE``.
The config file names this host's rank, every rank's address, the peers it needs
queue pairs with, the seed and the transport parameters.

Messages: :mod:`traffic.protocol` (one typed definition shared with the runner, one JSON
line each): the config file holds an :class:`~traffic.protocol.AgentConfig`; the agent reads
:class:`~traffic.protocol.RunOp`, :class:`~traffic.protocol.GetStats` and
:class:`~traffic.protocol.Exit` on stdin and writes :class:`~traffic.protocol.Ready` once its
QPs are up, :class:`~traffic.protocol.OpDone` after each collective,
:class:`~traffic.protocol.Stats` on request and :class:`~traffic.protocol.ErrorEvent` on
failure on stdout. For a RunOp the agent runs the group holding its rank, and records an idle
op (no bytes) when no group holds it.

QP numbers: the requester QP at rank r towards rank q is 0x10000+q, the
responder QP at rank q for requester r is 0x20000+r; with ``channels`` > 1 each peer has one
pair per channel, channel c's numbers 0x20000 x c higher (:func:`qpn`). With ``streams`` S > 1 (communicators
that run concurrently) each stream has its own channels: stream s, channel c is QP slot s x channels + c,
numbered like a channel of that index; its data packets carry the stream's TOS byte (``stream_tos``: a job's
traffic class, DSCP 26 lossless or DSCP 0 lossy; only lossless QPs obey PFC). The agent runs each stream's
RunOps in a worker thread of its own, in the order they arrive, so ops of different streams overlap. A
pattern trial (RunFlows) runs in its stream's worker too and splits a flow of ``qps`` N over channels
0..N-1 of its stream (traffic.patterns.executor). A QP's addresses: the
scale-up domain inside a server, else scale-out plane c mod planes (traffic.transport.planes). Each QP's UDP source port(s), its
ECMP entropy, come from the entropy policy ``transport.entropy`` (:mod:`traffic.transport.entropy`;
``per_flow``: one port per QP, drawn without repeats from 49152-65535 by a generator seeded
with (seed, rank)). The QP from rank r to rank q starts at the initial PSN ``initial_psn(seed, r, q)`` (24-bit, seeded random, as RNICs
pick one), which both ends compute.

Times in records (``t_start_ns``, ``t_end_ns``, ``t_post_ns``, ...) are
Unix-epoch ns from :func:`traffic.clock.unix_ns`, the clock of every table.
"""
from __future__ import annotations

import argparse
import queue
import sys
import threading
import traceback
from dataclasses import replace

from traffic import collectives, protocol
from traffic.collectives.channels import execute_channels
from traffic.clock import from_monotonic_ns, unix_ns
from traffic.patterns.executor import run_flows
from traffic.protocol import (AgentConfig, ErrorEvent, Exit, GetStats, MessageRecord, OpDone, PfcRxStats, QpCnpLog,
                              QpRateLog, Ready, RequesterQpStats, ResponderQpStats, RunOp, Stats)
from traffic.transport import Endpoint, RequesterQP, ResponderQP, initial_psn
from traffic.transport.cc import cnp_interval_ns
from traffic.transport.entropy import entropy_policy
from traffic.transport.pfc_rx import PfcReceiver
from traffic.transport.planes import qp_addresses
from traffic.transport.qp import DATA_TOS
from traffic.transport.selective import qp_classes

REQ_QPN_BASE = 0x10000
RESP_QPN_BASE = 0x20000
#: channel c's QPs sit c strides above channel 0's (requesters at odd, responders at even multiples of 0x10000)
CHANNEL_QPN_STRIDE = 0x20000


def qpn(base: int, rank: int, channel: int = 0) -> int:
    """QP number of the QP towards/for ``rank`` on ``channel`` (``base``: REQ_QPN_BASE or RESP_QPN_BASE)."""
    return base + channel * CHANNEL_QPN_STRIDE + rank


def channel_psn(seed, requester: int, responder: int, channel: int) -> int:
    """Initial PSN of the channel's QP from ``requester`` to ``responder`` (channel 0: :func:`initial_psn`)."""
    return initial_psn(seed, requester, responder if channel == 0 else f"{responder}/{channel}")


_EMIT_LOCK = threading.Lock()


def _emit(msg) -> None:
    line = protocol.encode(msg)
    with _EMIT_LOCK:  # QP threads report send errors while the main thread reports ops
        sys.stdout.write(line)
        sys.stdout.flush()


def _send_failed(rank: int, text: str) -> None:
    """A QP hit a send error other than a full queue: tell the testbed now (it stops the run)."""
    _emit(ErrorEvent(error=f"rank {rank}: {text}"))


class Agent:
    """The QPs of one host and the collectives they run; ``cfg``: the start configuration.

    Raises ValueError for an unknown congestion control or entropy policy name."""

    def __init__(self, cfg: AgentConfig):
        self.rank = cfg.rank
        self.ips = {r.rank: r.ip for r in cfg.ranks}
        addr = {r.rank: r for r in cfg.ranks}
        self.n = len(self.ips)
        self.params = cfg.transport
        self.channels = cfg.channels
        self.streams = cfg.streams
        if cfg.stream_tos and len(cfg.stream_tos) != cfg.streams:
            raise ValueError(f"stream_tos lists {len(cfg.stream_tos)} TOS bytes for {cfg.streams} stream(s)")
        #: TOS byte of each stream's data packets
        self.stream_tos = list(cfg.stream_tos) or [DATA_TOS] * cfg.streams
        slots = self.channels * self.streams  # queue pairs per peer: every stream's channels
        me = addr[self.rank]
        peers = sorted(set(cfg.peers))
        entropy = entropy_policy(self.params.entropy, cfg.seed, self.rank, self.params.entropy_ports,
                                 self.params.flowlet_gap_us, {(pp.src_ip, pp.dst_ip): pp.paths for pp in cfg.path_ports})
        requester_qp, responder_qp = qp_classes(self.params.loss_recovery)
        ports = entropy.host_ports(2 * len(peers) * slots)
        # a host with several NICs (planes, scale-up) receives on all its addresses
        several = len(me.plane_ips) > 1 or bool(me.scale_up_ip)
        self.ep = Endpoint("0.0.0.0" if several else me.ip, read_ecn=cnp_interval_ns(self.params) is not None)
        #: the NIC obeys PFC frames from its switch port for the lossless class (an RNIC does); agents
        #: of a run are root, a test agent without CAP_NET_RAW on loopback has no switch to pause it
        try:
            self.pfc = PfcReceiver(self.params.line_rate_bps, on_change=self._wake_qps)
        except PermissionError as e:
            print(f"agent rank {self.rank}: PFC frames not obeyed: no AF_PACKET socket ({e})", file=sys.stderr)
            self.pfc = None
        #: per QP slot (stream x channels + channel): peer rank -> requester / responder QP
        self.send_qps: list[dict[int, RequesterQP]] = [{} for _ in range(slots)]
        self.recv_qps: list[dict[int, ResponderQP]] = [{} for _ in range(slots)]
        #: per slot: messages from each peer that finished operations consumed (traffic.collectives.executor)
        self.rx_consumed: list[dict[int, int]] = [{q: 0 for q in cfg.peers} for _ in range(slots)]
        for c in range(slots):
            for i, q in enumerate(peers):
                src, dst = qp_addresses(me, addr[q], c)
                sport, rport = ports[2 * (c * len(peers) + i)], ports[2 * (c * len(peers) + i) + 1]
                on_error = lambda text, r=self.rank: _send_failed(r, text)  # noqa: E731
                req = requester_qp(qpn(REQ_QPN_BASE, q, c), qpn(RESP_QPN_BASE, self.rank, c), src, dst,
                                   sport, self.params, first_psn=channel_psn(cfg.seed, self.rank, q, c),
                                   on_error=on_error, entropy=entropy.for_qp(sport, src, dst), pause=self.pfc,
                                   tos=self.stream_tos[c // self.channels])
                resp = responder_qp(qpn(RESP_QPN_BASE, q, c), qpn(REQ_QPN_BASE, self.rank, c), src, dst,
                                    rport, self.params, first_psn=channel_psn(cfg.seed, q, self.rank, c),
                                    on_error=on_error)
                self.send_qps[c][q], self.recv_qps[c][q] = req, resp
                self.ep.requesters[req.qpn] = req
                self.ep.responders[resp.qpn] = resp
        self.send_qp, self.recv_qp = self.send_qps[0], self.recv_qps[0]
        self.ep.start()
        if self.pfc is not None:
            self.pfc.start()

    def _wake_qps(self) -> None:
        """A PFC frame changed the pause: every requester QP re-checks it now (a resume acts at once)."""
        for qp in (qp for qps in self.send_qps for qp in qps.values()):
            with qp.cond:
                qp.cond.notify_all()

    def run_op(self, cmd: RunOp) -> OpDone:
        """Run ``cmd`` in the group holding this rank (an idle record when none does).

        Raises traffic.collectives.UnknownAlgorithm for a collective/algorithm not registered, ValueError
        for a rank twice in the groups or a stream the agent has no QPs for, CollectiveTimeout
        (traffic.collectives.executor) on a timeout."""
        alg = collectives.get(cmd.collective, cmd.algorithm)
        if not 0 <= cmd.stream < self.streams:
            raise ValueError(f"op {cmd.op_id}: stream {cmd.stream} outside 0..{self.streams - 1}")
        groups = cmd.groups or [sorted(self.ips)]
        mine = [g for g in groups if self.rank in g]
        if len(mine) > 1 or (mine and len(set(mine[0])) != len(mine[0])):
            raise ValueError(f"rank {self.rank} appears more than once in the groups of op {cmd.op_id}")
        t0 = unix_ns()
        if not mine:  # not in this op: idle
            return OpDone(op_id=cmd.op_id, rank=self.rank, group_index=None, group_size=0, t_start_ns=t0,
                          t_end_ns=t0, sent_bytes=0, rx_msgs=0, t_rx_done_ns=t0)
        group = mine[0]
        g, pos = len(group), group.index(self.rank)
        lo, hi = cmd.stream * self.channels, (cmd.stream + 1) * self.channels
        res = execute_channels(alg, pos, group, cmd.size_bytes, self.send_qps[lo:hi], self.recv_qps[lo:hi],
                               self.rx_consumed[lo:hi], cmd.timeout_s)
        t1 = unix_ns()
        return OpDone(op_id=cmd.op_id, rank=self.rank, group_index=groups.index(group), group_size=g,
                      t_start_ns=t0, t_end_ns=t1, sent_bytes=res["sent_bytes"], rx_msgs=res["rx_msgs"],
                      t_rx_done_ns=res["t_rx_done_ns"])

    def run_flows(self, cmd: protocol.RunFlows) -> protocol.FlowsDone:
        """Run this rank's part of pattern trial ``cmd`` on its stream's queue pairs (traffic.patterns.executor:
        a flow's QP c is channel c of the stream). Raises ValueError for a stream the agent has no QPs for,
        as run_flows does."""
        if not 0 <= cmd.stream < self.streams:
            raise ValueError(f"pattern trial {cmd.trial}: stream {cmd.stream} outside 0..{self.streams - 1}")
        lo, hi = cmd.stream * self.channels, (cmd.stream + 1) * self.channels
        return run_flows(self.rank, cmd, self.send_qps[lo:hi], self.recv_qps[lo:hi], self.rx_consumed[lo:hi])

    def stats(self) -> Stats:
        """A snapshot of every QP's counters (copies: the QPs keep counting), message records, rate changes
        (requester QPs whose congestion control logged one) and CNP times (each notification point's sends,
        each reaction point's arrivals; QP ends with none are left out), times on the run's clock."""
        send = [(c, q, qp) for c, qps in enumerate(self.send_qps) for q, qp in qps.items()]
        reqs = [RequesterQpStats(rank=self.rank, peer=q, qpn=qp.qpn, udp_sport=qp.udp_sport,
                                 first_psn=qp.first_psn, counters=replace(qp.counters), channel=c,
                                 dscp=qp.tos >> 2)
                for c, q, qp in send]
        resps = [ResponderQpStats(rank=self.rank, peer=q, qpn=qp.qpn, first_psn=qp.first_psn,
                                  counters=replace(qp.counters), channel=c)
                 for c, qps in enumerate(self.recv_qps) for q, qp in qps.items()]
        msgs = [MessageRecord(rank=self.rank, peer=q, msg_seq=m.seq, size_bytes=m.size_bytes,
                              t_post_ns=m.t_post_ns, t_acked_ns=m.t_acked_ns)
                for _, q, qp in send for m in qp.messages]
        rates, cnps = [], []
        for c, q, qp in send:
            with qp.cond:  # the QP's hooks write its logs under this lock
                cols = qp.cc.rate_log.columns()
                rx_ns, rx_unrecorded = qp.cnp_rx.snapshot()
            if cols["time_ns"] or cols["unrecorded"]:
                cols["time_ns"] = [from_monotonic_ns(t) for t in cols["time_ns"]]
                rates.append(QpRateLog(rank=self.rank, peer=q, qpn=qp.qpn, channel=c, **cols))
            if rx_ns or rx_unrecorded:
                cnps.append(QpCnpLog(rank=self.rank, peer=q, qpn=qp.qpn, channel=c, role="rp",
                                     time_ns=[from_monotonic_ns(t) for t in rx_ns], unrecorded=rx_unrecorded))
        for c, qps in enumerate(self.recv_qps):
            for q, qp in qps.items():
                if qp.np is None:
                    continue
                tx_ns, tx_unrecorded = qp.np.sent.snapshot()
                if tx_ns or tx_unrecorded:
                    cnps.append(QpCnpLog(rank=self.rank, peer=q, qpn=qp.qpn, channel=c, role="np",
                                         time_ns=[from_monotonic_ns(t) for t in tx_ns], unrecorded=tx_unrecorded))
        pfc = PfcRxStats()
        if self.pfc is not None:
            with self.pfc.lock:
                frames = [[f.time_ns, f.class_enable_vector, f.lossless_quanta] for f in self.pfc.frames]
            pfc = PfcRxStats(**self.pfc.counters(), frames=frames)
        return Stats(rank=self.rank, requesters=reqs, responders=resps, msgs=msgs,
                     rx_pkts=self.ep.rx_pkts, rx_unknown_pkts=self.ep.rx_unknown_pkts, rates=rates, pfc=pfc,
                     cnps=cnps)

    def close(self) -> None:
        if self.pfc is not None:
            self.pfc.stop()
        self.ep.stop()


def _run_and_report(agent: Agent, cmd) -> None:
    try:
        _emit(agent.run_op(cmd) if isinstance(cmd, RunOp) else agent.run_flows(cmd))
    except Exception as e:
        _emit(ErrorEvent(error=str(e), op_id=cmd.op_id))


class StreamWorkers:
    """One worker thread per stream, started on its first command: each runs its stream's RunOps and RunFlows
    in arrival order and reports each (OpDone / FlowsDone, or ErrorEvent with the op id)."""

    def __init__(self, agent: Agent):
        self.agent = agent
        self.queues: dict[int, queue.SimpleQueue] = {}

    def submit(self, cmd) -> None:
        q = self.queues.get(cmd.stream)
        if q is None:
            q = self.queues[cmd.stream] = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(q,), name=f"stream-{cmd.stream}", daemon=True).start()
        q.put(cmd)

    def _work(self, q: queue.SimpleQueue) -> None:
        while True:
            _run_and_report(self.agent, q.get())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-id", required=True, help="run id (lets cleanup find this process)")
    ap.add_argument("--config", required=True)
    args = ap.parse_args(argv)
    try:
        with open(args.config) as f:
            cfg = protocol.decode(f.read())
        if not isinstance(cfg, AgentConfig):
            raise protocol.ProtocolError(f"{args.config}: holds a {type(cfg).__name__}, not an AgentConfig")
        agent = Agent(cfg)
    except Exception as e:
        _emit(ErrorEvent(error=f"agent start failed: {e}", trace=traceback.format_exc()))
        return 1
    _emit(Ready(rank=agent.rank))
    workers = StreamWorkers(agent)
    try:
        for line in sys.stdin:
            cmd = None
            try:
                cmd = protocol.decode(line)
                if isinstance(cmd, Exit):
                    break
                if isinstance(cmd, (RunOp, protocol.RunFlows)):  # a collective, or a pattern trial (traffic.patterns)
                    workers.submit(cmd)
                elif isinstance(cmd, GetStats):
                    _emit(agent.stats())
                else:
                    raise protocol.ProtocolError(f"{type(cmd).__name__} is not a command: allowed RunOp, "
                                                 "RunFlows, GetStats, Exit")
            except Exception as e:
                _emit(ErrorEvent(error=str(e), op_id=getattr(cmd, "op_id", None)))
    finally:
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
