"""Remove what dead runs left behind, and nothing else.

What belongs to a run, and how it is found, is :mod:`testbed.host.leftovers`
(OVS bridges, interfaces and named netns named by the run id; processes naming
it in their argv, their descendants, and those in the run's network namespaces).
This module decides which runs may be removed and removes their objects.

Policy: a run whose lock is held (:func:`testbed.host.runlock.is_live`) is skipped,
even when named explicitly; ``include_live=True`` (``testbed clean --force``)
cleans it anyway, for a run that hangs: the process holding the lock (the pid of its
state file, started before the lock was taken) is ended first, SIGTERM then SIGKILL after
the grace period, so it cannot restart its controller on a fabric being removed. Nothing is matched by a looser pattern,
nothing is killed by name, and ``mn -c`` is never run.

With ``run_ids=None`` every run found on the machine is considered, so the
state dir (``TESTBED_STATE_DIR``) must be the one the live runs use.
"""
from __future__ import annotations

import errno
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from dataplane import nft
from topology.naming import check_run_id, run_id_of
from testbed.host.leftovers import RunObjects, discover, is_control, netns_inode, protected_pids
from testbed.host.runlock import is_live, lock_path, state_path

#: Processes never signalled, whatever matched them (last line of defence).
NEVER_KILL = frozenset({"ovs-vswitchd", "ovsdb-server", "systemd", "init", "sshd", "dockerd"})
#: Seconds between SIGTERM and SIGKILL.
DEFAULT_GRACE_S = 3.0
_OVS_TIMEOUT_S = 10


@dataclass
class RunCleanup:
    """What was removed for one run; lists hold names (processes: 'PID NAME')."""

    run_id: str
    processes: list[str] = field(default_factory=list)
    bridges: list[str] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    state_files: list[str] = field(default_factory=list)
    nft_tables: list[str] = field(default_factory=list)

    KINDS = ("processes", "bridges", "interfaces", "netns", "state_files", "nft_tables")

    def counts(self) -> dict[str, int]:
        return {k: len(getattr(self, k)) for k in self.KINDS}

    def summary(self) -> str:
        """E.g. ``removed run tb12ab: 3 processes, 6 bridges, 22 interfaces``."""
        singular = {"processes": "process", "bridges": "bridge", "interfaces": "interface",
                    "netns": "netns", "state_files": "state file", "nft_tables": "nft table"}
        parts = []
        for kind, n in self.counts().items():
            if n:
                word = singular[kind] if n == 1 else kind.replace("_", " ")
                parts.append(f"{n} {word}")
        return f"removed run {self.run_id}: {', '.join(parts) or 'nothing'}"


@dataclass
class CleanReport:
    """Result of :func:`clean`: per-run removals, live runs skipped, warnings."""

    runs: list[RunCleanup] = field(default_factory=list)
    skipped_live: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when nothing was removed."""
        return self.total == 0

    def totals(self) -> dict[str, int]:
        """Objects removed per kind, summed over runs."""
        out = dict.fromkeys(RunCleanup.KINDS, 0)
        for r in self.runs:
            for k, n in r.counts().items():
                out[k] += n
        return out

    @property
    def total(self) -> int:
        """Number of objects removed, all kinds and runs together."""
        return sum(self.totals().values())

    def __str__(self) -> str:
        return "; ".join(self.lines())

    def lines(self) -> list[str]:
        """Lines for the terminal: one per cleaned run, then skipped live runs."""
        out = [r.summary() for r in self.runs if any(r.counts().values())]
        out += [f"skipped live run {rid} (its lock is held; use --force to clean it anyway)"
                for rid in self.skipped_live]
        if not out:
            out.append("nothing to clean")
        return out


def _live_owner(rid: str) -> psutil.Process | None:
    """The process holding run ``rid``'s lock (its state file's pid), when it is alive, was started no later
    than the lock was taken (not a reused pid) and is not this process or an ancestor; else None."""
    from testbed.host.runlock import read_state

    state = read_state(rid) or {}
    try:
        proc = psutil.Process(int(state["pid"]))
        if proc.pid in protected_pids() or proc.create_time() > float(state["started_at"]) + 1.0:
            return None
        return proc
    except (KeyError, TypeError, ValueError, psutil.Error):
        return None


def kill_in_namespaces(shell_pids: list[int], grace_s: float = 1.0) -> list[str]:
    """End every process in the network namespaces of ``shell_pids`` (a run's Mininet host shells) but the
    shells themselves: what a user started there (``h1 iperf3 -s -D`` in ``--cli``) is re-parented to init
    when the shell goes, and its namespace, emptied of the run's interfaces, no longer names the run.
    Returns 'PID NAME' of each process ended (SIGTERM, SIGKILL after ``grace_s``)."""
    inodes = {i for i in (netns_inode(p) for p in shell_pids) if i is not None}
    inodes.discard(netns_inode("self"))  # never the machine's own namespace
    skip = set(shell_pids) | protected_pids()
    procs = {p.pid: p for p in psutil.process_iter() if p.pid not in skip and netns_inode(p.pid) in inodes}
    return _kill(procs, grace_s)


def _kill(procs: dict[int, psutil.Process], grace_s: float) -> list[str]:
    """SIGTERM, wait up to ``grace_s``, SIGKILL the rest; return 'PID NAME' of those hit."""
    hit: list[str] = []
    alive: list[psutil.Process] = []
    for proc in procs.values():
        try:
            name = proc.name()
            if proc.pid <= 1 or name in NEVER_KILL:
                continue
            label = f"{proc.pid} {name}"
            proc.terminate()
        except psutil.NoSuchProcess:
            continue
        except psutil.Error:
            continue  # AccessDenied: not ours to kill
        hit.append(label)
        alive.append(proc)

    def still_running(p: psutil.Process) -> bool:
        try:
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if still_running(p)]
        if alive:
            time.sleep(0.05)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    deadline = time.monotonic() + 2.0
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if still_running(p)]
        if alive:
            time.sleep(0.05)
    return hit


def _del_bridges(names: list[str], warnings: list[str]) -> list[str]:
    if not names:
        return []
    argv = ["ovs-vsctl", f"--timeout={_OVS_TIMEOUT_S}"]
    for i, br in enumerate(names):
        argv += (["--"] if i else []) + ["--if-exists", "del-br", br]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=_OVS_TIMEOUT_S + 5)
    except (OSError, subprocess.TimeoutExpired) as exc:
        warnings.append(f"deleting bridges {', '.join(names)} failed: {exc}")
        return []
    if p.returncode != 0:
        warnings.append(f"deleting bridges {', '.join(names)} failed: {p.stderr.strip()}")
        return []
    return list(names)


def _del_links(rid: str, seen: list[str], warnings: list[str]) -> list[str]:
    """Delete root-namespace links named ``rid...``; return those gone now.

    ``seen`` are the run's links found before anything was removed: one that
    vanished since (its veth peer's namespace died with the run's processes)
    counts as removed too.
    """
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    removed = []
    with IPRoute() as ipr:
        links = [(link["index"], link.get("ifname")) for link in ipr.get_links()]
        mine = [(idx, name) for idx, name in links if run_id_of(name) == rid]
        for idx, name in mine:
            try:
                ipr.link("del", index=idx)
            except NetlinkError as exc:
                if exc.code != errno.ENODEV:  # ENODEV: went with its veth peer
                    warnings.append(f"deleting interface {name} failed: {exc}")
        left = {link.get("ifname") for link in ipr.get_links()}
        names = dict.fromkeys([*seen, *(name for _, name in mine)])
        removed = [name for name in names if name not in left]
    return removed


def _remove_each(names: list[str], remove, what: str, errors, warnings: list[str]) -> list[str]:
    """``remove(name)`` for each name; the names removed; a warning per ``errors`` raised."""
    removed = []
    for name in names:
        try:
            remove(name)
            removed.append(name)
        except errors as exc:
            warnings.append(f"removing {what} {name} failed: {exc}")
    return removed


def _del_netns(names: list[str], warnings: list[str]) -> list[str]:
    from pyroute2 import netns

    return _remove_each(names, netns.remove, "netns", OSError, warnings)


def _del_tables(names: list[str], warnings: list[str]) -> list[str]:
    return _remove_each(names, nft.delete_table, "nft table", nft.NftError, warnings)


def _del_state(rid: str) -> list[str]:
    removed = []
    for path in (state_path(rid), lock_path(rid)):
        try:
            Path(path).unlink()
            removed.append(str(path))
        except FileNotFoundError:
            pass
    return removed


def clean(
    run_ids: list[str] | None = None,
    include_live: bool = False,
    grace_s: float = DEFAULT_GRACE_S,
    spare_control: bool = False,
) -> CleanReport:
    """Remove the leftovers of dead runs; see the module docstring for what matches.

    Args:
        run_ids: runs to clean; ``None`` means every run found on the machine
            (state files, OVS bridges, interfaces, named netns, processes).
        include_live: also clean runs whose lock is held (kills a running run).
        grace_s: seconds between SIGTERM and SIGKILL.
        spare_control: leave the run's control processes alone: the process holding its lock (the
            driver of a live run) and the cluster sessions (:data:`testbed.host.leftovers.CONTROL_MARK`: the
            driver's ssh clients and their Python on each server). A cluster run's teardown cleans with it,
            so its safety net removes what Mininet left without ending the run or its sessions (on a machine
            that is both driver and server, or in the one-machine lab, they are all visible).

    Returns:
        A :class:`CleanReport`; warnings explain what could not be checked
        (e.g. OVS down: bridges skipped).

    Raises:
        ValueError: an entry of ``run_ids`` is not ``tb`` + 4 hex digits.
        PermissionError: not root (cannot list or delete kernel objects).
    """
    wanted = None if run_ids is None else {check_run_id(r) for r in run_ids}
    report = CleanReport()
    found, bridges, _ = discover(report.warnings)
    tables = nft.leftover_tables()  # the runs' netdev tables (<rid>ecn, <rid>tail, ...)
    for rid in sorted(wanted if wanted is not None else set(found) | {run_id_of(t) for t in tables}):
        if not include_live and is_live(rid):
            report.skipped_live.append(rid)
            continue
        f = found.get(rid, RunObjects())
        rc = RunCleanup(rid)
        owner = _live_owner(rid) if include_live else None
        procs = {p: q for p, q in f.procs.items() if owner is None or p != owner.pid}
        if spare_control:
            procs = {p: q for p, q in procs.items() if not is_control(q)}
            owner = None
        rc.processes = _kill({owner.pid: owner}, grace_s) if owner is not None else []  # first: it restarts things
        rc.processes += _kill(procs, grace_s)
        if bridges is not None:
            rc.bridges = _del_bridges(f.bridges, report.warnings)
        seen = [n for n in f.links if n not in f.bridges]  # a bridge's own port goes with it
        rc.interfaces = _del_links(rid, seen, report.warnings)
        rc.netns = _del_netns(f.netns, report.warnings)
        rc.state_files = _del_state(rid)
        rc.nft_tables = _del_tables([t for t in tables if run_id_of(t) == rid], report.warnings)
        report.runs.append(rc)
    return report

