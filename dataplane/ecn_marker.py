"""ECN marker actuator: an nftables netdev egress rule per switch port, driven by sampled class backlog.

The kernel here has no ``sch_red`` (docs/architecture.md), so RED marking is done in two
halves. The policy (:class:`dataplane.ecn_policy.MarkingPolicy`, pure)
turns each sample of the marked class's backlog into a marking probability
per port; this actuator holds that probability in the port's egress chain::

    table netdev <rid>ecn
      chain e<i> { type filter hook egress device "<port>" priority 0;
        ip dscp 26 ip ecn { ect0, ect1 } counter name "ect<i>"
        ip dscp 26 ip ecn { ect0, ect1 } numgen random mod 10000 < N ip ecn set ce counter name "ce<i>" }

``N = p * 10000``; at ``p = 0`` the second rule is absent (none marked below
Kmin), at ``p = 1`` it has no ``numgen``. Not-ECT packets and other DSCPs are
never matched. The egress hook runs in ``__dev_queue_xmit`` before the qdisc
enqueue, so a packet is marked on arrival at the queue from the backlog
sampled at most one period earlier. A change rewrites only the changed ports'
chains (flush + add, one atomic batch): the named counters survive it.

The loop (:meth:`NftEcnMarker.on_sample`) runs in the thread of the 1 ms
:class:`~dataplane.qdisc_sampler.QdiscSampler` that reads the marked class's
leaf: in a run, in the controller process (controllers/congestion/loop.py). ``loop_ns`` keeps each tick's time from the
sample's clock reading to the end of the actuation.

libnftables (Debian ``python3-nftables``) runs the batches; without it, one
``nft -f -`` subprocess per batch (``backend`` says which ran).
"""
from __future__ import annotations

import logging
import threading

import numpy as np

from dataplane.ecn_policy import MarkingPolicy
from dataplane.nft import COUNTER_RE, Nft
from topology.naming import check_run_id
from traffic.clock import unix_ns

log = logging.getLogger(__name__)

#: numgen modulus: probabilities are held in units of 1/10000
NUMGEN_MOD = 10000
_BACKLOG_COL = 3  # qdisc_sampler.COUNTERS: tx_bytes, tx_pkts, drops_pkts, backlog_bytes, backlog_pkts


def table_name(run_id: str) -> str:
    """The run's netdev table: ``<rid>ecn`` (cleanup finds it by the run id prefix)."""
    return f"{check_run_id(run_id)}ecn"


class NftEcnMarker:
    """Marks ECT packets of one DSCP class CE on switch egress ports with a per-port probability.

    Args:
        run_id: the run's id (names the table).
        policy: the marking policy; its ``ports`` are the switch ports to mark on.
        dscp: DSCP values of the marked class (default the lossless class, 26).

    Use as a context manager (or :meth:`start`/:meth:`stop`); pass :meth:`on_sample`
    as a QdiscSampler's ``on_sample``. After stop: :attr:`counts` (port -> (ect_pkts,
    ce_pkts)), :attr:`loop_ns`, :attr:`changes` ((time_ns, port, probability) rows).
    Raises NftError when nft refuses the table (e.g. no netdev egress hook).
    """

    def __init__(self, run_id: str, policy: MarkingPolicy, dscp: tuple[int, ...] = (26,)):
        self.table = table_name(run_id)
        self.policy = policy
        self.ports = list(policy.ports)
        self._match = f"ip dscp {{ {', '.join(str(d) for d in dscp)} }} ip ecn {{ ect0, ect1 }}"
        self._nft = Nft()
        self.backend = self._nft.backend
        self.loop_ns: list[int] = []
        self.changes: list[tuple[int, str, float]] = []
        self.counts: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._started = False

    def _chain(self, i: int, p: float) -> str:
        lines = [f"flush chain netdev {self.table} e{i}",
                 f'add rule netdev {self.table} e{i} {self._match} counter name "ect{i}"']
        if p >= 1:
            lines.append(f'add rule netdev {self.table} e{i} {self._match} ip ecn set ce counter name "ce{i}"')
        elif p > 0:
            n = round(p * NUMGEN_MOD)
            lines.append(f"add rule netdev {self.table} e{i} {self._match} numgen random mod {NUMGEN_MOD} < {n} "
                         f'ip ecn set ce counter name "ce{i}"')
        return "\n".join(lines)

    def start(self) -> "NftEcnMarker":
        """Create the table, a counter pair and an egress chain per port (marking nothing yet)."""
        lines = [f"add table netdev {self.table}"]
        for i, port in enumerate(self.ports):
            lines += [f"add counter netdev {self.table} ect{i}", f"add counter netdev {self.table} ce{i}",
                      f"add chain netdev {self.table} e{i} {{ type filter hook egress device \"{port}\" "
                      f"priority 0; }}"]
        lines += [self._chain(i, 0.0) for i in range(len(self.ports))]
        self._nft.run("\n".join(lines))
        self._started = True
        return self

    def on_sample(self, time_ns: int, counters: np.ndarray) -> None:
        """One loop tick: backlogs (column 3 of ``counters``, one row per port) -> policy -> changed chains."""
        changes = self.policy.decide(counters[:, _BACKLOG_COL].tolist())
        if changes:
            index = {p: i for i, p in enumerate(self.ports)}
            with self._lock:
                self._nft.run("\n".join(self._chain(index[p], prob) for p, prob in changes.items()))
            self.changes.extend((time_ns, p, prob) for p, prob in changes.items())
        self.loop_ns.append(unix_ns() - time_ns)

    def read_counts(self) -> dict[str, tuple[int, int]]:
        """port -> (ECT packets of the class seen at egress, packets marked CE), read from nft now."""
        out = self._nft.run(f"list counters table netdev {self.table}")
        got = {name: int(pkts) for name, pkts, _ in COUNTER_RE.findall(out)}
        return {p: (got.get(f"ect{i}", 0), got.get(f"ce{i}", 0)) for i, p in enumerate(self.ports)}

    def stop(self) -> None:
        """Read the counters into :attr:`counts`, delete the table. Safe to call twice."""
        if not self._started:
            return
        self._started = False
        with self._lock:
            try:
                self.counts = self.read_counts()
            finally:
                self._nft.run(f"delete table netdev {self.table}")

    def __enter__(self) -> "NftEcnMarker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def loop_ms(self) -> dict:
        """``{"p50": .., "p99": .., "ticks": n}``: loop time in ms (None without ticks)."""
        if not self.loop_ns:
            return {"p50": None, "p99": None, "ticks": 0}
        a = np.asarray(self.loop_ns) / 1e6
        return {"p50": round(float(np.percentile(a, 50)), 3), "p99": round(float(np.percentile(a, 99)), 3),
                "ticks": len(a)}
