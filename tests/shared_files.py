"""Where tests find the published workload files this repository does not ship (test-only: the product never
reads them).

``$TESTBED_SHARED_WORKLOADS`` names a directory holding ``aicb/`` (AICB's ``workload/simAI`` files),
``simai/`` (SimAI's examples: ``workload_analytical.txt``, ``workload_ep_test.txt``, ``microAllReduce.txt``)
and ``chakra_astrasim/`` (ASTRA-sim's Chakra example traces); unset or empty, ``../shared/workloads`` beside
the repository. A test that reads them skips when its file or folder is absent, the reason naming the path
and the variable (:func:`needs`).

Import as ``from shared_files import ...`` (pytest puts ``tests/`` on sys.path for the unit tests; an
integration test adds it, as tests/integration/test_chakra_astrasim_replay.py does).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

#: the environment variable naming the directory of shared workload files
ENV = "TESTBED_SHARED_WORKLOADS"
#: the directory when the variable is unset or empty: ../shared/workloads beside the repository
DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "workloads"


def shared_workloads() -> Path:
    """The directory of shared workload files: ``$TESTBED_SHARED_WORKLOADS`` (resolved), else :data:`DEFAULT`."""
    value = os.environ.get(ENV, "").strip()
    return Path(value).expanduser().resolve() if value else DEFAULT


def shared(relative: str) -> Path:
    """``relative`` (``aicb``, ``simai/workload_ep_test.txt``) inside :func:`shared_workloads`."""
    return shared_workloads() / relative


def needs(path: Path) -> pytest.MarkDecorator:
    """A skipif mark: skip when ``path`` (from :func:`shared`) does not exist, naming it and the variable."""
    return pytest.mark.skipif(not path.exists(), reason=f"{path} is not here: set {ENV} to a directory holding "
                                                        f"aicb/, simai/, chakra_astrasim/ (default {DEFAULT})")
