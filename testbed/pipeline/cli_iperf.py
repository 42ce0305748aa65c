"""The ``--cli`` prompt's ``iperf`` and ``iperfudp``: Mininet's commands, bounded in time.

Mininet 2.3.0's ``Mininet.iperf`` waits, with no limit, for a second ``/sec`` line from the iperf server: its
``waitListening`` probe (a telnet connection) made iperf up to 2.0.13 print one report more. iperf 2.0.14a and
later (Debian's 2.1.8) print none for it, so ``iperf h1 h2`` never returned; piped input never ended
(upstream mininet/mininet#1060, open). Others patched a deadline into that loop; here the two ends run as
processes of their own in the hosts' namespaces:

- the server (``iperf -s``) starts, and the client only once it listens (UDP: once its socket is bound),
  probed in /proc (no connection of its own, so no extra report to count);
- the client runs for :data:`SECONDS` (Mininet's default) and must end within :data:`CLIENT_GRACE_S` more;
- the server's report of that connection is waited for at most :data:`REPORT_WAIT_S`;
- then both are stopped (SIGINT, SIGKILL after 2 s) whatever happened, Ctrl-C and SIGTERM included: no
  iperf is left in a host. (Mininet also ran ``killall -9 iperf``, which kills every iperf of the machine,
  other runs' included: not here.)

It prints what Mininet's printed (``*** Iperf: testing TCP bandwidth between h1 and h2``, ``*** Results:
['9.52 Mbits/sec', '9.71 Mbits/sec']``: server, then client; UDP: the offered rate first) or, past a
limit, one line saying what did not end or report and that both were stopped.
"""
from __future__ import annotations

import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from mininet.log import output

#: iperf's test time, seconds (Mininet's default)
SECONDS = 5
#: TCP port (Mininet's default)
PORT = 5001
#: how long the server may take to listen, seconds
LISTEN_TIMEOUT_S = 5.0
#: how long the client may run past SECONDS, seconds (a connection that cannot be made: iperf's own
#: connect timeout is longer)
CLIENT_GRACE_S = 10.0
#: how long the server's report may take after the client ended, seconds
REPORT_WAIT_S = 5.0
#: a rate as iperf prints it (Mininet's _parseIperf)
RATE_RE = re.compile(r"([\d.]+ \w+/sec)")


def bound(pid: int, port: int, udp: bool) -> bool:
    """Whether the network namespace of process ``pid`` has a socket on ``port``: TCP listening (state 0A)
    or, ``udp``, UDP bound (state 07); IPv4 or IPv6 (/proc/PID/net/tcp, tcp6, udp, udp6)."""
    want, state = f":{port:04X}", "07" if udp else "0A"
    for table in (("udp", "udp6") if udp else ("tcp", "tcp6")):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        if any(r.split()[1].endswith(want) and r.split()[3] == state for r in rows):
            return True
    return False


def last_rate(text: str) -> str | None:
    """The last rate iperf printed (``9.52 Mbits/sec``), or None."""
    rates = RATE_RE.findall(text)
    return rates[-1] if rates else None


def _stop(proc: subprocess.Popen | None) -> None:
    """End ``proc``: SIGINT (iperf prints its report), SIGKILL when it has not ended 2 s later."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait(proc: subprocess.Popen, limit_s: float, done=lambda: False) -> bool:
    """Wait until ``proc`` ended or ``done()`` holds, at most ``limit_s``; True if either happened."""
    deadline = time.monotonic() + limit_s
    while proc.poll() is None and not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def iperf(client, server, short=lambda name: name, udp_bw: str | None = None) -> list[str] | None:
    """Run iperf from Mininet host ``client`` to host ``server`` (``udp_bw``, e.g. ``10M``: UDP at that rate,
    else TCP) for :data:`SECONDS`; print Mininet's lines (names through ``short``) and return Mininet's
    result list ([server rate, client rate], UDP: [udp_bw, server rate, client rate]), or print why and
    return None when a step passed its limit (module docstring). Never leaves an iperf running: both ends
    are stopped on return and on KeyboardInterrupt or any other exception, which propagate."""
    kind = "UDP" if udp_bw else "TCP"
    output(f"*** Iperf: testing {kind} bandwidth between {short(client.name)} and {short(server.name)}\n")
    args = ["iperf", "-p", str(PORT)] + (["-u"] if udp_bw else [])
    with tempfile.TemporaryFile() as server_out, tempfile.TemporaryFile() as client_out:
        srv = cli = None
        try:
            srv = server.popen(args + ["-s"], stdin=subprocess.DEVNULL, stdout=server_out, stderr=subprocess.STDOUT)
            if not _wait(srv, LISTEN_TIMEOUT_S, lambda: bound(srv.pid, PORT, bool(udp_bw))) or srv.poll() is not None:
                return _give_up(f"the iperf server on {short(server.name)} did not listen on {kind} port {PORT} "
                                f"within {LISTEN_TIMEOUT_S:g} s", server_out)
            cli = client.popen(args + ["-t", str(SECONDS), "-c", server.IP()] + (["-b", udp_bw] if udp_bw else []),
                               stdin=subprocess.DEVNULL, stdout=client_out, stderr=subprocess.STDOUT)
            if not _wait(cli, SECONDS + CLIENT_GRACE_S):
                return _give_up(f"the iperf client on {short(client.name)} did not end within "
                                f"{SECONDS + CLIENT_GRACE_S:g} s", client_out)
            if last_rate(_read(client_out)) is None:
                return _give_up(f"the iperf client on {short(client.name)} ended (exit code {cli.returncode}) "
                                f"without a rate", client_out)
            if not _wait(srv, REPORT_WAIT_S, lambda: last_rate(_read(server_out)) is not None):
                return _give_up(f"the iperf server on {short(server.name)} reported no rate within "
                                f"{REPORT_WAIT_S:g} s of the client's end (client: {last_rate(_read(client_out))})",
                                server_out)
            result = [last_rate(_read(server_out)), last_rate(_read(client_out)) or ""]
        finally:
            _stop(cli)
            _stop(srv)
    if udp_bw:
        result.insert(0, udp_bw)
    output(f"*** Results: {result}\n")
    return result


def _read(f) -> str:
    f.seek(0)
    return f.read().decode(errors="replace")


def _give_up(why: str, out) -> None:
    """Print why there is no result (``why``) with the last line of words in ``out`` (the output of the end
    that failed); the caller stops both ends. Returns None."""
    last = [ln.strip() for ln in _read(out).splitlines() if re.search(r"[A-Za-z0-9]", ln)][-1:]
    output(f"*** iperf: {why}: stopped the server and the client, no result"
           + (f" (its last line: {last[0]})" if last else "") + "\n")
    return None
