"""Fabric: the running system of one layout (topology/) (Mininet hosts, OVS switches, shaped links, controller).

Use as a context manager::

    with Fabric(spec, run_id, run_dir, datapath="user") as fab:
        fab.hosts[0].cmd("ping -c1 10.0.2.1")

On enter: write the controller's topology file, start the controller, build the
Mininet network (hosts in their own network namespaces, OVS bridges with
OpenFlow 1.5, fail-mode secure), turn checksum/segmentation offloads off on
every veth when the userspace datapath is used (it cannot fill in checksums),
disable IPv6 in hosts (no neighbour-discovery noise), set every veth's MTU and
every OVS port's ``mtu_request`` to ``fabric.mtu_bytes``, install every egress queue with
the ``fabric.queue_backend`` (dataplane.queues; rate, buffer and MTU) under a netem stage of
each link's delay (its own, e.g. a dci link's, else ``fabric.link_delay_us``) when any link has one
(dataplane.queues.delay), read every
rate and delay back (self-check), hand the controller's ECN/PFC loop its settings when the scenario has
``congestion.ecn`` or ``congestion.pfc`` (testbed.emulation.congestion_conf), and wait until the controller confirmed every
switch's flows and groups with a barrier, then supervise the controller
(testbed.emulation.controller_supervisor: a death is recorded and, with
``controller.restart``, the controller restarted). On exit (also after an
exception or Ctrl-C), remove exactly what was created; the supervisor's report
stays in ``controller_report``.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

from mininet.link import Link
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host, OVSSwitch
from pyroute2 import IPRoute

NUD_PERMANENT = 0x80  # <linux/neighbour.h>

from controllers.contract import TOPOLOGY_FILE, ControllerReady
from controllers.tenants import TenantFilter, filter_from_settings
from testbed.host import cleanup
from dataplane import queues
from testbed.emulation import congestion_conf
from testbed.emulation.controller_proc import ControllerProcess, controller_settings
from testbed.emulation.controller_supervisor import ControllerSupervisor
from traffic.clock import unix_ns
from testbed.process.lifecycle import StartStop, raise_if_interrupted
from testbed.spec.scenario import ScenarioSpec
from testbed.emulation.clock_wander import ClockWander, WanderingLink
from testbed.emulation.switch_tail_drop import SwitchTailDrop
from testbed.emulation.topo import HOST_NIC_QUEUE_BYTES, FabricTopo
from topology import build as build_layout
from topology import model, planes

log = logging.getLogger(__name__)

#: longest wait between a bridge's controller connection attempts (OVS's minimum, 1 s)
CONTROLLER_MAX_BACKOFF_MS = 1000
OFFLOADS_OFF = ("rx", "off", "tx", "off", "sg", "off", "tso", "off", "gso", "off", "gro", "off")


class FabricError(RuntimeError):
    """The fabric could not be built or failed its start-up self-check."""


class _StoppableMininet(Mininet):
    """Mininet whose build loop gives up at a SIGINT/SIGTERM held back meanwhile (testbed.process.lifecycle): a
    node or link is added in some 10-50 ms, so a large fabric's build (minutes) answers within one."""

    def addHost(self, *args, **kw):  # noqa: N802 (Mininet's names)
        raise_if_interrupted()
        return super().addHost(*args, **kw)

    def addSwitch(self, *args, **kw):  # noqa: N802
        raise_if_interrupted()
        return super().addSwitch(*args, **kw)

    def addLink(self, *args, **kw):  # noqa: N802
        raise_if_interrupted()
        return super().addLink(*args, **kw)

    def configHosts(self) -> None:  # noqa: N802  Mininet's own loop, one host at a time
        for host in self.hosts:
            raise_if_interrupted()
            if host.defaultIntf():
                host.configDefault()
            else:
                host.configDefault(ip=None, mac=None)


class Fabric(StartStop):
    """A running fabric of one run (see module docstring); ``layout`` is its topology.model.Layout."""

    #: how a host starts the testbed's Python (agents): this interpreter, with this process's environment
    python_argv: tuple = (sys.executable,)

    def __init__(self, spec: ScenarioSpec, run_id: str, run_dir: Path, datapath: str = "user",
                 layout: model.Layout | None = None, tenants=None):
        """``layout``: the run's layout, built once by the runner (testbed.pipeline.context.RunContext.layout);
        None: built here. ``tenants``: the run's testbed.spec.tenants.TenantMap the controller enforces
        (None: the scenario's own, tenant_map(spec); a jobs placement passes its extra hosts). ValueError
        for another run's layout or an unknown ``datapath``."""
        if datapath not in ("user", "kernel"):
            raise ValueError(f"datapath {datapath!r}: allowed 'user' or 'kernel'")
        if layout is not None and layout.run_id != run_id:
            raise ValueError(f"layout of run {layout.run_id!r} given to the fabric of run {run_id!r}")
        self.spec = spec
        self.run_id = run_id
        self.tenants = tenants
        self.run_dir = Path(run_dir)
        self.datapath = datapath
        self.layout = layout if layout is not None else build_layout(spec.fabric.kind, spec.fabric, run_id)
        self.net: Mininet | None = None
        self.controller: ControllerProcess | None = None
        self.supervisor: ControllerSupervisor | None = None
        #: summary.json's ``controller`` block, set when the fabric stops
        self.controller_report: dict | None = None
        #: interface -> configured egress rate in bit/s, for every shaped egress
        self.port_rate_bps: dict[str, float] = {}
        #: switch-side (root namespace) interfaces, sampled by telemetry
        self.switch_ports: list[str] = []
        #: the tenant isolation the controller enforces once started (controllers.tenants.TenantFilter; None: off):
        #: a host's static neighbours are only the hosts it may reach
        self.isolation: TenantFilter | None = None
        #: the controller's ready file once it confirmed every switch (controllers.contract.ControllerReady)
        self.ready: ControllerReady | None = None
        self._owner_pid = os.getpid()
        #: the queue backend of every egress (fabric.queue_backend), every egress under a netem stage when
        #: any link has a delay (fabric.link_delay_us, or a link's own: a dci fabric's dci_delay_us)
        self.queues = queues.get(spec.fabric.queue_backend, spec.fabric.queue_settings,
                                 delay_us=spec.fabric.link_delay_us,
                                 netem=any(ln.delay_or(spec.fabric.link_delay_us) for ln in self.layout.links))
        #: interface -> its link's one-way delay in us (its own, else fabric.link_delay_us), every shaped egress
        self.delay_us: dict[str, int] = {}
        self.readback: dict[str, queues.ShapedLink] = {}
        #: the switch ports' silent tail drop (testbed.emulation.switch_tail_drop), set once shaped
        self.tail_drop: SwitchTailDrop | None = None
        #: every shaper (host NICs, switch ports) as the clock wander redraws it (testbed.emulation.clock_wander)
        self.wander_links: list[WanderingLink] = []
        self.wander: ClockWander | None = None
        #: manifest/summary figures of the wander once stopped: fraction, changes, refused
        self.wander_report: dict | None = None

    # -- lifecycle (StartStop) -----------------------------------------------
    def start(self) -> None:
        setLogLevel("warning")
        t0_ns = unix_ns()
        model.save(self.layout, self.run_dir / TOPOLOGY_FILE)
        settings = controller_settings(self.spec, self.run_id, self.run_dir,
                                       congestion_conf.loop_settings_file(self.spec, self.run_dir),
                                       tenants=self.tenants)
        self.isolation = filter_from_settings(self.run_id, settings.tenants)
        self.controller = ControllerProcess(self.run_dir, settings, framework=self.spec.controller.framework).start()
        switch_cls = partial(OVSSwitch, datapath=self.datapath, protocols="OpenFlow15", failMode="secure")
        self.net = _StoppableMininet(topo=FabricTopo(layout=self.layout), switch=switch_cls, host=Host, link=Link,
                           controller=None, build=False, autoSetMacs=False, autoStaticArp=False,
                           waitConnected=False)
        self.net.build()  # every step and loop gives up at a held-back signal (raise_if_interrupted)
        self._configure_hosts()
        raise_if_interrupted()
        self.net.start()
        # after start: adding a port makes OVS reset its qdisc unless its QoS is linux-noop
        self._leave_qdiscs_to_us()
        self._set_mtu()
        self._connect_controller()
        self._shape_all()
        raise_if_interrupted()
        self.tail_drop = SwitchTailDrop(self.run_id, self.switch_ports).__enter__()
        if self.spec.fabric.clock_wander:
            self.wander = ClockWander(self.wander_links, self.spec.fabric.clock_wander,
                                      self.spec.fabric.mtu_bytes + 14, self.spec.seed).__enter__()
        congestion_conf.write_and_wait(self)  # the controller's ECN/PFC loop samples the queues from now on
        self.ready = self.controller.wait_ready()
        self.supervisor = ControllerSupervisor(self.controller, self.spec.controller.restart,
                                               [sw.dpid for sw in self.layout.switches], t0_ns).start()
        log.info("fabric %s ready: %s", self.run_id, self.ready)

    def stop(self) -> None:
        """Remove everything this fabric created. Safe to call twice and after a failed start.

        Only the process that built the fabric tears it down: a forked child
        (pyroute2 forks to open namespace sockets) that unwinds never does.
        """
        if os.getpid() != self._owner_pid:
            return
        if self.supervisor is not None:  # first: tearing down must not look like a death to restart from
            self.controller_report = self.supervisor.stop()
            self.supervisor = None
        if self.wander is not None:
            self.wander.stop()
            self.wander_report = {"fraction": self.wander.fraction, "changes": self.wander.changes,
                                  "refused": self.wander.errors}
            self.wander = None
        if self.tail_drop is not None:
            try:
                self.tail_drop.stop()
            except Exception as e:  # keep tearing down; testbed clean removes the table
                log.warning("removing the tail-drop rules failed: %s", e)
            self.tail_drop = None
        if self.net is not None:
            try:  # what a user started in a host (--cli) would outlive its shell
                ended = cleanup.kill_in_namespaces([h.pid for h in self.net.hosts if h.pid])
                if ended:
                    log.info("ended processes left in the hosts of run %s: %s", self.run_id, ", ".join(ended))
            except Exception as e:
                log.warning("ending processes in the hosts failed: %s", e)
            try:
                self.net.stop()
            except Exception as e:  # keep tearing down; report what failed
                log.warning("mininet stop failed: %s", e)
            self.net = None
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        # safety net: anything of this run that Mininet did not remove (e.g. a start cut short)
        report = cleanup.clean([self.run_id], include_live=True)
        if report.total:
            log.info("removed what Mininet left of run %s: %s", self.run_id, report)

    # -- access --------------------------------------------------------------
    def controller_health(self) -> dict | None:
        """summary.json's ``controller`` block as of now: the supervisor's report while the fabric runs
        (it keeps watching), ``controller_report`` (the final one) once the fabric stopped; None before
        the supervisor started (testbed.emulation.controller_supervisor.ControllerSupervisor.report)."""
        if self.controller_report is not None:
            return self.controller_report
        return self.supervisor.snapshot() if self.supervisor is not None else None

    @property
    def hosts(self) -> list[Host]:
        return [self.net.get(h.name) for h in self.layout.hosts]

    def host(self, rank: int) -> Host:
        return self.net.get(self.layout.hosts[rank].name)

    def switch(self, name: str) -> OVSSwitch:
        return self.net.get(name)

    def put_file(self, host: str, path: Path, text: str) -> None:
        """Write ``text`` to ``path`` where ``host``'s processes read it (here: this machine)."""
        Path(path).write_text(text)

    def host_intfs(self, host: str) -> list[str]:
        """Interfaces of ``host``: eth0, then one per topology.model.Nic (planes, scale-up)."""
        return [f"{host}-eth0"] + [n.intf for n in self.layout.nics_of(host)]

    # -- set-up steps ---------------------------------------------------------
    def _switch_port_names(self) -> list[str]:
        """Every switch-side port (root namespace of the switch's server), in switch order."""
        return [i.name for sw in self.layout.switches for i in self.net.get(sw.name).intfList() if i.name != "lo"]

    def _configure_hosts(self) -> None:
        for h in self.layout.hosts:
            raise_if_interrupted()
            node = self.net.get(h.name)
            # no IPv6 noise; TCP keeps at most 32 KB in the NIC queue (TCP small queues), so
            # only senders that ignore backpressure (UDP floods) overflow the 64 KB NIC queue
            node.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"
                     " net.ipv4.tcp_limit_output_bytes=32768")
            if self.datapath == "user":
                for intf in self.host_intfs(h.name):
                    node.cmd("ethtool -K", intf, *OFFLOADS_OFF, "2>/dev/null")
        prepare_switch_ports(self._switch_port_names(), self.datapath)

    def _connect_controller(self) -> None:
        """Point every bridge at our controller (no Mininet controller node: it would start a
        shell and probe the port with telnet; the controller is known to listen already).

        ``max_backoff=1000``: a bridge that lost its controller retries every second (OVS's
        default backs off to 8 s), so a restarted controller has every switch back within ~1 s
        of listening. The bridges are fail-secure: without a controller they keep their flows."""
        connect_bridges([sw.name for sw in self.layout.switches], f"tcp:127.0.0.1:{self.controller.port}")

    def _leave_qdiscs_to_us(self) -> None:
        """QoS type linux-noop on every switch port: OVS then never touches its tc qdisc."""
        leave_qdiscs_alone(self._switch_port_names())

    def _set_mtu(self) -> None:
        """Every link at ``fabric.mtu_bytes``: OVS ``mtu_request`` on switch ports, then both veth ends.

        Raises FabricError when a veth does not take the MTU (read back after setting).
        """
        mtu = self.spec.fabric.mtu_bytes
        wrong = set_switch_mtus(self._switch_port_names(), mtu)
        for h in self.layout.hosts:
            raise_if_interrupted()
            wrong += set_host_mtus(h.name, self.net.get(h.name).pid, self.host_intfs(h.name), mtu)
        if wrong:
            raise FabricError(f"MTU {mtu} (fabric.mtu_bytes) not taken by: " + ", ".join(wrong))

    def _shape_all(self) -> None:
        """Install every egress queue (self.queues) at its link's rate, read it back, install
        hosts' static neighbours. Switch ports queue their link's buffer_bytes; host NICs
        HOST_NIC_QUEUE_BYTES (per class, with a backend of priority classes)."""
        for view in planes.views(self.layout):  # each host NIC: one per plane or scale-up domain
            for h in view.hosts:
                raise_if_interrupted()
                node = self.net.get(h.name)
                ln = view.links_of(h.name)[0]
                intf = (ln.a if ln.a.node == h.name else ln.b).intf
                self.delay_us[intf] = ln.delay_or(self.spec.fabric.link_delay_us)
                self.readback[intf] = shape_host_nic(
                    self.queues, node.pid, intf, self._queue_config(ln.rate_bps, HOST_NIC_QUEUE_BYTES, switch_port=False),
                    [(peer.ip, peer.mac) for peer in view.hosts if peer.name != h.name and self.may_reach(h.name, peer.name)],
                    self.delay_us[intf])
                self.wander_links.append(self._wandering(f"/proc/{node.pid}/ns/net", intf, ln.rate_bps, False))
                self.port_rate_bps[intf] = ln.rate_bps
        switches = {s.name for s in self.layout.switches}
        with IPRoute() as ipr:
            for link in self.layout.links:
                raise_if_interrupted()
                for end in (link.a, link.b):
                    if end.node in switches:
                        self._shape_switch_port(ipr, end.intf, link.rate_bps, link.buffer_bytes,
                                                link.delay_or(self.spec.fabric.link_delay_us))
        problems = queues.self_check(self.port_rate_bps, self.readback)
        problems += queues.delay_check(self.delay_us, self.readback)
        if problems:
            raise FabricError("link shaping self-check failed: " + "; ".join(problems))

    def may_reach(self, src: str, dst: str) -> bool:
        """True when host ``src`` may send to host ``dst`` (names with or without the run id): always without
        tenant isolation, else as the controller enforces it (controllers.tenants.allowed)."""
        return self.isolation is None or self.isolation.allows(src, dst)

    def _queue_config(self, rate_bps: float, buffer_bytes: int, switch_port: bool = True) -> queues.QueueConfig:
        """One class of ``buffer_bytes``, or with a backend of priority classes the ``congestion`` section's
        three (testbed.spec.congestion). A switch port's leaves sit at the top of its clock wander band."""
        mtu = self.spec.fabric.mtu_bytes
        peak = rate_bps * (1 + self.spec.fabric.clock_wander) if switch_port and self.spec.fabric.clock_wander \
            else None
        if self.queues.max_classes < 3:
            return queues.QueueConfig.single(rate_bps, buffer_bytes, mtu, peak_rate_bps=peak)
        classes = self.spec.congestion.traffic_classes(buffer_bytes, mtu + 14, switch_port)
        return queues.QueueConfig(rate_bps=rate_bps, mtu_bytes=mtu, classes=classes, peak_rate_bps=peak)

    def _wandering(self, netns: str | None, ifname: str, rate_bps: float, switch_port: bool) -> WanderingLink:
        """The clock wander's view of a shaper the backend just installed (class 1:1 under root 1:)."""
        from dataplane.queues.htb_bfifo import CLASS_HANDLE, ROOT_HANDLE, burst_bytes_for
        mtu = self.spec.fabric.mtu_bytes
        return WanderingLink(netns, ifname, rate_bps, switch_port, CLASS_HANDLE, ROOT_HANDLE,
                             burst_bytes_for(rate_bps, mtu), mtu + 14)

    def _shape_switch_port(self, ipr: IPRoute, ifname: str, rate_bps: float, buffer_bytes: int,
                           delay_us: int = 0) -> None:
        self.delay_us[ifname] = delay_us
        self.readback[ifname] = self.queues.install(ipr, ifname, self._queue_config(rate_bps, buffer_bytes),
                                                    delay_us)
        self.port_rate_bps[ifname] = rate_bps
        self.switch_ports.append(ifname)
        self.wander_links.append(self._wandering(None, ifname, rate_bps, True))


# -- kernel steps on one server (here, or on a cluster run's server: testbed.cluster.run_fabric) ------------
def prepare_switch_ports(ports: list[str], datapath: str) -> None:
    """Switch ports live in the root namespace: no IPv6 router solicitations or MLD reports out of them into
    the fabric; with the userspace datapath, checksum/segmentation offloads off (it cannot fill them in)."""
    for port in ports:
        Path(f"/proc/sys/net/ipv6/conf/{port}/disable_ipv6").write_text("1")
        if datapath == "user":
            subprocess.run(["ethtool", "-K", port, *OFFLOADS_OFF],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def leave_qdiscs_alone(ports: list[str]) -> None:
    """QoS type linux-noop on every port of ``ports``: Open vSwitch then never touches its tc qdisc."""
    cmd = ["ovs-vsctl", "--timeout=10"]
    for port in ports:
        cmd += ["--", "set", "port", port, "qos=@noop"]
    cmd += ["--", "--id=@noop", "create", "qos", "type=linux-noop"]
    _vsctl(cmd)


def connect_bridges(bridges: list[str], target: str) -> None:
    """Point every bridge at the controller ``target`` (``tcp:ADDRESS:PORT``), retrying every
    CONTROLLER_MAX_BACKOFF_MS once it lost it."""
    cmd = ["ovs-vsctl", "--timeout=10"]
    for br in bridges:
        cmd += ["--", "set-controller", br, target]
    _vsctl(cmd)
    cmd = ["ovs-vsctl", "--timeout=10"]
    for br in bridges:
        cmd += ["--", "set", "controller", br, f"max_backoff={CONTROLLER_MAX_BACKOFF_MS}"]
    _vsctl(cmd)


def _vsctl(cmd: list[str]) -> None:
    """Run an ``ovs-vsctl`` command; FabricError with its stderr when it fails."""
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        raise FabricError(f"{' '.join(cmd[:6])} ... (exit {res.returncode}): {res.stderr.strip()[-500:]}")


def _set_mtus(ipr, intfs: list[str], mtu: int, label: str) -> list[str]:
    wrong = []
    for intf in intfs:
        idx = ipr.link_lookup(ifname=intf)[0]
        ipr.link("set", index=idx, mtu=mtu)
        got = ipr.get_links(idx)[0].get_attr("IFLA_MTU")
        if got != mtu:
            wrong.append(f"{label}{intf}: {got}")
    return wrong


def set_switch_mtus(ports: list[str], mtu: int) -> list[str]:
    """OVS ``mtu_request`` and the veth MTU of every switch port; ``"port: MTU"`` of each that did not take it."""
    cmd = ["ovs-vsctl", "--timeout=10"]
    for port in ports:
        cmd += ["--", "set", "interface", port, f"mtu_request={mtu}"]
    _vsctl(cmd)
    with IPRoute() as ipr:
        return _set_mtus(ipr, ports, mtu, "")


def set_host_mtus(host: str, pid: int, intfs: list[str], mtu: int) -> list[str]:
    """The MTU of a host's interfaces (in the network namespace of process ``pid``); ``"host:intf: MTU"`` of
    each that did not take it."""
    with IPRoute(netns=f"/proc/{pid}/ns/net") as ipr:
        return _set_mtus(ipr, intfs, mtu, f"{host}:")


def shape_host_nic(backend, pid: int, intf: str, config, neighbours: list[tuple[str, str]], delay_us: int = 0):
    """Install the host NIC queue ``config`` (dataplane.queues.QueueConfig) with ``backend`` on ``intf`` in the
    network namespace of ``pid`` (``delay_us`` of propagation delay by netem under it, 0: none) and the static
    neighbours ``(ip, mac)`` (host traffic never waits for, or sends, ARP during a run; the controller still
    answers ARP, controllers/app.py); the read-back (dataplane.queues.ShapedLink)."""
    with IPRoute(netns=f"/proc/{pid}/ns/net") as ipr:
        shaped = backend.install(ipr, intf, config, delay_us)
        idx = ipr.link_lookup(ifname=intf)[0]
        for ip, mac in neighbours:
            ipr.neigh("replace", dst=ip, lladdr=mac, ifindex=idx, state=NUD_PERMANENT)
    return shaped


def shape_switch_ports(backend, configs: dict) -> dict:
    """Install ``configs`` (port -> dataplane.queues.QueueConfig) with ``backend`` on switch ports of this
    server's root namespace; port -> read-back (dataplane.queues.ShapedLink)."""
    with IPRoute() as ipr:
        return {port: backend.install(ipr, port, config) for port, config in configs.items()}
