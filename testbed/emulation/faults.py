"""Apply a scenario's ``faults`` during the traffic (testbed.spec.faults), and record when each took effect.

:class:`FaultScheduler` starts with the traffic (the runner starts it right
before the first collective) and applies each fault at ``t0 + at_s`` in a
thread of its own:

- link ``down``/``up``: both ends' interfaces (switch-switch links: both
  are in the root namespace) set down or up with pyroute2; Open vSwitch sees
  the carrier change and sends OFPT_PORT_STATUS to the controller;
- switch ``down``/``up``: every link of the switch down or up, as above;
- link ``gray``: an nftables rule on the egress hook of each end's interface
  (both directions) that takes ``numgen random mod 10000 < k`` frames, with a
  counter, and forwards them to a blackhole: a veth pair ``<run id>gray`` /
  ``<run id>grayb`` left down, which frees them; ``heal`` removes the rules.
  No netem or RED here (docs/architecture.md: this kernel has neither); the frames leave
  before the egress qdisc, so no queue or interface counter of the link sees
  them (measured: 1000 frames, 50% rule, 509 taken, tx 504 at the sender and
  rx 504 at the receiver). Not ``drop``: a drop on the egress hook fails the
  sender's send with ENOBUFS (measured: 534 of 1000 AF_PACKET sends), and
  Open vSwitch, which sends a batch with sendmmsg, then sends the dropped
  frame again when it was not first in the call, or discards the rest of the
  batch when it was: the rule's counter and the frames lost disagree (CI:
  the rule counted 1-2 frames more than the transport lost in 5 of 10 runs
  on a saturated machine). Forwarded frames are stolen: the send succeeds.
- host ``pfc_storm``: the host's NIC sends PFC pause frames for ``duration_s``
  (testbed.emulation.pfc_storm, from the host's namespace: ``host_pids``);
  ``pfc_storms.csv`` has when it started and ended.

Every rule lives in one netdev table named ``<run id>faults``, deleted at
:meth:`FaultScheduler.stop` with the blackhole pair (and by ``testbed clean``
after a crash, which removes every netdev table and interface named after a
dead run). ``stop`` also brings up every interface a fault
left down, so teardown finds the fabric as built.

``faults.csv`` (run directory): one row per fault: ``fault`` (index in the
scenario), ``action``, ``target`` (``l1-s1`` or ``s2``), ``loss``, ``at_s``,
``planned_ns`` (t0 + at_s), ``applied_ns`` (when the first interface or rule
changed; empty when the traffic ended first), ``apply_us`` (time the whole
change took), ``gray_drops_pkts`` (frames the gray rules dropped). Times on the
run's one clock (traffic.clock.unix_ns).
"""
from __future__ import annotations

import csv
import json
import logging
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from pyroute2 import IPRoute

from dataplane.nft import delete_table, nft_run
from testbed.spec.faults import GRAY_LOSS_MOD, FaultSpec
from topology.model import Layout, Link
from traffic.clock import unix_ns

log = logging.getLogger(__name__)

FAMILY = "netdev"
CSV_COLUMNS = ("fault", "action", "target", "loss", "at_s", "planned_ns", "applied_ns", "apply_us",
               "gray_drops_pkts")


@dataclass
class AppliedFault:
    """One fault of the scenario and what happened to it."""

    index: int
    spec: FaultSpec
    links: tuple[Link, ...]
    planned_ns: int = 0
    applied_ns: Optional[int] = None
    apply_us: Optional[float] = None
    gray_drops_pkts: int = 0
    chains: list[str] = field(default_factory=list)

    def row(self) -> dict:
        f = self.spec
        return {"fault": self.index, "action": f.action, "target": f.target, "loss": f.loss, "at_s": f.at_s,
                "planned_ns": self.planned_ns, "applied_ns": self.applied_ns,
                "apply_us": None if self.apply_us is None else round(self.apply_us, 1),
                "gray_drops_pkts": self.gray_drops_pkts}

    def link_names(self, run_id: str) -> list[list[str]]:
        """The links hit, as [a, b] switch names without the run id."""
        return [[ln.a.node[len(run_id):], ln.b.node[len(run_id):]] for ln in self.links]


def fault_links(layout: Layout, fault: FaultSpec) -> tuple[Link, ...]:
    """The links of ``layout`` a fault hits (names without the run id); ValueError if none."""
    rid = layout.run_id
    if fault.host is not None:
        links = layout.links_of(rid + str(fault.host))[:1]
    elif fault.link is not None:
        ends = {rid + n for n in fault.link}
        links = tuple(ln for ln in layout.links if {ln.a.node, ln.b.node} == ends)
    else:
        links = layout.links_of(rid + str(fault.switch))
    if not links:
        raise ValueError(f"fault {fault.target}: no such link or switch in run {rid}")
    return links


def blackhole_names(run_id: str) -> tuple[str, str]:
    """The veth pair gray frames are forwarded to (both ends down: the kernel frees them)."""
    return f"{run_id}gray", f"{run_id}grayb"


def _chain_name(ifname: str) -> str:
    return "gray_" + ifname.replace("-", "_")


class FaultScheduler:
    """Applies ``faults`` at their times from :meth:`start` on; a context manager (module docstring).

    Raises nothing from the thread: an error applying a fault is logged and
    kept in :attr:`errors` (reported in summary.json), and the run goes on.
    """

    def __init__(self, layout: Layout, faults: tuple[FaultSpec, ...], run_dir: Path,
                 host_pids: Optional[dict] = None):
        self.layout = layout
        self.host_pids = host_pids or {}  # host name (with run id) -> pid of its namespace (pfc_storm)
        self.storms: list = []  # testbed.emulation.pfc_storm.PfcStorm
        self.run_id = layout.run_id
        self.table = f"{self.run_id}faults"
        self.run_dir = Path(run_dir)
        self.faults = [AppliedFault(i, f, fault_links(layout, f)) for i, f in enumerate(faults)]
        self.errors: list[str] = []
        self.t0_ns: Optional[int] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._down: set[str] = set()  # interfaces a fault set down
        self._table_made = False

    def __enter__(self) -> "FaultScheduler":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """t0 = now; apply each fault at t0 + at_s in a background thread."""
        self.t0_ns = unix_ns()
        for f in self.faults:
            f.planned_ns = self.t0_ns + int(f.spec.at_s * 1e9)
        if self.faults:
            self._thread = threading.Thread(target=self._run, name=f"faults-{self.run_id}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        for f in sorted(self.faults, key=lambda f: (f.planned_ns, f.index)):
            if self._stop.wait(max(0.0, (f.planned_ns - unix_ns()) / 1e9)):
                return
            try:
                t = unix_ns()
                self._apply(f)
                f.apply_us = (unix_ns() - t) / 1e3
                f.applied_ns = t
                log.info("fault %d applied: %s %s", f.index, f.spec.action, f.spec.target)
            except Exception as e:  # keep the run going; the summary reports it
                self.errors.append(f"fault {f.index} ({f.spec.action} {f.spec.target}): {e}")
                log.error("%s", self.errors[-1])

    def _apply(self, f: AppliedFault) -> None:
        ifnames = [end.intf for ln in f.links for end in (ln.a, ln.b)]
        if f.spec.action in ("down", "up"):
            self._set_state(ifnames, f.spec.action)
        elif f.spec.action == "gray":
            self._gray(f, ifnames)
        elif f.spec.action == "pfc_storm":
            self._storm(f)
        else:
            self._heal(f)

    def _set_state(self, ifnames: list[str], state: str) -> None:
        with IPRoute() as ipr:
            for name in ifnames:
                idx = ipr.link_lookup(ifname=name)
                if not idx:
                    raise RuntimeError(f"interface {name} not found in the root namespace")
                ipr.link("set", index=idx[0], state=state)
                (self._down.add if state == "down" else self._down.discard)(name)

    def _storm(self, f: AppliedFault) -> None:
        from testbed.emulation.pfc_storm import PfcStorm

        host = self.run_id + str(f.spec.host)
        ln = f.links[0]
        nic = ln.a if ln.a.node == host else ln.b
        storm = PfcStorm(f.index, str(f.spec.host), nic.intf, f"/proc/{self.host_pids[host]}/ns/net", ln.rate_bps,
                         f.spec.duration_s, ln.peer(host).intf)
        self.storms.append(storm.start())

    def _gray(self, f: AppliedFault, ifnames: list[str]) -> None:
        k = f.spec.loss_per_mod
        hole = blackhole_names(self.run_id)[0]
        if not self._table_made:
            with IPRoute() as ipr:
                if not ipr.link_lookup(ifname=hole):
                    ipr.link("add", ifname=hole, kind="veth", peer=blackhole_names(self.run_id)[1])
        lines = [] if self._table_made else [f"add table {FAMILY} {self.table}"]
        for name in ifnames:
            chain = _chain_name(name)
            lines.append(f"add chain {FAMILY} {self.table} {chain} "
                         f"{{ type filter hook egress device \"{name}\" priority 0; policy accept; }}")
            lines.append(f"add rule {FAMILY} {self.table} {chain} "
                         f"numgen random mod {GRAY_LOSS_MOD} < {k} counter fwd to \"{hole}\"")
            f.chains.append(chain)
        nft_run("\n".join(lines) + "\n")
        self._table_made = True

    def _heal(self, f: AppliedFault) -> None:
        gray = next((g for g in self.faults if g.spec.action == "gray" and g.chains
                     and set(g.link_names(self.run_id)[0]) == set(f.link_names(self.run_id)[0])), None)
        if gray is None:
            return
        gray.gray_drops_pkts = self._chain_drops(gray.chains)
        nft_run("".join(f"flush chain {FAMILY} {self.table} {c}\n"
                        f"delete chain {FAMILY} {self.table} {c}\n" for c in gray.chains))
        gray.chains = []

    def _chain_drops(self, chains: list[str]) -> int:
        """Packets the counters of ``chains`` saw (frames the gray rules dropped)."""
        p = subprocess.run(["nft", "-j", "list", "table", FAMILY, self.table],
                           capture_output=True, text=True, timeout=10)
        if p.returncode != 0:
            return 0
        total = 0
        for item in json.loads(p.stdout).get("nftables", []):
            rule = item.get("rule")
            if rule and rule.get("chain") in chains:
                total += sum(e["counter"]["packets"] for e in rule.get("expr", []) if "counter" in e)
        return total

    def stop(self) -> None:
        """Stop applying faults; read the gray counters, delete the run's nft table, bring downed interfaces
        up; write faults.csv. Safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self.storms:
            from testbed.emulation.pfc_storm import write_csv
            for storm in self.storms:
                storm.stop()
            write_csv(self.run_dir, self.storms)
        if self._table_made:
            for f in self.faults:
                if f.chains:
                    f.gray_drops_pkts = self._chain_drops(f.chains)
                    f.chains = []
            try:
                delete_table(self.table)
                with IPRoute() as ipr:
                    for idx in ipr.link_lookup(ifname=blackhole_names(self.run_id)[0]):
                        ipr.link("del", index=idx)  # its peer goes with it
            except Exception as e:  # testbed clean removes them later
                log.warning("deleting nft table %s or the blackhole pair: %s", self.table, e)
            self._table_made = False
        if self._down:
            try:
                self._set_state(sorted(self._down), "up")
            except Exception as e:  # the fabric's teardown deletes them anyway
                log.warning("bringing faulted interfaces back up: %s", e)
        if self.faults:
            self.write_csv()

    @property
    def gray_drops_pkts(self) -> int:
        """Frames every gray rule took (read at heal or stop)."""
        return sum(f.gray_drops_pkts for f in self.faults)

    def write_csv(self) -> Path:
        path = self.run_dir / "faults.csv"
        with open(path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
            w.writeheader()
            for f in self.faults:
                w.writerow(f.row())
        return path
