"""The traffic agents of one run: one process per host namespace, driven in lock step.

Each collective is started on every agent at once and waits for every agent's
``op_done``; that is the barrier between operations (nccl-tests also starts
each timed operation on all ranks together). A group-scoped collective (SimAI
TP/DP/EP groups) runs one ring per group, all groups concurrently.
"""
from __future__ import annotations

import json
import selectors
import subprocess
import sys
import time

from testbed.emulation.fabric import HOST_NIC_QUEUE_BYTES, Fabric
from testbed.lifecycle import StartStop, raise_if_interrupted
from traffic import protocol
from testbed.emulation.entropy_paths import pools_for_pairs
from traffic.protocol import (AgentConfig, ErrorEvent, Exit, GetStats, OpDone, PathPorts, RankAddress, Ready, RunOp,
                              Stats)
from traffic.transport.planes import qp_addresses
from testbed.spec.transport import cc_class, cc_settings
from traffic.transport import TransportParams
from testbed.spec.transport import DEFAULT_ENTROPY_PORTS
from traffic.transport.cc import transport_fields
from traffic.transport.entropy import ENTROPY_POLICIES, MULTI_PORT_POLICIES
from traffic.transport.selective import SELECTIVE_REPEAT


def taking_part(records: list[OpDone], groups) -> list[OpDone]:
    """The records of ``records`` (one per agent) whose rank is in one of ``groups`` (lists of ranks).

    The agent of a rank in no group answers a RunOp with an idle record (t_start_ns = t_end_ns,
    group_size 0); it is no rank of the collective, so it must not be in the op's per-rank rows or
    in the per-rank average time (nccl-tests' time over the ranks that run the op, e.g. ``-g N``).
    """
    members = {int(r) for g in groups for r in g}
    return [r for r in records if r.rank in members]


def transport_params(spec, rto_us: int, peers_per_rank: int = 2) -> TransportParams:
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
    ``peers_per_rank``: the most queue pairs one rank has (testbed.plan.plan_peers): the data
    sockets of a host share its NIC queue (HOST_NIC_QUEUE_BYTES), so each socket's send buffer is
    at most that / (peers + 1), or sends of a rank talking to many peers at once (all-to-all,
    trees) overflow the queue (ENOBUFS, counted as host qdisc drops); with ``workload.channels``
    C on P planes each NIC serves peers x ceil(C/P) QPs. A ring (2 peers, 1 channel) keeps the
    default.
    """
    from testbed.spec.rto import bdp_cap, rto_low

    t = spec.transport
    selective = t.loss_recovery == SELECTIVE_REPEAT
    reorders = ENTROPY_POLICIES[t.entropy].reorders
    low_us, low_pkts = rto_low(spec, int(rto_us))
    ports = (t.entropy_ports or DEFAULT_ENTROPY_PORTS[t.entropy]) if t.entropy in MULTI_PORT_POLICIES else 1
    gap_us = (t.flowlet_gap_us or int(rto_us) // 2) if t.entropy == "flowlet" else 0
    # channels share a NIC's queue too, spread over the planes' NICs (traffic.transport.planes)
    planes = spec.fabric.planes if spec.fabric.kind == "dual_plane" else 1
    channels = spec.workload.channels if spec.workload is not None else spec.jobs[0].workload.channels
    qps = max(peers_per_rank, 1) * -(-channels // planes)
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
    pairs with; ``transport``: every agent's TransportParams (:func:`transport_params`).
    Messages are those of :mod:`traffic.protocol`.
    """

    def __init__(self, fabric: Fabric, transport: TransportParams, seed: int, peers_of, channels: int = 1):
        self.fabric = fabric
        self.channels = channels
        self.transport = transport
        self.seed = seed
        self.peers_of = peers_of
        self.procs: list[subprocess.Popen] = []
        self._logs = []
        self._buf: dict[int, bytes] = {}

    def start(self, timeout_s: float = 30.0) -> None:
        layout = self.fabric.layout
        ranks = [rank_address(layout, h) for h in layout.hosts]
        run_dir = self.fabric.run_dir
        path_ports = self._path_ports(ranks)
        for h in layout.hosts:
            cfg = AgentConfig(rank=h.rank, ranks=ranks, peers=list(self.peers_of(h.rank)), seed=self.seed,
                              transport=self.transport, channels=self.channels,
                              path_ports=path_ports.get(h.rank, []))
            cfg_path = run_dir / f"agent-{h.rank}.json"
            cfg_path.write_text(protocol.encode(cfg))
            log = open(run_dir / f"agent-{h.rank}.log", "wb")
            self._logs.append(log)
            node = self.fabric.net.get(h.name)
            p = node.popen([sys.executable, "-m", "traffic.agent", "--run-id", self.fabric.run_id,
                            "--config", str(cfg_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=log)
            self.procs.append(p)
        self._collect(Ready, timeout_s)

    def _path_ports(self, ranks: list[RankAddress]) -> dict[int, list[PathPorts]]:
        """Per rank, the traced path pools of every address pair its QPs send on, when the entropy
        policy balances its ports over the paths (testbed.emulation.entropy_paths); else empty. The
        first call of a run writes them, with the time tracing took, to ``entropy_paths.json``."""
        if not ENTROPY_POLICIES[self.transport.entropy].uses_paths:
            return {}
        pairs = {r.rank: [qp_addresses(r, ranks[q], c) for q in sorted(set(self.peers_of(r.rank)))
                          for c in range(self.channels)] for r in ranks}
        t0 = time.monotonic()
        pools = pools_for_pairs(self.fabric.layout, [pr for prs in pairs.values() for pr in prs],
                                self.transport.entropy_ports)
        record = self.fabric.run_dir / "entropy_paths.json"
        if not record.exists():  # the first trial traces, later ones reuse the pools
            record.write_text(json.dumps({"trace_s": round(time.monotonic() - t0, 3), "pairs": [
                {"src_ip": src, "dst_ip": dst, "paths": paths} for (src, dst), paths in pools.items()]}))
        return {rank: [PathPorts(src, dst, pools[(src, dst)]) for src, dst in dict.fromkeys(prs)]
                for rank, prs in pairs.items()}

    def _send_all(self, cmd) -> None:
        line = protocol.encode(cmd).encode()
        for p in self.procs:
            p.stdin.write(line)
            p.stdin.flush()

    def _collect(self, event: type, timeout_s: float) -> list:
        """Read one ``event`` (a protocol event class) from every agent, in rank order.

        Raises AgentError on an ErrorEvent, a line that is no valid message, death or timeout."""
        sel = selectors.DefaultSelector()
        for i, p in enumerate(self.procs):
            sel.register(p.stdout, selectors.EVENT_READ, i)
        got: dict[int, dict] = {}
        deadline = time.monotonic() + timeout_s
        try:
            while len(got) < len(self.procs):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(len(self.procs))) - set(got))
                    raise AgentError(f"no {event.__name__} from ranks {missing} within {timeout_s:.1f} s")
                raise_if_interrupted()
                for key, _ in sel.select(min(left, 0.2)):
                    i = key.data
                    chunk = key.fileobj.read1(65536) if hasattr(key.fileobj, "read1") else key.fileobj.read(65536)
                    if not chunk:
                        raise AgentError(f"agent of rank {i} exited (code {self.procs[i].poll()}); "
                                         f"see {self.fabric.run_dir}/agent-{i}.log")
                    self._buf[i] = self._buf.get(i, b"") + chunk
                    while b"\n" in self._buf[i]:
                        line, self._buf[i] = self._buf[i].split(b"\n", 1)
                        try:
                            msg = protocol.decode(line)
                        except protocol.ProtocolError as e:
                            raise AgentError(f"rank {i}: {e}") from None
                        if isinstance(msg, ErrorEvent):
                            err = msg.error
                            raise AgentError(err if err.startswith(f"rank {i}:") else f"rank {i}: {err}")
                        if isinstance(msg, event):
                            got[i] = msg
        finally:
            sel.close()
        return [got[i] for i in range(len(self.procs))]

    def run_op(self, op_id: int, size_bytes: int, groups, timeout_s: float,
               collective: str = "allreduce", algorithm: str = "ring") -> list[OpDone]:
        """Run one collective in every rank group at once; return the op_done record of each rank that took
        part (a rank in one of ``groups``), in rank order.

        ``groups``: lists of ranks, each in the algorithm's position order, run
        concurrently (every agent is told all groups and runs the one holding its
        rank; a rank in none answers with an idle record, which ends the barrier and is
        then dropped: :func:`taking_part`). Each agent needs queue pairs with
        the peers the algorithm names in every group it will be given (``peers_of``;
        testbed.plan.plan_peers). ``collective``/``algorithm``: a key of
        traffic.collectives.ALGORITHMS. Raises AgentError on an error event, an agent's death or a timeout.
        """
        self._send_all(RunOp(op_id=op_id, collective=collective, algorithm=algorithm, size_bytes=int(size_bytes),
                             groups=[list(g) for g in groups], timeout_s=float(timeout_s)))
        return taking_part(self._collect(OpDone, timeout_s + 10), groups)

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
