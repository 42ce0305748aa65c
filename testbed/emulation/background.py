"""Background flows on a running fabric: iperf3 (and sized TCP) servers and clients in the hosts' namespaces.

:class:`BackgroundTraffic` runs the scenario's ``background`` list (testbed.spec.background) beside
the workload: ``start()`` starts one server per client run (a flow, or one client's burst of a
storage pattern; each on its own port, bound to its host's address, waited for until it listens):
``iperf3 -s -1`` for a duration flow, traffic.sized_tcp's sink for a sized one (iperf3 cannot time
a sized flow; see there)
and a scheduler thread that launches each client ``start_s`` after ``start()`` returned (the runner
enters it with the workload's traffic). ``stop()`` (the workload ended, Ctrl-C or a crash; safe to
call twice) stops the scheduler, interrupts every client still running (SIGINT: iperf3 then ends the
test and both ends write their JSON; status ``cut``), waits for the servers, kills whatever is left
after a grace period and reaps every process it started: none outlives the run (and a run killed
with SIGKILL leaves them in the run's namespaces, where ``testbed clean`` finds them).

A duration flow is interrupted at ``start_s + duration_s`` (iperf3's ``-t`` takes whole seconds) and
its bytes are the receiver's count (the server's ``end.sum_received``); a sized flow ends by itself
when its sink has read every byte. Results:
:meth:`BackgroundTraffic.rows` (background.csv, testbed.results.background).

Loss accounting (testbed.measure.accounting): background packets are not RoCE, so the transport's
``sent``/``received`` never count them, but the switch queues' tail-drop counters do. The packets the
background lost in the fabric are the hosts' TCP segments sent less those received (``Tcp OutSegs`` -
``InSegs`` summed over every host namespace between start and stop; offloads are off on every veth,
testbed.emulation.fabric.OFFLOADS_OFF, so a segment is a packet) plus the datagrams iperf3's UDP
receivers counted lost; :attr:`BackgroundTraffic.lost_pkts` is taken out of the switch queue drops.
"""
from __future__ import annotations

import math
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from testbed.host.timeout_scale import startup_s
from testbed.process.lifecycle import StartStop, raise_if_interrupted
from testbed.measure.drops import read_snmp
from testbed.spec.background import check_background
from traffic.clock import unix_ns

#: first TCP/UDP port of the iperf3 servers (one per client run); the agents use UDP 4791 and 49152+
BASE_PORT = 5201
#: seconds a server may take to listen, and a process to exit after SIGINT before it is killed
LISTEN_TIMEOUT_S = 10.0  # x testbed.host.timeout_scale
GRACE_S = 3.0
#: seconds to let the closing connections' last segments land before the TCP counters are read
SETTLE_S = 0.3
#: IPv4 + UDP header bytes (an iperf3 UDP datagram fills the link MTU less these)
IP_UDP_HEADER_BYTES = 28


class BackgroundError(RuntimeError):
    """iperf3 is missing, or a server did not start listening."""


@dataclass
class ClientRun:
    """One iperf3 client run and its server: flow ``name`` (burst ``burst`` of a storage pattern) from
    rank ``src`` to rank ``dst`` on ``port``, launched ``start_s`` after the background started;
    ``duration_s`` (stopped then) or ``size_bytes``; ``t_start_ns``/``t_end_ns``: launch and exit
    (Unix ns); ``status``: pending, running, done, cut (stopped by the workload's end),
    not_started, failed."""

    name: str
    kind: str
    burst: int
    src: int
    dst: int
    port: int
    start_s: float
    duration_s: Optional[float]
    size_bytes: Optional[int]
    rate_bps: Optional[float]
    parallel: int
    server: Optional[subprocess.Popen] = None
    client: Optional[subprocess.Popen] = None
    t_start_ns: Optional[int] = None
    t_end_ns: Optional[int] = None
    status: str = "pending"
    files: list = field(default_factory=list)

    @property
    def tag(self) -> str:
        """File stem of the run's records: ``<name>-<burst>-<src rank>``."""
        return f"{self.name}-{self.burst}-{self.src}"

    @property
    def sized(self) -> bool:
        """A sized TCP run (traffic.sized_tcp times its completion); else an iperf3 duration run."""
        return self.size_bytes is not None


def client_runs(flows, host_names: list[str], host_link_bps: float) -> list[ClientRun]:
    """The client runs of the ``background`` list ``flows`` (testbed.spec.background.check_background
    resolves the hosts; raises its ValueError), one port each from :data:`BASE_PORT`, ordered by start."""
    runs: list[ClientRun] = []
    for f, r in zip(flows, check_background(flows, host_names, host_link_bps)):
        if f.kind == "storage":
            for b, t in enumerate(r["starts_s"]):
                for src, dst in r["pairs"]:
                    runs.append(ClientRun(r["name"], "storage", b, src, dst, 0, t, None, int(f.burst_bytes),
                                          None, 1))
        else:
            (src, dst), = r["pairs"]
            runs.append(ClientRun(r["name"], f.kind, 0, src, dst, 0, f.start_s, f.duration_s,
                                  None if f.size_bytes is None else int(f.size_bytes), f.rate_bps, f.parallel))
    for k, run in enumerate(runs):
        run.port = BASE_PORT + k
    return sorted(runs, key=lambda r: (r.start_s, r.port))


def server_args(ip: str, port: int) -> list[str]:
    """One test's iperf3 server bound to ``ip``:``port``, JSON on stdout."""
    return ["iperf3", "-s", "-1", "-B", ip, "-p", str(port), "-J"]


def sized_args(role: str, run: ClientRun, ip: str, out: Path, run_id: str) -> list[str]:
    """traffic.sized_tcp's ``sink`` (bound to ``ip``) or ``send`` (to ``ip``) of a sized ``run``."""
    args = [sys.executable, "-m", "traffic.sized_tcp", role, "--bind" if role == "sink" else "--to", ip,
            "--port", str(run.port), "--streams", str(run.parallel), "--out", str(out), "--run-id", run_id]
    return args + (["--bytes", str(run.size_bytes)] if role == "send" else [])


def client_args(run: ClientRun, dst_ip: str, mtu_bytes: int) -> list[str]:
    """The iperf3 client of a duration ``run`` towards ``dst_ip``: ``-t`` of the duration rounded up plus
    one second (the scheduler interrupts it at the exact duration); the rate
    cap per stream: UDP ``-b``; TCP ``--fq-rate``, the socket's SO_MAX_PACING_RATE, which the kernel's
    own TCP pacing keeps without the fq qdisc (iperf3's ``-b`` writes 128 KiB blocks at once, a burst
    larger than an emulated switch buffer); ``-P`` the streams; UDP datagrams of the link MTU less the
    IP and UDP headers."""
    args = ["iperf3", "-c", dst_ip, "-p", str(run.port), "-J", "--connect-timeout", "5000",
            "-t", str(int(math.ceil(run.duration_s)) + 1)]
    if run.kind == "udp":
        args += ["-u", "-l", str(min(mtu_bytes, 9000) - IP_UDP_HEADER_BYTES)]
    if run.rate_bps is not None and run.kind == "udp":
        args += ["-b", str(int(run.rate_bps))]
    elif run.rate_bps is not None:  # the kernel's TCP pacing (SO_MAX_PACING_RATE), not iperf3's bursts
        args += ["--fq-rate", str(int(run.rate_bps))]
    if run.parallel > 1:
        args += ["-P", str(run.parallel)]
    return args


def tcp_segments(pid: int) -> tuple[int, int]:
    """(segments sent, segments received) of the network namespace of process ``pid``: Linux counts
    retransmitted segments in ``RetransSegs``, not in ``OutSegs``, so sent = OutSegs + RetransSegs;
    received = InSegs (/proc/PID/net/snmp)."""
    tcp = read_snmp(f"/proc/{pid}/net/snmp").get("Tcp", {})
    return int(tcp.get("OutSegs", 0)) + int(tcp.get("RetransSegs", 0)), int(tcp.get("InSegs", 0))


def _unblock_teardown_signals() -> None:
    """In the child before exec: let SIGINT and SIGTERM through. The runner holds them back in the
    threads that start processes (testbed.process.lifecycle), and a child inherits the mask: an iperf3 client
    with SIGINT blocked could not be told to end its test and write its JSON."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _listening(pid: int, port: int) -> bool:
    """Whether the namespace of ``pid`` has a TCP socket listening on ``port`` (/proc/PID/net/tcp; iperf3
    listens on TCP for its control connection whatever the test's protocol)."""
    try:
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    want = f":{port:04X}"
    return any(ln.split()[1].endswith(want) and ln.split()[3] == "0A" for ln in lines)


class BackgroundTraffic(StartStop):
    """The ``background`` flows of a run on ``fab`` (a running testbed.emulation.fabric.Fabric), results
    under ``run_dir``/background/ (the iperf3 JSON of every client and server)."""

    def __init__(self, fab, flows, run_dir: Path):
        self.fab = fab
        self.layout = fab.layout
        self.hosts = list(self.layout.hosts)
        short = [h.name[len(self.layout.run_id):] for h in self.hosts]
        self.host_names = short
        spec_fabric = fab.spec.fabric
        self.mtu_bytes = spec_fabric.mtu_bytes
        self.runs = client_runs(flows, short, spec_fabric.host_link_bps)
        self.dir = Path(run_dir) / "background"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._segs_before: dict[str, tuple[int, int]] = {}
        self._segs_after: dict[str, tuple[int, int]] = {}
        self.t0_ns: Optional[int] = None
        self.stopped = False

    # -- processes ---------------------------------------------------------------------------------
    def _node(self, rank: int):
        return self.fab.net.get(self.hosts[rank].name)

    def _open(self, run: ClientRun, role: str):
        """The file the process's stdout goes to: iperf3's JSON, or traffic.sized_tcp's log (its JSON is
        ``--out``)."""
        f = open(self.dir / f"{run.tag}.{role}.{'log' if run.sized else 'json'}", "wb")
        run.files.append(f)
        return f

    def _args(self, run: ClientRun, role: str) -> list[str]:
        """The command of ``run``'s server or client."""
        dst_ip = self.hosts[run.dst].ip
        if run.sized:
            return sized_args("sink" if role == "server" else "send", run, dst_ip,
                              self.dir / f"{run.tag}.{role}.json", self.layout.run_id)
        return server_args(dst_ip, run.port) if role == "server" else client_args(run, dst_ip, self.mtu_bytes)

    def start(self) -> None:
        if shutil.which("iperf3") is None:
            raise BackgroundError("background flows need iperf3 (Debian package iperf3; scripts/install "
                                  "installs it)")
        self.dir.mkdir(parents=True, exist_ok=True)
        self._segs_before = self._segments()
        for run in self.runs:
            run.server = self._node(run.dst).popen(self._args(run, "server"), stdout=self._open(run, "server"),
                                                   stderr=subprocess.STDOUT, preexec_fn=_unblock_teardown_signals)
        listen_s = startup_s(LISTEN_TIMEOUT_S)
        deadline = time.monotonic() + listen_s
        for run in self.runs:
            while not _listening(run.server.pid, run.port):
                raise_if_interrupted()
                if run.server.poll() is not None:
                    raise BackgroundError(f"background {run.tag}: the iperf3 server on "
                                          f"{self.host_names[run.dst]}:{run.port} exited (code "
                                          f"{run.server.returncode}); see {self.dir}/{run.tag}.server.json")
                if time.monotonic() > deadline:
                    raise BackgroundError(f"background {run.tag}: the iperf3 server on "
                                          f"{self.host_names[run.dst]}:{run.port} did not listen within "
                                          f"{listen_s:.0f} s")
                time.sleep(0.01)
        self.t0_ns = unix_ns()
        t = threading.Thread(target=self._schedule, name="background-scheduler", daemon=True)
        self._threads.append(t)
        t.start()

    def _sleep_until(self, t_ns: int) -> bool:
        """Sleep until Unix ns ``t_ns``; False when stopped first."""
        while True:
            left = (t_ns - unix_ns()) / 1e9
            if left <= 0:
                return not self._stop.is_set()
            if self._stop.wait(min(left, 0.05)):
                return False

    def _schedule(self) -> None:
        """Launch each client at its start; a duration run gets its own thread that interrupts it at its
        end; every client gets a thread that records its exit time."""
        for run in self.runs:
            if not self._sleep_until(self.t0_ns + int(run.start_s * 1e9)):
                return
            with self._lock:
                if self._stop.is_set():
                    return
                run.client = self._node(run.src).popen(self._args(run, "client"),
                                                       stdout=self._open(run, "client"), stderr=subprocess.STDOUT,
                                                       preexec_fn=_unblock_teardown_signals)
                run.t_start_ns = unix_ns()
                run.status = "running"
            w = threading.Thread(target=self._watch, args=(run,), name=f"background-{run.tag}", daemon=True)
            self._threads.append(w)
            w.start()

    def _watch(self, run: ClientRun) -> None:
        """Wait for ``run``'s client to exit (interrupting a duration run at its end); record the time."""
        if run.duration_s is not None:
            end_ns = run.t_start_ns + int(run.duration_s * 1e9)
            if self._sleep_until(end_ns) and run.client.poll() is None:
                run.client.send_signal(signal.SIGINT)
        code = run.client.wait()
        with self._lock:
            run.t_end_ns = unix_ns()
            if run.status == "running":
                run.status = "done" if code == 0 or run.duration_s is not None else "failed"

    def stop(self) -> None:
        """Stop the scheduler, interrupt what runs (status ``cut``), wait for the servers, kill what is
        left after :data:`GRACE_S`, reap everything, read the TCP counters. Safe to call twice."""
        if self.stopped:
            return
        self._stop.set()
        with self._lock:
            for run in self.runs:
                if run.client is not None and run.client.poll() is None:
                    run.status = "cut"
                    run.client.send_signal(signal.SIGINT)
                elif run.client is None:
                    run.status = "not_started"
        deadline = time.monotonic() + GRACE_S
        procs = [(r.client, False) for r in self.runs] + [(r.server, True) for r in self.runs]
        for p, is_server in procs:
            if p is None:
                continue
            try:
                p.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                if is_server:  # its client never came (or was killed): SIGINT ends it with its JSON
                    p.send_signal(signal.SIGINT)
                    try:
                        p.wait(timeout=1.0)
                        continue
                    except subprocess.TimeoutExpired:
                        pass
                p.kill()
                p.wait()
        for t in self._threads:
            t.join(timeout=2.0)
        for run in self.runs:
            if run.client is not None and run.t_end_ns is None:
                run.t_end_ns = unix_ns()
            for f in run.files:
                f.close()
            run.files = []
        if self._segs_before:
            if any(r.client is not None for r in self.runs):
                time.sleep(SETTLE_S)  # the last segments of the closing connections land
            self._segs_after = self._segments()
        self.stopped = True

    # -- counters ------------------------------------------------------------------------------------
    def _segments(self) -> dict[str, tuple[int, int]]:
        out = {}
        for h in self.hosts:
            try:
                out[h.name] = tcp_segments(self.fab.net.get(h.name).pid)
            except OSError:
                pass
        return out

    @property
    def tcp_lost_segments(self) -> int:
        """TCP segments the hosts sent less those they received between start and stop (>= 0)."""
        if not self._segs_after:
            return 0
        out = sum(self._segs_after[h][0] - self._segs_before[h][0] for h in self._segs_after if h in self._segs_before)
        inn = sum(self._segs_after[h][1] - self._segs_before[h][1] for h in self._segs_after if h in self._segs_before)
        return max(0, out - inn)

    def rows(self) -> list[dict]:
        """One row per client run (testbed.results.background.flow_row)."""
        from testbed.results.background import flow_row
        return [flow_row(run, self.host_names, self.dir) for run in self.runs]
