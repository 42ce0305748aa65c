"""The retransmission timeout of a run: given (``transport.rto_us``) or derived (``auto``).

Derivation (:func:`rto_basis`), stated in manifest.json ``rto`` and printed at
the start of a run::

    rto = 2 x (hops x queue_bytes x 8 / slow_bps + ack_every_pkts x frame x 8 / host_link_bps
               + path_delay_us)

with path_delay_us the longest path's one-way propagation (``(hops + 1) x link_delay_us`` unless links
carry their own delay: testbed.spec.fabric.FabricSpec.path_delay_us) and hops = ``fabric.max_switch_hops`` (3 on a spine-leaf, 5 on a fat-tree),
clamped to [:data:`MIN_AUTO_RTO_US`, :data:`MAX_AUTO_RTO_US`].
"""
from __future__ import annotations

from testbed.spec.scenario import ScenarioSpec
from traffic.transport import wire_bytes

#: floor and cap of the automatic retransmission timeout (see :func:`auto_rto_us`)
MIN_AUTO_RTO_US = 5_000
MAX_AUTO_RTO_US = 2_000_000
#: queue pairs per host that can have data in flight at once (a ring rank talks to both neighbours)
QPS_PER_HOST = 2


def auto_rto_us(spec: ScenarioSpec) -> int:
    """Go-back-N timeout, us: :func:`rto_basis` ``["rto_us"]``."""
    return rto_basis(spec)["rto_us"]


def rto_basis(spec: ScenarioSpec) -> dict:
    """The automatic go-back-N timeout and how it was derived (stated in the manifest and printed).

    rto = 2 x (hops x queue_bytes x 8 / slow_bps + ack_every_pkts x frame x 8 / host_link_bps
               + path_delay_us),
    clamped to [5 ms, 2 s]: twice (there and back) the worst queueing on the
    longest path (``hops`` switches, ``fabric.max_switch_hops``) plus an ACK interval, plus the
    path's round-trip propagation (``fabric.path_delay_us`` each way: ``hops + 1`` links of ``fabric.link_delay_us``, or a
    link's own delay where it has one). ``queue_bytes`` per hop is the smaller
    of the switch buffer and all data the senders may have unacknowledged
    (hosts x QPS_PER_HOST x window_pkts x frame): a queue cannot hold more than
    is in flight, so a 100 MB buffer does not make a 40-minute timeout.
    The 2 s cap bounds how long one lost packet stalls a collective; where the
    derived value is larger (deep buffers on slow links) ``capped`` is true,
    and an ACK later than 2 s would show as a spurious retransmission in the
    fidelity verdict rather than pass unseen.

    Returns: dict with rto_us, derived_us, capped, queue_bytes, slow_bps, hops.
    """
    from traffic import wire

    f, t = spec.fabric, spec.transport
    slow_bps = f.slowest_link_bps
    frame = wire_bytes(wire.BTH_BYTES + t.payload_bytes + wire.ICRC_BYTES)
    in_flight = f.n_hosts * QPS_PER_HOST * t.window_pkts * frame
    queue_bytes = min(f.buffer_bytes, in_flight)
    hops = f.max_switch_hops
    queue_s = hops * queue_bytes * 8 / slow_bps
    pkt_s = frame * 8 / f.host_link_bps
    prop_s = f.path_delay_us / 1e6
    derived = int(2e6 * (queue_s + t.ack_every_pkts * pkt_s + prop_s))
    rto = min(MAX_AUTO_RTO_US, max(MIN_AUTO_RTO_US, derived))
    return {"rto_us": rto, "derived_us": derived, "capped": derived > MAX_AUTO_RTO_US,
            "queue_bytes": queue_bytes, "slow_bps": slow_bps, "hops": hops}


#: IRN's N: RTO_low applies with at most max(this, transport.ack_every_pkts) packets in flight
RTO_LOW_MIN_PKTS = 3


def rto_low(spec: ScenarioSpec, rto_us: int) -> tuple[int, int]:
    """IRN's RTO_low for selective repeat (Mittal et al., SIGCOMM 2018, section 3.1): (us, packets).

    With few packets in flight a lost one may have no later arrival to be NACKed by (a tail
    loss, a short message, a lost last resend), so only a timer recovers it, and the timeout
    then resends little. While at most max(:data:`RTO_LOW_MIN_PKTS`, ``ack_every_pkts``) packets
    are in flight (sent, neither ACKed nor SACKed: up to an ACK interval of received packets waits
    for its ACK), each QP times out after RTO_low instead of ``rto``, once per ACK progress.
    RTO_low is 2 x the QP's smoothed RTT (traffic.transport.selective: RACK-TLP's probe timeout,
    RFC 8985), at most ``rto``; the value returned here, min(rto, 2 x base RTT of the longest
    path: testbed.spec.congestion.bdp_basis, one full frame and one ACK store-and-forward on every
    link, no queues), is its floor and its value before the first RTT sample. A static value was
    measured first (docs/how-a-run-works.md "Loss recovery"): one that suited the 5 Mbit/s ring fired early on a
    16 KB-buffer all-to-all, whose ACKs queue behind six other QPs in the sender's NIC (over 250
    duplicates per run). IRN's own figures: RTO_high 320 us, RTO_low 100 us, N = 3 at 40 Gbit/s.
    (0, 0) for go-back-N, which keeps one timeout (IBA vol. 1 9.7.6.1.3), and when spraying (a gap
    is not a loss before the reorder window, half the timeout).
    """
    from traffic.transport.entropy import ENTROPY_POLICIES
    if spec.transport.loss_recovery != "selective_repeat" or ENTROPY_POLICIES[spec.transport.entropy].reorders:
        return 0, 0
    from testbed.spec.congestion import bdp_basis
    low = min(int(rto_us), int(2 * bdp_basis(spec.fabric)["base_rtt_us"]))
    return low, max(RTO_LOW_MIN_PKTS, spec.transport.ack_every_pkts)


def bdp_cap(spec: ScenarioSpec) -> dict:
    """Selective repeat's BDP cap (IRN's BDP-FC, Mittal et al., SIGCOMM 2018, section 3.2) and how it
    was derived: the most packets a QP may have past its cumulative ACK.

    ``auto``: cap = floor(BDP / frame) + floor(buffer / frame), at least 2, at most
    ``window_pkts``; AckReq then comes at least every cap packets (a window that closes before a
    packet asks for an ACK would wait for a timer; traffic.transport.selective). BDP = the
    longest path's base RTT (testbed.spec.congestion.bdp_basis: one full frame and one ACK
    store-and-forward on every link) x its slowest link (``fabric.slowest_link_bps``: min(host_link_bps,
    fabric_link_bps, a dci fabric's dci_link_bps); ``host_link_bps`` for ``spray``, whose packets share every path); buffer =
    one switch port's (``congestion.buffers.lossless_bytes`` or ``fabric.buffer_bytes``): the whole
    frames the path holds without a drop. IRN's cap is the first term at line rate; with ACKs
    coalesced every ``ack_every_pkts`` packets the pipe alone leaves the link idle between ACKs, and
    on an oversubscribed path line rate overfills it (5 Mbit/s fabric links, 8 KB buffers,
    quickstart: 7 packets at line rate resent 25-29% of the posted bytes, 4 resent 17-19%, docs/how-a-run-works.md
    "Loss recovery"). ``transport.bdp_cap_pkts`` as a count: that count; ``off``: the window alone.

    Returns dict with ``cap_pkts`` (0: no cap beyond the window, go-back-N or ``off``) and, for
    ``auto``, ``pipe_pkts``, ``buffer_pkts``, ``slow_bps``, ``base_rtt_us``, ``frame_bytes``.
    """
    from testbed.spec.congestion import bdp_basis
    from traffic import wire
    from traffic.transport.entropy import ENTROPY_POLICIES

    f, t = spec.fabric, spec.transport
    if t.loss_recovery != "selective_repeat" or t.bdp_cap_pkts == "off":
        return {"cap_pkts": 0, "source": "off" if t.loss_recovery == "selective_repeat" else "go_back_n"}
    if t.bdp_cap_pkts != "auto":
        return {"cap_pkts": int(t.bdp_cap_pkts), "source": "transport.bdp_cap_pkts"}
    frame = wire_bytes(wire.BTH_BYTES + t.payload_bytes + wire.ICRC_BYTES)
    rtt_us = bdp_basis(f)["base_rtt_us"]
    slow = f.host_link_bps if ENTROPY_POLICIES[t.entropy].reorders else f.slowest_link_bps
    buf = spec.congestion.buffers.lossless_bytes or f.buffer_bytes
    pipe, held = int(slow * rtt_us / 8e6 // frame), int(buf // frame)
    cap = min(t.window_pkts, max(2, pipe + held))
    return {"cap_pkts": cap, "source": "auto", "pipe_pkts": pipe, "buffer_pkts": held, "slow_bps": slow,
            "base_rtt_us": rtt_us, "frame_bytes": frame}


def run_rto_us(spec: ScenarioSpec) -> int:
    """The run's timeout in us: ``transport.rto_us``, or :func:`auto_rto_us` when it is ``auto``."""
    return auto_rto_us(spec) if spec.transport.rto_us == "auto" else spec.transport.rto_us


def describe_rto(spec: ScenarioSpec) -> str:
    """One line stating the run's retransmission timeout and where it came from (and, with selective
    repeat, its RTO_low)."""
    if spec.transport.rto_us != "auto":
        text = f"retransmission timeout {spec.transport.rto_us / 1e3:g} ms (transport.rto_us)"
    else:
        b = rto_basis(spec)
        text = (f"retransmission timeout {b['rto_us'] / 1e3:g} ms (auto: 2 x ({b['hops']} hops x {b['queue_bytes']} B "
                f"queued at {b['slow_bps'] / 1e6:g} Mbit/s + ACK interval)")
        if b["capped"]:
            text += f"; derived {b['derived_us'] / 1e6:.1f} s, capped at {MAX_AUTO_RTO_US / 1e6:g} s"
        text += ")"
    if spec.transport.loss_recovery != "selective_repeat":
        return text
    low_us, low_pkts = rto_low(spec, run_rto_us(spec))
    text += "; selective repeat: " + (f"RTO_low 2 x smoothed RTT, >= {low_us / 1e3:g} ms, with <= {low_pkts} packets "
                                      f"in flight; " if low_us else "")
    b = bdp_cap(spec)
    if b["source"] == "auto":
        text += (f"BDP cap {b['cap_pkts']} packets ({b['pipe_pkts']} in flight at {b['slow_bps'] / 1e6:g} Mbit/s over "
                 f"the {b['base_rtt_us'] / 1e3:.1f} ms base RTT + {b['buffer_pkts']} in a switch buffer, at most "
                 f"window_pkts)")
    else:
        text += f"BDP cap {b['cap_pkts'] or 'off'} ({b['source']})"
    return text


def manifest_rto(spec: ScenarioSpec) -> dict:
    """manifest.json ``rto``: source (``auto`` or ``transport.rto_us``), the figures, and the printed line."""
    auto = spec.transport.rto_us == "auto"
    low_us, low_pkts = rto_low(spec, run_rto_us(spec))
    return {"source": "auto" if auto else "transport.rto_us",
            **(rto_basis(spec) if auto else {"rto_us": spec.transport.rto_us}),
            **({"rto_low_us": low_us, "rto_low_pkts": low_pkts} if low_us else {}),
            **({"bdp_cap": bdp_cap(spec)} if spec.transport.loss_recovery == "selective_repeat" else {}),
            "text": describe_rto(spec)}
