"""The os-ken controller as a child process of the testbed: start, wait ready, stop.

The controller (``python -m controllers.run``) listens on 127.0.0.1 only, on a
free port chosen per run, logs into the run directory, and writes a ready file
once every switch of the topology has connected and a barrier confirmed its
flows and groups (see controllers/fabric_app.py). ``start()`` may be called
again after the process died (testbed.emulation.controller_supervisor restarts it): same
port, same topology file, logs appended.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from testbed.lifecycle import raise_if_interrupted


class ControllerError(RuntimeError):
    """The controller did not start, or reported OpenFlow errors."""


def free_tcp_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControllerProcess:
    """One controller process for one run.

    Files in ``run_dir``: ``controller.log`` (its log), ``controller.ready``
    (JSON written by the app: dpids, flows, groups, errors).
    """

    def __init__(self, run_id: str, run_dir: Path, topology_path: Path, port: int | None = None):
        self.run_id = run_id
        self.port = port or free_tcp_port()
        self.log_path = run_dir / "controller.log"
        self.ready_path = run_dir / "controller.ready"
        self.topology_path = topology_path
        self.proc: subprocess.Popen | None = None
        self._out = None
        #: set by stop(): the exit that follows is the testbed's doing, not a death
        self.stopped_on_purpose = False

    def start(self) -> "ControllerProcess":
        """Spawn the controller and wait until it listens (at most 20 s). Raises ControllerError."""
        self.ready_path.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "controllers.run", "--run-id", self.run_id,
               "--topology", str(self.topology_path), "--listen-port", str(self.port),
               "--ready-file", str(self.ready_path), "--log-file", str(self.log_path)]
        if self._out is not None:
            self._out.close()
        self.stopped_on_purpose = False
        self._out = open(self.log_path.with_suffix(".stderr"), "ab")
        # own session: a Ctrl-C at the terminal reaches the testbed, which then stops us in order
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ControllerError(f"controller exited with code {self.proc.returncode} at start; "
                                      f"see {self.log_path} and {self._out.name}")
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise ControllerError(f"controller did not listen on 127.0.0.1:{self.port} within 20 s; see {self.log_path}")

    def read_ready(self) -> dict | None:
        """The ready file's content, or None while there is none."""
        try:
            return json.loads(self.ready_path.read_text())
        except FileNotFoundError:
            return None

    def wait_ready(self, timeout_s: float = 60.0, give_up=raise_if_interrupted) -> dict:
        """Block until the app confirmed every switch's flows and groups; return the ready file.

        ``give_up()`` runs every 50 ms and may raise to stop waiting (default:
        a held-back Ctrl-C). Raises ControllerError on timeout, on a dead
        controller, or when the switches answered with OpenFlow errors.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            give_up()
            if self.proc is None or self.proc.poll() is not None:
                raise ControllerError(f"controller died (see {self.log_path})")
            if self.ready_path.exists():
                ready = json.loads(self.ready_path.read_text())
                if ready.get("errors"):
                    raise ControllerError(f"switches rejected flows or groups: {ready['errors']}")
                return ready
            time.sleep(0.05)
        raise ControllerError(f"not every switch connected and confirmed its flows within {timeout_s:.0f} s; "
                              f"see {self.log_path}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s. Safe to call twice. A supervisor does not count
        this exit as a death."""
        self.stopped_on_purpose = True
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
            except ProcessLookupError:
                pass
        if self._out is not None:
            self._out.close()
            self._out = None
