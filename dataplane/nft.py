"""nftables batches: run them (libnftables, else ``nft -f -``), read named counters, find and delete a run's tables.

Every netdev table a run makes carries its run id as prefix (``<rid>ecn``,
``<rid>wdog``, ``<rid>tail``, the faults' table), so :func:`leftover_tables`
finds what a dead run left and ``testbed clean`` deletes exactly those.
libnftables comes from Debian's ``python3-nftables``; without it each batch is
one ``nft -f -`` subprocess (:attr:`Nft.backend` says which ran).
"""
from __future__ import annotations

import re
import subprocess

from topology.naming import run_id_of

#: a named counter in ``nft list counters`` output: (name, packets, bytes)
COUNTER_RE = re.compile(r"counter (\w+) \{\s*packets (\d+) bytes (\d+)")


class NftError(RuntimeError):
    """nft refused a batch; the message holds its error output."""


class Nft:
    """Runs nft command batches: libnftables when importable, else ``nft -f -``."""

    def __init__(self):
        try:
            import nftables
            self._lib = nftables.Nftables()
            self.backend = "nftables (libnftables)"
        except ImportError:
            self._lib = None
            self.backend = "nftables (nft -f)"

    def run(self, text: str) -> str:
        """Run ``text`` (nft commands, one per line); return nft's output; NftError on failure."""
        if self._lib is not None:
            rc, out, err = self._lib.cmd(text)
        else:
            p = subprocess.run(["nft", "-f", "-"], input=text, capture_output=True, text=True)
            rc, out, err = p.returncode, p.stdout, p.stderr
        if rc != 0:
            raise NftError(f"nft failed ({rc}): {err.strip()[:400]}")
        return out


def nft_run(text: str) -> str:
    """Run an nft batch (commands, one per line) and return nft's output; NftError on failure."""
    return Nft().run(text)


def nft_backend() -> str:
    """Which way nft batches run on this machine: ``nftables (libnftables)`` or ``nftables (nft -f)``."""
    return Nft().backend


def leftover_tables(run_id: str | None = None) -> list[str]:
    """netdev tables made by runs (``run_id`` only, when given), listed from nft; [] when nft is absent."""
    try:
        out = Nft().run("list tables netdev")
    except (NftError, FileNotFoundError):
        return []
    names = re.findall(r"^table netdev (\S+)", out, re.M)
    return [n for n in names if run_id_of(n) and (run_id is None or run_id_of(n) == run_id)]


def delete_table(name: str) -> None:
    """Delete netdev table ``name``; NftError when nft refuses."""
    Nft().run(f"delete table netdev {name}")
