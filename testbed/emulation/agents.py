"""The traffic agents of one run: one process per host namespace.

A collective is started on the agents of the ranks that take part and completes when each of them
answered ``op_done`` (nccl-tests also starts each timed operation on all its ranks together). A
group-scoped collective (SimAI TP/DP/EP groups) runs one ring per group, all groups concurrently.

Streams: ops carry a stream number (a communicator: NCCL runs each on its own CUDA stream and
connections). Each stream has its own queue pairs to every peer; an agent runs the ops of one stream
in the order it gets them and the ops of different streams concurrently, so several jobs, or one job's
parallel groups, share the fabric at once (:meth:`AgentGroup.submit`).
"""
from __future__ import annotations

import json
import subprocess
import threading
import sys
import time
from concurrent.futures import Future
from typing import Sequence

from testbed.emulation.fabric import Fabric
from testbed.emulation.agent_events import AgentEvents
from testbed.host.timeout_scale import startup_s
from testbed.process.lifecycle import StartStop
from traffic import protocol
from testbed.emulation.entropy_paths import pools_for_pairs
from testbed.emulation.topo import HOST_NIC_QUEUE_BYTES
from traffic.protocol import (AgentConfig, Exit, GetStats, OpDone, PathPorts, RankAddress, Ready, RunFlows, RunOp,
                              Stats)
from traffic.transport.planes import qp_addresses
from testbed.spec.transport import cc_class, cc_settings
from traffic.transport import TransportParams
from testbed.spec.transport import DEFAULT_ENTROPY_PORTS
from traffic.transport.cc import transport_fields
from traffic.transport.entropy import ENTROPY_POLICIES, MULTI_PORT_POLICIES
from traffic.transport.selective import SELECTIVE_REPEAT

#: wait for every agent's Ready on the development machines (s), x testbed.host.timeout_scale
READY_TIMEOUT_S = 30.0


def taking_part(records: list[OpDone], groups) -> list[OpDone]:
    """The records of ``records`` (one per agent) whose rank is in one of ``groups`` (lists of ranks).

    The agent of a rank in no group answers a RunOp with an idle record (t_start_ns = t_end_ns,
    group_size 0); it is no rank of the collective, so it must not be in the op's per-rank rows or
    in the per-rank average time (nccl-tests' time over the ranks that run the op, e.g. ``-g N``).
    """
    members = {int(r) for g in groups for r in g}
    return [r for r in records if r.rank in members]


def transport_params(spec, rto_us: int, peers_per_rank: int = 2, streams: int = 1) -> TransportParams:
    """The agents' TransportParams from a ScenarioSpec (the one place they are built).

    ``rto_us``: the retransmission timeout, ``transport.rto_us`` or derived when that is ``auto``;
    the line rate is ``fabric.host_link_bps``; the congestion control's settings are the scenario's
    ``transport.<name>`` over its defaults (testbed.spec.transport.cc_settings; DCQCN's scaled by the
    run's dilation). Loss recovery is ``transport.loss_recovery``; with
    selective repeat the reorder window is half the retransmission timeout under an entropy policy
    whose packets overtake each other (``spray``), else 0 (nothing overtakes: a gap is a loss at
    once, as in IRN), and IRN's RTO_low and BDP cap apply (testbed.spec.rto.rto_low, bdp_cap). ``flowlet``'s gap
    defaults to half the timeout too (the auto timeout is twice the longest queueing a packet can
    meet, testbed.spec.rto: no overtaken packet is later than that).
    ``peers_per_rank``: the most queue pairs one rank has (testbed.workloads.plan.plan_peers): the data
    sockets of a host share its NIC queue (HOST_NIC_QUEUE_BYTES), so each socket's send buffer is
    at most that / (peers + 1), or sends of a rank talking to many peers at once (all-to-all,
    trees) overflow the queue (ENOBUFS, counted as host qdisc drops); with ``workload.channels``
    C (a pattern: its widest flow's ``qps``) on P planes each NIC serves peers x ceil(C/P) QPs, and ``streams`` (testbed.workloads.plan.plan_streams)
    times that. A ring (2 peers, 1 channel, 1 stream) keeps the default.
    """
    from testbed.spec.jobs import qp_channels
    from testbed.spec.rto import bdp_cap, rto_low

    t = spec.transport
    selective = t.loss_recovery == SELECTIVE_REPEAT
    reorders = ENTROPY_POLICIES[t.entropy].reorders
    low_us, low_pkts = rto_low(spec, int(rto_us))
    ports = (t.entropy_ports or DEFAULT_ENTROPY_PORTS[t.entropy]) if t.entropy in MULTI_PORT_POLICIES else 1
    gap_us = (t.flowlet_gap_us or int(rto_us) // 2) if t.entropy == "flowlet" else 0
    # channels share a NIC's queue too, spread over the planes' NICs (traffic.transport.planes)
    planes = spec.fabric.planes if spec.fabric.kind == "dual_plane" else 1
    channels = qp_channels(spec)  # a pattern's flows split over QPs; a jobs run: the collective jobs' channels
    qps = max(peers_per_rank, 1) * -(-channels // planes) * max(streams, 1)
    sndbuf = min(TransportParams.sndbuf_bytes, HOST_NIC_QUEUE_BYTES // (qps + 1))
    return TransportParams(payload_bytes=t.payload_bytes, window_pkts=t.window_pkts,
                           ack_every_pkts=t.ack_every_pkts, rto_us=int(rto_us),
                           line_rate_bps=float(spec.fabric.host_link_bps), sndbuf_bytes=sndbuf,
                           **transport_fields(cc_class(spec), cc_settings(spec)), entropy=t.entropy,
                           entropy_ports=ports, flowlet_gap_us=gap_us,
                           loss_recovery=t.loss_recovery,
                           reorder_window_us=int(rto_us) // 2 if selective and reorders else 0,
                           rto_low_us=low_us, rto_low_pkts=low_pkts, bdp_cap_pkts=bdp_cap(spec)["cap_pkts"])


def rank_address(layout, host) -> RankAddress:
    """``host``'s addresses as its agent and its peers need them: every plane, and its server's
    scale-up domain when the layout has one (traffic.transport.planes)."""
    up = layout.scale_up_nic(host.name)
    server = next((i for i, s in enumerate(layout.servers()) if host in s), -1) if up else -1
    ips = layout.plane_ips(host.name)
    return RankAddress(rank=host.rank, ip=host.ip, name=host.name, plane_ips=list(ips) if len(ips) > 1 else [],
                       server=server, scale_up_ip=up.ip if up else "")


class AgentError(RuntimeError):
    """An agent failed, died, or did not answer in time."""


class AgentGroup(StartStop):
    """Start, drive and stop the agents of a fabric's hosts.

    ``peers_of(rank) -> list[int]`` names the ranks each agent needs queue
    pairs with; ``transport``: every agent's TransportParams (:func:`transport_params`); ``stream_tos``:
    the TOS byte of each stream's data packets (a job's traffic class; empty: every stream lossless).
    Messages are those of :mod:`traffic.protocol`.
    """

    def __init__(self, fabric: Fabric, transport: TransportParams, seed: int, peers_of, channels: int = 1,
                 streams: int = 1, stream_tos: Sequence[int] = ()):
        self.fabric = fabric
        self.channels = channels
        self.streams = streams
        #: TOS byte of each stream's data packets (empty: all lossless; traffic.protocol.AgentConfig.stream_tos)
        self.stream_tos = list(stream_tos)
        self.transport = transport
        self.seed = seed
        self.peers_of = peers_of
        self.procs: list[subprocess.Popen] = []
        self._logs = []
        self._events: AgentEvents | None = None
        self._write_lock = threading.Lock()

    def start(self, timeout_s: float | None = None) -> None:
        """Spawn one agent per host and wait for every Ready (``timeout_s``, default
        :data:`READY_TIMEOUT_S` x the machine's timeout scale, testbed.host.timeout_scale)."""
        layout = self.fabric.layout
        ranks = [rank_address(layout, h) for h in layout.hosts]
        run_dir = self.fabric.run_dir
        path_ports = self._path_ports(ranks)
        for h in layout.hosts:
            cfg = AgentConfig(rank=h.rank, ranks=ranks, peers=list(self.peers_of(h.rank)), seed=self.seed,
                              transport=self.transport, channels=self.channels,
                              path_ports=path_ports.get(h.rank, []), streams=self.streams,
                              stream_tos=self.stream_tos)
            cfg_path = run_dir / f"agent-{h.rank}.json"
            self.fabric.put_file(h.name, cfg_path, protocol.encode(cfg))
            log = open(run_dir / f"agent-{h.rank}.log", "wb")
            self._logs.append(log)
            node = self.fabric.net.get(h.name)
            p = node.popen([*self.fabric.python_argv, "-m", "traffic.agent", "--run-id", self.fabric.run_id,
                            "--config", str(cfg_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=log)
            self.procs.append(p)
        self._events = AgentEvents(self.procs, self._death, AgentError)
        self._collect(Ready, startup_s(READY_TIMEOUT_S) if timeout_s is None else timeout_s)

    def _death(self, i: int) -> str:
        return f"agent of rank {i} exited (code {self.procs[i].poll()}); see {self.fabric.run_dir}/agent-{i}.log"

    def _path_ports(self, ranks: list[RankAddress]) -> dict[int, list[PathPorts]]:
        """Per rank, the traced path pools of every address pair its QPs send on, when the entropy
        policy balances its ports over the paths (testbed.emulation.entropy_paths); else empty. The
        first call of a run writes them, with the time tracing took, to ``entropy_paths.json``."""
        if not ENTROPY_POLICIES[self.transport.entropy].uses_paths:
            return {}
        pairs = {r.rank: [qp_addresses(r, ranks[q], c) for q in sorted(set(self.peers_of(r.rank)))
                          for c in range(self.channels * self.streams)] for r in ranks}
        t0 = time.monotonic()
        pools = pools_for_pairs(self.fabric.layout, [pr for prs in pairs.values() for pr in prs],
                                self.transport.entropy_ports)
        record = self.fabric.run_dir / "entropy_paths.json"
        if not record.exists():  # the first trial traces, later ones reuse the pools
            record.write_text(json.dumps({"trace_s": round(time.monotonic() - t0, 3), "pairs": [
                {"src_ip": src, "dst_ip": dst, "paths": paths} for (src, dst), paths in pools.items()]}))
        return {rank: [PathPorts(src, dst, pools[(src, dst)]) for src, dst in dict.fromkeys(prs)]
                for rank, prs in pairs.items()}

    def _send(self, ranks, cmd) -> None:
        line = protocol.encode(cmd).encode()
        with self._write_lock:  # job threads submit concurrently
            for r in ranks:
                p = self.procs[r]
                p.stdin.write(line)
                p.stdin.flush()

    def _send_all(self, cmd) -> None:
        self._send(range(len(self.procs)), cmd)

    def _collect(self, event: type, timeout_s: float) -> list:
        """Read one ``event`` (a protocol event class) from every agent, in rank order.

        Raises AgentError on an ErrorEvent, a line that is no valid message, death or timeout."""
        return self._events.collect(event, timeout_s)

    def submit(self, op_id: int, size_bytes: int, groups, timeout_s: float, collective: str = "allreduce",
               algorithm: str = "ring", stream: int = 0) -> Future:
        """Start one collective in every rank group of ``groups`` at once, on ``stream``; the future's
        result is the op_done record of each rank in the groups, in rank order.

        Only the agents of those ranks get the command, so ops on disjoint ranks, or on different streams,
        run concurrently; an agent runs the ops of one stream in the order submitted. ``op_id``: unique in
        the run. ``groups``: lists of ranks, each in the algorithm's position order (empty: every rank in
        one group). Each agent needs queue pairs with the peers the algorithm names in every group it will
        be given (``peers_of``; testbed.workloads.plan.plan_peers). The future raises AgentError on an error event
        of this op or any agent failure. Raises ValueError for a stream outside 0..streams-1 or an op id
        already running. Thread-safe.
        """
        if not 0 <= stream < self.streams:
            raise ValueError(f"stream {stream} outside 0..{self.streams - 1}: the agents were started with "
                             f"{self.streams} stream(s)")
        ranks = sorted({int(r) for g in groups for r in g}) if groups else list(range(len(self.procs)))
        return self._submit(op_id, ranks, RunOp(op_id=op_id, collective=collective, algorithm=algorithm,
                                                size_bytes=int(size_bytes), groups=[list(g) for g in groups],
                                                timeout_s=float(timeout_s), stream=stream))

    def submit_flows(self, cmd: RunFlows, ranks) -> Future:
        """Start pattern trial ``cmd`` (its ``op_id`` set, unique in the run; its ``stream`` one the agents
        have) on the agents of ``ranks`` only: every rank its flows name. The future's result is each rank's
        FlowsDone in rank order (:meth:`wait`); it raises AgentError like :meth:`submit`'s. Thread-safe."""
        if cmd.op_id is None or not 0 <= cmd.stream < self.streams:
            raise ValueError(f"submit_flows needs an op_id and a stream in 0..{self.streams - 1}: got op_id "
                             f"{cmd.op_id}, stream {cmd.stream}")
        return self._submit(cmd.op_id, sorted({int(r) for r in ranks}), cmd)

    def _submit(self, op_id: int, ranks: list[int], cmd) -> Future:
        future = self._events.expect_op(op_id, ranks)
        try:
            self._send(ranks, cmd)
        except BaseException:
            self._events.forget_op(op_id)
            raise
        future.ranks = ranks
        return future

    def wait(self, future: Future, op_id: int, timeout_s: float) -> list[OpDone]:
        """The records of a submitted op (:meth:`submit`), waiting at most ``timeout_s``; raises AgentError
        naming the ranks that did not answer, KeyboardInterrupt-like signals through the lifecycle's check."""
        return self._events.wait_op(future, op_id, future.ranks, timeout_s)

    def run_op(self, op_id: int, size_bytes: int, groups, timeout_s: float,
               collective: str = "allreduce", algorithm: str = "ring", stream: int = 0) -> list[OpDone]:
        """Run one collective in every rank group at once and wait for it: :meth:`submit` and :meth:`wait`
        with the op's ``timeout_s`` plus 10 s. Returns the op_done record of each rank that took part (a rank
        in one of ``groups``), in rank order. Raises AgentError on an error event, an agent's death or a
        timeout."""
        fut = self.submit(op_id, size_bytes, groups, timeout_s, collective, algorithm, stream)
        return taking_part(self.wait(fut, op_id, timeout_s + 10), groups) if groups else \
            self.wait(fut, op_id, timeout_s + 10)

    def command(self, cmd, reply: type, timeout_s: float) -> list:
        """Send ``cmd`` (a traffic.protocol command) to every agent; return each one's ``reply`` event in
        rank order. Raises AgentError like :meth:`run_op`."""
        self._send_all(cmd)
        return self._collect(reply, timeout_s)

    def stats(self) -> list[Stats]:
        self._send_all(GetStats())
        return self._collect(Stats, 30)

    def stop(self) -> None:
        """Ask every agent to exit; kill what does not within 3 s."""
        if self._events is not None:
            self._events.stop()
        for p in self.procs:
            try:
                if p.poll() is None:
                    p.stdin.write(protocol.encode(Exit()).encode())
                    p.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + 3
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in self._logs:
            f.close()
        self.procs, self._logs = [], []
