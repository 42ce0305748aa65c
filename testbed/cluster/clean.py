"""``testbed clean`` on every server of a cluster run, through the same ssh Mininet uses.

A driver that dies (SIGKILL, lost power) leaves on each server what Mininet's stop would
have removed: the run's OVS bridges, host namespaces with their shells (``mininet:<rid>...``)
and interfaces. Mininet's own answer is ``ssh server sudo mn -c``, which removes every
Mininet object on the server, the runs of others included; this runs
:func:`testbed.host.cleanup.clean` for the named runs only, on each server, with this
checkout's Python (cluster mode needs the same code path on every server).
"""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, Sequence

from topology.naming import check_run_id

REPO = Path(__file__).resolve().parents[2]
#: ssh options as MininetCluster uses them (key login, never a password prompt)
SSH = ("ssh", "-n", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10")


def clean_servers(servers: Sequence[str], run_ids: Sequence[str], timeout_s: float = 120.0
                  ) -> Dict[str, subprocess.CompletedProcess]:
    """Run ``testbed clean RUN_ID...`` (without --force: a run whose lock a server holds is
    skipped) on each server by ssh; the completed process per server (stdout: the report lines).

    Raises ValueError naming a bad run id (before any ssh), or an empty ``run_ids`` (cleaning
    every run of every server is not offered from here).
    """
    if not run_ids:
        raise ValueError("run_ids is empty: name the runs to clean on the servers")
    rids = [check_run_id(r) for r in run_ids]
    remote = ["sudo", "env", f"PYTHONPATH={REPO}", sys.executable, "-m", "testbed.cli", "clean", *rids]
    return {srv: subprocess.run([*SSH, srv, shlex.join(remote)], capture_output=True, text=True,
                                timeout=timeout_s) for srv in servers}


def main(argv=None) -> int:
    """``python -m testbed.cluster.clean SERVER[,SERVER...] RUN_ID...``: exit 1 if a server failed."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m testbed.cluster.clean SERVER[,SERVER...] RUN_ID...", file=sys.stderr)
        return 2
    rc = 0
    for srv, res in clean_servers(args[0].split(","), args[1:]).items():
        print(f"{srv}: exit {res.returncode}\n{res.stdout}{res.stderr}", end="")
        rc |= res.returncode != 0
    return rc


if __name__ == "__main__":
    sys.exit(main())
