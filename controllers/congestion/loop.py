"""The controller's congestion loop: a 1 ms sampler of the lossless class driving ECN marking and PFC.

Runs as a thread of the os-ken app (:class:`controllers.app.FabricRoutingApp`),
in the controller process: the policies own the thresholds and decide; the
actuators act through netlink and nftables from this process (OpenFlow
cannot pause a queue or mark by queue depth). Each tick:

1. one ``RTM_GETQDISC`` dump of the lossless class's tbf leaf on every switch
   port (:class:`dataplane.qdisc_sampler.QdiscSampler`, ``period_s``);
2. ECN (``ecn`` set): the RED policy (:mod:`dataplane.ecn_policy`) and
   the nftables marker (:class:`dataplane.ecn_marker.NftEcnMarker`);
3. PFC (``pfc`` set): the Xoff/Xon policy on the bytes charged to each ingress
   (:mod:`controllers.congestion.pfc`), pausing or resuming the lossless
   class of the upstream device's egress toward it (:mod:`dataplane.pfc_gate`:
   a switch's port in the root namespace, a host's NIC in its namespace) and,
   toward a host, sending real PFC frames from the switch port
   (:class:`dataplane.pfc_frames.PfcSender`: one long-lived socket per
   port, priority 3, refreshed at half the pause time while paused; opening and
   closing an AF_PACKET socket per frame took 16 ms here, an RCU grace period);
4. PFC frames received from hosts (:mod:`controllers.congestion.rx_pauses`): honoured on the
   host-facing port's own lossless egress, watched by the PFC watchdog, dropped in storm.

Loop time = from the sample's clock reading to the end of the tick's actions.

Settings: :class:`controllers.contract.LoopSettings`, a JSON file the testbed writes once the
fabric's queues are installed (the controller settings' ``loop_settings_file``;
testbed.emulation.congestion_conf); the loop waits for it, then writes ``congestion_loop.started``. It stops
when the testbed asks (the file ``congestion_loop.stop`` appears in
``results_dir``: the measurement is over and the testbed writes its results
before tearing the fabric down) or at the latest when the controller stops
(SIGTERM: :func:`stop_all` from controllers.run). At stop it resumes everything it
paused, writes into ``results_dir`` the files below, then ``congestion_loop.stopped``
(its tables are final): ``lossless_queues.csv`` (every
sample), ``ecn_marking.csv``, ``pfc_events.csv`` (time_ns, port, class,
event pause|resume|rx_pause|rx_resume|storm|restore, charged_bytes, upstream, upstream_port, actuation_us,
pfc_frame: controllers.loop_result.PFC_EVENT_COLUMNS) and
``congestion_loop.json`` (controllers.loop_result.LoopResult: loop time, counts; read by
testbed.results.congestion).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from controllers import contract
from controllers.contract import (ECN_MARKING_FILE, LOOP_RESULT_FILE, LOOP_STARTED_FILE, LOOP_STOP_REQUEST_FILE,
                                  LOOP_STOPPED_FILE, LOSSLESS_QUEUES_FILE, PFC_EVENTS_FILE, LoopSettings)
from controllers.loop_result import (PFC_EVENT_NAMES, EcnResult, LoopResult, Percentiles, PfcResult,
                                     WatchdogResult)
from traffic.wire.pfc import LOSSLESS_PRIORITY

LOG = logging.getLogger(__name__)

#: how often the loop's starter thread looks for the stop request (seconds)
STOP_POLL_S = 0.05
#: the lossless class: index in htb_classes (its IEEE 802.1p priority: traffic.wire.pfc.LOSSLESS_PRIORITY)
LOSSLESS_CLASS = 1
#: PFC quanta sent toward a host while paused (the maximum; the sender refreshes it while paused)
PAUSE_QUANTA = 0xFFFF
_BACKLOG_COL, _DROPS_COL = 3, 2
_RUNNING: List["CongestionLoop"] = []


class CongestionLoop:
    """One run's loop (module doc). ``conf``: its settings; ``layout``: the run's topology."""

    def __init__(self, conf: LoopSettings, layout):
        from controllers.congestion import pfc
        from dataplane.qdisc_sampler import QdiscSampler

        self.conf, self.layout = conf, layout
        self.results_dir = Path(conf.results_dir)
        self.ports = sorted(pfc.upstreams(layout))
        self.sampler = QdiscSampler(self.ports, conf.period_s, parent=conf.sampled_parent,
                                    on_sample=self._tick)
        # sch_red leaves mark by themselves (dataplane.queues.sch_red): no loop marker then
        self.marker = self._marker() if conf.ecn is not None and conf.ecn.marker != "red" else None
        self.policy = None
        if conf.pfc is not None:
            self.policy = pfc.PfcPolicy(conf.pfc.xoff_bytes, conf.pfc.xon_bytes, self.ports, pfc.feeds(layout))
        self.upstreams = pfc.upstreams(layout)
        self.gates: Dict[str, Any] = {}
        self._handles: list = []
        self.frames: Dict[str, Any] = {}  # host-facing ingress -> PfcSender
        self.events: List[tuple] = []
        self.loop_ns: List[int] = []
        self.watchdog = self._watchdog()
        self.rx = None  # controllers.congestion.rx_pauses.RxPauses (PFC on)
        self._stop_lock = threading.Lock()
        self._stopped = False

    def _watchdog(self):
        """The PFC watchdog (controllers/congestion/watchdog.py: storm after a pause longer than
        ``detect_ms``, pauses not honoured until ``restore_ms`` without demand) when ``pfc.watchdog`` is
        configured and the policy module exists; else None (every pause demand is honoured)."""
        wd = self.conf.pfc.watchdog if self.conf.pfc is not None else None
        if wd is None:
            return None
        try:
            from controllers.congestion.watchdog import PfcWatchdog
        except ImportError:
            LOG.warning("pfc.watchdog configured, but controllers/congestion/watchdog.py is missing: not run")
            return None
        return PfcWatchdog(detect_ms=wd.detect_ms, restore_ms=wd.restore_ms, mitigate=wd.enabled)

    def _marker(self):
        from dataplane.ecn_marker import NftEcnMarker
        from dataplane.ecn_policy import MarkingPolicy, RedCurve

        e = self.conf.ecn
        policy = MarkingPolicy(RedCurve(e.kmin_bytes, e.kmax_bytes, e.pmax), self.ports, e.step)
        return NftEcnMarker(self.conf.run_id, policy, (e.dscp,))

    # ------------------------------------------------------------ lifecycle
    def _open_gates(self) -> None:
        """A ClassGate on every upstream egress that a pausable ingress can pause (sockets opened now,
        so a tick never waits for a namespace)."""
        from pyroute2 import IPRoute

        from dataplane.pfc_frames import PfcSender
        from dataplane.pfc_gate import ClassGate, kick_socket
        from dataplane.rtnetlink import Netlink

        by_ns: Dict[Optional[str], tuple] = {}
        for ingress in self.policy.paused:
            up = self.upstreams[ingress]
            pid = self.conf.host_pids.get(up.node[len(self.conf.run_id):]) if up.is_host else None
            ns = f"/proc/{pid}/ns/net" if pid else None
            if ns not in by_ns:
                by_ns[ns] = (IPRoute(netns=ns, flags=0) if ns else IPRoute(), Netlink(ns), kick_socket(ns))
                self._handles += list(by_ns[ns])
            limit = self.conf.host_queue_bytes if up.is_host else self.conf.lossless_buffer_bytes
            self.gates[ingress] = ClassGate(*by_ns[ns], up.ifname, LOSSLESS_CLASS, self._leaf_bps(up.rate_bps, not up.is_host),
                                            self.conf.mtu_bytes, limit)
            if up.is_host:
                self.frames[ingress] = PfcSender(ingress, up.rate_bps)
                self._handles.append(self.frames[ingress])
        self._open_rx(by_ns)

    def _leaf_bps(self, rate_bps: float, switch_port: bool) -> float:
        """The rate a class leaf of an interface was installed at: a switch port's at the top of its clock
        wander band (testbed.emulation.clock_wander), a host NIC's at its nominal rate."""
        return rate_bps * (1 + self.conf.clock_wander) if switch_port else rate_bps

    def _open_rx(self, by_ns: Dict[Optional[str], tuple]) -> None:
        """Host PFC frames (controllers/congestion/rx_pauses.py): a gate on every host-facing port's own
        lossless egress, the frame socket, the watchdog's drop actuator."""
        from pyroute2 import IPRoute

        from controllers.congestion.rx_pauses import RxPauses, frame_socket
        from dataplane.pfc_gate import ClassGate, kick_socket
        from dataplane.pfc_watchdog_drop import WatchdogDrop
        from dataplane.rtnetlink import Netlink

        if None not in by_ns:
            by_ns[None] = (IPRoute(), Netlink(None), kick_socket(None))
            self._handles += list(by_ns[None])
        ports = {p: (up.rate_bps, up.node, up.ifname) for p, up in self.upstreams.items() if up.is_host}
        gates = {p: ClassGate(*by_ns[None], p, LOSSLESS_CLASS, self._leaf_bps(bps, True), self.conf.mtu_bytes,
                              self.conf.lossless_buffer_bytes) for p, (bps, _h, _n) in ports.items()}
        for gate in gates.values():  # a restarted controller may find ports left paused
            gate.resume()  # (their kick frames go to the hosts, not into a switch: not counted as kicks)
        sock = frame_socket()
        self._handles.append(sock)
        drop = None
        if self.watchdog is not None and self.watchdog.mitigate:
            drop = WatchdogDrop(self.conf.run_id).prepare()
        self.rx = RxPauses(ports, gates, self.watchdog, drop, sock)

    def start(self) -> "CongestionLoop":
        if self.policy is not None:
            self._open_gates()
            for gate in self.gates.values():  # a restarted controller may find classes left paused
                gate.resume()
        if self.marker is not None:
            self.marker.start()
        self.sampler.start()
        _RUNNING.append(self)
        (self.results_dir / LOOP_STARTED_FILE).write_text(json.dumps({"ports": len(self.ports)}))
        LOG.info("congestion loop: %d ports every %.1f ms, ECN %s, PFC %s (PFC frames to %d hosts)",
                 len(self.ports), self.conf.period_s * 1e3, "on" if self.marker else "off",
                 "on" if self.policy else "off", len(self.frames))
        return self

    def stop(self) -> None:
        """Stop sampling, resume every paused upstream, remove the marker, write the results, then
        :data:`controllers.contract.LOOP_STOPPED_FILE`. Once only: a second call (the stop request and SIGTERM at once) waits for the
        first and returns."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
            try:
                self._stop_now()
            finally:  # also after a failed stop: the testbed waits for this file, not for a timeout
                (self.results_dir / LOOP_STOPPED_FILE).write_text(json.dumps({"time_ns": time.time_ns()}))

    def _stop_now(self) -> None:
        if self in _RUNNING:
            _RUNNING.remove(self)
        try:
            self.sampler.stop()
        finally:
            if self.policy is not None:
                for ingress in self.policy.release_all():
                    try:  # the fabric may be gone already (Mininet stops before the controller)
                        self._act(time.time_ns(), ingress, "resume", -1)
                    except OSError as e:
                        LOG.info("resume of %s at stop: %s", ingress, e)
            if self.rx is not None:
                self._stop_rx()
            try:
                if self.marker is not None:
                    self.marker.stop()
            finally:
                for h in self._handles:
                    h.close()
                self.write()

    def _stop_rx(self) -> None:
        try:
            self.events.extend(self.rx.release_all(time.time_ns()))
        except OSError as e:  # the fabric may be gone already
            LOG.info("releasing host-paused ports at stop: %s", e)
        if self.rx.drop is not None:
            try:
                self.rx.drop.stop()
            except Exception as e:  # testbed clean removes the table and pair later
                LOG.warning("watchdog drop rules at stop: %s", e)

    # ------------------------------------------------------------ the tick
    def _tick(self, time_ns: int, counters) -> None:
        """``counters``: the sampler's int64 array, one row per port (dataplane.qdisc_sampler.COUNTERS)."""
        if self.marker is not None:
            self.marker.on_sample(time_ns, counters)
        if self.policy is not None:
            backlogs = counters[:, _BACKLOG_COL].tolist()
            if self.rx is not None:  # host PFC frames and storms first: a storm's queue is not charged
                self.events.extend(self.rx.tick(time_ns))
                backlogs = self.rx.uncharge_storms(self.ports, backlogs)
            changes = self.policy.decide(backlogs)
            if self.watchdog is None:
                for ingress, event, charged in changes:
                    self._act(time_ns, ingress, event, charged)
            else:
                self._watch(time_ns, {i: charged for i, _, charged in changes})
        self.loop_ns.append(time.time_ns() - time_ns)

    def _watch(self, time_ns: int, charged: Dict[str, int]) -> None:
        """Feed every ingress's pause demand to the watchdog; act on what it says to honour; log storms
        and restores as events (``storm`` / ``restore`` rows of pfc_events.csv). The watchdog watches switch
        queues only (as SONiC's pfcwd runs on switch ports): a pause of a switch's egress by this switch,
        here, and a switch port paused by its host's frames (controllers/congestion/rx_pauses.py); a host NIC
        this switch pauses is always honoured (measured: with the over-charged ingresses of a host port a
        victim host next to a standing queue stayed paused 200 ms and was declared a storm)."""
        for ingress, demand in self.policy.paused.items():
            key = (ingress, LOSSLESS_PRIORITY)
            up = self.upstreams[ingress]
            if up.is_host:
                if demand != self.gates[ingress].paused:
                    self._act(time_ns, ingress, "pause" if demand else "resume", charged.get(ingress, -1))
                continue
            change = self.watchdog.update(key, time_ns, demand)
            if change is not None:
                self.events.append((time_ns, ingress, LOSSLESS_PRIORITY, change.kind, -1, up.node, up.ifname,
                                    0.0, False))
            want = self.watchdog.honour(key, demand)
            if want != self.gates[ingress].paused:
                self._act(time_ns, ingress, "pause" if want else "resume", charged.get(ingress, -1))

    def _act(self, time_ns: int, ingress: str, event: str, charged: int) -> None:
        gate, up = self.gates[ingress], self.upstreams[ingress]
        ns = gate.pause() if event == "pause" else gate.resume()
        frame = ingress in self.frames
        if frame:
            sender = self.frames[ingress]
            sender.pause(LOSSLESS_PRIORITY, PAUSE_QUANTA) if event == "pause" else sender.resume(LOSSLESS_PRIORITY)
        self.events.append((time_ns, ingress, LOSSLESS_PRIORITY, event, charged, up.node, up.ifname,
                            round(ns / 1e3, 1), frame))

    # ------------------------------------------------------------ results
    def write(self) -> LoopResult:
        """Write the result files (module doc), congestion_loop.json atomically; return its record."""
        from dataplane.atomic_files import write_csv, write_text

        frame = self.sampler.to_frame()
        frame.insert(2, "class", "lossless")
        write_csv(frame, self.results_dir / LOSSLESS_QUEUES_FILE)
        queue: Dict[str, Any] = dict.fromkeys(("lossless_drops_pkts", "lossless_queue_p99_bytes",
                                                "lossless_queue_max_bytes"))
        if len(frame):
            drops = frame.groupby("port", observed=True)["drops_pkts"].agg(["first", "last"])
            queue = {"lossless_drops_pkts": int((drops["last"] - drops["first"]).sum()),
                     "lossless_queue_p99_bytes": float(frame["backlog_bytes"].quantile(0.99)),
                     "lossless_queue_max_bytes": int(frame["backlog_bytes"].max())}
        result = LoopResult(period_s=self.conf.period_s, ports=len(self.ports), ticks=len(self.loop_ns),
                            missed_ticks=self.sampler.missed_ticks, sampler_cpu_pct=round(self.sampler.cpu_pct, 1),
                            **_loop_ms(self.loop_ns), **queue, ecn=self._ecn_result(), pfc=self._pfc_result())
        write_text(self.results_dir / LOOP_RESULT_FILE, json.dumps(contract.encode(result), indent=1))
        return result

    def _ecn_result(self) -> Optional[EcnResult]:
        """The marker's counts (and ecn_marking.csv written), sch_red's counters read once now, or None."""
        import pandas as pd

        from dataplane.atomic_files import write_csv

        if self.marker is not None:
            write_csv(pd.DataFrame(self.marker.changes, columns=["time_ns", "port", "probability"]),
                      self.results_dir / ECN_MARKING_FILE)
            c, counts = self.marker.policy.curve, self.marker.counts
            return EcnResult(marker=self.marker.backend, kmin_bytes=c.kmin_bytes, kmax_bytes=c.kmax_bytes,
                             pmax=c.pmax, ect_pkts=sum(e for e, _ in counts.values()),
                             ce_marked_pkts=sum(m for _, m in counts.values()))
        if self.conf.ecn is None:
            return None
        from dataplane.queues.sch_red import red_stats
        e = self.conf.ecn
        return EcnResult(marker="red (sch_red leaf of the lossless class)", kmin_bytes=e.kmin_bytes,
                         kmax_bytes=e.kmax_bytes, pmax=e.pmax, ect_pkts=None,
                         ce_marked_pkts=sum(int(q.get("marked", 0)) for p in self.ports for q in red_stats(p)))

    def _pfc_result(self) -> Optional[PfcResult]:
        """PFC's figures (and pfc_events.csv written); None without PFC. The policy's gates and host-frame
        part (``rx``) are opened together at start (:meth:`_open_gates`)."""
        import pandas as pd

        from dataplane.atomic_files import write_csv

        if self.policy is None:
            return None
        events = pd.DataFrame(self.events, columns=PFC_EVENT_NAMES)
        write_csv(events, self.results_dir / PFC_EVENTS_FILE)
        return PfcResult(xoff_bytes=self.policy.xoff_bytes, xon_bytes=self.policy.xon_bytes,
                         kick_frames=sum(g.kicks for g in self.gates.values()),
                         host_pfc_frames=sum(f.counters.frames for f in self.frames.values()),
                         storms=int((events["event"] == "storm").sum()),
                         restores=int((events["event"] == "restore").sum()),
                         **self.rx.summary(time.time_ns()),
                         watchdog=WatchdogResult(**self.watchdog.summary()) if self.watchdog is not None else None,
                         pause_actuation_us=_pcts(events.loc[events["event"] == "pause", "actuation_us"]),
                         resume_actuation_us=_pcts(events.loc[events["event"] == "resume", "actuation_us"]))


def _pcts(values, digits: int = 1) -> Percentiles:
    """p50, p99 and count of ``values`` (None without any)."""
    import numpy as np

    a = np.asarray(values, dtype=float)
    if not len(a):
        return Percentiles(p50=None, p99=None, n=0)
    return Percentiles(p50=round(float(np.percentile(a, 50)), digits),
                       p99=round(float(np.percentile(a, 99)), digits), n=int(len(a)))


def _loop_ms(loop_ns: List[int]) -> dict:
    p = _pcts([n / 1e6 for n in loop_ns], 3)
    return {"loop_p50_ms": p.p50, "loop_p99_ms": p.p99,
            "loop_max_ms": round(max(loop_ns) / 1e6, 3) if loop_ns else None}


def start_when_configured(conf_file: Optional[str], layout) -> Optional[threading.Thread]:
    """The app's entry: a daemon thread that waits for ``conf_file`` (the loop's
    controllers.contract.LoopSettings, written once the queues exist), starts the loop, then stops it
    when the testbed asks (controllers.contract.LOOP_STOP_REQUEST_FILE in the results directory). None
    when ``conf_file`` is unset (no ECN, no PFC). A settings file that is not a LoopSettings is logged
    (the ContractError names the field) and the loop does not start."""
    if not conf_file:
        return None

    def run() -> None:
        path = Path(conf_file)
        while not path.exists():
            time.sleep(0.02)
        try:
            loop = CongestionLoop(contract.read_json(path, LoopSettings), layout).start()
        except Exception:
            LOG.exception("congestion loop failed to start")
            return
        request = loop.results_dir / LOOP_STOP_REQUEST_FILE
        while loop in _RUNNING:
            if request.exists():
                LOG.info("congestion loop: the testbed asked it to stop (the measurement is over)")
                try:
                    loop.stop()
                except Exception:
                    LOG.exception("congestion loop failed to stop cleanly")
                return
            time.sleep(STOP_POLL_S)

    thread = threading.Thread(target=run, name="congestion-loop", daemon=True)
    thread.start()
    return thread


def stop_all() -> None:
    """Stop every running loop (controllers.run calls this on SIGTERM, before the process exits)."""
    for loop in list(_RUNNING):
        try:
            loop.stop()
        except Exception:
            LOG.exception("congestion loop failed to stop cleanly")
