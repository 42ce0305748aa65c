"""Counters of packets lost OUTSIDE the emulated switch queues.

* :class:`DropSnapshot` reads every counter of packets dropped outside the
  emulated switch queues (see :meth:`DropSnapshot.take`) and, separately, the
  emulated queues' own tail drops; :func:`delta` subtracts two snapshots. The
  runner takes one snapshot before the traffic and one after it, so the switch
  queue drops of a run come from counters read around the traffic, never from
  sampler rows that may start late or end early.
* :func:`packet_sockets` and :func:`ovs_socket_inodes` list the AF_PACKET
  sockets (sock_diag) and those of ``ovs-vswitchd``; Open vSwitch's send
  buffer check (:mod:`testbed.measure.send_buffer`) reads them too.

The switch-port egress bfifo tail drops are the EMULATED switch buffer and are
never violations; a host's own egress qdisc drops are (a real NIC does not drop
what its host has queued).
"""
from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from typing import Optional

import psutil

OVS_VSWITCHD_PIDFILE = "/var/run/openvswitch/ovs-vswitchd.pid"
#: ovs-vswitchd's log (``--log-file`` default; ``OVS_LOGDIR`` overrides the directory).
OVS_VSWITCHD_LOG = os.path.join(os.environ.get("OVS_LOGDIR", "/var/log/openvswitch"), "ovs-vswitchd.log")
#: Log line of a failed send on the userspace datapath (lib/netdev-linux.c, netdev_linux_send):
#: the packet is lost and no OVS or kernel counter counts it. OVS rate-limits these lines.
OVS_SEND_ERROR_RE = re.compile(rb"error sending Ethernet packet on (\S+): ")
#: Open vSwitch coverage counters that count dropped packets. Names checked in
#: OVS 3.1.0 (Debian 3.1.0-2+deb12u1, ``strings ovs-vswitchd``): 13
#: ``datapath_drop_*`` (datapath errors: upcall_error, lock_error, meter,
#: recirc_error, invalid_port, rx_invalid_packet, tunnel push/pop, ...),
#: 12 ``drop_action_*`` (the reason of an explicit datapath drop action:
#: of_pipeline = the OpenFlow tables dropped it, congestion,
#: too_many_resubmit, ...), ``netdev_send_prepare_drops`` and
#: ``netdev_push_header_drops``. ``coverage/show`` lists only counters that
#: were hit; an absent counter is 0.
OVS_DROP_COVERAGE_RE = re.compile(r"^(datapath_drop_\w+|drop_action_\w+|netdev_\w*drops?)$")
#: Key of the counter of frames the OpenFlow tables dropped (no flow matched, or a group without a live bucket).
PIPELINE_DROP_COUNTER = "ovs_coverage_drop_action_of_pipeline"
_SUBPROCESS_TIMEOUT_S = 10.0


def read_softnet_dropped() -> int:
    """Sum over CPUs of column 2 (``dropped``: backlog queue full) of /proc/net/softnet_stat."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(line.split()[1], 16) for line in f if line.strip())


def read_net_dev(path: str) -> dict[str, tuple[int, int]]:
    """ifname -> (rx_drop, tx_drop) from a /proc/.../net/dev file (fields 4 and 12)."""
    out = {}
    with open(path) as f:
        for line in f.readlines()[2:]:
            name, _, rest = line.partition(":")
            v = rest.split()
            out[name.strip()] = (int(v[3]), int(v[11]))
    return out


def read_snmp(path: str) -> dict[str, dict[str, int]]:
    """{'Udp': {'RcvbufErrors': n, ...}, 'Ip': {...}} from /proc/<pid>/net/snmp."""
    tables: dict[str, dict[str, int]] = {}
    with open(path) as f:
        lines = f.read().splitlines()
    for head, vals in zip(lines[::2], lines[1::2]):
        proto, _, names = head.partition(":")
        tables[proto] = dict(zip(names.split(), (int(x) for x in vals.partition(":")[2].split())))
    return tables


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=_SUBPROCESS_TIMEOUT_S).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(f"DropSnapshot: {' '.join(cmd)} failed: {e}") from e


def _read_ovs() -> dict[str, int]:
    """OVS drop counters: dpctl 'lost' summed over datapaths + drop coverage counters."""
    lost = sum(int(m) for m in re.findall(r"\blost:(\d+)", _run(["ovs-appctl", "dpctl/show"])))
    out = {"ovs_dpctl_lost_pkts": lost}
    for line in _run(["ovs-appctl", "coverage/show"]).splitlines():
        parts = line.split()
        if parts and OVS_DROP_COVERAGE_RE.match(parts[0]) and "total:" in parts:
            out[f"ovs_coverage_{parts[0]}_pkts"] = int(parts[parts.index("total:") + 1])
    return out


def _ovs_vswitchd_pid() -> int:
    try:
        with open(OVS_VSWITCHD_PIDFILE) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        for p in psutil.process_iter(["name"]):
            if p.info["name"] == "ovs-vswitchd":
                return p.pid
    raise RuntimeError("DropSnapshot: ovs-vswitchd is not running (no pidfile, no process)")


def ovs_socket_inodes() -> set[int]:
    """Inodes of the sockets ovs-vswitchd holds; RuntimeError when it is not running."""
    return _socket_inodes(_ovs_vswitchd_pid())


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            link = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


# sock_diag for AF_PACKET (include/uapi/linux/{sock_diag,packet_diag}.h); pyroute2's
# DiagSocket covers AF_INET/AF_UNIX only, so the dump is decoded here.
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_PACKET_SHOW_INFO, _PACKET_SHOW_MEMINFO = 0x1, 0x10
_PACKET_DIAG_INFO, _PACKET_DIAG_MEMINFO = 0, 6
_SK_MEMINFO_WMEM_ALLOC, _SK_MEMINFO_SNDBUF, _SK_MEMINFO_DROPS = 2, 3, 8  # include/uapi/linux/sock_diag.h


@dataclass(frozen=True)
class PacketSocket:
    """One AF_PACKET socket as sock_diag reports it: ``ifindex`` it is bound to (0: none),
    ``sndbuf_bytes`` (sk_sndbuf), ``wmem_alloc_bytes`` (bytes of queued sends charged to
    it now), ``drops_pkts`` (sk_drops: packets the socket could not take in)."""

    ifindex: int
    sndbuf_bytes: int
    wmem_alloc_bytes: int
    drops_pkts: int


def packet_sockets() -> dict[int, PacketSocket]:
    """inode -> :class:`PacketSocket` for every AF_PACKET socket of this netns."""
    req = struct.pack("=IHHII", 36, _SOCK_DIAG_BY_FAMILY, 0x301, 1, 0) + struct.pack(
        "=BBHIIII", socket.AF_PACKET, 0, 0, 0, _PACKET_SHOW_INFO | _PACKET_SHOW_MEMINFO, 0xFFFFFFFF, 0xFFFFFFFF
    )
    out: dict[int, PacketSocket] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, _NETLINK_SOCK_DIAG) as s:
        s.bind((0, 0))
        s.send(req)
        while True:
            data = s.recv(1 << 16)
            off = 0
            while off + 16 <= len(data):
                length, mtype = struct.unpack_from("=IH", data, off)
                if mtype == 3:  # NLMSG_DONE
                    return out
                if mtype == 2:  # NLMSG_ERROR
                    (err,) = struct.unpack_from("=i", data, off + 16)
                    raise RuntimeError(f"DropSnapshot: packet sock_diag failed: {os.strerror(-err)}")
                (inode,) = struct.unpack_from("=I", data, off + 20)
                ifindex = drops = sndbuf = wmem = 0
                a, end = off + 32, off + length
                while a + 4 <= end:
                    alen, atype = struct.unpack_from("=HH", data, a)
                    if alen < 4:
                        break
                    if atype == _PACKET_DIAG_INFO:
                        (ifindex,) = struct.unpack_from("=I", data, a + 4)
                    elif atype == _PACKET_DIAG_MEMINFO and alen >= 4 + 4 * (_SK_MEMINFO_DROPS + 1):
                        mem = struct.unpack_from(f"={_SK_MEMINFO_DROPS + 1}I", data, a + 4)
                        wmem, sndbuf, drops = mem[_SK_MEMINFO_WMEM_ALLOC], mem[_SK_MEMINFO_SNDBUF], mem[_SK_MEMINFO_DROPS]
                    a += (alen + 3) & ~3
                out[inode] = PacketSocket(ifindex, sndbuf, wmem, drops)
                off += (length + 3) & ~3
            if not data:
                return out


def _host_qdisc_drops(pid: int, ifnames: list[str]) -> dict[str, int]:
    """ifname -> root-qdisc drops in the netns of ``pid`` (0 where the root is noqueue)."""
    from pyroute2 import IPRoute

    out = {}
    with IPRoute(netns=f"/proc/{pid}/ns/net") as ipr:
        for name in ifnames:
            found = ipr.link_lookup(ifname=name)
            if not found:
                raise RuntimeError(f"DropSnapshot: {name} not found in the netns of pid {pid}")
            drops = 0
            for q in ipr.get_qdiscs(index=found[0]):
                if q["parent"] == 0xFFFFFFFF:
                    st = q.get_attr("TCA_STATS2")
                    queue = st.get_attr("TCA_STATS_QUEUE") if st else None
                    drops = queue["drops"] if queue else 0
            out[name] = drops
    return out


@dataclass(frozen=True)
class DropSnapshot:
    """Counters of packets dropped outside the emulated switch queues, at one time.

    ``counters`` maps self-explaining keys to cumulative packet counts;
    ``queue_drops`` maps each switch port to the cumulative tail drops of its
    emulated queue (the root qdisc: HTB counts its leaves' drops), kept apart
    because those drops are the emulation, not a fault; ``ovs_log_bytes`` is
    the size of ovs-vswitchd's log at that time (None: not readable);
    ``time_s`` is CLOCK_MONOTONIC. Build with :meth:`take`; compare with
    :func:`delta` and :func:`queue_drops_delta`.
    """

    time_s: float
    counters: dict[str, int] = field(default_factory=dict)
    queue_drops: dict[str, int] = field(default_factory=dict)
    ovs_log_bytes: Optional[int] = None

    @classmethod
    def take(
        cls,
        host_pids: dict[str, int],
        switch_ifnames: list[str],
        host_ifnames: dict[str, list[str]],
    ) -> "DropSnapshot":
        """Read every non-emulated drop counter. Must run as root in the root netns.

        Args:
            host_pids: host name -> pid of a process inside that host's netns.
            switch_ifnames: switch-side ports in the root netns (OVS ports).
            host_ifnames: host name -> its interfaces (in its netns).

        Keys (``[x]`` names the host or interface):

        * ``softnet_dropped_pkts``: /proc/net/softnet_stat col 2, all CPUs (the
          per-CPU input backlog is shared by every netns).
        * ``udp_rcvbuf_errors_pkts[h]``, ``udp_sndbuf_errors_pkts[h]``,
          ``udp_mem_errors_pkts[h]``, ``udp_in_csum_errors_pkts[h]``,
          ``udp_in_errors_other_pkts[h]`` (= InErrors - RcvbufErrors -
          MemErrors - InCsumErrors: the kernel counts those three in InErrors
          too), ``udp_no_ports_pkts[h]``, ``ip_in_discards_pkts[h]``,
          ``ip_out_discards_pkts[h]``: /proc/<pid>/net/snmp of the host netns.
        * ``host_rx_dropped_pkts[if]``, ``host_tx_dropped_pkts[if]``:
          /proc/<pid>/net/dev; ``host_qdisc_drops_pkts[if]``: the host NIC's root
          egress qdisc (a host-side HTB/bfifo that overflows; note a dropped UDP
          send is also counted as Udp SndbufErrors unless IP_RECVERR is set).
        * ``switch_rx_dropped_pkts[if]``, ``switch_tx_dropped_pkts[if]``: root-ns
          /proc/net/dev of the switch-side veths.
        * ``ovs_rx_socket_drops_pkts[if]``: sk_drops of ovs-vswitchd's AF_PACKET
          socket on each switch port (userspace datapath: OVS too slow to read).
        * ``ovs_dpctl_lost_pkts``: 'lost' of ``ovs-appctl dpctl/show`` (upcalls
          lost), summed over datapaths; ``ovs_coverage_<name>_pkts``: drop
          coverage counters (:data:`OVS_DROP_COVERAGE_RE`). Both are per
          ovs-vswitchd process, so other runs on the same OVS add to them.

        Raises:
            RuntimeError: ovs-appctl failed, ovs-vswitchd not found, or an
                interface missing; OSError: a host pid's /proc files are gone.
        """
        c: dict[str, int] = {"softnet_dropped_pkts": read_softnet_dropped()}
        for host, pid in host_pids.items():
            snmp = read_snmp(f"/proc/{pid}/net/snmp")
            udp, ip = snmp.get("Udp", {}), snmp.get("Ip", {})
            rcvbuf, mem, csum = udp.get("RcvbufErrors", 0), udp.get("MemErrors", 0), udp.get("InCsumErrors", 0)
            c[f"udp_rcvbuf_errors_pkts[{host}]"] = rcvbuf
            c[f"udp_sndbuf_errors_pkts[{host}]"] = udp.get("SndbufErrors", 0)
            c[f"udp_mem_errors_pkts[{host}]"] = mem
            c[f"udp_in_csum_errors_pkts[{host}]"] = csum
            c[f"udp_in_errors_other_pkts[{host}]"] = max(0, udp.get("InErrors", 0) - rcvbuf - mem - csum)
            c[f"udp_no_ports_pkts[{host}]"] = udp.get("NoPorts", 0)
            c[f"ip_in_discards_pkts[{host}]"] = ip.get("InDiscards", 0)
            c[f"ip_out_discards_pkts[{host}]"] = ip.get("OutDiscards", 0)
            names = host_ifnames.get(host, [])
            dev = read_net_dev(f"/proc/{pid}/net/dev")
            for name in names:
                if name not in dev:
                    raise RuntimeError(f"DropSnapshot: {name} not in /proc/{pid}/net/dev (host {host})")
                c[f"host_rx_dropped_pkts[{name}]"], c[f"host_tx_dropped_pkts[{name}]"] = dev[name]
            for name, drops in (_host_qdisc_drops(pid, names) if names else {}).items():
                c[f"host_qdisc_drops_pkts[{name}]"] = drops
        dev = read_net_dev("/proc/net/dev")
        for name in switch_ifnames:
            if name not in dev:
                raise RuntimeError(f"DropSnapshot: switch port {name} not in the root netns")
            c[f"switch_rx_dropped_pkts[{name}]"], c[f"switch_tx_dropped_pkts[{name}]"] = dev[name]
        if switch_ifnames:
            ovs_inodes = ovs_socket_inodes()
            by_index = {socket.if_nametoindex(n): n for n in switch_ifnames}
            for name in switch_ifnames:
                c[f"ovs_rx_socket_drops_pkts[{name}]"] = 0
            for inode, ps in packet_sockets().items():
                if inode in ovs_inodes and ps.ifindex in by_index:
                    c[f"ovs_rx_socket_drops_pkts[{by_index[ps.ifindex]}]"] += ps.drops_pkts
        c.update(_read_ovs())
        return cls(time_s=time.monotonic(), counters=c, queue_drops=_switch_queue_drops(switch_ifnames),
                   ovs_log_bytes=_file_size(OVS_VSWITCHD_LOG) if switch_ifnames else None)

    @staticmethod
    def delta(before: "DropSnapshot", after: "DropSnapshot") -> dict[str, int]:
        """``after - before`` per key (a key absent from one snapshot counts as 0).

        Adds ``ovs_send_errors_logged_pkts[<interface>]``: lines "error sending
        Ethernet packet on <interface>" that ovs-vswitchd logged between the
        two snapshots, each a packet lost where no counter counts it (a lower
        bound: OVS rate-limits these lines), per interface so that a link
        taken down by a fault is charged with its own. Absent when the log was
        not readable or had no such line.

        A negative value means the counter was reset (OVS restarted, interface
        recreated); :func:`testbed.measure.verdict.evaluate` reports it as a violation.
        """
        keys = sorted(set(before.counters) | set(after.counters))
        out = {k: after.counters.get(k, 0) - before.counters.get(k, 0) for k in keys}
        if before.ovs_log_bytes is not None and after.ovs_log_bytes is not None:
            for ifname, n in ovs_send_errors_by_interface(
                    OVS_VSWITCHD_LOG, before.ovs_log_bytes, after.ovs_log_bytes).items():
                out[f"ovs_send_errors_logged_pkts[{ifname}]"] = n
        return out


delta = DropSnapshot.delta


def queue_drops_delta(before: DropSnapshot, after: DropSnapshot) -> int:
    """Packets the emulated switch queues tail-dropped between two snapshots (sum over ports).

    Raises ValueError when a port's counter went backwards (queue recreated)."""
    total = 0
    for port, n in after.queue_drops.items():
        d = n - before.queue_drops.get(port, 0)
        if d < 0:
            raise ValueError(f"queue drop counter of {port} went backwards ({d}): qdisc recreated during the run")
        total += d
    return total


def _file_size(path: str) -> Optional[int]:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def ovs_send_errors_by_interface(path: str, start_bytes: int, end_bytes: int) -> dict[str, int]:
    """interface -> lines matching :data:`OVS_SEND_ERROR_RE` in ``path`` between two byte offsets.

    A log rotated in between (``end_bytes < start_bytes``) is read from its start; an unreadable log
    gives {}."""
    if end_bytes < start_bytes:
        start_bytes = 0
    try:
        with open(path, "rb") as f:
            f.seek(start_bytes)
            chunk = f.read(max(0, end_bytes - start_bytes))
    except OSError:
        return {}
    out: dict[str, int] = {}
    for name in OVS_SEND_ERROR_RE.findall(chunk):
        key = name.decode(errors="replace")
        out[key] = out.get(key, 0) + 1
    return out



def _switch_queue_drops(ifnames: list[str]) -> dict[str, int]:
    """port -> cumulative drops of its root qdisc (root netns), read in one netlink dump."""
    if not ifnames:
        return {}
    from dataplane.qdisc_sampler import COUNTERS, QdiscDumper

    dumper = QdiscDumper([socket.if_nametoindex(n) for n in ifnames])
    try:
        row = [0] * (len(COUNTERS) * len(ifnames))
        dumper.dump_into(row)
    finally:
        dumper.close()
    k = COUNTERS.index("drops_pkts")
    out = {}
    for i, name in enumerate(ifnames):
        v = row[i * len(COUNTERS) + k]
        if v < 0:
            raise RuntimeError(f"DropSnapshot: switch port {name} has no root qdisc")
        out[name] = v
    return out
