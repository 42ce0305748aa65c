"""Packet captures of a run (``output.pcap``): one tcpdump per port, real packets into ``pcap/<port>.pcap``.

:class:`Captures` is a context manager around the traffic (testbed.pipeline.runner): on enter it starts one
``tcpdump -i IFACE -s SNAPLEN -w pcap/<port>.pcap`` per port (host NICs inside the host's network
namespace through ``nsenter --net``, switch ports in the root namespace) and waits until every one
reports ``listening on``, so the capture holds the traffic from its first packet. On exit it stops
them with SIGINT (tcpdump flushes its file and prints its counters), counts the packets in every
file and adds the ``pcap`` block to manifest.json.

Exactly what was started is stopped: the process ids it started, nothing by name. Each tcpdump runs
in its own session (a Ctrl-C at the terminal reaches the run, not the captures, which the run then
stops in order) with a parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGINT)``): if the run
process dies without unwinding (SIGKILL, crash), the kernel stops its captures, files flushed.

Size cap: ``max_bytes`` is shared evenly by the ports; a watcher checks every
:data:`WATCH_PERIOD_S` and stops a port's tcpdump (SIGINT, file complete) once its file reaches its
share, so a file may pass its share by what the port carries in that time (at most about 10 Mbit/s x
2 directions x 0.1 s = 250 KB on these links).
"""
from __future__ import annotations

import ctypes
import logging
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed.process.lifecycle import StartStop, raise_if_interrupted
from testbed.results.rundir import RunDir
from testbed.spec.pcap import CapturePort, PcapSpec, resolve_ports

log = logging.getLogger(__name__)

TCPDUMP = "tcpdump"
#: how often the watcher compares file sizes with their cap
WATCH_PERIOD_S = 0.1
#: longest wait for a tcpdump to start listening, and to flush and exit after SIGINT
START_TIMEOUT_S, STOP_TIMEOUT_S = 10.0, 5.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: libc loaded in the parent: the forked child only calls into it (no dlopen between fork and exec)
_LIBC = ctypes.CDLL(None, use_errno=True)
_COUNTER_RE = re.compile(r"^(\d+) packets? (captured|received by filter|dropped by kernel)", re.M)


class CaptureError(RuntimeError):
    """A tcpdump could not start (its own message quoted)."""


def _child_setup() -> None:
    """In the child between fork and exec: SIGINT/SIGTERM unblocked (the run starts captures with them held
    back, testbed.process.lifecycle, and exec keeps the mask: tcpdump would ignore the SIGINT that stops it) and
    SIGINT on the parent's death."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGINT), 0, 0, 0)


def tcpdump_argv(port: CapturePort, host_pid: int | None, path: Path, snaplen_bytes: int) -> list[str]:
    """The command that captures ``port`` into ``path``: tcpdump (``-Z root``: Debian's drops to user tcpdump,
    who cannot write into the run directory), prefixed with ``nsenter --net=/proc/PID/ns/net`` for a host NIC."""
    argv = [TCPDUMP, "-i", port.intf, "-s", str(snaplen_bytes), "-w", str(path), "-n", "-Z", "root",
            "--immediate-mode"]
    if port.host is not None:
        argv = ["nsenter", f"--net=/proc/{host_pid}/ns/net", "--"] + argv
    return argv


@dataclass
class _Running:
    port: CapturePort
    path: Path
    log_path: Path
    proc: subprocess.Popen
    cap_bytes: int
    capped: bool = False
    cpu_s: float | None = None  # tcpdump's user + system CPU time, read just before it is stopped


@dataclass
class Captures(StartStop):
    """tcpdump on every port of ``spec`` (testbed.spec.pcap.PcapSpec) of ``fab`` (a running
    testbed.emulation.fabric.Fabric) into ``run_dir/pcap``. ``report``: the manifest's ``pcap`` block once
    stopped (:meth:`stop`). Raises CaptureError from ``start`` when a tcpdump exits or stays silent."""

    fab: object
    spec: PcapSpec
    run_dir: Path
    quiet: bool = True
    report: dict | None = None
    _running: list = field(default_factory=list)
    _halt: threading.Event = field(default_factory=threading.Event)
    _watcher: threading.Thread | None = None

    def start(self) -> None:
        ports = resolve_ports(self.fab.layout, self.spec.ports)
        out = Path(self.run_dir) / "pcap"
        out.mkdir(parents=True, exist_ok=True)
        cap_bytes = self.spec.max_bytes // len(ports)
        for port in ports:
            pid = self.fab.net.get(port.host).pid if port.host else None
            path, log_path = out / f"{port.port}.pcap", out / f"{port.port}.tcpdump.log"
            with open(log_path, "wb") as err:
                proc = subprocess.Popen(tcpdump_argv(port, pid, path, self.spec.snaplen_bytes),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                        start_new_session=True, preexec_fn=_child_setup)
            self._running.append(_Running(port, path, log_path, proc, cap_bytes))
        self._wait_listening()
        self._watcher = threading.Thread(target=self._watch, name="pcap-cap", daemon=True)
        self._watcher.start()

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = list(self._running)
        while waiting:
            raise_if_interrupted()
            for r in list(waiting):
                text = r.log_path.read_text(errors="replace")
                if "listening on" in text:
                    waiting.remove(r)
                elif r.proc.poll() is not None or time.monotonic() > deadline:
                    why = text.strip().splitlines()[-1] if text.strip() else f"exit code {r.proc.poll()}"
                    raise CaptureError(f"output.pcap: tcpdump on {r.port.port} ({r.port.intf}) did not start: {why}")
            time.sleep(0.02)

    def _watch(self) -> None:
        while not self._halt.wait(WATCH_PERIOD_S):
            for r in self._running:
                try:
                    big = r.path.stat().st_size >= r.cap_bytes
                except OSError:
                    continue
                if big and not r.capped and r.proc.poll() is None:
                    r.capped = True
                    r.cpu_s = _cpu_s(r.proc.pid)
                    r.proc.send_signal(signal.SIGINT)
                    log.info("pcap %s reached its cap of %d bytes: capture stopped", r.port.port, r.cap_bytes)

    def stop(self) -> None:
        """SIGINT every tcpdump this object started (SIGKILL after STOP_TIMEOUT_S), then write the report."""
        self._halt.set()
        if self._watcher is not None:
            self._watcher.join()
            self._watcher = None
        for r in self._running:
            if r.proc.poll() is None:
                r.cpu_s = _cpu_s(r.proc.pid)
                r.proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for r in self._running:
            try:
                r.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait()
        if self._running and self.report is None:
            self.report = self._report()
            add_to_manifest(Path(self.run_dir), self.report)
            if not self.quiet:
                print(format_report(self.report), flush=True)

    def _report(self) -> dict:
        files = []
        for r in self._running:
            counters = {what: int(n) for n, what in _COUNTER_RE.findall(r.log_path.read_text(errors="replace"))}
            files.append({"port": r.port.port, "asked": r.port.asked, "interface": r.port.intf,
                          "namespace": "host" if r.port.host else "root",
                          "file": str(r.path.relative_to(self.run_dir)), "packets": count_packets(r.path),
                          "bytes": r.path.stat().st_size if r.path.exists() else 0,
                          "dropped_by_kernel": counters.get("dropped by kernel"), "capped": r.capped,
                          "cpu_s": r.cpu_s})
        cpu = [f["cpu_s"] for f in files if f["cpu_s"] is not None]
        return {"tool": "tcpdump", "snaplen_bytes": self.spec.snaplen_bytes, "max_bytes": self.spec.max_bytes,
                "cap_bytes_per_port": self._running[0].cap_bytes, "cpu_s": round(sum(cpu), 3) if cpu else None,
                "files": files}


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (None when it is gone)."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return round(t.user + t.system, 3)


def count_packets(path: Path) -> int:
    """Packets in the pcap file ``path`` (0 when missing or empty), read with scapy's RawPcapReader."""
    from scapy.utils import RawPcapReader

    if not path.exists() or path.stat().st_size < 24:  # no global header: tcpdump never wrote
        return 0
    n = 0
    with RawPcapReader(str(path)) as reader:
        for _ in reader:
            n += 1
    return n


def add_to_manifest(run_dir: Path, block: dict) -> None:
    """Add ``block`` as manifest.json's ``pcap`` key (the manifest is written before the fabric is built)."""
    run = RunDir(run_dir)
    run.write_manifest({**run.manifest, "pcap": block})


def format_report(block: dict) -> str:
    """One line: ``pcap: N files, P packets (pcap/h1-eth0.pcap 123, ...)``."""
    files = block["files"]
    total = sum(f["packets"] for f in files)
    each = ", ".join(f"{f['file']} {f['packets']}" + (" (capped)" if f["capped"] else "") for f in files[:4])
    more = f", ... {len(files) - 4} more" if len(files) > 4 else ""
    return f"pcap: {len(files)} files, {total} packets ({each}{more})"


def captures_for(fab, spec, run_dir: Path, quiet: bool = True):
    """A :class:`Captures` for the scenario ``spec``'s ``output.pcap``, or a do-nothing context when absent."""
    import contextlib

    if spec.output.pcap is None:
        return contextlib.nullcontext()
    return Captures(fab, spec.output.pcap, Path(run_dir), quiet)
