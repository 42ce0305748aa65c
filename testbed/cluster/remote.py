"""Run the testbed's own kernel steps on another server: one Python process per server over ssh.

A cluster run (testbed.cluster.run_fabric) shapes links, reads queue and drop counters and
samples the CPU on the server where each switch and host lives. The single-server code does
that with pyroute2 and ``/proc`` in its own process; here the same functions run in a Python
process started once per server and run by ssh as root with this checkout on the path::

    ssh SERVER sudo env PYTHONPATH=REPO PYTHON -m testbed.cluster.remote

The driver sends it requests on stdin and reads the answers on stdout, each a 4-byte big-endian
length and a pickle (``pickle`` between machines that already trust each other with root ssh:
docs/cluster.md). Requests:

- ``("call", "module:function", args, kwargs)``: the function's return value;
- ``("new", "module:Class", args, kwargs)``: an object kept on the server, answered with its
  handle; ``("method", handle, name, args, kwargs)``: a method of it; ``("drop", handle)``.

An exception on the server comes back as :class:`RemoteError` naming the server, the call and
the server's traceback. The server process ends with its stdin (the driver's end or ssh gone):
objects it kept are closed (``__exit__`` or ``stop``) first.
"""
from __future__ import annotations

import importlib
import os
import pickle
import shlex
import struct
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Dict, Optional

from topology.naming import check_run_id

REPO = Path(__file__).resolve().parents[2]
#: ssh options as MininetCluster uses them (key login, never a prompt)
SSH = ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-T")
_HEADER = struct.Struct(">I")


class RemoteError(RuntimeError):
    """A request failed on the server (the message names server, call and the server's traceback), or the
    server's process is gone."""


def _resolve(path: str):
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"{path!r}: give 'module:name'")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _read_frame(stream) -> Optional[bytes]:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    n = _HEADER.unpack(head)[0]
    data = stream.read(n)
    if len(data) < n:
        return None
    return data


def _write_frame(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def serve(stdin=None, stdout=None) -> None:
    """The server side: answer requests until stdin ends, then close every kept object."""
    stdin = stdin or sys.stdin.buffer
    if stdout is None:  # answers on a copy of fd 1; fd 1 itself (print(), child processes) goes to stderr
        sys.stdout.flush()
        stdout = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
    kept: Dict[int, Any] = {}
    try:
        while True:
            raw = _read_frame(stdin)
            if raw is None:
                return
            req = pickle.loads(raw)
            try:
                op = req[0]
                if op == "call":
                    value = _resolve(req[1])(*req[2], **req[3])
                elif op == "new":
                    obj = _resolve(req[1])(*req[2], **req[3])
                    kept[id(obj)] = obj
                    value = id(obj)
                elif op == "method":
                    value = getattr(kept[req[1]], req[2])(*req[3], **req[4])
                    if value is kept[req[1]]:  # start() -> self: the object stays on the server
                        value = None
                elif op == "drop":
                    value = kept.pop(req[1], None) is not None
                else:
                    raise ValueError(f"unknown request {op!r}")
                _write_frame(stdout, ("ok", value))
            except Exception as e:  # noqa: BLE001 (handed to the driver)
                _write_frame(stdout, ("err", f"{type(e).__name__}: {e}", traceback.format_exc()))
    finally:
        for obj in reversed(list(kept.values())):
            for name in ("__exit__", "stop"):
                if hasattr(obj, name):
                    try:
                        getattr(obj, name)(*((None, None, None) if name == "__exit__" else ()))
                    except Exception:  # noqa: BLE001
                        pass
                    break


def write_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` on this server (its folder made first)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)


class ServerSession:
    """The driver's end: one Python process on ``server`` (module docstring) for run ``run_id``; thread-safe.

    ``command``: the argv that starts the server side (default: ssh to ``server``; tests pass a
    local one). Use as a context manager or :meth:`close`. Raises ValueError for a bad ``run_id``,
    RemoteError when the process cannot be started or dies.
    """

    def __init__(self, server: str, run_id: str, command: Optional[list] = None, python: str = sys.executable) -> None:
        self.server = server
        # ``--run-id``: ``testbed clean RID`` finds both ends (this ssh and the process on the server), as separate
        # words in both argvs (ssh joins its remote words with spaces)
        remote = ["sudo", "-n", "env", f"PYTHONPATH={REPO}", python, "-m", "testbed.cluster.remote",
                  "--run-id", check_run_id(run_id)]
        self.argv = command or [*SSH, server, *map(shlex.quote, remote)]
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self._stderr: list = []
        threading.Thread(target=self._drain, daemon=True, name=f"remote-{server}").start()

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self._stderr = (self._stderr + [line.decode(errors="replace")])[-40:]

    def _ask(self, req, what: str):
        with self._lock:
            if self.proc.poll() is not None:
                raise RemoteError(f"{self.server}: the testbed's process there is gone (exit {self.proc.returncode}): "
                                  f"{''.join(self._stderr)[-1500:]}")
            try:
                _write_frame(self.proc.stdin, req)
                raw = _read_frame(self.proc.stdout)
            except (BrokenPipeError, OSError) as e:
                raw, err = None, e
            else:
                err = None
            if raw is None:
                self.proc.wait(timeout=10)
                raise RemoteError(f"{self.server}: {what}: no answer ({err or 'process ended'}, exit "
                                  f"{self.proc.returncode}): {''.join(self._stderr)[-1500:]}")
        answer = pickle.loads(raw)
        if answer[0] == "err":
            raise RemoteError(f"{self.server}: {what} failed: {answer[1]}\n{answer[2]}")
        return answer[1]

    def call(self, function: str, *args, **kwargs):
        """``module:function(*args, **kwargs)`` on the server; its return value (picklable)."""
        return self._ask(("call", function, args, kwargs), function)

    def new(self, cls: str, *args, **kwargs) -> "RemoteObject":
        """A ``module:Class(*args, **kwargs)`` kept on the server."""
        return RemoteObject(self, self._ask(("new", cls, args, kwargs), cls), cls)

    def close(self) -> None:
        """End the server's process (its kept objects are closed there first); safe to call twice."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "ServerSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RemoteObject:
    """An object kept on a server (:meth:`ServerSession.new`): ``call(method, *args)`` and ``drop()``."""

    def __init__(self, session: ServerSession, handle: int, what: str) -> None:
        self.session, self.handle, self.what = session, handle, what

    def call(self, method: str, *args, **kwargs):
        return self.session._ask(("method", self.handle, method, args, kwargs), f"{self.what}.{method}")

    def drop(self) -> None:
        self.session._ask(("drop", self.handle), f"{self.what} drop")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="the testbed's process on a server (testbed.cluster.remote)")
    ap.add_argument("--run-id", required=True, type=check_run_id, help="the run it serves (testbed clean finds it)")
    ap.parse_args()
    serve()
