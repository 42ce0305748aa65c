"""Find what runs left on this machine: each object named by, or running for, a run id.

An object belongs to run ``RID`` (``tb`` + 4 hex digits, see
:mod:`topology.naming`) when:

- OVS bridge, root-namespace interface or named netns: its name is ``RID``
  followed by a lowercase letter (``tb3fa1l1``, ``tb3fa1h1-eth0``, ``tb3fa1probe``);
- process: its argv has ``--run-id RID`` (or ``--run-id=RID``), or an argument
  ``mininet:RID<node>`` (Mininet's host and switch shells), or it is a
  descendant of such a process, or it lives in a network namespace of the run
  (see :func:`_discover_processes`: never the machine's own namespace, and
  only one whose interfaces, ``lo`` aside, all carry the run id).

Nothing is matched by a looser pattern. Removing what is found, and which runs may be
removed, is :mod:`testbed.host.cleanup`.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

import psutil

from topology.naming import RUN_ID_RE, run_id_of
from testbed.host.runlock import known_runs


#: Command-line flags that carry a run id (agents; the controller's oslo.config flag).
RUN_ID_FLAGS = ("--run-id", "--testbed-run-id")


def process_run_ids(cmdline: list[str]) -> set[str]:
    """Return the run ids an argv names via ``--run-id RID``, ``--testbed-run-id RID`` (the
    controller, under os-ken or ryu-manager) or ``mininet:RID<node>``.

    >>> sorted(process_run_ids(["bash", "--norc", "-is", "mininet:tb12abh1"]))
    ['tb12ab']
    """
    ids: set[str] = set()
    for i, arg in enumerate(cmdline):
        flag, eq, value = arg.partition("=")
        if flag not in RUN_ID_FLAGS:
            flag, value = None, ""
        elif not eq:
            value = cmdline[i + 1] if i + 1 < len(cmdline) else ""
        if flag and RUN_ID_RE.match(value):
            ids.add(value)
        elif arg.startswith("mininet:"):
            rid = run_id_of(arg[len("mininet:"):])
            if rid:
                ids.add(rid)
    return ids


def _is_mininet_shell(cmdline: list[str], rid: str) -> bool:
    return any(a.startswith("mininet:") and run_id_of(a[8:]) == rid for a in cmdline)


def netns_inode(pid: int | str) -> int | None:
    """Inode of the network namespace of ``pid`` (or ``"self"``), the namespace's identity; None if unreadable."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


@dataclass
class RunObjects:
    """What one run left: its processes (pid -> process), OVS bridges, named netns, root-namespace
    interfaces (``links``), and whether it has a state file."""

    procs: dict[int, psutil.Process] = field(default_factory=dict)
    bridges: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    has_state: bool = False


#: argv word of a cluster run's session processes (testbed.cluster.remote: the driver's ssh client and the
#: Python it starts on a server); :func:`testbed.host.cleanup.clean` spares them with
#: ``spare_control``
CONTROL_MARK = "testbed.cluster.remote"


def is_control(proc: psutil.Process) -> bool:
    """Whether ``proc`` (found by :func:`_discover_processes`) is a cluster session."""
    try:
        cmdline = getattr(proc, "info", {}).get("cmdline") or proc.cmdline()
    except psutil.Error:
        return False
    return any(CONTROL_MARK in word for word in cmdline)


def protected_pids() -> set[int]:
    """This process and its ancestors: never killed, whatever their argv says."""
    me = psutil.Process()
    return {me.pid, *(p.pid for p in me.parents())}


def _list_bridges(warnings: list[str]) -> list[str] | None:
    try:
        p = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"],
                           capture_output=True, text=True, timeout=15)
    except FileNotFoundError:
        return []  # OVS not installed: no bridges can exist
    except subprocess.TimeoutExpired:
        p = None
    if p is None or p.returncode != 0:
        why = p.stderr.strip() if p is not None else "timed out"
        warnings.append(f"OVS is not reachable ({why}); bridges were not checked. "
                        "Run scripts/start-ovs and clean again.")
        return None
    return p.stdout.split()


def _list_links() -> list[str]:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return [link.get("ifname") for link in ipr.get_links()]


def _list_netns() -> list[str]:
    from pyroute2 import netns

    try:
        return netns.listnetns()
    except OSError:
        return []


def discover(warnings: list[str]) -> tuple[dict[str, RunObjects], list[str] | None, list[str]]:
    """Every run's objects on this machine (module docstring): (run id -> :class:`RunObjects`, all OVS
    bridges or None when OVS could not be asked (a warning is appended to ``warnings``), all
    root-namespace interface names)."""
    found: dict[str, RunObjects] = {}

    def slot(rid: str) -> RunObjects:
        return found.setdefault(rid, RunObjects())

    for rid in known_runs():
        slot(rid).has_state = True
    bridges = _list_bridges(warnings)
    for br in bridges or []:
        rid = run_id_of(br)
        if rid:
            slot(rid).bridges.append(br)
    links = _list_links()
    for name in links:
        rid = run_id_of(name)
        if rid:
            slot(rid).links.append(name)
    for ns in _list_netns():
        rid = run_id_of(ns)
        if rid:
            slot(rid).netns.append(ns)
    _discover_processes(found, slot)
    return found, bridges, links


def _netns_link_names(pid: int) -> list[str] | None:
    """Interface names in the network namespace of ``pid`` (/proc/PID/net/dev); None if unreadable."""
    try:
        with open(f"/proc/{pid}/net/dev") as fh:
            return [line.split(":", 1)[0].strip() for line in fh.readlines()[2:]]
    except OSError:
        return None


def netns_is_runs(rid: str, pid: int, need_own_link: bool) -> bool:
    """True if every interface but ``lo`` in the netns of ``pid`` carries ``rid``.

    The machine's own namespace always has other interfaces (eth0, other
    runs' veths, ...), so this can never hand it to a run. With
    ``need_own_link`` at least one interface must carry ``rid``.
    """
    names = _netns_link_names(pid)
    if names is None:
        return False
    mine = [n for n in names if n != "lo"]
    if any(run_id_of(n) != rid for n in mine):
        return False
    return bool(mine) or not need_own_link


def _discover_processes(found: dict[str, RunObjects], slot) -> None:
    """Attribute processes to runs: by argv, by network namespace, by ancestry.

    A network namespace belongs to a run only if it is not the namespace of
    this process, of PID 1 or of any protected process, every interface in
    it except ``lo`` carries the run id, and either a Mininet shell of the run
    lives in it, it is a named netns of the run, or at least one of its
    interfaces carries the run id (programs started with ``mnexec`` whose
    host shell already died).
    """
    protected = protected_pids()
    excluded_ns = {netns_inode("self"), netns_inode(1)}
    excluded_ns |= {netns_inode(pid) for pid in protected}
    excluded_ns.discard(None)
    claimed: dict[int, str] = {}  # netns inode -> run id that positively claims it
    for rid, f in found.items():
        for ns in f.netns:
            try:
                claimed[os.stat(f"/run/netns/{ns}").st_ino] = rid
            except OSError:
                pass
    procs = list(psutil.process_iter(["pid", "cmdline"]))
    by_ns: dict[int, list[psutil.Process]] = {}
    for proc in procs:
        ino = netns_inode(proc.pid)
        if ino is not None and ino not in excluded_ns:
            by_ns.setdefault(ino, []).append(proc)
        cmdline = proc.info.get("cmdline") or []
        for rid in process_run_ids(cmdline):
            if proc.pid not in protected:
                slot(rid).procs[proc.pid] = proc
            if ino is not None and ino not in excluded_ns and _is_mininet_shell(cmdline, rid):
                claimed.setdefault(ino, rid)
    for ino, members in by_ns.items():
        pid = members[0].pid
        rid = claimed.get(ino)
        if rid is not None:
            if not netns_is_runs(rid, pid, need_own_link=False):
                continue
        else:
            names = _netns_link_names(pid) or []
            rids = {run_id_of(n) for n in names} - {None}
            if len(rids) != 1:
                continue
            rid = rids.pop()
            if not netns_is_runs(rid, pid, need_own_link=True):
                continue
        for proc in members:
            if proc.pid not in protected:
                slot(rid).procs[proc.pid] = proc
    for rid, f in list(found.items()):  # descendants of anything matched
        for proc in list(f.procs.values()):
            try:
                for child in proc.children(recursive=True):
                    if child.pid not in protected:
                        f.procs.setdefault(child.pid, child)
            except psutil.Error:
                pass
