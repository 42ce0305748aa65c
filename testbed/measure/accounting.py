"""Where every packet of a run went: the loss identity, each event counted once.

The identity a run is judged by (summary.json ``loss``)::

    sent = received + switch_queue + watchdog + faults + elsewhere + unexplained

* ``sent``: transport packets the agents put on the wire (data, ACK, NAK, CNP;
  a send the host NIC queue refused and the agent retried counts once, when it
  left);
* ``received``: packets the hosts' RoCEv2 endpoints received;
* ``switch_queue``: tail drops of the emulated switch queues (their qdisc
  counters, exact since testbed.emulation.switch_tail_drop);
* ``watchdog``: lossless packets the PFC watchdog's drop action took;
* ``faults``: losses charged to injected faults (testbed.pipeline.judge.charge_faults);
* ``elsewhere``: drops outside the emulation, by name (:func:`elsewhere`): a
  host's receive path, an Open vSwitch socket or its pipeline, a kernel backlog,
  a host NIC queue beyond the agents' retries, Open vSwitch send errors;
* ``unexplained``: what no counter explains; a faithful run has none.

Counters that see ONE event several times are merged, not added (each was
measured to count the same drop):

* a host NIC queue that is full makes the agent's ``sendto`` fail with ENOBUFS
  (IP_RECVERR; traffic.transport.nic): the kernel counts the same event as a
  qdisc drop of the host NIC, an ``Ip OutDiscards`` and a ``Udp
  SndbufErrors``. The agent retries (an RNIC never drops its own packets), so
  these are *backpressure*, not losses: ``host_nic_retries`` per host, and
  only qdisc drops beyond the retries count as losses;
* a frame a veth cannot hand to its peer's backlog counts in the sender's
  ``tx_dropped`` and in ``softnet_stat``'s dropped column: the larger is taken.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

#: ``[name]`` of a per-host or per-interface counter key
_KEY_RE = re.compile(r"^(\w+)\[(.+)\]$")
#: counters that see the host NIC queue's ENOBUFS events again (not added; reported)
_SAME_AS_HOST_QDISC = ("udp_sndbuf_errors_pkts", "ip_out_discards_pkts")
_VETH_TX = ("switch_tx_dropped_pkts", "host_tx_dropped_pkts")


def _split(key: str) -> tuple[str, str]:
    m = _KEY_RE.match(key)
    return (m.group(1), m.group(2)) if m else (key, "")


def host_of_interface(ifname: str, hosts: list[str]) -> str | None:
    """The host (one of ``hosts``, full names with the run id) whose interface ``ifname`` is
    (``<host>-eth<k>``), or None."""
    owner = ifname.rsplit("-", 1)[0]
    return owner if owner in hosts else None


@dataclass
class Elsewhere:
    """Drops outside the emulated queues: ``losses`` (counter key -> packets, each event once),
    ``host_nic_retries`` (host -> ENOBUFS retries, benign), ``merged`` (counter key -> packets it
    saw that another counter already counts: reported, not added)."""

    losses: dict[str, int] = field(default_factory=dict)
    host_nic_retries: dict[str, int] = field(default_factory=dict)
    merged: dict[str, int] = field(default_factory=dict)

    @property
    def total_pkts(self) -> int:
        return sum(v for v in self.losses.values() if v > 0)


def elsewhere(counter_drops: dict[str, int], retries_by_host: dict[str, int],
              background_senders: frozenset[str] = frozenset()) -> Elsewhere:
    """Classify the drop counters of a run (testbed.measure.drops.DropSnapshot.delta, after kick
    frames and faults were taken out) into losses, counted once, and benign backpressure.

    ``retries_by_host``: host (full name) -> sends its agents retried after ENOBUFS (qps.csv
    ``nic_full_waits``, requesters and responders). Negative deltas (a counter reset) are kept as
    losses so that the verdict names them. ``background_senders``: hosts (full names) whose background
    flows (iperf3 or the UDP sender, which do not retry) shared the NIC: its queue's drops beyond the
    agents' retries are those flows' own sender-side losses (a 20 Mbit/s UDP flow on a 20 Mbit/s NIC, case
    C04), already in the background block's lost packets: merged as ``background_sender_nic_drops_pkts``.
    """
    out = Elsewhere()
    hosts = sorted({_split(k)[1] for k in counter_drops if _split(k)[0].startswith(("udp_", "ip_"))}
                   | set(retries_by_host))
    qdisc_by_host: dict[str, int] = {}
    for key, v in counter_drops.items():
        name, where = _split(key)
        if name == "host_qdisc_drops_pkts":
            h = host_of_interface(where, hosts) or where
            qdisc_by_host[h] = qdisc_by_host.get(h, 0) + v
    veth_tx = sum(v for k, v in counter_drops.items() if _split(k)[0] in _VETH_TX and v > 0)
    for key, v in sorted(counter_drops.items()):
        if not v:
            continue
        name, where = _split(key)
        if name == "host_qdisc_drops_pkts":
            continue  # per host, below
        if name in _SAME_AS_HOST_QDISC:
            extra = v - qdisc_by_host.get(where, 0)
            if extra > 0 and name == "ip_out_discards_pkts":  # discards that were not the NIC queue's
                out.losses[f"ip_out_discards_beyond_nic_queue_pkts[{where}]"] = extra
            out.merged[key] = v if extra <= 0 else v - extra
            continue
        if name == "softnet_dropped_pkts":
            if v > veth_tx:  # backlog drops beyond the veths' own count
                out.losses["softnet_dropped_beyond_veth_pkts"] = v - veth_tx
            if veth_tx:
                out.merged[key] = min(v, veth_tx)
            continue
        out.losses[key] = v
    for h in sorted(set(qdisc_by_host) | set(retries_by_host)):
        drops, retries = qdisc_by_host.get(h, 0), retries_by_host.get(h, 0)
        if retries:
            out.host_nic_retries[h] = retries
        if drops > retries and h in background_senders:
            out.merged[f"background_sender_nic_drops_pkts[{h}]"] = drops - retries
        elif drops > retries:
            out.losses[f"host_nic_queue_drops_pkts[{h}]"] = drops - retries
    return out


@dataclass
class LossIdentity:
    """The identity of a run (module doc), packets. ``unexplained_pkts`` = sent - every named term."""

    sent_pkts: int
    received_pkts: int
    switch_queue_drops_pkts: int
    watchdog_drops_pkts: int
    lost_to_faults_pkts: int
    elsewhere_pkts: int
    unexplained_pkts: int
    elsewhere: dict[str, int]
    host_nic_retries: dict[str, int]
    merged_counters: dict[str, int]
    #: switch queue drops of background (non-RoCE) packets, left out of ``switch_queue_drops_pkts``
    background_pkts: int = 0

    def as_json(self) -> dict:
        return {"identity": "sent = received + switch_queue + watchdog + faults + elsewhere + unexplained",
                **asdict(self)}

    def sentence(self) -> str:
        """``sent 100 = received 90 + switch queues 8 + ... + unexplained 2`` (the terms that are not 0)."""
        terms = [("received", self.received_pkts), ("switch queues", self.switch_queue_drops_pkts),
                 ("PFC watchdog", self.watchdog_drops_pkts), ("faults", self.lost_to_faults_pkts)]
        terms += [(k, v) for k, v in sorted(self.elsewhere.items(), key=lambda kv: -kv[1]) if v]
        body = " + ".join(f"{k} {v}" for k, v in terms if v or k == "received")
        return f"sent {self.sent_pkts} = {body} + unexplained {self.unexplained_pkts}"


def loss_identity(t: dict, other: Elsewhere, watchdog_drops_pkts: int, background_pkts: int = 0) -> LossIdentity:
    """The identity from the transport totals ``t`` (testbed.measure.transport_totals.transport_totals, with
    ``lost_to_faults_pkts`` when faults ran; its ``switch_drops_pkts`` holds the queues' tail drops of
    RoCE packets plus the watchdog's) and the drops elsewhere. ``background_pkts``: the queues' drops of
    background flows (testbed.emulation.background), already left out of ``t``; reported, not a term."""
    queue = int(t["switch_drops_pkts"]) - int(watchdog_drops_pkts)
    faults = int(t.get("lost_to_faults_pkts", 0))
    sent, received = int(t["sent_pkts"]), int(t["received_pkts"])
    rest = sent - received - queue - watchdog_drops_pkts - faults - other.total_pkts
    return LossIdentity(sent, received, queue, int(watchdog_drops_pkts), faults, other.total_pkts, rest,
                        dict(other.losses), dict(other.host_nic_retries), dict(other.merged), int(background_pkts))
