"""Per-run lock and state files: how cleanup tells a live run from leftovers.

A run holds ``STATE_DIR/<rid>.lock`` with an exclusive ``flock`` for its whole
lifetime and keeps ``STATE_DIR/<rid>.json`` (pid, start time, argv, objects it
created). The kernel drops the flock when the process dies, however it dies,
so "lock file present but not held" means the run is gone and its objects are
leftovers. ``testbed clean`` never touches a run whose lock is held.

The lock fd is close-on-exec, so processes the run spawns do not inherit it and
cannot keep a crashed run looking live.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from topology.naming import RUN_ID_RE, check_run_id

#: Per-run lock and state files live here; a live run holds an flock on its lock.
STATE_DIR = Path(os.environ.get("TESTBED_STATE_DIR", "/run/aifabric"))


class RunLockError(RuntimeError):
    """Raised when a run id is already held by a live run."""


def state_dir() -> Path:
    """Return the directory holding lock and state files (:data:`STATE_DIR`)."""
    return Path(STATE_DIR)


def lock_path(run_id: str, directory: Path | None = None) -> Path:
    return (directory or state_dir()) / f"{run_id}.lock"


def state_path(run_id: str, directory: Path | None = None) -> Path:
    return (directory or state_dir()) / f"{run_id}.json"


class RunLock:
    """Hold the lock of one run for the lifetime of a ``with`` block.

    ``with RunLock("tb3fa1") as lock: ...`` creates ``STATE_DIR/tb3fa1.lock``
    (flocked) and ``STATE_DIR/tb3fa1.json``, and removes both on exit.
    Use :meth:`record` to note each object the run creates.

    Raises:
        ValueError: ``run_id`` is not ``tb`` + 4 hex digits.
        RunLockError: another process holds the lock of this run id.
        OSError: the state directory cannot be created or written (not root?).
    """

    #: How long ``__enter__`` retries when the lock is momentarily held by an
    #: :func:`is_live` check of another process (seconds).
    RETRY_S = 0.5

    def __init__(self, run_id: str, directory: Path | None = None) -> None:
        self.run_id = check_run_id(run_id)
        self.directory = Path(directory) if directory is not None else state_dir()
        self.lock_path = lock_path(run_id, self.directory)
        self.state_path = state_path(run_id, self.directory)
        self._fd: int | None = None
        self._state: dict = {}

    def __enter__(self) -> "RunLock":
        self.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + self.RETRY_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
                    os.close(fd)
                    owner = (read_state(self.run_id, self.directory) or {}).get("pid", "?")
                    raise RunLockError(
                        f"run {self.run_id} is already live (pid {owner}); "
                        f"lock {self.lock_path} is held"
                    ) from None
                time.sleep(0.02)
        self._fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._state = {
            "run_id": self.run_id,
            "pid": os.getpid(),
            "started_at": time.time(),
            "started_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "argv": list(sys.argv),
            "objects": {},
        }
        self._write_state()
        return self

    def record(self, kind: str, name: str) -> None:
        """Note that the run created object ``name`` of ``kind`` (e.g. 'bridge')."""
        if self._fd is None:
            raise RuntimeError("RunLock.record() called outside the 'with' block")
        names = self._state["objects"].setdefault(kind, [])
        if name not in names:
            names.append(name)
            self._write_state()

    def _write_state(self) -> None:
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        tmp.write_text(json.dumps(self._state, indent=2) + "\n")
        os.replace(tmp, self.state_path)

    def __exit__(self, *exc_info) -> None:
        self.release()

    def release(self) -> None:
        """Remove the state and lock files and drop the lock (idempotent)."""
        if self._fd is None:
            return
        for path in (self.state_path, self.lock_path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        os.close(self._fd)  # closing the last fd drops the flock
        self._fd = None


def is_live(run_id: str, directory: Path | None = None) -> bool:
    """Return True if the lock file of ``run_id`` exists and someone holds its flock.

    A lock file we cannot open counts as live (never clean what we cannot check).
    """
    path = lock_path(run_id, directory)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # EWOULDBLOCK: held; anything else: cannot tell, so live
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def read_state(run_id: str, directory: Path | None = None) -> dict | None:
    """Return the parsed state file of ``run_id``, or None if absent or unreadable."""
    try:
        return json.loads(state_path(run_id, directory).read_text())
    except (OSError, ValueError):
        return None


def known_runs(directory: Path | None = None) -> list[str]:
    """Return the sorted run ids that have a lock or state file in the state dir."""
    try:
        entries = os.listdir(directory or state_dir())
    except FileNotFoundError:
        return []
    ids = set()
    for entry in entries:
        stem, dot, ext = entry.partition(".")
        if ext in ("lock", "json") and RUN_ID_RE.match(stem):
            ids.add(stem)
    return sorted(ids)


@contextmanager
def held_flock(lock_file: str | None):
    """Hold ``flock(lock_file, LOCK_EX)`` (waiting for it) for the block; no-op for None or "".

    The shared fabric lock of a machine where several people or tools build fabrics (e.g.
    ``/tmp/fabric.lock``): ``testbed regress --lock`` and the benchmarks take it per run.
    """
    if not lock_file:
        yield
        return
    with open(lock_file, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
