"""Several "servers" on one machine, for Mininet's cluster engine: a lab in namespaces.

:class:`LocalServers` is a context manager that builds, on this machine only:

- a *console* network namespace holding the lab LAN (a Linux bridge ``lan``) with the
  address ``<lan>.1``; the cluster driver (Mininet's ``MininetCluster``, the controller)
  runs there (:meth:`LocalServers.console_argv`);
- per server, a network namespace joined to the LAN by a veth pair (``lan0`` inside, address
  ``<lan>.<2+i>``) and a private mount namespace with its own ``/run`` (tmpfs) and its own
  ``/etc/ssh/ssh_config.d`` (the lab's client settings: the harness's key, no known_hosts);
  inside it, its own ``ovsdb-server`` + ``ovs-vswitchd`` (database and logs in the server's
  temp dir, sockets in its ``/run/openvswitch``, so a plain ``ovs-vsctl`` on the server
  talks to that server's switch only) and its own ``sshd`` (root login with a key the
  harness made, ``PermitTunnel yes`` for ``ssh -w`` links).

Every server sees the same file system as this machine (same ``mnexec``, ``sudo`` and
Python), which is what Mininet's cluster mode expects of real servers. Nothing is created
in the machine's own network namespace and the machine's Open vSwitch is never used. On exit
(also on an exception) every process that ran in a server's or the console's mount namespace
is ended, the namespaces (and so every interface in them) are deleted and the temp dir is
removed: :meth:`LocalServers.leftovers` is empty afterwards.

Needs root, ``openssh-server``, ``openssh-client``, ``sudo``, ``openvswitch-switch``
(binaries only; its service is not used), ``iproute2`` and util-linux ``unshare``.
"""
from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from testbed.host.runlock import STATE_DIR

#: The lab LAN's /24 (exists only inside the harness's namespaces).
DEFAULT_LAN = "172.31.213"
#: prefix of every namespace and temp dir the harness makes: ``mcl`` + 4 hex digits
NAME_PREFIX = "mcl"
MAX_SERVERS = 8
OVS_SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
SSHD = "/usr/sbin/sshd"
#: seconds to wait for a server's sshd and ovs-vswitchd to come up
START_TIMEOUT_S = 30.0

#: send buffer of each server's Open vSwitch packet socket (scripts/start-ovs --wmem-bytes default)
OVS_SEND_BUFFER_BYTES = 64 << 20
#: on a server: a throwaway bridge between two veth pairs, one frame through it (OVS opens its send socket),
#: wait until the socket exists, remove bridge and veths
WARM_SCRIPT = (
    "set -e; ip link add wa0 type veth peer name wa1; ip link add wb0 type veth peer name wb1; "
    "for i in wa0 wa1 wb0 wb1; do ip link set $i up; done; "
    "ovs-vsctl --timeout=10 add-br {br} -- set bridge {br} datapath_type=netdev -- add-port {br} wa1 "
    "-- add-port {br} wb1; ovs-ofctl del-flows {br}; ovs-ofctl add-flow {br} in_port=wa1,actions=output:wb1; "
    "ok=1; for n in $(seq 50); do "
    "python3 -c 'import socket; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((\"wa0\", 0)); "
    "s.send(bytes([255])*6 + bytes([2,0,0,0,0,1]) + bytes([0x88,0xb5]) + bytes(46))'; "
    "if [ $(awk 'NR>1 && $5==0' /proc/net/packet | wc -l) -ge 1 ]; "
    "then ok=0; break; fi; sleep 0.1; done; "
    "ovs-vsctl --timeout=10 del-br {br}; ip link del wa0; ip link del wb0; exit $ok")
_REQUIRED = ("ip", "unshare", "nsenter", "ssh", "ssh-keygen", "sudo", "mnexec", "ovsdb-tool", "ovsdb-server",
             "ovs-vswitchd", "ovs-vsctl")


class ServersError(RuntimeError):
    """The harness could not build a server (the message names the step and its output)."""


@dataclass(frozen=True)
class Server:
    """One emulated server: its name (used by Mininet as the server name), LAN address,
    network namespace and private directory."""

    name: str
    ip: str
    netns: str
    dir: Path

    def ovs_env(self) -> Dict[str, str]:
        """Environment for ``ovs-vsctl``/``ovs-appctl`` run from outside the server."""
        return {**os.environ, "OVS_RUNDIR": str(self.dir / "run"), "OVS_DBDIR": str(self.dir)}


def _run(argv: Sequence[str], what: str, timeout: float = 30.0, **kw) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
    if proc.returncode != 0:
        raise ServersError(f"{what}: {' '.join(map(shlex.quote, argv))} exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-800:]}")
    return proc.stdout


def _mnt_ns(pid: int) -> Optional[str]:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _pids_in_mnt_ns(ns: str) -> List[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _mnt_ns(int(entry)) == ns:
            found.append(int(entry))
    return found


class LocalServers:
    """Context manager: ``count`` servers on this machine (module docstring).

    ``count``: 1..MAX_SERVERS. ``lan``: first three octets of the lab LAN (inside the lab's
    namespaces only). Attributes after ``__enter__``: ``servers`` (list of :class:`Server`,
    named ``srv1``, ``srv2``...: give these names, or their ``ip``, to ``MininetCluster``),
    ``console_ip``, ``dir`` (temp dir), ``key`` (private key path).

    Raises ValueError for a bad ``count``; ServersError (after removing what was made) when a
    step fails; RuntimeError naming the missing tools when one is not installed.
    """

    def __init__(self, count: int = 2, lan: str = DEFAULT_LAN) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SERVERS:
            raise ValueError(f"count = {count!r}: allowed 1..{MAX_SERVERS} servers")
        self.count = count
        self.lan = lan
        self.tag = NAME_PREFIX + secrets.token_hex(2)
        self.console_netns = self.tag + "c"
        self.console_ip = f"{lan}.1"
        self.servers: List[Server] = []
        self.dir: Optional[Path] = None
        self.key: Optional[Path] = None
        self._anchors: Dict[str, subprocess.Popen] = {}  # name -> process holding the mount ns
        self._mnt: Dict[str, str] = {}  # name -> mount namespace id (readlink /proc/PID/ns/mnt)
        self._netns: List[str] = []

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "LocalServers":
        missing = [t for t in _REQUIRED if shutil.which(t) is None] + ([] if os.path.exists(SSHD) else [SSHD])
        if missing:
            raise RuntimeError(f"LocalServers needs {', '.join(missing)} (apt: openssh-server openssh-client sudo "
                               f"openvswitch-switch iproute2 mininet)")
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=self.tag + "-"))
        os.chmod(self.dir, 0o700)
        self.key = self.dir / "id_ed25519"
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", self.tag, "-f", str(self.key)], "ssh key")
        (self.dir / "authorized_keys").write_text(Path(str(self.key) + ".pub").read_text())
        client = self.dir / "ssh_config.d"
        client.mkdir()
        (client / "lab.conf").write_text(
            f"Host *\n  User root\n  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
            "  ServerAliveInterval 5\n")
        # the LAN: a bridge in the console namespace
        self._add_netns(self.console_netns)
        ip_c = ["ip", "-n", self.console_netns]
        _run(ip_c + ["link", "add", "lan", "type", "bridge"], "lan bridge")
        _run(ip_c + ["addr", "add", f"{self.console_ip}/24", "dev", "lan"], "lan address")
        _run(ip_c + ["link", "set", "lan", "up"], "lan up")
        _run(ip_c + ["link", "set", "lo", "up"], "console lo")
        hosts = [f"{self.console_ip} console"]
        for i in range(1, self.count + 1):
            hosts.append(f"{self.lan}.{1 + i} srv{i}")
        # this machine's hostname resolves (sudo warns on every call otherwise, into Mininet's ptys)
        (self.dir / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {socket.gethostname()}\n" +
                                        "\n".join(hosts) + "\n")
        self._start_console_anchor()
        for i in range(1, self.count + 1):
            self.servers.append(self._start_server(i))
        for srv in self.servers:
            self._wait_ready(srv)
        self._warm_send_sockets()

    def _warm_send_sockets(self) -> None:
        """Make every server's ovs-vswitchd create its packet send socket (on its first send; userspace
        datapath) while ``net.core.wmem_default`` is OVS_SEND_BUFFER_BYTES, as scripts/start-ovs does for
        the machine's own: the testbed refuses a run whose emulated buffers the socket cannot hold
        (testbed.measure.send_buffer). The sysctl is global (not per network namespace): it is raised for
        about a second and restored, also on an error."""
        path = Path("/proc/sys/net/core/wmem_default")
        old = path.read_text().strip()
        path.write_text(str(OVS_SEND_BUFFER_BYTES))
        try:
            for srv in self.servers:
                self.on_server(srv, ["sh", "-c", WARM_SCRIPT.format(br=self.tag + "warm")], timeout=60)
        finally:
            path.write_text(old)

    def _add_netns(self, name: str) -> None:
        _run(["ip", "netns", "add", name], f"netns {name}")
        self._netns.append(name)

    def _mount_script(self, run_dir: Path) -> str:
        """Shell lines giving a mount namespace its own /run, ssh client settings and /etc/hosts."""
        d = self.dir
        return (f"set -e; mount --make-rprivate /; mount -t tmpfs -o mode=755 tmpfs /run; "
                f"mkdir -p /run/sshd /run/openvswitch /run/netns; "
                f"mount --bind {run_dir} /run/openvswitch; "
                f"mount --bind {d}/ssh_config.d /etc/ssh/ssh_config.d; "
                f"mount --bind {d}/hosts /etc/hosts; ")

    def _start_server(self, i: int) -> Server:
        name = f"srv{i}"
        netns = f"{self.tag}s{i}"
        sdir = self.dir / name
        run_dir = sdir / "run"
        run_dir.mkdir(parents=True)
        srv = Server(name, f"{self.lan}.{1 + i}", netns, sdir)
        self._add_netns(netns)
        peer = f"{self.tag}p{i}"
        _run(["ip", "-n", self.console_netns, "link", "add", peer, "type", "veth", "peer", "name", "lan0", "netns",
              netns], f"{name} veth")
        _run(["ip", "-n", self.console_netns, "link", "set", peer, "master", "lan", "up"], f"{name} veth up")
        ip_s = ["ip", "-n", netns]
        _run(ip_s + ["addr", "add", f"{srv.ip}/24", "dev", "lan0"], f"{name} address")
        _run(ip_s + ["link", "set", "lan0", "up"], f"{name} lan0 up")
        _run(ip_s + ["link", "set", "lo", "up"], f"{name} lo up")
        db = sdir / "conf.db"
        _run(["ovsdb-tool", "create", str(db), OVS_SCHEMA], f"{name} ovsdb")
        (sdir / "sshd_config").write_text(
            f"ListenAddress {srv.ip}\nPort 22\nHostKey {sdir}/host_key\nPidFile {sdir}/sshd.pid\n"
            f"AuthorizedKeysFile {self.dir}/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "PermitTunnel yes\nX11Forwarding no\nPrintMotd no\nMaxSessions 200\nMaxStartups 200:30:400\n"
            "LogLevel ERROR\n")
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(sdir / "host_key")], f"{name} host key")
        sock = "unix:/run/openvswitch/db.sock"
        mounted = sdir / "mounted"
        script = (self._mount_script(run_dir) + f"touch {mounted}; " +
                  f"export OVS_RUNDIR=/run/openvswitch OVS_DBDIR={sdir} OVS_LOGDIR={sdir}; "
                  f"ovsdb-server {db} --remote=punix:/run/openvswitch/db.sock --pidfile=/run/openvswitch/ovsdb-server.pid "
                  f"--log-file={sdir}/ovsdb-server.log --detach --no-chdir; "
                  f"ovs-vsctl --db={sock} --no-wait init; "
                  f"ovs-vswitchd {sock} --pidfile=/run/openvswitch/ovs-vswitchd.pid --log-file={sdir}/ovs-vswitchd.log "
                  f"--detach --no-chdir; "
                  f"exec {SSHD} -D -e -f {sdir}/sshd_config")
        log = open(sdir / "sshd.log", "wb")
        proc = subprocess.Popen(["ip", "netns", "exec", netns, "unshare", "--mount", "--propagation", "private",
                                 "sh", "-c", script], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self._anchors[name] = proc
        self._wait_mounted(name, mounted)
        return srv

    def _wait_mounted(self, name: str, marker: Path) -> None:
        """Wait until ``name``'s anchor made its mounts, then note its mount namespace (so that
        teardown finds every process started in it, even if a later start-up step fails)."""
        proc = self._anchors[name]
        deadline = time.monotonic() + START_TIMEOUT_S
        while not marker.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ServersError(f"{name}: mount namespace did not come up (exit {proc.poll()})")
            time.sleep(0.02)
        self._mnt[name] = self._inner_mnt_ns(proc.pid)

    def _start_console_anchor(self) -> None:
        """A sleeping process holding the console's mount namespace (driver commands join it)."""
        run_dir = self.dir / "console-run"
        run_dir.mkdir()
        ready = self.dir / "console-ready"
        # the machine's run-state dir (testbed.host.runlock.STATE_DIR) stays visible in the console: a
        # testbed run there sees the locks of the machine's live runs (its start-up cleanup leaves them alone,
        # the pid namespace being shared) and they see its lock
        state = Path(STATE_DIR)
        state.mkdir(parents=True, exist_ok=True)
        keep = self.dir / "console-state"
        keep.mkdir()
        script = (f"mount --make-rprivate / && mount --bind {state} {keep} && " + self._mount_script(run_dir) +
                  f"mkdir -p {state} && mount --bind {keep} {state}; touch {ready}; exec sleep infinity")
        proc = subprocess.Popen(["ip", "netns", "exec", self.console_netns, "unshare", "--mount", "--propagation",
                                 "private", "sh", "-c", script], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._anchors["console"] = proc
        self._wait_mounted("console", ready)

    def _wait_ready(self, srv: Server) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            proc = self._anchors[srv.name]
            if proc.poll() is not None:
                raise ServersError(f"{srv.name}: sshd or Open vSwitch did not start (exit {proc.returncode}): "
                                   f"{(srv.dir / 'sshd.log').read_text()[-800:]}")
            ok = subprocess.run(self.console_argv(["ssh", "-n", "-o", "BatchMode=yes", "-o", "ConnectTimeout=2",
                                                   srv.ip, "ovs-vsctl", "--timeout=2", "show"]),
                                capture_output=True, text=True, timeout=15)
            if ok.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise ServersError(f"{srv.name}: no ssh + ovs-vsctl after {START_TIMEOUT_S} s: {ok.stderr.strip()}")
            time.sleep(0.2)

    @staticmethod
    def _inner_mnt_ns(pid: int) -> str:
        """Mount namespace of ``pid`` (``ip netns exec``, ``unshare`` and ``sh`` exec, so the
        anchor keeps its pid while it moves into its own mount namespace)."""
        ns = _mnt_ns(pid)
        if ns is None:
            raise ServersError(f"process {pid} is gone")
        return ns

    # ------------------------------------------------------------------ use
    def console_argv(self, argv: Sequence[str]) -> List[str]:
        """``argv`` wrapped to run in the console: the lab's network and mount namespace (ssh to
        any server works there with the harness's key). Set ``HOME`` to a scratch dir for
        Mininet's cluster code (it makes ``$HOME/.ssh/mn``): see :meth:`console_env`."""
        pid = self._anchors["console"].pid
        return ["nsenter", "-t", str(pid), "-m", "-n", "--"] + list(argv)

    def console_env(self) -> Dict[str, str]:
        """Environment for :meth:`console_argv`: ``HOME`` in the harness's temp dir."""
        home = self.dir / "home"
        home.mkdir(exist_ok=True)
        return {**os.environ, "HOME": str(home)}

    def server_argv(self, srv: Server, argv: Sequence[str]) -> List[str]:
        """``argv`` wrapped to run on ``srv`` (its network and mount namespaces, as root)."""
        pid = self._anchors[srv.name].pid
        return ["nsenter", "-t", str(pid), "-m", "-n", "--"] + list(argv)

    def on_server(self, srv: Server, argv: Sequence[str], timeout: float = 30.0) -> str:
        """Run ``argv`` on ``srv``; its stdout. ServersError on a non-zero exit."""
        return _run(self.server_argv(srv, argv), f"on {srv.name}", timeout=timeout)

    def server_processes(self, srv: Server) -> List[int]:
        """Pids of every process running in ``srv``'s mount namespace (sshd, OVS, and whatever
        ssh sessions started there: Mininet's node shells, tunnels)."""
        ns = self._mnt.get(srv.name)
        return _pids_in_mnt_ns(ns) if ns else []

    def _daemon_pids(self, srv: Server) -> List[int]:
        pids = [self._anchors[srv.name].pid]
        for name in ("ovsdb-server.pid", "ovs-vswitchd.pid"):
            try:
                pids.append(int((srv.dir / "run" / name).read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        return pids

    def server_leftovers(self, srv: Server) -> Dict[str, list]:
        """What a cluster run left on a live server: bridges in its OVS, interfaces in its
        network namespace beyond ``lo``/``lan0``, network namespaces (Mininet hosts) and processes
        beyond the server's own sshd, ovsdb-server and ovs-vswitchd. All empty after a clean run."""
        bridges = self.on_server(srv, ["ovs-vsctl", "--timeout=5", "list-br"]).split()
        links = self.on_server(srv, ["ip", "-o", "link", "show"]).splitlines()
        intfs = [ln.split(":")[1].strip().split("@")[0] for ln in links if ln.strip()]
        extra_intfs = [i for i in intfs if i not in ("lo", "lan0", "ovs-netdev")]
        daemons = set(self._daemon_pids(srv))
        own_netns = os.readlink(f"/proc/{self._anchors[srv.name].pid}/ns/net")
        procs, netns = [], set()
        for pid in self.server_processes(srv):
            if pid in daemons:
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                net = os.readlink(f"/proc/{pid}/ns/net")
            except OSError:
                continue
            if net != own_netns:
                netns.add(net)
            procs.append(f"{pid} {cmd}")
        return {"bridges": bridges, "interfaces": extra_intfs, "netns": sorted(netns), "processes": procs}

    def leftovers(self) -> Dict[str, list]:
        """What the harness itself left on this machine (after :meth:`close`: all empty):
        its network namespaces, processes in its mount namespaces, its temp dir."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        ns = [ln.split()[0] for ln in listed.splitlines() if ln.startswith(self.tag)]
        procs = [p for mnt in self._mnt.values() if mnt for p in _pids_in_mnt_ns(mnt)]
        procs += [p.pid for p in self._anchors.values() if p.poll() is None]
        dirs = [str(p) for p in Path(tempfile.gettempdir()).glob(self.tag + "-*")]
        return {"netns": ns, "processes": sorted(set(procs)), "dirs": dirs}

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        """End every process of the lab, delete its namespaces and temp dir (idempotent)."""
        victims = set()
        for mnt in self._mnt.values():
            if mnt:
                victims.update(_pids_in_mnt_ns(mnt))
        # (a server's detached ovsdb-server/ovs-vswitchd are in its mount namespace too; pid
        # files are not trusted here: a stale one could name someone else's process)
        victims.update(p.pid for p in self._anchors.values() if p.poll() is None)
        victims.discard(os.getpid())
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in victims:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() and not _zombie(p)
                                                      for p in victims):
                time.sleep(0.05)
        for proc in self._anchors.values():
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self._netns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._netns.clear()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
