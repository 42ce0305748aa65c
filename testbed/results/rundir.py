"""The results root: checked writable before anything is built."""
from __future__ import annotations

import tempfile
from pathlib import Path

from testbed.spec.scenario import ScenarioError


def check_results_root(root: Path) -> None:
    """Raise ScenarioError unless ``root`` is a writable directory or can be created (nothing is made).

    Probes by really creating and removing a temporary file in ``root`` or in
    its nearest existing ancestor (so read-only mounts, files in the way and
    missing permissions are all caught before anything is built).
    """
    root = Path(root).absolute()
    probe_dir = root
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise ScenarioError(f"--results {root}: {probe_dir} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe_dir):
            pass
    except OSError as e:
        what = "is not writable" if probe_dir == root else f"cannot be created ({probe_dir} is not writable)"
        raise ScenarioError(f"--results {root}: {what}: {e.strerror}") from None
