"""Fidelity monitor: is this run's emulation honest?

Handigol et al., "Reproducible network experiments using container-based
emulation", CoNEXT 2012: an emulation is only trustworthy while the CPU is not
the bottleneck; they monitor that links deliver their configured rate while
busy and that no packet is lost outside the emulated queues. This module does
the same for the testbed, with three parts:

* :class:`CpuIdleMonitor` samples whole-machine CPU idle % once a second.
* :class:`DropSnapshot` reads every counter of packets dropped OUTSIDE the
  emulated switch queues (see :meth:`DropSnapshot.take` for the list);
  :func:`delta` subtracts two snapshots.
* :func:`evaluate` turns CPU samples, drop deltas and queue samples into a
  :class:`FidelityVerdict` with human sentences and figures for summary.json.

The switch-port egress bfifo tail drops are the EMULATED switch buffer and are
never violations; a host's own egress qdisc drops are (a real NIC does not drop
what its host has queued; see :meth:`DropSnapshot.take`).
"""
from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np
import pandas as pd
import psutil

from traffic.clock import unix_ns
from testbed import timing

OVS_VSWITCHD_PIDFILE = "/var/run/openvswitch/ovs-vswitchd.pid"
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
_SUBPROCESS_TIMEOUT_S = 10.0


# ---------------------------------------------------------------------------
# CPU
# ---------------------------------------------------------------------------
def _idle_busy(t) -> tuple[float, float]:
    """(idle, busy) seconds of a psutil cputimes: idle includes iowait; steal is busy."""
    idle = t.idle + getattr(t, "iowait", 0.0)
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)
    return idle, busy  # guest/guest_nice are already inside user/nice (proc(5))


class CpuIdleMonitor:
    """Thread sampling CPU idle % every ``period_s`` (default 1 s).

    Idle % of an interval = 100 * (idle + iowait) / (idle + iowait + user + nice
    + system + irq + softirq + steal), from ``psutil.cpu_times`` deltas (the
    /proc/stat accounting). ``idle_pct`` is whole-machine; ``min_cpu_idle_pct``
    is the least idle single CPU, which shows one saturated core (e.g. the
    single-threaded userspace OVS datapath) that the average hides on 2 cores.

    Use as a context manager or ``start()`` / ``stop()``; then :meth:`samples`.
    Raises ValueError if ``period_s <= 0``.
    """

    def __init__(self, period_s: float = 1.0):
        if not period_s > 0:
            raise ValueError(f"period_s={period_s!r} must be > 0")
        self.period_s = float(period_s)
        self._rows: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "CpuIdleMonitor":
        if self._thread is not None:
            raise RuntimeError("CpuIdleMonitor already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="CpuIdleMonitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "CpuIdleMonitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        prev = psutil.cpu_times(percpu=True)
        t0 = time.monotonic()
        k = 0
        last = t0
        while True:
            k += 1
            stopping = self._stop.wait(max(0.0, t0 + k * self.period_s - time.monotonic()))
            now = time.monotonic()
            # on stop, keep the last partial interval if it is long enough to mean something
            if stopping and now - last < min(0.2, self.period_s):
                return
            cur = psutil.cpu_times(percpu=True)
            t_ns = unix_ns()
            last = now
            pcts, tot_idle, tot_all = [], 0.0, 0.0
            for a, b in zip(prev, cur):
                ia, ba = _idle_busy(a)
                ib, bb = _idle_busy(b)
                di, db = max(0.0, ib - ia), max(0.0, bb - ba)
                tot_idle += di
                tot_all += di + db
                if di + db > 0:
                    pcts.append(100.0 * di / (di + db))
            prev = cur
            if tot_all > 0:
                self._rows.append((t_ns, 100.0 * tot_idle / tot_all, min(pcts)))
            if stopping:
                return

    def samples(self) -> pd.DataFrame:
        """Samples so far: DataFrame(time_ns: int Unix-epoch ns at the interval end
        (:func:`traffic.clock.unix_ns`, the clock of every results table),
        idle_pct: float 0-100 whole machine, min_cpu_idle_pct: float 0-100)."""
        return pd.DataFrame(list(self._rows), columns=["time_ns", "idle_pct", "min_cpu_idle_pct"])


# ---------------------------------------------------------------------------
# Drop counters outside the emulated queues
# ---------------------------------------------------------------------------
def _read_softnet_dropped() -> int:
    """Sum over CPUs of column 2 (``dropped``: backlog queue full) of /proc/net/softnet_stat."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(line.split()[1], 16) for line in f if line.strip())


def _read_net_dev(path: str) -> dict[str, tuple[int, int]]:
    """ifname -> (rx_drop, tx_drop) from a /proc/.../net/dev file (fields 4 and 12)."""
    out = {}
    with open(path) as f:
        for line in f.readlines()[2:]:
            name, _, rest = line.partition(":")
            v = rest.split()
            out[name.strip()] = (int(v[3]), int(v[11]))
    return out


def _read_snmp(path: str) -> dict[str, dict[str, int]]:
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
_SK_MEMINFO_DROPS = 8


def _packet_socket_drops() -> dict[int, tuple[int, int]]:
    """inode -> (bound ifindex, sk_drops) for every AF_PACKET socket of this netns."""
    req = struct.pack("=IHHII", 36, _SOCK_DIAG_BY_FAMILY, 0x301, 1, 0) + struct.pack(
        "=BBHIIII", socket.AF_PACKET, 0, 0, 0, _PACKET_SHOW_INFO | _PACKET_SHOW_MEMINFO, 0xFFFFFFFF, 0xFFFFFFFF
    )
    out: dict[int, tuple[int, int]] = {}
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
                ifindex = drops = 0
                a, end = off + 32, off + length
                while a + 4 <= end:
                    alen, atype = struct.unpack_from("=HH", data, a)
                    if alen < 4:
                        break
                    if atype == _PACKET_DIAG_INFO:
                        (ifindex,) = struct.unpack_from("=I", data, a + 4)
                    elif atype == _PACKET_DIAG_MEMINFO and alen >= 4 + 4 * (_SK_MEMINFO_DROPS + 1):
                        (drops,) = struct.unpack_from("=I", data, a + 4 + 4 * _SK_MEMINFO_DROPS)
                    a += (alen + 3) & ~3
                out[inode] = (ifindex, drops)
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
    ``time_s`` is CLOCK_MONOTONIC. Build with :meth:`take`; compare with :func:`delta`.
    """

    time_s: float
    counters: dict[str, int] = field(default_factory=dict)

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
        c: dict[str, int] = {"softnet_dropped_pkts": _read_softnet_dropped()}
        for host, pid in host_pids.items():
            snmp = _read_snmp(f"/proc/{pid}/net/snmp")
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
            dev = _read_net_dev(f"/proc/{pid}/net/dev")
            for name in names:
                if name not in dev:
                    raise RuntimeError(f"DropSnapshot: {name} not in /proc/{pid}/net/dev (host {host})")
                c[f"host_rx_dropped_pkts[{name}]"], c[f"host_tx_dropped_pkts[{name}]"] = dev[name]
            for name, drops in (_host_qdisc_drops(pid, names) if names else {}).items():
                c[f"host_qdisc_drops_pkts[{name}]"] = drops
        dev = _read_net_dev("/proc/net/dev")
        for name in switch_ifnames:
            if name not in dev:
                raise RuntimeError(f"DropSnapshot: switch port {name} not in the root netns")
            c[f"switch_rx_dropped_pkts[{name}]"], c[f"switch_tx_dropped_pkts[{name}]"] = dev[name]
        if switch_ifnames:
            ovs_inodes = _socket_inodes(_ovs_vswitchd_pid())
            by_index = {socket.if_nametoindex(n): n for n in switch_ifnames}
            for name in switch_ifnames:
                c[f"ovs_rx_socket_drops_pkts[{name}]"] = 0
            for inode, (ifindex, drops) in _packet_socket_drops().items():
                if inode in ovs_inodes and ifindex in by_index:
                    c[f"ovs_rx_socket_drops_pkts[{by_index[ifindex]}]"] += drops
        c.update(_read_ovs())
        return cls(time_s=time.monotonic(), counters=c)

    @staticmethod
    def delta(before: "DropSnapshot", after: "DropSnapshot") -> dict[str, int]:
        """``after - before`` per key (a key absent from one snapshot counts as 0).

        A negative value means the counter was reset (OVS restarted, interface
        recreated); :func:`evaluate` reports it as a violation.
        """
        keys = sorted(set(before.counters) | set(after.counters))
        return {k: after.counters.get(k, 0) - before.counters.get(k, 0) for k in keys}


delta = DropSnapshot.delta


# ---------------------------------------------------------------------------
# Verdict
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class FidelityThresholds:
    """Limits of an honest run; every field is validated (ValueError names it).

    min_cpu_idle_pct: a second with whole-machine idle below this is saturated.
    max_saturated_fraction: saturated seconds allowed, as a fraction of the run's
        seconds; at least 1 second is always allowed (see :func:`evaluate`).
    max_unexplained_drops: packets dropped outside the emulated queues allowed.
    max_extra_lost_pkts: transport-lost packets beyond switch-queue drops allowed.
    min_link_rate_ratio: delivered / configured rate while backlogged, minimum.
    min_backlogged_intervals: backlogged sampling intervals a port needs before
        its rate is judged.
    min_host_busy_s: busy seconds a host NIC needs before its rate is judged.
    max_congested_fraction: host rates are judged only when switch queues were
        backlogged (>= 2 packets somewhere) in at most this fraction of samples.
    ignored_drop_counters: drop-counter key prefixes reported in figures but not
        judged (e.g. ``"ovs_coverage_drop_action_of_pipeline"`` when the
        controller drops on purpose).
    """

    min_cpu_idle_pct: float = 5.0
    max_saturated_fraction: float = 0.05
    max_unexplained_drops: int = 0
    max_extra_lost_pkts: int = 2
    min_link_rate_ratio: float = 0.9
    min_backlogged_intervals: int = 10
    min_host_busy_s: float = 0.5
    max_congested_fraction: float = 0.1
    ignored_drop_counters: tuple[str, ...] = ()

    def __post_init__(self):
        checks = {
            "min_cpu_idle_pct": 0 <= self.min_cpu_idle_pct <= 100,
            "max_saturated_fraction": 0 <= self.max_saturated_fraction <= 1,
            "max_unexplained_drops": isinstance(self.max_unexplained_drops, int) and self.max_unexplained_drops >= 0,
            "max_extra_lost_pkts": isinstance(self.max_extra_lost_pkts, int) and self.max_extra_lost_pkts >= 0,
            "min_link_rate_ratio": 0 < self.min_link_rate_ratio <= 1,
            "min_backlogged_intervals": isinstance(self.min_backlogged_intervals, int) and self.min_backlogged_intervals >= 1,
            "min_host_busy_s": self.min_host_busy_s > 0,
            "max_congested_fraction": 0 <= self.max_congested_fraction <= 1,
            "ignored_drop_counters": isinstance(self.ignored_drop_counters, tuple),
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"FidelityThresholds.{name}={getattr(self, name)!r} is out of range")


@dataclass
class FidelityVerdict:
    """faithful: no violations. violations: one human sentence each, with figures.
    figures: JSON-ready numbers (cpu, drops, extra_lost_pkts, links, hosts)."""

    faithful: bool
    violations: list[str]
    figures: dict


def _mbps(bps: float) -> str:
    return f"{bps / 1e6:.1f} Mbit/s"


def _check_cpu(cpu: pd.DataFrame, th: FidelityThresholds, violations: list[str]) -> dict:
    if cpu is None or len(cpu) == 0:
        violations.append("CPU idle was not sampled: cannot show the CPU was not the bottleneck")
        return {"seconds": 0}
    idle = cpu["idle_pct"].to_numpy(dtype=float)
    n = len(idle)
    saturated = int((idle < th.min_cpu_idle_pct).sum())
    allowed = max(1, int(th.max_saturated_fraction * n))
    fig = {
        "seconds": n,
        "saturated_s": saturated,
        "allowed_saturated_s": allowed,
        "min_idle_pct": float(idle.min()),
        "mean_idle_pct": float(idle.mean()),
    }
    if "min_cpu_idle_pct" in cpu:
        fig["min_single_cpu_idle_pct"] = float(cpu["min_cpu_idle_pct"].min())
    if saturated > allowed:
        violations.append(
            f"CPU saturated: idle < {th.min_cpu_idle_pct:g}% in {saturated} of {n} s "
            f"(min {fig['min_idle_pct']:.1f}%, allowed {allowed} s)"
        )
    return fig


def _check_drops(drops: dict[str, int], extra_lost_pkts, th: FidelityThresholds, violations: list[str]) -> dict:
    judged = {k: v for k, v in drops.items() if v and not k.startswith(th.ignored_drop_counters)}
    ignored = {k: v for k, v in drops.items() if v and k.startswith(th.ignored_drop_counters)}
    negative = {k: v for k, v in judged.items() if v < 0}
    positive = {k: v for k, v in judged.items() if v > 0}
    total = sum(positive.values())
    if negative:
        violations.append(
            "drop counters went backwards (reset during the run, drops unknown): "
            + ", ".join(f"{k}={v}" for k, v in sorted(negative.items()))
        )
    if total > th.max_unexplained_drops:
        violations.append(
            f"{total} packets dropped outside the emulated switch queues "
            f"(allowed {th.max_unexplained_drops}): "
            + ", ".join(f"{k}={v}" for k, v in sorted(positive.items(), key=lambda kv: -kv[1]))
        )
    if extra_lost_pkts is not None and extra_lost_pkts > th.max_extra_lost_pkts:
        violations.append(
            f"transport lost {extra_lost_pkts} packets more than the switch queues dropped "
            f"(tolerance {th.max_extra_lost_pkts})"
        )
    return {
        "unexplained_drops_pkts": total,
        "nonzero": dict(sorted(positive.items())),
        "reset_counters": dict(sorted(negative.items())),
        "ignored_nonzero": dict(sorted(ignored.items())),
        "extra_lost_pkts": extra_lost_pkts,
    }


def _link_ratio(g: pd.DataFrame) -> tuple[int, float, float]:
    """(backlogged intervals, their seconds, delivered bits in them) for one port's samples."""
    g = g.sort_values("time_ns")
    t = g["time_ns"].to_numpy(dtype=np.int64)
    tx = g["tx_bytes"].to_numpy(dtype=np.int64)
    bl = g["backlog_bytes"].to_numpy(dtype=np.int64)
    dt_ns, dtx = np.diff(t), np.diff(tx)
    busy = (bl[:-1] > 0) & (bl[1:] > 0) & (dt_ns > 0) & (dtx >= 0)
    return int(busy.sum()), float(dt_ns[busy].sum()) / 1e9, float(dtx[busy].sum()) * 8.0


def _check_links(port_samples, port_rate_bps, th, violations) -> dict:
    figs: dict[str, dict] = {}
    if port_samples is None or len(port_samples) == 0:
        return figs
    for port, g in port_samples.groupby("port", observed=True, sort=True):
        port = str(port)
        rate = port_rate_bps.get(port)
        if rate is None:
            raise ValueError(f"port {port!r} has samples but no configured rate in port_rate_bps")
        n, busy_s, bits = _link_ratio(g)
        fig = {"configured_bps": float(rate), "backlogged_intervals": n, "backlogged_s": busy_s}
        if n >= th.min_backlogged_intervals and busy_s > 0:
            delivered = bits / busy_s
            ratio = delivered / rate
            fig.update(delivered_bps=delivered, ratio=ratio)
            if ratio < th.min_link_rate_ratio:
                violations.append(
                    f"link {port} delivered {_mbps(delivered)} = {ratio:.0%} of {_mbps(rate)} while backlogged "
                    f"({n} intervals, {busy_s:.2f} s; minimum {th.min_link_rate_ratio:.0%})"
                )
        figs[port] = fig
    return figs


def fabric_congested_fraction(port_samples: pd.DataFrame, min_backlog_pkts: int = 2) -> float:
    """Fraction of sample times at which some switch port held >= ``min_backlog_pkts`` packets."""
    if port_samples is None or len(port_samples) == 0:
        return 0.0
    busy = port_samples["backlog_pkts"] >= min_backlog_pkts
    return float(busy.groupby(port_samples["time_ns"]).any().mean())


def _check_hosts(host_tx, port_rate_bps, th, violations, port_samples=None) -> dict:
    """Host NICs must drive their links at line rate while they have unacknowledged data,
    unless the fabric held them back: when switch queues were backlogged in more than
    ``max_congested_fraction`` of the samples, the network (not the CPU) may explain a
    slow sender, and host rates are reported but not judged."""
    figs: dict[str, dict] = {}
    if host_tx is None or len(host_tx) == 0:
        return figs
    congested = fabric_congested_fraction(port_samples)
    judge = congested <= th.max_congested_fraction
    figs["fabric_congested_fraction"] = congested
    for row in host_tx.itertuples(index=False):
        host = str(row.host)
        rate = getattr(row, "link_bps", None)
        if rate is None or pd.isna(rate):
            rate = getattr(row, "link_rate_bps", None)
        if rate is None or pd.isna(rate):
            rate = port_rate_bps.get(host)
        if rate is None:
            raise ValueError(f"host {host!r}: no link_bps column and no port_rate_bps[{host!r}]")
        busy_s, wire = float(row.tx_busy_s), float(row.tx_wire_bytes)
        fig = {"configured_bps": float(rate), "tx_busy_s": busy_s, "tx_wire_bytes": wire}
        if busy_s >= th.min_host_busy_s:
            delivered = wire * 8.0 / busy_s
            ratio = delivered / rate
            fig.update(delivered_bps=delivered, ratio=ratio)
            if judge and ratio < th.min_link_rate_ratio:
                violations.append(
                    f"host {host} NIC sent {_mbps(delivered)} = {ratio:.0%} of {_mbps(rate)} while it had data "
                    f"unacknowledged ({busy_s:.2f} s; minimum {th.min_link_rate_ratio:.0%}) while the switch queues were "
                    f"empty: the CPU, not the network, limited it"
                )
        figs[host] = fig
    return figs


def evaluate(
    cpu: pd.DataFrame,
    drops: dict[str, int],
    port_samples: pd.DataFrame,
    port_rate_bps: dict[str, float],
    host_tx: Optional[pd.DataFrame],
    thresholds: FidelityThresholds,
    extra_lost_pkts: Optional[int] = None,
    departures: Optional[pd.DataFrame] = None,
) -> FidelityVerdict:
    """Judge one run (Handigol et al., CoNEXT 2012, section 3: fidelity monitor).

    Args:
        cpu: :meth:`CpuIdleMonitor.samples` (time_ns, idle_pct[, min_cpu_idle_pct]).
        drops: :func:`delta` of two :class:`DropSnapshot` (packets per key).
        port_samples: :meth:`testbed.telemetry.QdiscSampler.to_frame` of the
            switch ports (time_ns, port, tx_bytes, backlog_bytes, ...).
        port_rate_bps: port -> configured rate in bit/s; may also hold host
            names -> host link rate (used when ``host_tx`` has no link_rate_bps).
        host_tx: one row per host: ``host``, ``tx_wire_bytes`` (frame bytes the
            host NIC sent, counted as the qdiscs count: Ethernet frame without
            FCS), ``tx_busy_s`` (seconds it had data queued), optional
            ``link_bps`` (or ``link_rate_bps``) = the host link rate, else
            ``port_rate_bps[host]`` is used; or None.
        thresholds: :class:`FidelityThresholds`.
        extra_lost_pkts: packets the transport counted lost minus those the
            switch queues dropped, or None if unknown.
        departures: :meth:`testbed.timing.DepartureCapture.to_frame`, or None:
            (d) packet timing, :func:`testbed.timing.check_departures`.

    Checks:
        (a) CPU: seconds with idle < min_cpu_idle_pct. Violation when more than
            ``max(1, max_saturated_fraction * seconds)``: a single saturated
            second (process start, a GC pause, teardown) distorts at most that
            second and is tolerated in any run; sustained saturation, more than
            5 % of the run, means CPU queueing is part of the measured delays
            and throughputs, which is what Handigol et al. flag.
        (b) Non-emulated drops: sum of positive deltas (ignoring
            ``ignored_drop_counters``) > max_unexplained_drops, each counter
            named; any negative delta (reset counter); and extra_lost_pkts >
            max_extra_lost_pkts.
        (c) Link rate: per switch port, over sampling intervals with backlog > 0
            at both ends, ``ratio = 8 * sum(delta tx_bytes) / (rate * sum(dt))``
            (the time-weighted mean of per-interval ratios); violation when the
            port has >= min_backlogged_intervals such intervals and ratio <
            min_link_rate_ratio. Hosts: ``8 * tx_wire_bytes / tx_busy_s / rate``
            with tx_busy_s >= min_host_busy_s, same threshold.

    Returns: :class:`FidelityVerdict`; ``figures`` = {"cpu", "drops", "links",
        "hosts", "thresholds"}.
    Raises: ValueError when a sampled port or a host has no configured rate.
    """
    violations: list[str] = []
    figures = {
        "cpu": _check_cpu(cpu, thresholds, violations),
        "drops": _check_drops(drops, extra_lost_pkts, thresholds, violations),
        "links": _check_links(port_samples, port_rate_bps, thresholds, violations),
        "hosts": _check_hosts(host_tx, port_rate_bps, thresholds, violations, port_samples),
        "packet_timing": timing.check_departures(departures, port_samples, port_rate_bps, violations),
        "thresholds": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(thresholds).items()},
    }
    return FidelityVerdict(faithful=not violations, violations=violations, figures=figures)
