"""The ``faults`` and ``failover`` sections: failures injected during a run, and how the controller finds them.

``faults`` is a list; each entry happens ``at_s`` seconds after the traffic
started (the first collective is posted) and is one of::

    {at_s: 2.0, link: [l1, s1], action: down}      # both ends' interfaces down
    {at_s: 6.0, link: [l1, s1], action: up}
    {at_s: 2.0, switch: s2, action: down}          # every link of s2 down (a switch without hosts)
    {at_s: 6.0, switch: s2, action: up}
    {at_s: 1.0, link: [l1, s1], action: gray, loss: 0.01}   # drop 1% of frames, both directions
    {at_s: 5.0, link: [l1, s1], action: heal}      # the gray loss ends
    {at_s: 1.0, host: h2, action: pfc_storm, duration_s: 2.0}   # h2's NIC keeps its port paused (PFC storm)

Names are switch names without the run id (``l1``, ``s2``), checked against
the fabric's layout before anything is built; a link is two switches joined
by a link (host links are not faults: their host would be cut off and the
collective could never finish). On a fabric with parallel links (``fabric.links_per_spine``) a
link fault hits every link between the two switches (the bundle fails as a whole). ``up`` needs
an earlier ``down`` of the
same link or switch, ``heal`` an earlier ``gray``. A switch with hosts
cannot go down, for the same reason. The gray loss probability is applied as
``numgen random mod 10000 < round(loss * 10000)`` (nftables), so it is
0.0001 .. 0.9999 in steps of 0.0001.

``pfc_storm`` (needs ``congestion.pfc``): for ``duration_s`` seconds the host's NIC sends real IEEE
802.1Qbb pause frames for the lossless class (priority 3, 65535 quanta, refreshed at half their time)
toward its switch port, like a hung NIC that stops draining, then one frame of quanta 0
(testbed.emulation.pfc_storm); the controller honours them and its PFC watchdog is what ends the storm.

``failover`` tunes the controller's gray-failure detector
(controllers/failover.py): every ``stats_period_ms`` (default 100) it reads
port statistics; a link whose loss over at most the last ``window_ms``
(default 10000) exceeds ``gray_loss_threshold`` (a fraction, default 0.005),
with at least one switch buffer of full frames lost, is treated as down.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, StrictFloat, StrictInt, model_validator

from testbed.spec.units import SpecModel

#: nftables ``numgen random mod`` of the gray loss rule: loss resolution 1e-4
GRAY_LOSS_MOD = 10_000
#: faults later than this after the traffic start are refused (no run lasts longer than 2 h)
MAX_FAULT_AT_S = 7200.0


class FaultSpec(SpecModel):
    """One scheduled failure (module docstring)."""

    at_s: StrictFloat | StrictInt = Field(ge=0.0, le=MAX_FAULT_AT_S)
    action: Literal["down", "up", "gray", "heal", "pfc_storm"]
    link: Optional[tuple[str, str]] = None
    switch: Optional[str] = None
    host: Optional[str] = None
    duration_s: Optional[StrictFloat | StrictInt] = Field(None, gt=0.0, le=MAX_FAULT_AT_S)
    loss: Optional[StrictFloat | StrictInt] = Field(None, ge=1.0 / GRAY_LOSS_MOD, le=1 - 1.0 / GRAY_LOSS_MOD)

    @model_validator(mode="after")
    def _consistent(self) -> "FaultSpec":
        if self.action == "pfc_storm" or self.host is not None or self.duration_s is not None:
            return self._storm()
        if (self.link is None) == (self.switch is None):
            raise ValueError("give exactly one of link: [a, b] or switch: name")
        if self.switch is not None and self.action not in ("down", "up"):
            raise ValueError(f"action {self.action!r} is for links; a switch allows: down, up")
        if self.action == "gray" and self.loss is None:
            raise ValueError("action gray needs loss: a fraction 0.0001 .. 0.9999 (e.g. 0.01 for 1%)")
        if self.action != "gray" and self.loss is not None:
            raise ValueError(f"loss is only for action gray, not {self.action!r}")
        if self.link is not None and self.link[0] == self.link[1]:
            raise ValueError(f"link: both ends are {self.link[0]!r}; a link joins two switches")
        return self

    def _storm(self) -> "FaultSpec":
        if self.action != "pfc_storm":
            raise ValueError(f"host and duration_s are for action pfc_storm, not {self.action!r}")
        if self.host is None or self.duration_s is None or self.link is not None or self.switch is not None \
                or self.loss is not None:
            raise ValueError("action pfc_storm takes host: name and duration_s: seconds > 0 (no link, switch "
                             "or loss)")
        return self

    @property
    def target(self) -> str:
        """``l1-s1``, ``s2`` or ``h2``: what the fault hits (names without the run id)."""
        if self.host is not None:
            return str(self.host)
        return "-".join(self.link) if self.link is not None else str(self.switch)

    @property
    def loss_per_mod(self) -> int:
        """k of ``numgen random mod GRAY_LOSS_MOD < k`` for a gray fault (0 otherwise)."""
        return round((self.loss or 0) * GRAY_LOSS_MOD)


class FailoverSpec(SpecModel):
    """The controller's gray-failure detector (module docstring)."""

    gray_loss_threshold: StrictFloat | StrictInt = Field(0.005, gt=0.0, lt=1.0)
    stats_period_ms: StrictInt = Field(100, ge=20, le=5000)
    window_ms: StrictInt = Field(10_000, ge=100, le=60_000)

    @model_validator(mode="after")
    def _window(self) -> "FailoverSpec":
        if self.window_ms < 2 * self.stats_period_ms:
            raise ValueError(f"failover.window_ms = {self.window_ms} must hold at least two polls of "
                             f"failover.stats_period_ms = {self.stats_period_ms}")
        return self


def check_faults(layout, faults: tuple[FaultSpec, ...] | list[FaultSpec]) -> None:
    """Check every fault's names and order against ``layout`` (a topology.model.Layout of the scenario's
    fabric; any run id). Raises ValueError naming ``faults[i].<key>``, the bad value and what is allowed."""
    rid = layout.run_id
    switches = {s.name[len(rid):]: s for s in layout.switches}
    with_hosts = {name for name, s in switches.items() if layout.hosts_on(s.name)}
    links = {frozenset((ln.a.node[len(rid):], ln.b.node[len(rid):])) for ln in layout.links
             if ln.a.node in {s.name for s in layout.switches} and ln.b.node in {s.name for s in layout.switches}}
    state: dict[str, str] = {}
    order = sorted(range(len(faults)), key=lambda i: (faults[i].at_s, i))
    for i in order:
        f = faults[i]
        if f.action == "pfc_storm":
            hosts = [h.name[len(rid):] for h in layout.hosts]
            if f.host not in hosts:
                raise ValueError(f"faults.{i}.host: {f.host!r} is not a host of this fabric; allowed: "
                                 f"{', '.join(hosts)}")
            continue
        if f.link is not None:
            for end in f.link:
                if end not in switches:
                    raise ValueError(f"faults.{i}.link: {end!r} is not a switch of this fabric; allowed: "
                                     f"{', '.join(sorted(switches))}")
            if frozenset(f.link) not in links:
                raise ValueError(f"faults.{i}.link: {f.link[0]} and {f.link[1]} are not joined by a link; links: "
                                 + ", ".join(sorted("-".join(sorted(p)) for p in links)))
            key = "link " + "-".join(sorted(f.link))
        else:
            if f.switch not in switches:
                raise ValueError(f"faults.{i}.switch: {f.switch!r} is not a switch of this fabric; allowed: "
                                 f"{', '.join(sorted(switches))}")
            if f.switch in with_hosts:
                raise ValueError(f"faults.{i}.switch: {f.switch} has hosts, which a switch failure would cut off "
                                 f"(the collective could never finish); allowed: "
                                 f"{', '.join(sorted(set(switches) - with_hosts)) or 'none'}")
            key = f"switch {f.switch}"
        before = state.get(key, "ok")
        need = {"down": ("ok",), "up": ("down",), "gray": ("ok",), "heal": ("gray",)}[f.action]
        if before not in need:
            raise ValueError(f"faults.{i}.action: {f.action} at {f.at_s:g} s, but {key} is "
                             f"{ {'ok': 'healthy', 'down': 'down', 'gray': 'gray'}[before] } then; "
                             f"allowed there: {', '.join(_allowed_after(before))}")
        state[key] = {"down": "down", "up": "ok", "gray": "gray", "heal": "ok"}[f.action]


def _allowed_after(state: str) -> list[str]:
    return {"ok": ["down", "gray"], "down": ["up"], "gray": ["heal"]}[state]


def check_storms(faults, pfc_on: bool) -> None:
    """A ``pfc_storm`` fault needs PFC (the switches honour host pause frames only with it). ValueError
    naming ``faults[i].action`` otherwise."""
    for i, f in enumerate(faults):
        if f.action == "pfc_storm" and not pfc_on:
            raise ValueError(f"faults.{i}.action: pfc_storm needs congestion.pfc (enabled): without PFC the "
                             f"switches ignore pause frames; add congestion.pfc {{xoff_bytes, xon_bytes}}")
