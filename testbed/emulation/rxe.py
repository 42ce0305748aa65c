"""Soft-RoCE (rdma_rxe) devices for emulated hosts: verbs programs send through the host's fabric interface.

Why a bridge and not ``rdma link add`` inside the host's namespace: on the kernels users run (Debian 12's
6.1, measured in the scripts/vm guest on 2026-12-02) ``rdma link add rxe0 type rxe netdev h1-eth0``
run inside a host's network namespace gives an ACTIVE device, but its traffic fails (perftest:
"Completion with error at client, Failed status 2"): rxe routes its packets and receives UDP 4791
in the machine's own (initial) network namespace only. Kernels with network namespace support in
rxe (upstream work from 2025) would not need this; the bridge works on both.

So each host that runs verbs gets, for the run (:class:`RxeDevices`):

- a veth pair ``<host>-rxe`` (machine's namespace) <-> ``<host>-rxp`` (the host's namespace); the
  machine-side end carries the host's MAC and IPv4 address (/32, no prefix route; IPv6 off, so GID
  index 1 is the RoCEv2 IPv4 GID), ``accept_local`` on and ``rp_filter`` off (both hosts' addresses
  are local to the machine's namespace; a packet from one arrives at the other from outside), and a
  permanent neighbour entry for every peer host it may reach (their MAC, as the hosts' own static
  neighbours: with tenant isolation, only its tenant's and the shared hosts);
- the rxe device ``<host>rxe`` on ``<host>-rxe`` (``rdma link add ... type rxe``);
- in the host's namespace, two tc rules on clsact: everything arriving from ``<host>-rxp`` leaves by the
  host's fabric interface (``mirred egress redirect``: through its egress qdisc, so the host link's
  rate, queue and PFC pause apply), and UDP 4791 arriving at the fabric interface goes to ``<host>-rxp``
  (so to the rxe device; the host's own stack never sees RoCE packets meanwhile).

rxe sends a packet to another host's address with its own interface as the output interface: the
routing lookup misses (no route; the peer's local route belongs to another interface) and the kernel
takes the destination as on-link (net/ipv4/route.c ``ip_route_output_key_hash_rcu``, "Apparently,
routing tables are wrong"), so the packet leaves ``<host>-rxe``, never the loopback.

Nothing outlives the run: :meth:`RxeDevices.stop` deletes the rxe devices and the veth pairs (which
removes the rules with the peer end) and the clsact qdiscs it added, and restores nothing else (it
changed nothing else). The names carry the run id, so ``testbed clean`` removes the machine-side veth of
a run killed with SIGKILL (deleting it removes its rxe device: rxe follows its netdev's unregister).
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed.host.timeout_scale import startup_s
from testbed.process.lifecycle import StartStop, raise_if_interrupted

#: RoCEv2's UDP destination port (IBTA RoCEv2 annex A17)
ROCE_V2_UDP_PORT = 4791
#: seconds one ip/tc/rdma command may take (under software emulation a few seconds were seen)
COMMAND_TIMEOUT_S = 60.0
#: seconds rxe may take to list the host's address in its GID table (x testbed.host.timeout_scale)
GID_TIMEOUT_S = 5.0


class RxeError(RuntimeError):
    """An rxe device or its bridge could not be made (the command and its error named)."""


def names(host: str) -> tuple[str, str, str]:
    """(machine-side veth, host-side veth, rxe device) of ``host`` (a full host name with the run id,
    e.g. ``tb3fa1h1``): ``tb3fa1h1-rxe``, ``tb3fa1h1-rxp``, ``tb3fa1h1rxe`` (interface names of at most
    15 characters for hosts up to h9999)."""
    return f"{host}-rxe", f"{host}-rxp", f"{host}rxe"


def roce_v2_ipv4_gid_index(device: str, ip: str, sysfs: Path = Path("/sys/class/infiniband")) -> int:
    """The GID index of ``device``'s port 1 whose GID is the IPv4-mapped ``ip`` (``::ffff:a.b.c.d``) of type
    RoCE v2 (what perftest's ``-x`` takes). Raises RxeError when there is none (the address not yet
    seen by rxe)."""
    want = "0000:0000:0000:0000:0000:ffff:" + "".join(f"{int(o):02x}" for o in ip.split(".")[:2]) + ":" + \
        "".join(f"{int(o):02x}" for o in ip.split(".")[2:])
    port = sysfs / device / "ports" / "1"
    for gid_file in sorted((port / "gids").iterdir(), key=lambda p: int(p.name)):
        try:
            gid = gid_file.read_text().strip()
            kind = (port / "gid_attrs" / "types" / gid_file.name).read_text().strip()
        except OSError:  # an empty slot has no type ("Invalid argument")
            continue
        if gid == want and kind == "RoCE v2":
            return int(gid_file.name)
    raise RxeError(f"{device}: no RoCE v2 GID for {ip} in {port / 'gids'}")


@dataclass
class RxeHost:
    """One host's rxe bridge: ``host`` (full name), ``ip``, ``mac``, ``intf`` (its fabric interface),
    ``pid`` (a process in its namespace), ``gid_index`` once made."""

    host: str
    ip: str
    mac: str
    intf: str
    pid: int
    gid_index: int | None = None
    made: list = field(default_factory=list)

    @property
    def device(self) -> str:
        return names(self.host)[2]


def _run(args: list[str], what: str) -> str:
    """Run ``args``; its stdout. RxeError naming ``what``, the command and its stderr when it fails."""
    try:
        res = subprocess.run(args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RxeError(f"{what}: '{' '.join(args)}' took over {COMMAND_TIMEOUT_S:.0f} s") from None
    if res.returncode != 0:
        raise RxeError(f"{what}: '{' '.join(args)}' failed: {res.stderr.strip() or res.stdout.strip()}")
    return res.stdout


def _in_ns(pid: int, args: list[str]) -> list[str]:
    """``args`` run in the network namespace of process ``pid`` (nsenter from util-linux)."""
    return ["nsenter", "-t", str(pid), "-n", "--", *args]


def _sysctl(path: str, value: str) -> None:
    Path("/proc/sys/net", path).write_text(value)


class RxeDevices(StartStop):
    """rxe devices on the hosts ``ranks`` of the running fabric ``fab`` (module docstring); ``devices``:
    rank -> :class:`RxeHost` once started."""

    def __init__(self, fab, ranks):
        self.fab = fab
        layout = fab.layout
        self.ranks = sorted(set(ranks))
        self.devices: dict[int, RxeHost] = {}
        self._peers = {r: [(layout.hosts[p].ip, layout.hosts[p].mac) for p in self.ranks
                           if p != r and fab.may_reach(layout.hosts[r].name, layout.hosts[p].name)]
                       for r in self.ranks}
        self._layout = layout

    def start(self) -> None:
        _run(["modprobe", "rdma_rxe"], "loading rdma_rxe")
        for r in self.ranks:
            raise_if_interrupted()
            h = self._layout.hosts[r]
            dev = RxeHost(h.name, h.ip, h.mac, h.intf, self.fab.net.get(h.name).pid)
            self.devices[r] = dev
            self._make(dev, self._peers[r])

    def _make(self, d: RxeHost, peers: list[tuple[str, str]]) -> None:
        outer, inner, device = names(d.host)
        what = f"Soft-RoCE bridge of {d.host}"
        _run(["ip", "link", "add", outer, "address", d.mac, "type", "veth", "peer", "name", inner,
              "netns", str(d.pid)], what)
        d.made.append("veth")
        for key, value in (("ipv6/conf/{}/disable_ipv6", "1"), ("ipv4/conf/{}/accept_local", "1"),
                           ("ipv4/conf/{}/rp_filter", "0")):
            _sysctl(key.format(outer), value)
        _run(["ip", "addr", "add", f"{d.ip}/32", "dev", outer, "noprefixroute"], what)
        _run(["ip", "link", "set", outer, "up"], what)
        for ip, mac in peers:
            _run(["ip", "neigh", "replace", ip, "lladdr", mac, "dev", outer, "nud", "permanent"], what)
        ns = lambda *a: _run(_in_ns(d.pid, list(a)), what)  # noqa: E731
        ns("ip", "link", "set", inner, "up")
        ns("tc", "qdisc", "add", "dev", inner, "clsact")
        ns("tc", "filter", "add", "dev", inner, "ingress", "matchall",
           "action", "mirred", "egress", "redirect", "dev", d.intf)
        ns("tc", "qdisc", "add", "dev", d.intf, "clsact")
        d.made.append("clsact")
        ns("tc", "filter", "add", "dev", d.intf, "ingress", "protocol", "ip", "u32",
           "match", "ip", "protocol", "17", "0xff", "match", "ip", "dport", str(ROCE_V2_UDP_PORT), "0xffff",
           "action", "mirred", "egress", "redirect", "dev", inner)
        _run(["rdma", "link", "add", device, "type", "rxe", "netdev", outer], what)
        d.made.append("rxe")
        deadline = time.monotonic() + startup_s(GID_TIMEOUT_S)
        while True:  # rxe fills its GID table from the netdev's addresses in a work queue
            try:
                d.gid_index = roce_v2_ipv4_gid_index(device, d.ip)
                return
            except (RxeError, OSError):
                if time.monotonic() > deadline:
                    raise
            raise_if_interrupted()
            time.sleep(0.05)

    def stop(self) -> None:
        """Delete every rxe device, veth pair and clsact qdisc this made (safe to call twice; a failure is
        raised after the others were tried)."""
        errors = []
        for d in self.devices.values():
            outer, _, device = names(d.host)
            steps = []
            if "rxe" in d.made:
                steps.append((["rdma", "link", "delete", device], "rxe"))
            if "veth" in d.made:
                steps.append((["ip", "link", "del", outer], "veth"))
            if "clsact" in d.made:
                steps.append((_in_ns(d.pid, ["tc", "qdisc", "del", "dev", d.intf, "clsact"]), "clsact"))
            for args, tag in steps:
                try:
                    _run(args, f"removing the Soft-RoCE bridge of {d.host}")
                except RxeError as e:
                    if tag != "clsact" or Path(f"/proc/{d.pid}").exists():  # the host's namespace may be gone
                        errors.append(str(e))
                d.made.remove(tag)
        if errors:
            raise RxeError("; ".join(errors))
