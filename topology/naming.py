"""Run identifiers and the names of every kernel object a run creates.

Every interface, OVS bridge, namespace and process a run creates carries the
run id as prefix (interfaces, bridges) or as ``--run-id RID`` / ``mininet:RID``
in its command line (processes), so cleanup can remove exactly what a run made.

Run id: ``tb`` + 4 lowercase hex digits, e.g. ``tb3fa1``.
Node names start with the run id (topology builders: ``<rid>s<N>`` spine N,
``<rid>l<N>`` leaf N, ``<rid>h<N>`` host N, 1-based). Interface names follow Mininet: ``<node>-eth<port>`` (at most 15
characters: ``tb3fa1l12-eth12``).
"""
from __future__ import annotations

import re
import secrets

from topology.model import RUN_ID_RE  # noqa: F401  (re-exported: testbed's run-id checks)

#: Matches any name made by any run (interfaces, bridges, netns).
ANY_RUN_OBJECT_RE = re.compile(r"^(tb[0-9a-f]{4})[a-z]")


def new_run_id() -> str:
    """Return a fresh random run id such as ``tb3fa1``."""
    return "tb" + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` unchanged; raise ValueError if it is not ``tb`` + 4 hex digits."""
    if not RUN_ID_RE.match(run_id):
        raise ValueError(f"run id {run_id!r} is not 'tb' followed by 4 hex digits")
    return run_id


def run_id_of(name: str) -> str | None:
    """Return the run id prefix of an object name, or None if no run made it."""
    m = ANY_RUN_OBJECT_RE.match(name)
    return m.group(1) if m else None
