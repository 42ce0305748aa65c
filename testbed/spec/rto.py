"""The go-back-N retransmission timeout of a run: given (``transport.rto_us``) or derived (``auto``).

Derivation (:func:`rto_basis`), stated in manifest.json ``rto`` and printed at
the start of a run::

    rto = 2 x (hops x queue_bytes x 8 / slow_bps + ack_every_pkts x frame x 8 / host_link_bps)

with hops = ``fabric.max_switch_hops`` (3 on a spine-leaf, 5 on a fat-tree),
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

    rto = 2 x (hops x queue_bytes x 8 / slow_bps + ack_every_pkts x frame x 8 / host_link_bps),
    clamped to [5 ms, 2 s]: twice (there and back) the worst queueing on the
    longest path (``hops`` switches, ``fabric.max_switch_hops``) plus an ACK interval. ``queue_bytes`` per hop is the smaller
    of the switch buffer and all data the senders may have unacknowledged
    (hosts x QPS_PER_HOST x window_pkts x frame): a queue cannot hold more than
    is in flight, so a 100 MB buffer does not make a 40-minute timeout (C15).
    The 2 s cap bounds how long one lost packet stalls a collective; where the
    derived value is larger (deep buffers on slow links) ``capped`` is true,
    and an ACK later than 2 s would show as a spurious retransmission in the
    fidelity verdict rather than pass unseen.

    Returns: dict with rto_us, derived_us, capped, queue_bytes, slow_bps, hops.
    """
    from traffic import wire

    f, t = spec.fabric, spec.transport
    slow_bps = min(f.host_link_bps, f.fabric_link_bps)
    frame = wire_bytes(wire.BTH_BYTES + t.payload_bytes + wire.ICRC_BYTES)
    in_flight = f.n_hosts * QPS_PER_HOST * t.window_pkts * frame
    queue_bytes = min(f.buffer_bytes, in_flight)
    hops = f.max_switch_hops
    queue_s = hops * queue_bytes * 8 / slow_bps
    pkt_s = frame * 8 / f.host_link_bps
    derived = int(2e6 * (queue_s + t.ack_every_pkts * pkt_s))
    rto = min(MAX_AUTO_RTO_US, max(MIN_AUTO_RTO_US, derived))
    return {"rto_us": rto, "derived_us": derived, "capped": derived > MAX_AUTO_RTO_US,
            "queue_bytes": queue_bytes, "slow_bps": slow_bps, "hops": hops}


def run_rto_us(spec: ScenarioSpec) -> int:
    """The run's timeout in us: ``transport.rto_us``, or :func:`auto_rto_us` when it is ``auto``."""
    return auto_rto_us(spec) if spec.transport.rto_us == "auto" else spec.transport.rto_us


def describe_rto(spec: ScenarioSpec) -> str:
    """One line stating the run's retransmission timeout and where it came from."""
    if spec.transport.rto_us != "auto":
        return f"retransmission timeout {spec.transport.rto_us / 1e3:g} ms (transport.rto_us)"
    b = rto_basis(spec)
    text = (f"retransmission timeout {b['rto_us'] / 1e3:g} ms (auto: 2 x ({b['hops']} hops x {b['queue_bytes']} B queued "
            f"at {b['slow_bps'] / 1e6:g} Mbit/s + ACK interval)")
    if b["capped"]:
        text += f"; derived {b['derived_us'] / 1e6:.1f} s, capped at {MAX_AUTO_RTO_US / 1e6:g} s"
    return text + ")"


def manifest_rto(spec: ScenarioSpec) -> dict:
    """manifest.json ``rto``: source (``auto`` or ``transport.rto_us``), the figures, and the printed line."""
    auto = spec.transport.rto_us == "auto"
    return {"source": "auto" if auto else "transport.rto_us",
            **(rto_basis(spec) if auto else {"rto_us": spec.transport.rto_us}),
            "text": describe_rto(spec)}
