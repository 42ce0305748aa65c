"""Transmitter clock wander: every shaped interface's rate moves within a small band during a run.

Why. Every HTB shaper of the emulation runs off the same kernel clock at
exactly its configured rate, so two senders at line rate into one full
tail-drop queue keep a fixed phase against its departures: the sender whose
frames arrive just after a departure takes every freed slot and the other
loses nearly everything (the phase effect of Floyd & Jacobson, "On Traffic
Phase Effects in Packet-Switched Gateways", Internetworking: Research and
Experience 3, 1992; measured here before this module: two paced UDP senders,
one queue, 98 % of the drops on one of them; with go-back-N the loser was
locked out for seconds, Jain 0.62-0.77). Real NICs and switch ports have
independent oscillators and transmit jitter of the order of a frame time
(DMA, doorbells, arbitration), which decorrelates these phases; Floyd and
Jacobson's cure is the same in kind: a random component in the service times.

What. Each interface's shaper rate (the HTB class 1:1 of both queue backends)
is redrawn every ``step_s`` from a uniform band of relative width
``fraction`` (``fabric.clock_wander``)::

    host NIC:     nominal x (1 - fraction x U)      never faster than nominal
    switch port:  nominal x (1 + fraction x U)      never slower than nominal

so a host never sends faster than any switch port it crosses (a single flow
never queues), and ``step_s = frame_s / (2 x fraction)`` (``frame_s``: one
full frame at the nominal rate), so each redraw moves two transmitters'
relative phase by at most half a frame time (the phases mix within a few
steps). Draws come from a ``random.Random`` seeded with the scenario's seed
and the interface's name: a run is reproducible. Interfaces are redrawn one
at a time, staggered over the step.

Cost. One prebuilt ``RTM_NEWTCLASS`` message per change on a raw
NETLINK_ROUTE socket per namespace (dataplane.rtnetlink, as the PFC gate),
5-10 us each measured on a veth; the quickstart (40 interfaces, 4 KiB frames,
step 0.33 s at fraction 0.005) makes about 120 changes per second.

Measured (benchmarks/fair_tail_drop.py, two go-back-N senders into one 32 KB
queue, seeds 1-10): drop shares 0.38-0.54 (before: 0.55-0.85 on one host),
goodput Jain while both send >= 0.95 in 9 of 10 seeds (0.919 in the tenth;
before 0.62-0.77). Steps four times as long (phase moving 2 frames per step)
measured worse, 7 of 10.

Changing an HTB class's rate keeps its tokens (net/sched/sch_htb.c
``htb_change_class`` sets tokens only when it creates a class), so a change
neither bursts nor stalls the link.
"""
from __future__ import annotations

import bisect
import logging
import random
import struct
import threading
import time
from dataclasses import dataclass
from typing import Optional

from dataplane.rtnetlink import RTM_NEWTCLASS, Netlink, nlattr, ratespec, tc_change_msg
from testbed.process.lifecycle import StartStop

log = logging.getLogger(__name__)

# include/uapi/linux/pkt_sched.h
_TCA_HTB_PARMS, _TCA_HTB_RATE64, _TCA_HTB_CEIL64 = 1, 6, 7
#: quantized rate levels per band: a draw picks one of them (prebuilt messages)
LEVELS = 33
#: redraws no faster than this (s) and no slower (the phases must still mix within a run)
MIN_STEP_S, MAX_STEP_S = 0.02, 2.0


def htb_class_change_msg(ifindex: int, handle: int, parent: int, rate_bytes_s: int, burst_bytes: int,
                         quantum_bytes: int) -> bytes:
    """``RTM_NEWTCLASS`` (change, ack requested) setting HTB class ``handle``'s rate = ceil and its
    bucket (``burst_bytes`` at that rate, as cburst too). Ethernet link layer: no rate table needed
    (net/sched/sch_htb.c). ``rate_bytes_s`` > 0."""
    if rate_bytes_s <= 0:
        raise ValueError(f"rate_bytes_s={rate_bytes_s}: must be > 0")
    spec = ratespec(rate_bytes_s)
    ticks = min(0xFFFFFFFF, (burst_bytes * 10**9 // rate_bytes_s) >> 6)  # PSCHED_NS2TICKS
    opt = spec + spec + struct.pack("=IIIII", ticks, ticks, quantum_bytes, 0, 0)  # struct tc_htb_opt
    opts = nlattr(_TCA_HTB_PARMS, opt)
    if rate_bytes_s > 0xFFFFFFFF:
        opts += nlattr(_TCA_HTB_RATE64, struct.pack("=Q", rate_bytes_s)) + \
            nlattr(_TCA_HTB_CEIL64, struct.pack("=Q", rate_bytes_s))
    return tc_change_msg(RTM_NEWTCLASS, ifindex, handle, parent, b"htb", opts)


def step_s(fraction: float, frame_bytes: int, rate_bps: float) -> float:
    """Seconds between redraws: half a frame time of phase per step, ``frame_s / (2 fraction)``,
    clamped to [MIN_STEP_S, MAX_STEP_S]."""
    frame_s = frame_bytes * 8 / rate_bps
    return min(MAX_STEP_S, max(MIN_STEP_S, frame_s / (2 * fraction)))


def band_bps(nominal_bps: float, fraction: float, switch_port: bool) -> tuple[float, float]:
    """(lowest, highest) rate of an interface: hosts [nominal (1 - f), nominal], switch ports
    [nominal, nominal (1 + f)] (module doc)."""
    return (nominal_bps, nominal_bps * (1 + fraction)) if switch_port else (nominal_bps * (1 - fraction), nominal_bps)


@dataclass(frozen=True)
class WanderingLink:
    """One shaped interface: ``netns`` (None: the root namespace; else ``/proc/<pid>/ns/net``),
    ``ifname``, its ``nominal_bps``, whether it is a ``switch_port``, and the HTB class the backend made
    (``handle``/``parent``, ``burst_bytes``, ``quantum_bytes`` as installed)."""

    netns: Optional[str]
    ifname: str
    nominal_bps: float
    switch_port: bool
    handle: int
    parent: int
    burst_bytes: int
    quantum_bytes: int


class ClockWander(StartStop):
    """A thread that redraws the rates of ``links`` (module doc) until stopped.

    ``fraction``: the band's relative width (0 < fraction <= 0.02); ``frame_bytes``: a full frame
    (link MTU + 14); ``seed``: the scenario's seed. ``changes`` counts the rate changes made and
    ``errors`` the refused ones (the first is logged; a refused change leaves the last rate). The
    mean rate of every interface is recorded in :attr:`mean_rate_bps` at stop (time-weighted).
    Raises ValueError for a fraction outside (0, 0.02]."""

    def __init__(self, links: list[WanderingLink], fraction: float, frame_bytes: int, seed: int):
        if not 0 < fraction <= 0.02:
            raise ValueError(f"clock wander fraction {fraction!r}: allowed 0 < fraction <= 0.02")
        self.links, self.fraction, self.frame_bytes, self.seed = list(links), fraction, frame_bytes, seed
        self.changes = 0
        self.errors = 0
        self.mean_rate_bps: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._socks: dict = {}

    def _messages(self, ln: WanderingLink, index: int) -> list[tuple[float, bytes]]:
        lo, hi = band_bps(ln.nominal_bps, self.fraction, ln.switch_port)
        out = []
        for k in range(LEVELS):
            bps = lo + (hi - lo) * k / (LEVELS - 1)
            out.append((bps, htb_class_change_msg(index, ln.handle, ln.parent, max(1, round(bps / 8)),
                                                  ln.burst_bytes, ln.quantum_bytes)))
        return out

    def start(self) -> None:
        from pyroute2 import IPRoute

        plan = []
        for i, ln in enumerate(self.links):
            if ln.netns not in self._socks:
                self._socks[ln.netns] = Netlink(ln.netns)
            with IPRoute(netns=ln.netns) if ln.netns else IPRoute() as ipr:
                found = ipr.link_lookup(ifname=ln.ifname)
            if not found:
                raise ValueError(f"clock wander: interface {ln.ifname} not found")
            rng = random.Random(f"clock-wander-{self.seed}-{i}")  # the links' order is the layout's
            plan.append((ln, self._messages(ln, found[0]), rng,
                         step_s(self.fraction, self.frame_bytes, ln.nominal_bps)))
        self._thread = threading.Thread(target=self._run, args=(plan,), name="clock-wander", daemon=True)
        self._thread.start()

    def _run(self, plan) -> None:
        t0 = time.monotonic()
        # (next time, i): staggered so that changes spread evenly over each interface's step
        due = sorted((t0 + st * (i + 0.5) / len(plan), i) for i, (_ln, _m, _r, st) in enumerate(plan))
        since = {i: (t0, plan[i][0].nominal_bps) for i in range(len(plan))}
        area = {i: 0.0 for i in range(len(plan))}
        while due:
            t, i = due.pop(0)
            if self._stop.wait(max(0.0, t - time.monotonic())):
                break
            ln, msgs, rng, st = plan[i]
            bps, msg = msgs[rng.randrange(LEVELS)]
            try:
                self._socks[ln.netns].request(msg)
                self.changes += 1
                now = time.monotonic()
                t_prev, bps_prev = since[i]
                area[i] += (now - t_prev) * bps_prev
                since[i] = (now, bps)
            except OSError as e:
                self.errors += 1
                if self.errors == 1:
                    log.warning("clock wander: rate change on %s refused: %s", ln.ifname, e)
            bisect.insort(due, (t + st, i))
        now = time.monotonic()
        for i, (t_prev, bps_prev) in since.items():
            total = area[i] + (now - t_prev) * bps_prev
            self.mean_rate_bps[plan[i][0].ifname] = total / max(now - t0, 1e-9)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        for s in self._socks.values():
            s.close()
        self._socks = {}
