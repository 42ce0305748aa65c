"""A PFC storm from a host's NIC (fault ``pfc_storm``, testbed.spec.faults): real pause frames, like a hung NIC.

A NIC that stops draining its receive buffer keeps sending IEEE 802.1Qbb XOFF for the lossless class
and so keeps its switch port paused (the "PFC storm" of deployed RoCE fabrics, e.g. Guo et al., SIGCOMM
2016, section 4.3). :class:`PfcStorm` makes one from the host's namespace: a
:class:`dataplane.pfc_frames.PfcSender` bound to the host's NIC sends a pause of priority 3
with 65535 quanta (3.36 s at 10 Mbit/s) and refreshes it at half its time (before it expires) for
``duration_s``; then the NIC "recovers" and sends one frame of quanta 0 (XON), as a NIC whose receive
buffer drained does. The frames pass the NIC's qdisc (the MAC makes them) and reach the switch port,
where the controller's loop honours them (controllers/congestion/rx_pauses.py) and its PFC watchdog
stops honouring them once the pause has lasted ``detect_ms``.

The storm runs in a thread of its own from :meth:`PfcStorm.start`; :meth:`PfcStorm.stop` ends it early
(XON) at the end of the run. ``pfc_storms.csv`` (run directory, :func:`write_csv`): one row per storm:
``fault``, ``host``, ``switch_port`` (the port the frames arrive on), ``start_ns`` (the first XOFF),
``end_ns`` (the XON), ``xoff_frames`` (first pause and refreshes), ``xon_frames``. Unix ns
(traffic.clock.unix_ns), the run's one clock.
"""
from __future__ import annotations

import csv
import threading
from pathlib import Path
from typing import Optional

from dataplane.pfc_frames import LOSSLESS_PRIORITY, MAX_QUANTA, PfcSender

STORMS_FILE = "pfc_storms.csv"
CSV_COLUMNS = ("fault", "host", "switch_port", "start_ns", "end_ns", "xoff_frames", "xon_frames")


class PfcStorm:
    """Pause frames from ``nic`` (a host interface in namespace ``netns``, a link of ``link_bps``) for
    ``duration_s`` seconds (module doc). ``switch_port``: the far end (reported only).
    OSError from :meth:`start` when the interface or namespace is gone."""

    def __init__(self, fault: int, host: str, nic: str, netns: str, link_bps: float, duration_s: float,
                 switch_port: str = ""):
        self.fault, self.host, self.nic, self.netns = fault, host, nic, netns
        self.link_bps, self.duration_s, self.switch_port = float(link_bps), float(duration_s), switch_port
        self.sender: Optional[PfcSender] = None
        self.start_ns: Optional[int] = None
        self.end_ns: Optional[int] = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "PfcStorm":
        """Send the first XOFF now; end the storm with an XON after ``duration_s`` (a thread)."""
        self.sender = PfcSender(self.nic, self.link_bps, netns=self.netns)
        self.sender.pause(LOSSLESS_PRIORITY, MAX_QUANTA)
        self.start_ns = self.sender.counters.log[0][0]
        self._thread = threading.Thread(target=self._run, name=f"pfc-storm-{self.host}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        self._done.wait(self.duration_s)
        self._end()

    def _end(self) -> None:
        with self._lock:
            if self.sender is None or self.end_ns is not None:
                return
            try:
                self.sender.resume(LOSSLESS_PRIORITY)
                self.end_ns = self.sender.counters.log[-1][0]
            except OSError:  # the NIC is gone (fabric stopping): no XON to send
                pass
            self.sender.close()

    def stop(self) -> None:
        """End the storm now if it still runs (XON) and close the sender. Safe to call twice."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._end()

    def row(self) -> dict:
        c = self.sender.counters if self.sender is not None else None
        return {"fault": self.fault, "host": self.host, "switch_port": self.switch_port,
                "start_ns": self.start_ns, "end_ns": self.end_ns,
                "xoff_frames": c.pause_frames + c.refresh_frames if c else 0, "xon_frames": c.resume_frames if c else 0}


def write_csv(run_dir: Path, storms: list) -> Optional[Path]:
    """``pfc_storms.csv`` (module doc) of ``storms`` (PfcStorm); None when there are none."""
    if not storms:
        return None
    path = Path(run_dir) / STORMS_FILE
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        w.writerows(s.row() for s in storms)
    return path
