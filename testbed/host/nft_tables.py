"""nftables tables a run created, found by name: ``<run id>_<purpose>`` in family netdev.

The fault injector (testbed.emulation.faults) names its table ``tb12ab_faults``;
:func:`run_tables` finds every such table so teardown and ``testbed clean``
remove exactly the tables of one run (an interface's deletion unhooks its
netdev chains but leaves the table behind).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess

FAMILY = "netdev"
_TABLE_RE = re.compile(r"^(tb[0-9a-f]{4})_[a-z]+$")


def nft(script: str, timeout_s: float = 10.0) -> str:
    """Run an nft script (``nft -f -``) and return its output; RuntimeError with nft's message on failure."""
    p = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        raise RuntimeError(f"nft failed: {p.stderr.strip()} (script: {script.strip()[:300]!r})")
    return p.stdout


def run_tables() -> dict[str, list[str]]:
    """{run id: [table names]} of every netdev table named after a run; {} without the nft tool."""
    if shutil.which("nft") is None:
        return {}
    p = subprocess.run(["nft", "-j", "list", "tables", FAMILY], capture_output=True, text=True, timeout=10)
    if p.returncode != 0:
        return {}
    out: dict[str, list[str]] = {}
    for item in json.loads(p.stdout or "{}").get("nftables", []):
        name = item.get("table", {}).get("name", "")
        m = _TABLE_RE.match(name)
        if m:
            out.setdefault(m.group(1), []).append(name)
    return out


def delete_table(name: str) -> bool:
    """Delete netdev table ``name``; False if it was not there."""
    p = subprocess.run(["nft", "delete", "table", FAMILY, name], capture_output=True, text=True, timeout=10)
    return p.returncode == 0
