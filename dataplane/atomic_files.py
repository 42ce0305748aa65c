"""Atomic file writers: a reader in another process sees the old file or the whole new one, never half.

Each writer writes a temporary file in the target's directory, then renames it
over the target (``os.replace``: rename(2) is atomic within one file system).
Both processes of a run use them: the testbed for its result tables and
``summary.json``, the controller for its ready file and its congestion tables.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` (str or Path) atomically, mode 0644. No temporary file is left behind.

    Raises OSError (the subclass of its errno) whose ``filename`` is ``path``: a failed write(2) or close(2)
    (ENOSPC on a full file system) names no file of its own.
    """
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise _naming(e, path) from e
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError) and e.errno is not None:
            raise _naming(e, path) from e
        raise


def _naming(e: OSError, path: Path) -> OSError:
    """``e`` again (same errno, hence same subclass) with ``path`` as its file name."""
    return OSError(e.errno, e.strerror, str(path))


def write_json(path, obj: Any) -> None:
    """Write ``obj`` as indented JSON (numpy numbers as floats), atomically."""
    write_text(path, json.dumps(obj, indent=1, default=float))


def write_csv(df, path) -> None:
    """Write the pandas DataFrame ``df`` as CSV without the index, atomically."""
    write_text(path, df.to_csv(index=False))
