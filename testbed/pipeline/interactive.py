"""``testbed run SCENARIO --cli``: the Mininet CLI on the live fabric after the workload, with testbed commands.

The run builds the fabric, runs its workload and measures it as usual; then, with the fabric, the
controller and its congestion loop still up (the run's agents have exited), :func:`run_cli` opens
:class:`TestbedCLI`, Mininet's CLI (every Mininet command: ``nodes``, ``net``, ``pingall``, ``h1 ping h2`` ...)
plus the commands below. Names are bare everywhere (``h1``, ``s1``, ``s1-eth2``, without the run id that
prefixes them in the kernel): every command accepts them, and the output of Mininet's and the testbed's
commands shows them (a command run in a host, ``h1 ip link``, prints what the host's shell prints). The
testbed's commands:

- ``queues [PORT...]``: every switch port's egress qdiscs now (backlog, drops, packets sent per class);
- ``ecmp [SWITCH...]``: each switch's select groups, with bucket -> output port (peer) and packet counts;
- ``pauses``: PFC state now: which lossless classes (switch ports and host NICs) are paused;
- ``collective KIND SIZE [ALGORITHM]``: run one collective over every host on the live fabric (fresh
  agents with the queue pairs it needs) and print its time, algbw, busbw and busbw/link, as the run's table
  (testbed.results.tables.size_table) has them;
- ``pingall``: Mininet's, but with tenant isolation only the pairs the controller allows (the others
  are listed as skipped: each would wait out ping's timeout);
- ``iperf [SRC DST]``, ``iperfudp [BW SRC DST]``: Mininet's, but bounded in time, and no iperf is left
  running (testbed.pipeline.cli_iperf; Mininet 2.3.0's waited for ever with iperf >= 2.0.14);
- ``help``: lists them.

Leaving the CLI (``exit``, ``quit``, Ctrl-D) returns to the run, which writes its results, then tears
the fabric down, exactly as without ``--cli``. The results hold the workload only: collectives run from the
CLI are printed, not recorded (their agents log into ``<run dir>/cli/``); the controller's own records
(congestion loop, events) cover the CLI's time too. Ctrl-C at the prompt interrupts the command, not
the run; SIGTERM ends the CLI and the run as an interruption.
"""
from __future__ import annotations

import os
import json
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from mininet.cli import CLI
from mininet.log import lg, output, setLogLevel

from testbed.pipeline import cli_iperf
from testbed.process import signals

#: tbf rate of a paused lossless class (dataplane.pfc_gate: 1 byte/s)
PAUSED_RATE_BPS = 8
#: class names of htb_classes' tbf leaves, by handle (dataplane.queues.htb_classes.leaf_handle)
CLASS_BY_LEAF = {"10:": "control", "20:": "lossless", "30:": "lossy"}
TESTBED_COMMANDS = ("queues", "ecmp", "pauses", "collective")


class _Terminated(BaseException):
    """SIGTERM at the prompt (Mininet's CLI swallows KeyboardInterrupt: it must not swallow this)."""


def tc_qdiscs(dev: str, node=None) -> list[dict]:
    """``tc -s -j qdisc show dev DEV`` (in ``node``'s namespace when given): iproute2's JSON list of qdiscs."""
    cmd = f"tc -s -j qdisc show dev {dev}"
    out = node.cmd(cmd) if node is not None else subprocess.run(cmd.split(), capture_output=True, text=True).stdout
    try:
        return json.loads(out or "[]")
    except json.JSONDecodeError:
        return []


def leaf_class_name(q: dict) -> str:
    """A leaf qdisc's class: ``lossless`` etc. for htb_classes' tbf leaves, else its kind (``bfifo``)."""
    return CLASS_BY_LEAF.get(q["handle"], q["handle"]) if q["kind"] == "tbf" else q["kind"]


def tbf_rate_bps(q: dict) -> float | None:
    """A tbf's rate in bit/s from iproute2's JSON (a number of bytes/s, or a string like ``8bit``)."""
    rate = (q.get("options") or {}).get("rate")
    if isinstance(rate, (int, float)):
        return float(rate) * 8
    from testbed.spec.units import parse_rate
    try:
        return float(parse_rate(str(rate)))
    except (ValueError, TypeError):
        return None


def parse_group_stats(text: str) -> dict[int, list[int]]:
    """``ovs-ofctl dump-group-stats`` output -> group id -> packet count per bucket."""
    out = {}
    for line in text.splitlines():
        m = re.search(r"group_id=(\d+)", line)
        if m:
            out[int(m.group(1))] = [int(n) for n in re.findall(r"bucket\d+:packet_count=(\d+)", line)]
    return out


def parse_groups(text: str) -> dict[int, list[str]]:
    """``ovs-ofctl dump-groups`` output -> group id -> each bucket's actions, in bucket order
    (``bucket=bucket_id:0,weight:3,actions=output:3,bucket=...``)."""
    out = {}
    for line in text.splitlines():
        m = re.search(r"group_id=(\d+)", line)
        if m:
            buckets = line.strip().split(",bucket=")[1:]
            out[int(m.group(1))] = [b.partition("actions=")[2] for b in buckets]
    return out


class _BareNames:
    """A text stream that writes to ``stream`` with the run id ``rid`` taken off every name it prefixes."""

    def __init__(self, stream, rid: str):
        self.stream = stream
        self._prefix = re.compile(rf"(?<![\w-]){re.escape(rid)}(?=[A-Za-z])")

    def write(self, text: str) -> int:
        return self.stream.write(self._prefix.sub("", text))

    def __getattr__(self, name):
        return getattr(self.stream, name)


class TestbedCLI(CLI):
    """Mininet's CLI on ``fab`` (a running testbed.emulation.fabric.Fabric) of run ``ctx``
    (testbed.pipeline.context.RunContext) with the commands of the module docstring."""

    prompt = "testbed> "

    def __init__(self, ctx, fab, stdin=sys.stdin, **kwargs):
        self.ctx, self.fab = ctx, fab
        self.rid = fab.run_id
        self._collectives_run = 0
        super().__init__(fab.net, stdin=stdin, **kwargs)

    # -- names without the run id ----------------------------------------------
    def _short(self, name: str) -> str:
        return name[len(self.rid):] if name.startswith(self.rid) else name

    def _full(self, name: str) -> str:
        return name if name.startswith(self.rid) else self.rid + name

    def precmd(self, line: str) -> str:
        """Bare node names in any command are the run's nodes (``h1 ping h2``, ``iperf h1 h2``, ``link s1 h1
        down``); ``sh``, ``py`` and ``px`` lines are left as typed."""
        line = super().precmd(line)
        words = line.split(" ")
        if words[0] in ("sh", "py", "px"):
            return line
        return " ".join(self._full(w) if w not in self.mn and self._full(w) in self.mn else w for w in words)

    def onecmd(self, line: str):
        """Run one command; Mininet's and the testbed's output with bare names (a host's own output as is)."""
        first = line.split(" ", 1)[0]
        if first in self.mn:
            return super().onecmd(line)
        handler, out = lg.ch, sys.stdout
        stream, self.stdout = handler.stream, _BareNames(self.stdout, self.rid)
        handler.stream, sys.stdout = _BareNames(stream, self.rid), _BareNames(out, self.rid)
        try:
            return super().onecmd(line)
        finally:
            handler.stream, sys.stdout, self.stdout = stream, out, self.stdout.stream

    def do_help(self, line: str):
        """List the testbed's commands, then Mininet's."""
        if not line:
            print("testbed commands:\n"
                  "  queues [PORT...]                   switch egress queues now: backlog, drops, sent (per class)\n"
                  "  ecmp [SWITCH...]                   select groups: bucket -> port (peer), packets\n"
                  "  pauses                             PFC: lossless classes paused now (switch ports, host NICs)\n"
                  "  collective KIND SIZE [ALGORITHM]   run a collective on every host; print algbw/busbw\n"
                  "  pingall [TIMEOUT_S]                ping all host pairs; with tenants only the allowed ones\n"
                  "  iperf [SRC DST], iperfudp [BW SRC DST]   Mininet's, ended by a time limit at the latest\n"
                  "  exit | quit | Ctrl-D               leave: the run writes its results and tears down\n"
                  "host and switch names may omit the run id (h1 ping h2). Mininet's commands:")
        return super().do_help(line)

    # -- pingall -----------------------------------------------------------------
    def do_pingall(self, line: str):
        """pingall [TIMEOUT_S]: ping every ordered pair of hosts once (Mininet's pingall). With tenant isolation only
        the pairs the controller allows: a pair it drops by design would wait out ping's timeout (10 s) each, so
        those are skipped and listed after the results."""
        flt = getattr(self.fab, "isolation", None)  # a cluster fabric has none
        if flt is None:
            return super().do_pingall(line)
        opts = f"-W {line.split()[0]} " if line.split() else ""
        hosts, sent, received, skipped = self.mn.hosts, 0, 0, []
        output("*** Ping: testing ping reachability within tenants and to shared hosts\n")
        for src in hosts:
            output(f"{src.name} -> ")
            for dst in hosts:
                if dst is src:
                    continue
                if not flt.allows(src.name, dst.name):
                    skipped.append(f"{src.name}->{dst.name}")
                    continue
                s, r = self.mn._parsePing(src.cmd(f"ping -c1 {opts}{dst.IP()}"))
                sent, received = sent + s, received + r
                output(f"{dst.name} " if r else "X ")
            output("\n")
        lost = 100.0 * (sent - received) / sent if sent else 0.0
        output(f"*** Results: {lost:.0f}% dropped ({received}/{sent} received)\n")
        if skipped:
            output(f"*** skipped {len(skipped)} pairs across tenants (isolation drops them by design): "
                   f"{', '.join(skipped)}\n")

    # -- iperf, iperfudp ------------------------------------------------------------
    def do_iperf(self, line: str):
        """iperf [SRC DST]: TCP iperf from SRC to DST (default: the first and the last host), as Mininet's but
        bounded in time (testbed.pipeline.cli_iperf)."""
        self._iperf(line.split(), None, "iperf src dst")

    def do_iperfudp(self, line: str):
        """iperfudp [BW SRC DST]: UDP iperf at BW (e.g. 10M) from SRC to DST, as Mininet's but bounded in time."""
        words = line.split()
        self._iperf(words[1:], words[0] if words else "10M", "iperfudp bw src dst (bw e.g. 10M)",
                    len(words) not in (0, 3))

    def _iperf(self, names: list[str], udp_bw: str | None, usage: str, bad: bool = False) -> None:
        if bad or len(names) not in (0, 2):
            print(f"invalid number of args: {usage}")
            return
        missing = [self._short(n) for n in names if n not in self.mn]
        if missing:
            print(f"no such node: {', '.join(missing)}")
            return
        hosts = [self.mn[n] for n in names] or [self.mn.hosts[0], self.mn.hosts[-1]]
        cli_iperf.iperf(hosts[0], hosts[1], self._short, udp_bw)

    # -- queues ------------------------------------------------------------------
    def do_queues(self, line: str):
        """queues [PORT...]: each switch port's egress qdiscs now (root: backlog, drops, sent; per class)."""
        want = {self._full(p) for p in line.split()}
        ports = [p for p in self.fab.switch_ports if not want or p in want]
        if not ports:
            print(f"no such switch port: {line.strip()}; ports: {', '.join(self._short(p) for p in self.fab.switch_ports)}")
            return
        print(f"{'port':<10} {'backlog_bytes':>13} {'backlog_pkts':>12} {'drops_pkts':>10} {'tx_pkts':>9}  classes "
              f"(backlog_bytes/drops_pkts)")
        for port in ports:
            qdiscs = tc_qdiscs(port)
            root = next((q for q in qdiscs if q.get("root")), None)
            if root is None:
                print(f"{self._short(port):<10} (no qdisc)")
                continue
            leaves = [f"{leaf_class_name(q)} {q.get('backlog', 0)}/"
                      f"{q.get('drops', 0)}" for q in qdiscs if not q.get("root") and q["kind"] in ("tbf", "bfifo")]
            print(f"{self._short(port):<10} {root.get('backlog', 0):>13} {root.get('qlen', 0):>12} "
                  f"{root.get('drops', 0):>10} {root.get('packets', 0):>9}  {', '.join(leaves)}")

    # -- ecmp ----------------------------------------------------------------------
    def _peer_of(self, switch: str) -> dict[int, str]:
        peers = {}
        for ln in self.fab.layout.links:
            for end, other in ((ln.a, ln.b), (ln.b, ln.a)):
                if end.node == switch:
                    peers[end.number] = self._short(other.node)
        return peers

    def do_ecmp(self, line: str):
        """ecmp [SWITCH...]: each switch's select groups: bucket -> output port (peer), packets per bucket."""
        want = {self._full(s) for s in line.split()}
        switches = [s.name for s in self.fab.layout.switches if not want or s.name in want]
        if not switches:
            print(f"no such switch: {line.strip()}; switches: "
                  f"{', '.join(self._short(s.name) for s in self.fab.layout.switches)}")
            return
        for sw in switches:
            run = lambda what: subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", what, sw], capture_output=True,
                                              text=True, timeout=10).stdout
            groups, stats, peers = parse_groups(run("dump-groups")), parse_group_stats(run("dump-group-stats")), \
                self._peer_of(sw)
            print(f"{self._short(sw)}: {len(groups)} group(s)")
            for gid in sorted(groups):
                counts = stats.get(gid, [])
                parts = []
                for i, actions in enumerate(groups[gid]):
                    m = re.search(r"output:(\d+)", actions)
                    where = f"port {m.group(1)} ({peers.get(int(m.group(1)), '?')})" if m else actions
                    parts.append(f"b{i} -> {where}: {counts[i] if i < len(counts) else '?'} pkts")
                print(f"  group {gid}: " + "; ".join(parts))

    # -- pauses ----------------------------------------------------------------------
    def do_pauses(self, line: str):
        """pauses: PFC state now: every lossless class (switch ports, host NICs) paused or running."""
        if not self.ctx.spec.congestion.pfc_on:
            print("PFC is off in this scenario (no congestion.pfc): nothing is ever paused")
            return
        rows = [(p, None) for p in self.fab.switch_ports]
        rows += [(intf, self.fab.net.get(h.name)) for h in self.fab.layout.hosts for intf in self.fab.host_intfs(h.name)]
        paused = 0
        print(f"{'port':<10} {'lossless':<8} {'backlog_bytes':>13} {'drops_pkts':>10}")
        for dev, node in rows:
            q = next((q for q in tc_qdiscs(dev, node) if q.get("handle") == "20:" and q["kind"] == "tbf"), None)
            if q is None:
                continue
            rate = tbf_rate_bps(q)
            state = "PAUSED" if rate is not None and rate <= PAUSED_RATE_BPS else "running"
            paused += state == "PAUSED"
            print(f"{self._short(dev):<10} {state:<8} {q.get('backlog', 0):>13} {q.get('drops', 0):>10}")
        print(f"{paused} lossless class(es) paused now (the run's pause counts: summary.json congestion block)")

    # -- collective ---------------------------------------------------------------------
    def do_collective(self, line: str):
        """collective KIND SIZE [ALGORITHM]: e.g. ``collective allreduce 1MiB ring``; prints time, algbw, busbw."""
        from testbed.emulation.agents import AgentError
        from traffic import collectives

        words = line.split()
        if len(words) not in (2, 3):
            print(f"usage: collective KIND SIZE [ALGORITHM]; KIND: {', '.join(collectives.collectives())}")
            return
        kind, size_text = words[0], words[1]
        algorithm = words[2] if len(words) == 3 else (
            collectives.DEFAULT_ALGORITHM if collectives.DEFAULT_ALGORITHM in collectives.names(kind)
            else (collectives.names(kind) or [""])[0])
        blocked = self._pairs_isolation_drops()
        if blocked:
            print(f"collective: error: tenant isolation drops {len(blocked)} host pairs of a collective over every "
                  f"host (e.g. {blocked[0][0]}->{blocked[0][1]}), and the CLI's collective runs over every host; "
                  "run each tenant's collective as a job of the scenario (docs/jobs.md)")
            return
        try:
            from testbed.spec.units import parse_size
            size = int(parse_size(size_text))
            if size <= 0:
                raise ValueError(f"{size_text!r}: a size must be > 0")
            result = run_collective(self.ctx, self.fab, kind, algorithm, size, self._collectives_run)
        except (ValueError, AgentError, OSError) as e:
            print(f"collective: error: {e}")
            return
        self._collectives_run += 1
        print(f"{kind}/{algorithm} {size} B on {result['ranks']} ranks: time {result['time_us']:.0f} us, algbw "
              f"{result['algbw_bps'] / 1e6:.3f} Mbit/s, busbw {result['busbw_bps'] / 1e6:.3f} Mbit/s "
              f"(busbw/link {result['busbw_ratio']:.3f}: busbw / (link x efficiency), as the run's table)")


    def _pairs_isolation_drops(self) -> list[tuple[str, str]]:
        """The (source, destination) host pairs (short names) the fabric's tenant isolation drops; [] without it."""
        flt = getattr(self.fab, "isolation", None)  # a cluster fabric has none
        if flt is None:
            return []
        names = [h.name for h in self.fab.layout.hosts]
        return [(self._short(a), self._short(b)) for a in names for b in names if a != b and not flt.allows(a, b)]


class _AgentFabric:
    """The fabric as the CLI's agents see it: the same, but their files go into ``<run dir>/cli``."""

    def __init__(self, fab, run_dir: Path):
        self._fab, self.run_dir = fab, run_dir

    def __getattr__(self, name):
        return getattr(self._fab, name)


def run_collective(ctx, fab, collective: str, algorithm: str, size_bytes: int, k: int = 0) -> dict:
    """Run one ``collective``/``algorithm`` of ``size_bytes`` over every host of the live ``fab`` with fresh
    agents (queue pairs to the peers the algorithm names); return ``{ranks, time_us, algbw_bps, busbw_bps,
    busbw_ratio}``: the row of the run's own table for this one op (testbed.results.tables.size_table: time =
    first rank's start to last rank's end; algbw = size x 8 / time; busbw = algbw x the algorithm's busbw
    factor, nccl-tests; busbw_ratio = busbw / (host link rate x payload efficiency), ``ctx.goodput_bps``).

    Raises traffic.collectives.UnknownAlgorithm (a ValueError) or testbed.emulation.agents.AgentError."""
    from testbed.emulation.agents import AgentGroup, transport_params
    from testbed.results import tables
    from testbed.spec.rto import run_rto_us
    from traffic import collectives

    alg = collectives.get(collective, algorithm)
    group = tuple(range(ctx.spec.fabric.n_hosts))
    peers = {r: sorted({group[p] for p in alg.peers(pos, len(group))}) for pos, r in enumerate(group)}
    transport = transport_params(ctx.spec, run_rto_us(ctx.spec), max(len(p) for p in peers.values()))
    cli_dir = Path(ctx.run_dir) / "cli" / f"collective-{k}"
    cli_dir.mkdir(parents=True, exist_ok=True)
    factor = alg.busbw_factor(len(group))
    expect_s = factor * size_bytes * 8 / ctx.goodput_bps
    with AgentGroup(_AgentFabric(fab, cli_dir), transport, ctx.spec.seed + 1 + k, lambda r: peers.get(r, []),
                    ctx.spec.workload.channels if ctx.spec.workload is not None else 1) as agents:
        recs = agents.run_op(0, size_bytes, [group], timeout_s=10 * expect_s + 20, collective=collective,
                             algorithm=algorithm)
    meta = {0: {"size_bytes": size_bytes, "iteration": 0, "warmup": False, "collective": collective,
                "algorithm": algorithm, "group_size": len(group)}}
    row = tables.size_table(tables.ops_table(recs, meta, len(group)), len(group), ctx.goodput_bps).iloc[0]
    return {"ranks": len(group), "time_us": float(row.time_us), "algbw_bps": float(row.algbw_bps),
            "busbw_bps": float(row.busbw_bps), "busbw_ratio": float(row.busbw_ratio)}


@contextmanager
def stdin_kept_for_the_cli() -> Iterator[None]:
    """Keep piped commands (``printf 'h1 ping -c1 h3\\nexit\\n' | testbed run S --cli``) for the prompt.

    Every process the run starts (Mininet's commands, OVS tools, ...) inherits descriptor 0; one of them read
    a piped stdin to its end before the prompt showed, so only EOF was left ("left the CLI after 0 s"). While
    this is entered, descriptor 0 is /dev/null and ``sys.stdin`` reads the original input from a descriptor
    children do not inherit. A terminal is left as it is (line editing, Ctrl-C)."""
    if sys.stdin is None or sys.stdin.isatty():
        yield
        return
    kept = os.dup(0)  # os.dup's descriptor is not inheritable
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    old, sys.stdin = sys.stdin, open(kept, "r", closefd=False)
    try:
        yield
    finally:
        sys.stdin = old
        os.dup2(kept, 0)
        os.close(kept)


@contextmanager
def stdout_line_buffered() -> Iterator[None]:
    """While entered, ``sys.stdout`` flushes at every newline (restored after).

    In the CLI Mininet's output goes to stderr through its logger, which flushes every message; the testbed's
    goes to stdout, which Python buffers in blocks when it is a pipe or a file. Both into one pipe
    (``printf 'help\\n' | testbed run S --cli 2>&1 | less``), a command's lines came out of the order they were
    written in (``help``: Mininet's half before the testbed's list). A stdout without ``reconfigure`` (a test's
    capture) or already line-buffered (a terminal) is left as it is."""
    reconfigure, was = getattr(sys.stdout, "reconfigure", None), getattr(sys.stdout, "line_buffering", True)
    if reconfigure is None or was:
        yield
        return
    sys.stdout.flush()
    reconfigure(line_buffering=True)
    try:
        yield
    finally:
        reconfigure(line_buffering=was)


def run_cli(ctx, fab, stdin=None) -> None:
    """Open :class:`TestbedCLI` on the live ``fab`` until the user leaves it.

    SIGINT interrupts the command at the prompt (Mininet's handling); SIGTERM leaves the CLI and raises
    KeyboardInterrupt, so the run tears down as an interrupted run (exit 143)."""
    def on_term(signum, frame):
        try:
            signals.handler(signum, frame)  # records the signal for the exit code
        except KeyboardInterrupt:
            pass
        raise _Terminated()

    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    old_term = signal.signal(signal.SIGTERM, on_term)
    setLogLevel("output")  # Mininet's commands print at level 'output'
    print(f"\nworkload done; the fabric of run {fab.run_id} stays up. Testbed commands: queues, ecmp, pauses, "
          f"collective KIND SIZE; 'help' lists all; exit or Ctrl-D to write the results and tear down.", flush=True)
    t0 = time.monotonic()
    try:
        with stdout_line_buffered():  # in the order written, Mininet's lines (stderr) and the testbed's
            TestbedCLI(ctx, fab, stdin=stdin if stdin is not None else sys.stdin)
    except _Terminated:
        raise KeyboardInterrupt("signal SIGTERM") from None
    finally:
        setLogLevel("warning")
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        print(f"left the CLI after {time.monotonic() - t0:.0f} s: writing the results, then tearing down", flush=True)


def add_run_flag(run_parser) -> None:
    """``testbed run --cli`` (the run subcommand's parser)."""
    run_parser.add_argument("--cli", action="store_true",
                            help="after the workload, leave the fabric up in the Mininet CLI with testbed commands "
                            "(queues, ecmp, pauses, collective KIND SIZE); exit writes the results and tears down")
