"""Link model: what a link does to a frame (cut-through serialization, propagation delay), stated in the
manifest, and the bounds it puts on measured figures.

The packet timing check that verifies it in a run is :mod:`testbed.measure.packet_timing`, over the
departures :mod:`testbed.measure.departure_capture` records.

Link model
----------
Every egress (host NIC and switch port) is an HTB class at the link rate over
a tail-drop FIFO (:mod:`dataplane.queues.htb_bfifo`). HTB releases a frame as soon as the
class holds non-negative tokens and charges the frame's serialization time
(``frame_bytes * 8 / rate_bps``) afterwards (net/sched/sch_htb.c,
``htb_charge_class``), so:

* a backlogged egress sends back to back, one frame per serialization time:
  the gap between departures i and i+1 is the serialization time of frame i,
  as on a real wire;
* an idle egress forwards a frame at once: no port waits for a whole frame
  before passing it on. A frame's serialization is paid once, where it is
  charged, not again at every hop: the fabric emulates **cut-through**
  switching, not store-and-forward;
* there is no propagation delay unless ``fabric.link_delay_us`` asks for one:
  then a netem stage at every egress root holds each frame ``link_delay_us``
  before the shaper (:mod:`dataplane.queues.delay`), so a path of ``n`` links
  adds ``n x link_delay_us`` each way and a round trip ``2 x n x link_delay_us``
  (:func:`path_rtt_us`). It needs ``sch_netem`` (refused before anything is
  built where the kernel has none; see :func:`check_delay_backend`).

For a window of one packet with an ACK per packet (:func:`window1_busbw_ratio`),
cut-through gives one data frame and one ACK frame per round trip on each link
(``ratio = data / (data + ack)``, 0.946 at the 1024-byte path MTU), where
store-and-forward on the two-hop path through one leaf would pay each twice
(``0.473``).

busbw/link above 1
------------------
HTB's bucket holds ``burst_bytes`` (:func:`testbed.emulation.htb_bfifo.burst_bytes_for`,
3 full frames, or 1 ms at high rates) of tokens after an idle period, which a port may send at
once before it is paced, and the last frame of an operation arrives without
waiting for its own serialization (cut-through, no wire to cross). Between
collectives every port idles, so an operation can finish up to ``burst_bytes
+ one frame`` of serialization time early. The measured busbw/link of one
operation can therefore exceed 1 by at most :func:`busbw_ratio_error_bound`
= ``(burst_bytes + frame) / (wire bytes each rank sends)``: 0.05 for a 64 KiB
all-reduce on 8 ranks (6056 of 121,000 bytes), 0.0008 at 4 MiB. A single
64 KiB run reading 1.004 is inside that bound.
"""
from __future__ import annotations

import pandas as pd

from dataplane.queues import htb_bfifo
from testbed.spec.scenario import ScenarioError, ScenarioSpec
from traffic import wire
from traffic.transport import ACK_FRAME_BYTES, wire_bytes

SWITCHING = "cut_through"


def data_frame_bytes(payload_bytes: int) -> int:
    """Frame bytes of a full data packet: Ethernet + IPv4 + UDP + BTH + payload + ICRC (1082 at 1024)."""
    return wire_bytes(wire.BTH_BYTES + payload_bytes + wire.ICRC_BYTES)


def window1_busbw_ratio(payload_bytes: int, switching: str = SWITCHING, hops: int = 2) -> float:
    """busbw/link (busbw over link rate x payload efficiency) of a 2-rank ring all-reduce with
    ``window_pkts = ack_every_pkts = 1`` and no propagation delay.

    Each rank sends one data frame per round trip and its link back carries the
    peer's data plus the ACK, so a round costs ``data + ack`` frame times per
    link with cut-through and ``hops * (data + ack)`` with store-and-forward
    (each of the ``hops`` switch egresses on the path waits for the whole frame).
    Raises ValueError for another ``switching``.
    """
    data = data_frame_bytes(payload_bytes)
    per_round = data + ACK_FRAME_BYTES
    if switching == "cut_through":
        return data / per_round
    if switching == "store_and_forward":
        return data / (hops * per_round)
    raise ValueError(f"switching={switching!r}: allowed cut_through, store_and_forward")


def early_bytes(rate_bps: float, mtu_bytes: int) -> int:
    """Bytes of serialization an operation can skip after an idle moment: HTB's burst + one frame
    (module doc, "busbw/link above 1"); ``x 8 / rate_bps`` is how early it can finish, in seconds."""
    return htb_bfifo.burst_bytes_for(rate_bps, mtu_bytes) + htb_bfifo.frame_bytes(mtu_bytes)


def busbw_ratio_error_bound(wire_bytes_per_rank: float, rate_bps: float, mtu_bytes: int) -> float:
    """Most one operation's busbw/link can exceed 1 by: (HTB burst + one frame) / wire bytes each rank sends.

    ``wire_bytes_per_rank``: frame bytes one rank puts on its link in the operation.
    """
    return early_bytes(rate_bps, mtu_bytes) / wire_bytes_per_rank


def add_busbw_error_bounds(size_rows: list[dict], spec: ScenarioSpec, efficiency: float) -> None:
    """Add ``busbw_ratio_error_bound`` (see :func:`busbw_ratio_error_bound`) to each summary size row.

    A rank sends the row's ``busbw_factor`` (its algorithm's, for its group size) x ``size_bytes``
    of payload (nccl-tests' definition of busbw), ``/ efficiency`` in frame bytes (partial last
    packets only add frame bytes, so the bound is not understated).
    """
    for row in size_rows:
        row["busbw_ratio_error_bound"] = size_error_bound(row["busbw_factor"], row["size_bytes"], spec, efficiency)


def size_error_bound(busbw_factor: float, size_bytes: int, spec: ScenarioSpec, efficiency: float) -> float:
    """:func:`busbw_ratio_error_bound` of one size: a rank sends ``busbw_factor x size_bytes / efficiency``
    frame bytes (nccl-tests' busbw definition)."""
    wire = busbw_factor * size_bytes / efficiency
    return busbw_ratio_error_bound(wire, spec.fabric.host_link_bps, spec.fabric.mtu_bytes)


def above_link_note(sizes: pd.DataFrame, spec: ScenarioSpec, efficiency: float) -> str | None:
    """One sentence on the sizes whose busbw/link exceeds 1, or None: those within their
    :func:`size_error_bound` are latency-bound operations the HTB burst let end early (they measure no
    link rate); any beyond it is named as unexplained. ``sizes``: sizes.csv (size_bytes, busbw_ratio,
    busbw_factor)."""
    if sizes is None or sizes.empty or "busbw_factor" not in sizes:
        return None
    over = sizes[sizes["busbw_ratio"] > 1.0]
    if over.empty:
        return None
    bounds = [size_error_bound(r.busbw_factor, r.size_bytes, spec, efficiency) for r in over.itertuples()]
    beyond = [(r.size_bytes, r.busbw_ratio, b) for r, b in zip(over.itertuples(), bounds) if r.busbw_ratio > 1 + b]
    top = over.loc[over["busbw_ratio"].idxmax()]
    text = (f"busbw/link above 1 for {len(over)} size row(s) (highest {top['busbw_ratio']:.3f} at "
            f"{int(top['size_bytes'])} B)")
    if not beyond:
        return (text + ": each within its bound 1 + (HTB burst + one frame) / bytes a rank sends: small operations "
                "end early after an idle moment and measure latency, not the link rate (docs/link-model.md)")
    s, r, b = beyond[0]
    return text + f"; {len(beyond)} beyond the HTB burst bound, e.g. {s} B at {r:.3f} > 1 + {b:.3f}: not explained"


def check_delay_backend(spec: ScenarioSpec, delay_backend: str) -> None:
    """Refuse a propagation delay above 0 (``fabric.link_delay_us`` or the kind's own, e.g.
    ``fabric.dci_delay_us``) before anything is built, naming the key and the reason.

    ``delay_backend``: the capability probe's ``delay`` ('netem' or 'none').
    Raises ScenarioError.
    """
    asked = {key: d for key, d in spec.fabric.delays_us.items() if d}
    if not asked or delay_backend == "netem":
        return
    key, d = next(iter(asked.items()))
    raise ScenarioError(f"fabric.{key} = {d}: this kernel has no sch_netem, so links cannot add "
                        f"propagation delay here; allowed here: 0 (run on a kernel with netem, e.g. the "
                        f"Vagrant VM or a scripts/vm guest)")


def path_rtt_us(links: int, link_delay_us: float, rate_bps: float, data_frame_bytes: int,
                ack_frame_bytes: int = ACK_FRAME_BYTES) -> float:
    """Base round trip of one data frame and its ACK over a path of ``links`` links at ``rate_bps``, us:
    ``2 x links x link_delay_us`` of propagation plus each frame's serialization once (cut-through, module
    doc), no queueing. ``links``: 2 from host to host through one switch."""
    return 2 * links * link_delay_us + (data_frame_bytes + ack_frame_bytes) * 8e6 / rate_bps


def window_limited_goodput_bps(window_pkts: int, payload_bytes: int, rtt_us: float) -> float:
    """Goodput of a QP whose window, not the link, is the limit: ``window_pkts x payload_bytes x 8 / RTT``
    (bit/s of payload), with an ACK per packet so the window slides every frame. The window is the limit
    while ``window_pkts`` frames serialize in less than the RTT (:func:`path_rtt_us`)."""
    return window_pkts * payload_bytes * 8e6 / rtt_us


def link_model(spec: ScenarioSpec, delay_backend: str) -> dict:
    """The manifest's ``link_model``: switching mode, delay and its backend, shaping figures.

    Raises ScenarioError first when a delay (``fabric.link_delay_us``, ``fabric.dci_delay_us``) cannot be honoured here
    (:func:`check_delay_backend`): the manifest is written before anything is built.
    """
    check_delay_backend(spec, delay_backend)
    f = spec.fabric
    delayed = any(f.delays_us.values())
    return {
        "switching": SWITCHING,
        "serialization": "HTB token bucket per egress at the link rate: a backlogged port sends one frame "
                         "per serialization time; an idle port forwards at once (no per-hop store-and-forward)",
        "propagation_delay_us": f.link_delay_us,
        "delays_us": f.delays_us,  # every delay key of the kind: link_delay_us, and e.g. dci_delay_us
        "path_delay_us": f.path_delay_us,  # one way, the longest path (testbed.spec.fabric.path_delay_us)
        "delay_backend": "netem (root of every egress, the shaper under it)" if delayed else "none",
        "delay_backend_available": delay_backend,
        "mtu_bytes": f.mtu_bytes,
        "frame_bytes_counted": "Ethernet frame without preamble, FCS or inter-frame gap",
        "burst_bytes": {"host": htb_bfifo.burst_bytes_for(f.host_link_bps, f.mtu_bytes),
                        "fabric": htb_bfifo.burst_bytes_for(f.fabric_link_bps, f.mtu_bytes)},
        "window1_busbw_ratio": window1_busbw_ratio(spec.transport.payload_bytes),
    }
