"""The fabric of a ``testbed run`` split over several servers (scenario ``cluster``, ``--servers``).

:class:`ClusterRunFabric` is :class:`testbed.emulation.fabric.Fabric` built by Mininet's cluster
engine (testbed.cluster.engine: ``MininetCluster``, ``RemoteHost``, ``RemoteOVSSwitch``,
``RemoteSSHLink`` tunnels between servers), with every step that touches a kernel done on the
server that owns the port or host, by the same functions the single-server fabric calls
(testbed.emulation.fabric: switch port preparation, OVS QoS/MTU/controller settings, MTUs,
queue installation and read-back), run there through one testbed process per server
(testbed.cluster.remote). So every link is shaped as on one server, the tunnel ends
included (the tunnel's tap is the switch port of a crossing link), and the shaping
self-check reads back every queue on its own server.

The controller runs where the driver runs and listens on the driver's address that the servers
reach (the source address of a route to the first server): every server's bridges point to it.
The switches are fail-secure with OpenFlow 1.5 as on one server, so loops (several spines) are
the controller's business as always.
"""
from __future__ import annotations

import logging
import socket
import sys
from functools import partial
from pathlib import Path
from typing import Dict, List

from mininet.examples.cluster import MininetCluster, RemoteSSHLink
from mininet.log import setLogLevel

from controllers.contract import TOPOLOGY_FILE
from dataplane import queues
from testbed.cluster.engine import ClusterHost, ClusterOVSSwitch, placer_class
from topology.placement import Placement, place
from testbed.cluster.remote import REPO, RemoteError, ServerSession
from testbed.emulation import congestion_conf
from testbed.emulation.controller_proc import ControllerProcess, controller_settings
from testbed.emulation.controller_supervisor import ControllerSupervisor
from testbed.emulation.fabric import OFFLOADS_OFF, Fabric, FabricError
from testbed.emulation.topo import HOST_NIC_QUEUE_BYTES, FabricTopo
from testbed.process.lifecycle import raise_if_interrupted
from topology import model, planes
from traffic.clock import unix_ns

log = logging.getLogger(__name__)

FABRIC = "testbed.emulation.fabric:"


def driver_address(server: str, port: int = 22) -> str:
    """This machine's IPv4 address on the route to ``server`` (what the servers reach it at). OSError when
    ``server`` does not resolve or has no route."""
    ip = socket.gethostbyname(server)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((ip, port))  # UDP: no packet sent, only the route chosen
        return s.getsockname()[0]


class ClusterRunFabric(Fabric):
    """A running fabric over ``spec.cluster.servers`` (module docstring); the Fabric interface the runner and
    the workloads use, plus ``placement`` (topology.placement.Placement), ``sessions`` (server ->
    testbed.cluster.remote.ServerSession) and ``switch_ports_on`` (server -> its switch-side ports).

    Raises FabricError when a server step or the shaping self-check fails, RemoteError when a server's
    testbed process cannot be started or dies, whatever Mininet raises for an unreachable server.
    """

    #: a remote host's process starts by ssh without this process's environment: this checkout on its path
    python_argv = ("env", f"PYTHONPATH={REPO}", sys.executable)

    def __init__(self, spec, run_id: str, run_dir: Path, datapath: str = "user", layout=None, tenants=None):
        super().__init__(spec, run_id, run_dir, datapath, layout=layout, tenants=tenants)
        if spec.cluster is None:
            raise ValueError("ClusterRunFabric needs a scenario with a cluster section")
        self.placement: Placement = place(self.layout, spec.cluster.servers, spec.cluster.placement)
        self.sessions: Dict[str, ServerSession] = {}
        self.switch_ports_on: Dict[str, List[str]] = {}
        self.remote_tail_drop = {}
        self.remote_wander = {}
        self._wander_on: Dict[str, list] = {}

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        setLogLevel("warning")
        t0_ns = unix_ns()
        servers = self.placement.servers
        for srv in servers:
            self.sessions[srv] = ServerSession(srv, self.run_id)
        model.save(self.layout, self.run_dir / TOPOLOGY_FILE)
        settings = controller_settings(self.spec, self.run_id, self.run_dir,
                                       congestion_conf.loop_settings_file(self.spec, self.run_dir),
                                       tenants=self.tenants)
        host = driver_address(servers[0])
        self.controller = ControllerProcess(self.run_dir, settings, framework=self.spec.controller.framework,
                                            listen_host=host).start()
        switch = partial(ClusterOVSSwitch, datapath=self.datapath, protocols="OpenFlow15", failMode="secure")
        self.net = MininetCluster(topo=FabricTopo(layout=self.layout), servers=list(servers),
                                  placement=placer_class(self.placement), switch=switch, host=ClusterHost,
                                  link=RemoteSSHLink, controller=None, build=False, autoSetMacs=False,
                                  autoStaticArp=False, waitConnected=False)
        self.net.build()
        raise_if_interrupted()
        self._configure_hosts()
        self.net.start()
        for srv in servers:
            self.switch_ports_on[srv] = [i.name for sw in self.layout.switches
                                         if self.placement.server_of[sw.name] == srv
                                         for i in self.net.get(sw.name).intfList() if i.name != "lo"]
        self._on_each("leave_qdiscs_alone", lambda srv: (self.switch_ports_on[srv],))
        self._set_mtu()
        self._on_each("connect_bridges", lambda srv: (self._bridges_on(srv), f"tcp:{host}:{self.controller.port}"))
        self._shape_all()
        raise_if_interrupted()
        for srv in servers:
            if self.switch_ports_on[srv]:
                td = self.sessions[srv].new("testbed.emulation.switch_tail_drop:SwitchTailDrop", self.run_id,
                                            self.switch_ports_on[srv])
                td.call("start")
                self.remote_tail_drop[srv] = td
        if self.spec.fabric.clock_wander:  # each server redraws its own shapers (same draws: seeded per interface)
            for srv, links in self._wander_on.items():
                cw = self.sessions[srv].new("testbed.emulation.clock_wander:ClockWander", links,
                                            self.spec.fabric.clock_wander, self.spec.fabric.mtu_bytes + 14,
                                            self.spec.seed)
                cw.call("start")
                self.remote_wander[srv] = cw
        self.ready = self.controller.wait_ready()
        self.supervisor = ControllerSupervisor(self.controller, self.spec.controller.restart,
                                               [sw.dpid for sw in self.layout.switches], t0_ns).start()
        log.info("fabric %s ready over %s: %s", self.run_id, ", ".join(servers), self.ready)

    def stop(self) -> None:
        """Remove everything this fabric created on every server (also after a failed start)."""
        if self.supervisor is not None:
            self.controller_report = self.supervisor.stop()
            self.supervisor = None
        if self.remote_wander:
            changes = refused = 0
            for srv, cw in self.remote_wander.items():
                try:
                    cw.call("stop")
                    changes += cw.call("__getattribute__", "changes")
                    refused += cw.call("__getattribute__", "errors")
                except RemoteError as e:
                    log.warning("stopping the clock wander on %s failed: %s", srv, e)
            self.wander_report = {"fraction": self.spec.fabric.clock_wander, "changes": changes, "refused": refused}
            self.remote_wander = {}
        for srv, td in list(self.remote_tail_drop.items()):
            try:
                td.call("stop")
            except RemoteError as e:
                log.warning("removing the tail-drop rules on %s failed: %s", srv, e)
        self.remote_tail_drop = {}
        if self.net is not None:
            nodes = self.net.nameToNode
            for srv, session in self.sessions.items():
                pids = [nodes[h.name].pid for h in self.layout.hosts
                        if self.placement.server_of[h.name] == srv and h.name in nodes and nodes[h.name].pid]
                try:
                    session.call("testbed.host.cleanup:kill_in_namespaces", pids)
                except RemoteError as e:
                    log.warning("ending processes in the hosts on %s failed: %s", srv, e)
            try:
                self.net.stop()
            except Exception as e:  # keep tearing down
                log.warning("mininet stop failed: %s", e)
            self.net = None
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        for srv, session in self.sessions.items():  # safety net: what Mininet left of this run on the server
            try:
                report = session.call("testbed.host.cleanup:clean", [self.run_id], include_live=True,
                                      spare_control=True)
                if report.total:
                    log.info("removed what Mininet left of run %s on %s: %s", self.run_id, srv, report)
            except RemoteError as e:
                log.warning("cleaning run %s on %s failed: %s (testbed.cluster.clean %s %s)", self.run_id, srv, e,
                            srv, self.run_id)
            session.close()
        self.sessions = {}

    def put_file(self, host: str, path: Path, text: str) -> None:
        """Write ``text`` to ``path`` here (the run directory's record) and on ``host``'s server."""
        Path(path).write_text(text)
        self._session_of(host).call("testbed.cluster.remote:write_file", str(path), text)

    # -- set-up steps, each on the server that owns the port or host ------------------------------
    def _bridges_on(self, srv: str) -> List[str]:
        return [sw.name for sw in self.layout.switches if self.placement.server_of[sw.name] == srv]

    def _on_each(self, function: str, args_of) -> Dict[str, object]:
        """``testbed.emulation.fabric.<function>(*args_of(server))`` on every server with switches."""
        out = {}
        for srv, session in self.sessions.items():
            if self._bridges_on(srv):
                out[srv] = session.call(FABRIC + function, *args_of(srv))
        return out

    def _session_of(self, node: str) -> ServerSession:
        return self.sessions[self.placement.server_of[node]]

    def _configure_hosts(self) -> None:
        for h in self.layout.hosts:
            raise_if_interrupted()
            node = self.net.get(h.name)
            cmds = ["sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"
                    " net.ipv4.tcp_limit_output_bytes=32768"]
            if self.datapath == "user":
                cmds += [f"ethtool -K {intf} {' '.join(OFFLOADS_OFF)} 2>/dev/null" for intf in self.host_intfs(h.name)]
            node.cmd("; ".join(cmds))
        self._on_each("prepare_switch_ports", lambda srv: (
            [i.name for sw in self._bridges_on(srv) for i in self.net.get(sw).intfList() if i.name != "lo"],
            self.datapath))

    def _set_mtu(self) -> None:
        mtu = self.spec.fabric.mtu_bytes
        wrong = [w for ws in self._on_each("set_switch_mtus", lambda srv: (self.switch_ports_on[srv], mtu)).values()
                 for w in ws]
        for h in self.layout.hosts:
            raise_if_interrupted()
            wrong += self._session_of(h.name).call(FABRIC + "set_host_mtus", h.name, self.net.get(h.name).pid,
                                                   self.host_intfs(h.name), mtu)
        if wrong:
            raise FabricError(f"MTU {mtu} (fabric.mtu_bytes) not taken by: " + ", ".join(wrong))

    def _shape_all(self) -> None:
        for view in planes.views(self.layout):
            for h in view.hosts:
                raise_if_interrupted()
                ln = view.links_of(h.name)[0]
                intf = (ln.a if ln.a.node == h.name else ln.b).intf
                self.readback[intf] = self._session_of(h.name).call(
                    FABRIC + "shape_host_nic", self.queues, self.net.get(h.name).pid, intf,
                    self._queue_config(ln.rate_bps, HOST_NIC_QUEUE_BYTES, switch_port=False),
                    [(peer.ip, peer.mac) for peer in view.hosts if peer.name != h.name])
                self.port_rate_bps[intf] = ln.rate_bps
                self._wander_on.setdefault(self.placement.server_of[h.name], []).append(
                    self._wandering(f"/proc/{self.net.get(h.name).pid}/ns/net", intf, ln.rate_bps, False))
        switches = {s.name for s in self.layout.switches}
        configs: Dict[str, dict] = {srv: {} for srv in self.sessions}
        for link in self.layout.links:
            for end in (link.a, link.b):
                if end.node in switches:
                    configs[self.placement.server_of[end.node]][end.intf] = (link.rate_bps, link.buffer_bytes)
        for srv, ports in configs.items():
            raise_if_interrupted()
            if not ports:
                continue
            got = self.sessions[srv].call(FABRIC + "shape_switch_ports", self.queues,
                                          {p: self._queue_config(r, b) for p, (r, b) in ports.items()})
            self.readback.update(got)
            for port, (rate, _buf) in ports.items():
                self.port_rate_bps[port] = rate
                self.switch_ports.append(port)
                self._wander_on.setdefault(srv, []).append(self._wandering(None, port, rate, True))
        problems = queues.self_check(self.port_rate_bps, self.readback)
        problems += queues.delay_check({port: 0 for port in self.readback}, self.readback)  # no delay (check_cluster)
        if problems:
            raise FabricError("link shaping self-check failed: " + "; ".join(problems))
