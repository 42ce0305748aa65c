"""Silent tail drop on switch ports: every frame Open vSwitch hands a port meets the port's queue once.

A switch ASIC tail-drops a packet at a full egress queue without telling the
ingress that sent it. The emulation's switch is ``ovs-vswitchd`` on the
userspace datapath, which sends each output batch to a port with one
``sendmmsg`` on an AF_PACKET socket (lib/netdev-linux.c,
``netdev_linux_sock_batch_send``); the port's egress qdisc is the emulated
queue. When the queue is full the kernel rejects the frame (the qdisc counts a
drop, ``sendmmsg`` reports ENOBUFS) and Open vSwitch then

* sends the rejected frame AGAIN when it was not first in the call
  (``sendmmsg`` returned the count before it; OVS retries from there), so the
  qdisc counts it twice, or lets it through after all if a slot freed;
* gives up on the REST of the batch when it was first, so those frames are
  lost where no counter sees them.

Measured before this module: 9,504 counted drops + 15,562 delivered
> 23,202 sent in a UDP run; 448 of 6,485 losses of a two-sender tail-drop run
outside any counter.

The cure is one nftables rule per switch port on the netdev egress hook,
which runs in ``__dev_queue_xmit`` before the qdisc::

    table netdev <rid>tail
      chain t<i> { type filter hook egress device "<port>" priority -100; policy accept;
        meta mark != 0x7462 meta mark set 0x7462 fwd to "<port>" }

``fwd`` hands the frame to the same port's ``dev_queue_xmit`` (nf_dup_netdev:
the frame is *stolen*, so the sender's send succeeds whatever the queue does);
the second pass carries the mark and goes straight on to the qdisc, which
accepts or tail-drops it and counts the drop once. The mark never leaves the
port's frame: the next switch (userspace datapath) builds new buffers, and a
host's namespace clears it (``skb_scrub_packet`` across namespaces).
Measured on a veth with HTB + bfifo: without the rule 4,332 ENOBUFS, qdisc
drops 4,332; with it 0 ENOBUFS, qdisc drops 4,760 = frames sent - frames
received exactly. Priority -100 runs this chain before every other egress
chain of the run (ECN marker, faults, PFC watchdog at -1..0), so they see
each frame once, on its second pass.

The table is named after the run (``<rid>tail``): ``testbed clean`` removes a
dead run's (testbed.host.cleanup, like the ECN marker's tables).
"""
from __future__ import annotations

from dataplane.nft import Nft, NftError
from dataplane.skb_marks import SECOND_PASS_MARK
from testbed.process.lifecycle import StartStop
from topology.naming import check_run_id

#: the chain runs before the run's other netdev egress chains (ECN marker 0, faults 0, watchdog -1)
CHAIN_PRIORITY = -100


def table_name(run_id: str) -> str:
    """The run's netdev table: ``<run id>tail``."""
    return f"{check_run_id(run_id)}tail"


def ruleset(run_id: str, ports: list[str]) -> str:
    """The nft batch that makes the run's table with one chain per switch port (see module doc).

    Raises ValueError for a bad run id or a port name nft could not take (quotes, blanks)."""
    lines = [f"add table netdev {table_name(run_id)}"]
    for i, port in enumerate(ports):
        if not port or any(c in port for c in "\"' \t\n;{}"):
            raise ValueError(f"switch port name {port!r}: not an interface name")
        lines.append(f"add chain netdev {table_name(run_id)} t{i} {{ type filter hook egress device \"{port}\" "
                     f"priority {CHAIN_PRIORITY}; policy accept; }}")
        lines.append(f"add rule netdev {table_name(run_id)} t{i} meta mark != {SECOND_PASS_MARK:#x} "
                     f"meta mark set {SECOND_PASS_MARK:#x} fwd to \"{port}\"")
    return "\n".join(lines) + "\n"


class SwitchTailDrop(StartStop):
    """The run's silent-tail-drop rules on ``ports`` (switch-side interfaces in the root namespace).

    ``start`` installs them in one nft batch (NftError when nft refuses); ``stop`` deletes the table
    (safe twice, and after a failed start). ``backend``: how nft ran (libnftables or ``nft -f``)."""

    def __init__(self, run_id: str, ports: list[str]):
        self.run_id = check_run_id(run_id)
        self.ports = list(ports)
        self._nft = Nft()
        self.backend = self._nft.backend
        self._made = False

    def start(self) -> None:
        if not self.ports:
            return
        self._made = True  # a half-made table is deleted by stop()
        self._nft.run(ruleset(self.run_id, self.ports))

    def stop(self) -> None:
        if not self._made:
            return
        try:
            self._nft.run(f"delete table netdev {table_name(self.run_id)}")
        except NftError as e:
            if "No such file" not in str(e):
                raise
        self._made = False
