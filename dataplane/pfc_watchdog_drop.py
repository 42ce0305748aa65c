"""The PFC watchdog's drop action: lossless packets toward a port in storm are dropped at its egress, counted.

While the watchdog (controllers/congestion/watchdog.py) holds a port in storm it stops honouring the
port's pauses; deployed switches then drop that queue's packets instead of holding them (SONiC
``pfcwd`` action ``drop``). Here, per port in storm, one rule on the nftables netdev egress hook of the
switch port takes every packet of the lossless class (``ip dscp 26``) before the port's qdisc, with a
named counter (packets and bytes)::

    table netdev <rid>wdog
      chain d<i> { type filter hook egress device "<port>" priority -1;
        ip dscp 26 counter name "d<i>" fwd to "<rid>wdh" }

The packets are forwarded to a veth pair left down (``<rid>wdh`` / ``<rid>wdhb``), which frees
them: an egress ``drop`` fails Open vSwitch's AF_PACKET send with ENOBUFS, and its ``sendmmsg`` then
resends the frame or discards the rest of its batch (measured for the gray fault:
testbed.emulation.faults), so the counter and the loss would disagree. What the queue already held
when the storm was declared is not dropped: the port is resumed, so it drains toward the host.
Table and pair are made by :meth:`WatchdogDrop.prepare` when the loop starts (making them inside a
tick took 170 ms once, holding the port paused that much longer), a chain per port at the storm
(one nft batch), and removed by :meth:`WatchdogDrop.stop`, or by ``testbed clean`` after a crash
(both are named after the run).
"""
from __future__ import annotations

from dataplane.nft import COUNTER_RE, Nft
from topology.naming import check_run_id


class WatchdogDrop:
    """Drop rules for the lossless class (``dscp``) on switch egress ports of run ``run_id`` (module doc).

    :meth:`drop` / :meth:`release` per port; :attr:`dropped` port -> (packets, bytes) of every closed
    drop, plus open ones after :meth:`stop`. Raises NftError (dataplane.nft) when nft
    refuses a batch, OSError when the veth pair cannot be made."""

    def __init__(self, run_id: str, dscp: int = 26):
        self.table = f"{check_run_id(run_id)}wdog"
        self.hole = (f"{run_id}wdh", f"{run_id}wdhb")
        self.dscp = int(dscp)
        self._nft = Nft()
        self._index: dict[str, int] = {}
        self.active: set[str] = set()
        self.dropped: dict[str, tuple[int, int]] = {}
        self._made = False

    def prepare(self) -> "WatchdogDrop":
        """Make the table and the veth pair now (before any storm)."""
        if not self._made:
            self._make()
        return self

    def _make(self) -> None:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            if not ipr.link_lookup(ifname=self.hole[0]):
                ipr.link("add", ifname=self.hole[0], kind="veth", peer=self.hole[1])
        self._nft.run(f"add table netdev {self.table}")
        self._made = True

    def drop(self, port: str) -> None:
        """Start dropping ``port``'s lossless packets (a no-op while they are dropped)."""
        if port in self.active:
            return
        if not self._made:
            self._make()
        i = self._index.setdefault(port, len(self._index))
        t = self.table
        self._nft.run("\n".join([
            f"add counter netdev {t} d{i}",
            f'add chain netdev {t} d{i} {{ type filter hook egress device "{port}" priority -1; }}',
            f'add rule netdev {t} d{i} ip dscp {self.dscp} counter name "d{i}" fwd to "{self.hole[0]}"']))
        self.active.add(port)

    def release(self, port: str) -> None:
        """Stop dropping ``port``'s packets; add what its rule took to :attr:`dropped`."""
        if port not in self.active:
            return
        i = self._index[port]
        got = self._read().get(f"d{i}", (0, 0))
        self._nft.run(f"delete chain netdev {self.table} d{i}\ndelete counter netdev {self.table} d{i}")
        self.active.discard(port)
        old = self.dropped.get(port, (0, 0))
        self.dropped[port] = (old[0] + got[0], old[1] + got[1])

    def _read(self) -> dict[str, tuple[int, int]]:
        out = self._nft.run(f"list counters table netdev {self.table}")
        return {name: (int(p), int(b)) for name, p, b in COUNTER_RE.findall(out)}

    @property
    def dropped_pkts(self) -> int:
        return sum(p for p, _ in self.dropped.values())

    @property
    def dropped_bytes(self) -> int:
        return sum(b for _, b in self.dropped.values())

    def stop(self) -> None:
        """Release every port (counting), delete the table and the veth pair. Safe to call twice."""
        if not self._made:
            return
        try:
            for port in sorted(self.active):
                self.release(port)
        finally:
            self._made = False
            self._nft.run(f"delete table netdev {self.table}")
            from pyroute2 import IPRoute
            with IPRoute() as ipr:
                for idx in ipr.link_lookup(ifname=self.hole[0]):
                    ipr.link("del", index=idx)
