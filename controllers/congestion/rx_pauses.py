"""PFC frames a switch receives from its hosts: honoured on the port's lossless egress, watched by the watchdog.

A host NIC may pause its switch port (IEEE 802.1Qbb): a MAC control frame (ethertype 0x8808, opcode
0x0101, format :mod:`traffic.wire.pfc`) enabling priority 3 with q quanta asks the port to stop
sending the lossless class for ``q x 512 / link_bps`` seconds (the quanta are bit times of the
emulated host link); a new frame reloads the timer, quanta 0 resumes at once, as a real MAC does
(:class:`traffic.transport.pfc_rx.PauseState`, the host side's timer, reused per port).

- :class:`PortPauses` (pure): per host-facing switch port, the frames received and the pause demand
  at a time (timer running or not). Other frames (802.3x PAUSE, other ethertypes) and ports are ignored.
- :class:`RxPauses`: the controller loop's part (controllers/congestion/loop.py), each tick:
  drain the AF_PACKET socket (one, on ethertype 0x8808, every interface of the root namespace where
  the switch ports live; frames are stamped with the tick's clock reading, taken before its queue dump:
  about a period early or late), then per
  port: the demand goes to the PFC watchdog (key ``(port, 3, "rx")``) when configured, and what it
  says to honour to the port's own lossless egress: the tbf leaf held at 8 bit/s
  (:class:`dataplane.pfc_gate.ClassGate`, the actuator of switch pauses). A port in storm
  is resumed and, when the watchdog mitigates, its lossless packets are dropped at egress
  (:class:`dataplane.pfc_watchdog_drop.WatchdogDrop`) until the watchdog restores it. What its
  queue held then drains to the host (a real switch drops it), and its backlog is no longer charged
  to the ingresses feeding it (:meth:`RxPauses.uncharge_storms`), as a switch that discarded the queue
  frees its buffer: the pauses the storm spread upstream end at the detection.

Events (rows of pfc_events.csv, controllers.loop_result.PFC_EVENT_COLUMNS): ``rx_pause`` / ``rx_resume`` (the port's
egress held / released for its host; ``port`` is the held egress; ``actuation_us`` the netlink
change), ``storm`` / ``restore`` (``actuation_us``: installing / removing the drop rule); the
``upstream`` columns name the host and its NIC (the far end of the port).
"""
from __future__ import annotations

import socket
import time
from typing import Dict, List, Optional

from traffic.transport.pfc_rx import PACKET_OUTGOING, PauseState
from traffic.wire.pfc import ETH_P_MAC_CONTROL, LOSSLESS_PRIORITY, parse_pfc


class PortPauses:
    """Pause timers of switch ports from PFC frames they received (module doc).

    ``ports``: {switch port interface: link rate bit/s (> 0, else ValueError)}. Counts ``frames``
    (PFC frames of a known port), ``ignored`` (other MAC control frames, unknown ports)."""

    def __init__(self, ports: Dict[str, float]):
        self.state = {p: PauseState(bps) for p, bps in ports.items()}
        self.frames = self.ignored = 0

    def on_frame(self, ifname: str, now_ns: int, frame: bytes) -> bool:
        """Apply ``frame`` received on ``ifname`` at ``now_ns``; True when it was a PFC frame of a port."""
        st = self.state.get(ifname)
        parsed = parse_pfc(frame) if st is not None else None
        if parsed is None:
            self.ignored += 1
            return False
        st.on_frame(now_ns, *parsed)
        self.frames += 1
        return True

    def demand(self, ifname: str, now_ns: int, priority: int = LOSSLESS_PRIORITY) -> bool:
        """Whether ``ifname`` is asked to hold ``priority`` at ``now_ns`` (its pause timer runs)."""
        return self.state[ifname].paused_until_ns(now_ns, priority) > 0

    def paused_ns(self, ifname: str, now_ns: int) -> int:
        """Time the lossless priority of ``ifname`` was asked to pause up to ``now_ns``."""
        return self.state[ifname].paused_ns(now_ns)


def frame_socket() -> socket.socket:
    """A non-blocking AF_PACKET socket receiving MAC control frames (0x8808) on every interface of this
    namespace. OSError without CAP_NET_RAW."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_MAC_CONTROL))
    s.setblocking(False)
    return s


class RxPauses:
    """Honour host PFC frames on host-facing switch ports (module doc).

    Args:
        ports: {switch port: (link_bps, host, host NIC)} of every host-facing port.
        gates: {switch port: ClassGate of its own lossless egress}.
        watchdog: a :class:`controllers.congestion.watchdog.PfcWatchdog` or None (always honour).
        drop: the drop actuator (``drop(port)``, ``release(port)``) or None (storms only resume).
        sock: a socket from :func:`frame_socket` (None: no frames are read, e.g. in tests).
    """

    def __init__(self, ports: Dict[str, tuple], gates: Dict[str, object], watchdog=None, drop=None,
                 sock: Optional[socket.socket] = None):
        self.ports = ports
        self.pauses = PortPauses({p: bps for p, (bps, _h, _n) in ports.items()})
        self.gates, self.watchdog, self.drop, self.sock = gates, watchdog, drop, sock

    def drain(self, now_ns: int) -> None:
        """Read every frame waiting on the socket into :attr:`pauses`, stamped ``now_ns``."""
        while self.sock is not None:
            try:
                frame, addr = self.sock.recvfrom(128)
            except BlockingIOError:
                return
            if addr[2] != PACKET_OUTGOING:
                self.pauses.on_frame(addr[0], now_ns, frame)

    def tick(self, now_ns: int) -> List[tuple]:
        """One loop tick: drain, decide, act; the event rows (controllers.loop_result.PFC_EVENT_COLUMNS) of what
        changed."""
        self.drain(now_ns)
        rows: List[tuple] = []
        for port, (_bps, host, nic) in self.ports.items():
            demand = self.pauses.demand(port, now_ns)
            want = demand
            if self.watchdog is not None:
                key = (port, LOSSLESS_PRIORITY, "rx")
                change = self.watchdog.update(key, now_ns, demand)
                want = self.watchdog.honour(key, demand)
                if change is not None:
                    t0 = time.monotonic_ns()  # storm: drop from now on; restore: stop dropping
                    if self.drop is not None:
                        (self.drop.drop if change.kind == "storm" and self.watchdog.mitigate else self.drop.release)(port)
                    rows.append((now_ns, port, LOSSLESS_PRIORITY, change.kind, -1, host, nic,
                                 round((time.monotonic_ns() - t0) / 1e3, 1), False))
            gate = self.gates[port]
            if want != gate.paused:
                ns = gate.pause() if want else gate.resume()
                rows.append((now_ns, port, LOSSLESS_PRIORITY, "rx_pause" if want else "rx_resume", -1, host, nic,
                             round(ns / 1e3, 1), False))
        return rows

    def uncharge_storms(self, egress_ports, backlogs_bytes: list) -> list:
        """``backlogs_bytes`` (one per ``egress_ports``) with 0 for every port the watchdog holds in storm
        and drops for: a real switch's drop action discards that queue and frees its buffer, so the
        ingresses feeding it are no longer charged with it (here what it held drains to the host)."""
        wd = self.watchdog
        if wd is None or not wd.mitigate or wd.storms == wd.restores:  # no queue in storm now
            return backlogs_bytes
        for k, port in enumerate(egress_ports):
            if port in self.ports and self.watchdog.in_storm((port, LOSSLESS_PRIORITY, "rx")):
                backlogs_bytes[k] = 0
        return backlogs_bytes

    def release_all(self, now_ns: int) -> List[tuple]:
        """Resume every held port and stop every drop (the loop's stop); the event rows."""
        rows = []
        for port, (_bps, host, nic) in self.ports.items():
            if self.drop is not None:
                self.drop.release(port)
            if self.gates[port].paused:
                ns = self.gates[port].resume()
                rows.append((now_ns, port, LOSSLESS_PRIORITY, "rx_resume", -1, host, nic, round(ns / 1e3, 1), False))
        return rows

    def summary(self, now_ns: int) -> dict:
        """controllers.loop_result.PfcResult's figures: PFC frames received from hosts, time their ports were asked to
        pause, the watchdog's drops (packets, bytes)."""
        return {"rx_pfc_frames": self.pauses.frames,
                "rx_paused_time_s": round(sum(self.pauses.paused_ns(p, now_ns) for p in self.ports) / 1e9, 6),
                "watchdog_drops_pkts": self.drop.dropped_pkts if self.drop is not None else 0,
                "watchdog_drops_bytes": self.drop.dropped_bytes if self.drop is not None else 0}
