"""Bounded reads of user-given files (scenarios, SimAI and Chakra workloads): never block, never read
more than asked.

A path can name a file that is "regular" but never ends or never answers: ``/proc/kmsg`` blocks a
plain read until the kernel logs something, procfs files report size 0 whatever they hold. The file
is opened ``O_NONBLOCK`` and read in chunks while :func:`select.select` says data is ready, up to
``max_bytes + 1`` bytes and ``timeout_s`` seconds in all.
"""
from __future__ import annotations

import os
import select
import stat
import time

#: seconds a read of one file may take before it is given up (a local file takes microseconds)
READ_TIMEOUT_S = 5.0


class UnreadableFile(OSError):
    """The file is not a regular file, does not answer within the timeout, or is larger than allowed."""


def read_bounded(path, max_bytes: int, timeout_s: float = READ_TIMEOUT_S) -> bytes:
    """At most ``max_bytes + 1`` bytes of ``path`` (one more than allowed tells the caller it is too big).

    Raises FileNotFoundError / PermissionError as open does, and :class:`UnreadableFile` naming the path
    when it is not a regular file or gives no end of data within ``timeout_s``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnreadableFile(f"{path}: not a regular file")
        chunks, n, deadline = [], 0, time.monotonic() + timeout_s
        while n <= max_bytes:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, left))
            if not ready:
                raise UnreadableFile(f"{path}: no data within {timeout_s:g} s (not a file that can be read to its end)")
            try:
                b = os.read(fd, min(1 << 20, max_bytes + 1 - n))
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise UnreadableFile(f"{path}: no data within {timeout_s:g} s (not a file that can be read "
                                         f"to its end)") from None
                time.sleep(0.01)
                continue
            if not b:
                break
            chunks.append(b)
            n += len(b)
        return b"".join(chunks)
    finally:
        os.close(fd)
