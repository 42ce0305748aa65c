"""One perftest run between two hosts of a running fabric, over their rxe devices (testbed.emulation.rxe).

:func:`run_pair` starts perftest's server on the ``dst`` host (in its namespace, on its rxe device, the
RoCEv2 IPv4 GID), waits until it listens on its TCP port (perftest exchanges the QPs' addresses over
TCP, through the fabric like any host traffic), starts the client on ``src`` towards ``dst``'s address,
waits for both and reads the client's report (testbed.results.perftest.parse_report). Around the
test it reads the transmit packet counters of the two switch ports facing ``dst`` and ``src``
(``/sys/class/net/PORT/statistics/tx_packets``: every frame the switch sent them), so the row says how
many packets the fabric carried for the test. Every process it starts is killed and reaped before it
returns, also on Ctrl-C (KeyboardInterrupt from :func:`testbed.process.lifecycle.raise_if_interrupted`).
"""
from __future__ import annotations

import math
import signal
import subprocess
import time
from pathlib import Path

from testbed.emulation.background import _unblock_teardown_signals
from testbed.host.timeout_scale import startup_s
from testbed.process.lifecycle import raise_if_interrupted
from testbed.results.perftest import COLUMNS, PerftestOutputError, bw_bps, cpu_mhz, parse_report, roce_pkts_min
from traffic.clock import unix_ns

#: perftest's TCP port for its address exchange (its default), one more per run of a scenario
BASE_PORT = 18515
#: seconds the server may take to listen (x testbed.host.timeout_scale)
LISTEN_TIMEOUT_S = 15.0
#: seconds for perftest's set-up (device, QP, address exchange) beyond its traffic (x timeout_scale)
SETUP_S = 30.0
#: per message, s: a message's round trip through Python-free but software-emulated hosts and switches is far
#: below this; the bound only keeps a hung test from hanging the run
PER_MESSAGE_S = 0.05


def listening(pid: int, port: int) -> bool:
    """Whether the namespace of ``pid`` has a TCP socket listening on ``port``, IPv4 or IPv6
    (/proc/PID/net/tcp and tcp6: state 0A)."""
    want = f":{port:04X}"
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        if any(ln.split()[1].endswith(want) and ln.split()[3] == "0A" for ln in lines):
            return True
    return False


def switch_port_facing(layout, host: str) -> str:
    """The switch port (root-namespace interface) at the other end of ``host``'s first link."""
    for ln in layout.links:
        if host in (ln.a.node, ln.b.node) and (ln.a.intf == f"{host}-eth0" or ln.b.intf == f"{host}-eth0"):
            return ln.peer(host).intf
    raise ValueError(f"{host}: no link from {host}-eth0 in the layout")


def tx_packets(ifname: str) -> int:
    """Packets ``ifname`` (a root-namespace interface) has transmitted (its kernel counter)."""
    return int(Path(f"/sys/class/net/{ifname}/statistics/tx_packets").read_text())


def perftest_args(test: str, device: str, gid_index: int, size_bytes: int, iterations: int, port: int,
                  server_ip: str | None = None) -> list[str]:
    """perftest's command: ``test`` on rxe ``device`` with RoCEv2 GID ``gid_index``, ``iterations`` messages of
    ``size_bytes``, address exchange on TCP ``port``; the client when ``server_ip`` is given.

    Latency tests report in TSC cycles (``-C``), converted to us by the caller
    (testbed.results.perftest.parse_report with /proc/cpuinfo's MHz): perftest 4.5 converts with the
    cycles-per-us it samples, and under software emulation that sample failed its own r^2 >= 0.9 test
    (0.80 in the guest, 2026-12-03), leaving 0 MHz and every latency ``inf``, with or without ``-F``."""
    args = [test, "-d", device, "-x", str(gid_index), "-s", str(size_bytes), "-n", str(iterations),
            "-p", str(port), *(["-C"] if test.endswith("_lat") else [])]
    return args + ([server_ip] if server_ip else [])


def timeout_s(test: str, size_bytes: int, iterations: int, link_bps: float) -> float:
    """How long a run may take before it is stopped as hung, s: set-up, the messages' wire time at
    ``link_bps`` (both ways for a ping-pong) ten times over, and :data:`PER_MESSAGE_S` per message, all
    x testbed.host.timeout_scale."""
    wire_s = roce_pkts_min(test, size_bytes, iterations, None) * (min(size_bytes, 4096) + 78) * 8 / link_bps
    return startup_s(SETUP_S + 10 * wire_s + PER_MESSAGE_S * iterations * (2 if test.endswith("_lat") else 1))


def _stop(p: subprocess.Popen | None) -> None:
    if p is None:
        return
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=2.0)
            return
        except subprocess.TimeoutExpired:
            p.kill()
    p.wait()


def run_pair(fab, devices, run: dict, index: int, out_dir: Path) -> dict:
    """Run ``run`` (a testbed.spec.perftest.check_runs entry: name, test, src, dst ranks, size_bytes,
    iterations) on ``fab`` with the rxe ``devices`` (rank -> testbed.emulation.rxe.RxeHost); the
    processes' output in ``out_dir`` (``<name>.server.txt``, ``<name>.client.txt``).
    Returns its perftest.csv row (testbed.results.perftest.COLUMNS): status ``done``, or ``failed`` with
    ``error`` (perftest's exit code and last lines, or the timeout). Raises KeyboardInterrupt when the run
    is interrupted (after stopping its processes)."""
    layout = fab.layout
    src, dst = layout.hosts[run["src"]], layout.hosts[run["dst"]]
    short = lambda h: h.name[len(layout.run_id):]  # noqa: E731
    row = {c: None for c in COLUMNS}
    row.update({"name": run["name"], "test": run["test"], "src": short(src), "dst": short(dst),
                "size_bytes": run["size_bytes"], "iterations": run["iterations"], "status": "failed",
                "gid_index": devices[run["src"]].gid_index})
    port = BASE_PORT + index
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {k: open(out_dir / f"{run['name']}.{k}.txt", "wb") for k in ("server", "client")}
    to_dst, to_src = switch_port_facing(layout, dst.name), switch_port_facing(layout, src.name)
    server = client = None
    limit_s = timeout_s(run["test"], run["size_bytes"], run["iterations"], fab.spec.fabric.host_link_bps)
    try:
        common = (run["test"], run["size_bytes"], run["iterations"], port)
        server = fab.net.get(dst.name).popen(
            perftest_args(run["test"], devices[run["dst"]].device, devices[run["dst"]].gid_index, *common[1:]),
            stdout=files["server"], stderr=subprocess.STDOUT, preexec_fn=_unblock_teardown_signals)
        deadline = time.monotonic() + startup_s(LISTEN_TIMEOUT_S)
        while not listening(server.pid, port):
            raise_if_interrupted()
            if server.poll() is not None or time.monotonic() > deadline:
                row["error"] = (f"the server on {short(dst)} exited ({server.returncode})" if server.poll() is not None
                                else f"the server on {short(dst)} did not listen on TCP {port}")
                return row
            time.sleep(0.05)
        before = (tx_packets(to_dst), tx_packets(to_src))
        row["start_ns"] = unix_ns()
        client = fab.net.get(src.name).popen(
            perftest_args(run["test"], devices[run["src"]].device, devices[run["src"]].gid_index, *common[1:],
                          server_ip=dst.ip),
            stdout=files["client"], stderr=subprocess.STDOUT, preexec_fn=_unblock_teardown_signals)
        deadline = time.monotonic() + limit_s
        while client.poll() is None or server.poll() is None:
            raise_if_interrupted()
            if time.monotonic() > deadline:
                row["error"] = f"still running after {limit_s:.0f} s: stopped"
                break
            time.sleep(0.05)
        row["end_ns"] = unix_ns()
        time.sleep(0.2)  # the last acknowledgements land
        after = (tx_packets(to_dst), tx_packets(to_src))
        row["switch_tx_pkts_to_dst"], row["switch_tx_pkts_to_src"] = after[0] - before[0], after[1] - before[1]
    finally:
        _stop(client)
        _stop(server)
        for f in files.values():
            f.close()
    text = (out_dir / f"{run['name']}.client.txt").read_text(errors="replace")
    try:
        figures = parse_report(text, cpu_mhz() if run["test"].endswith("_lat") else None)  # -C: cycles
    except PerftestOutputError as e:
        row["error"] = row["error"] or f"client exit {client.returncode}: {e}"
        return row
    bad = sorted(k for k, v in figures.items() if isinstance(v, float) and not math.isfinite(v))
    row.update({k: (None if k in bad else v) for k, v in figures.items()})
    # perftest 4.5 with -C prints its standard deviation as -nan (every other latency finite, in cycles):
    # the deviation is left empty, the run is not failed for it
    bad = [k for k in bad if k != "t_stdev_us"]
    row["size_bytes"], row["iterations"] = run["size_bytes"], run["iterations"]
    if bad:
        row["error"] = row["error"] or f"perftest reported non-finite {', '.join(bad)} (inf or nan)"
    row["bw_avg_bps"] = bw_bps(row.get("bw_avg_mib_s"))
    row["roce_pkts_min"] = roce_pkts_min(run["test"], run["size_bytes"], run["iterations"], row["mtu_bytes"])
    if row["error"] is None and client.returncode == 0:
        row["status"] = "done"
    elif row["error"] is None:
        row["error"] = f"client exit {client.returncode}"
    return row
