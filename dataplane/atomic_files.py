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
    """Write ``text`` to ``path`` (str or Path) atomically, mode 0644. Raises OSError; no temporary file is
    left behind."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json(path, obj: Any) -> None:
    """Write ``obj`` as indented JSON (numpy numbers as floats), atomically."""
    write_text(path, json.dumps(obj, indent=1, default=float))


def write_csv(df, path) -> None:
    """Write the pandas DataFrame ``df`` as CSV without the index, atomically."""
    write_text(path, df.to_csv(index=False))
