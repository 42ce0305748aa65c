"""Before a run: does the scenario fit what this machine can emulate faithfully?

The scenario's offered load (testbed.measure.packet_load: packet-hops/s, all sending hosts, every
link each frame crosses) is compared with the machine's faithful capacity at the scenario's path
MTU (testbed.measure.capacity: the calibrated figures, or a conservative default without a
calibration). Above the capacity the run is warned (the CPU may saturate and the verdict judge it
NOT faithful); above ``fidelity.max_capacity_ratio`` times it (default 2) the run is refused with
:class:`CapacityError` (exit code 2, nothing built), naming what would fit. An expert overrides the
refusal with ``testbed run --over-capacity`` (``over_capacity=True`` in testbed.api) or
``fidelity.max_capacity_ratio: off`` in the scenario.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

from testbed.measure import capacity
from testbed.measure.packet_load import PacketLoad, packet_load

#: transport.payload_bytes that costs the fewest packets per bit, suggested when the scenario uses less
BIG_PAYLOAD_BYTES = 4096
#: least fabric.host_link_bps a scenario may set (testbed.spec.units.RateBps)
MIN_LINK_BPS = 100e3
_UNSET = object()
#: ``--over-capacity``'s help (testbed run, testbed nccl)
OVER_CAPACITY_HELP = ("run even when the scenario offers more than fidelity.max_capacity_ratio (default 2) x this "
                      "machine's faithful capacity ('testbed doctor'); the run will likely be judged NOT faithful")


class CapacityError(ValueError):
    """The scenario offers more than ``fidelity.max_capacity_ratio`` x this machine's faithful capacity;
    the message names the hosts, rates and what would fit."""


def _round_down(x: float, digits: int = 2) -> float:
    """``x`` rounded down to ``digits`` significant digits (0 stays 0)."""
    if x <= 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return math.floor(x / scale + 1e-9) * scale


def _with_payload(spec, payload_bytes: int):
    """``spec`` with ``transport.payload_bytes`` changed (only what packet_load reads; not re-validated)."""
    return spec.model_copy(update={"transport": spec.transport.model_copy(update={"payload_bytes": payload_bytes})})


def what_fits(spec, load: PacketLoad, cap_hop_pps: float, points: Mapping[int, float],
              peers: Optional[Mapping[int, Sequence[int]]] = None, layout=None) -> str:
    """The clause naming what fits within ``cap_hop_pps`` (module docstring): the most hosts at this
    rate, the highest ``fabric.host_link_bps`` for these hosts, and the rate with the largest path MTU
    when the scenario's is smaller. Hosts are counted with this fabric's mean path length."""
    rate = spec.fabric.host_link_bps
    if cap_hop_pps <= 0:
        return "nothing fits: this machine's calibration found no faithful rate at this path MTU"
    n_fit = int(cap_hop_pps // load.hop_pps_per_host) if load.hop_pps_per_host else load.sending_hosts
    hosts = (f"at most {n_fit} sending hosts at {rate / 1e6:g} Mbit/s" if n_fit >= 2
             else f"not even 2 hosts at {rate / 1e6:g} Mbit/s")
    r_fit = _round_down(rate * cap_hop_pps / load.hop_pps)
    these = f"these {load.sending_hosts} hosts"
    rates = (f"{these} at most {r_fit / 1e6:.2g} Mbit/s per host link (fabric.host_link_bps)" if r_fit >= MIN_LINK_BPS
             else f"{these} at no fabric.host_link_bps of path MTU {spec.transport.payload_bytes} (the least is "
                  f"{MIN_LINK_BPS / 1e3:g} kbit/s)")
    out = f"what fits faithfully on this machine: {hosts}, or {rates}"
    payload = spec.transport.payload_bytes
    if payload < BIG_PAYLOAD_BYTES:
        big = packet_load(_with_payload(spec, BIG_PAYLOAD_BYTES), peers, layout)
        r_big = _round_down(rate * capacity.hop_pps_at(points, BIG_PAYLOAD_BYTES) / big.hop_pps)
        if r_big >= MIN_LINK_BPS:
            out += (f", or {these} at most {r_big / 1e6:.2g} Mbit/s per host link with transport.payload_bytes: "
                    f"{BIG_PAYLOAD_BYTES} (fabric.mtu_bytes >= {BIG_PAYLOAD_BYTES + 44})")
    return out


def check_scenario(spec, peers: Optional[Mapping[int, Sequence[int]]] = None, layout=None, cached=_UNSET,
                   over_capacity: bool = False) -> Optional[str]:
    """Compare ``spec``'s offered load with this machine's faithful capacity (module docstring).

    Args:
        spec: a validated testbed.spec.scenario.ScenarioSpec.
        peers: rank -> ranks it sends to (the workload's queue pairs); None: every pair of hosts.
        layout: the fabric's topology.model.Layout (None: ``spec.fabric.layout_preview()``).
        cached: a calibration record (testbed.measure.capacity); default: the cached one for the
            scenario's datapath; None: no calibration (the conservative default).
        over_capacity: warn instead of refusing.

    Returns: a warning (str) when the load is above the capacity, else None.
    Raises: CapacityError when it is above ``spec.fidelity.max_capacity_ratio`` x the capacity and
    neither ``over_capacity`` nor ``max_capacity_ratio: off`` allows it.
    """
    if cached is _UNSET:
        cached = capacity.load_cached(None if spec.fabric.datapath == "auto" else spec.fabric.datapath)
    layout = layout if layout is not None else spec.fabric.layout_preview()
    load = packet_load(spec, peers, layout)
    points = capacity.figures(cached)
    payload = spec.transport.payload_bytes
    cap = capacity.hop_pps_at(points, payload)
    if load.hop_pps <= cap:
        return None
    f = spec.fabric
    source = (f"calibrated {cached.get('measured_utc', '?')} by 'testbed doctor --calibrate'" if cached else
              f"NOT calibrated: a conservative default {capacity.DEFAULT_SOURCE}; 'testbed doctor --calibrate' "
              f"measures this machine")
    ratio = load.hop_pps / cap if cap > 0 else math.inf
    what = (f"{load.sending_hosts} sending hosts (of {load.n_hosts}) x {f.host_link_bps / 1e6:g} Mbit/s host links at "
            f"path MTU {payload} offer up to {load.hop_pps:,.0f} packet-hops/s ({load.frames_pps:,.0f} data frames/s "
            f"crossing {load.links_per_frame:.2f} links each, plus ACKs), {ratio:.1f}x this machine's faithful "
            f"capacity of {cap:,.0f} packet-hops/s at path MTU {payload} ({source})")
    fits = what_fits(spec, load, cap, points, peers, layout)
    limit = spec.fidelity.max_capacity_ratio
    if limit is not None and ratio > limit and not over_capacity:
        raise CapacityError(
            f"fabric too large for this machine: {what}; refused above {limit:g}x (fidelity.max_capacity_ratio). "
            f"{fits[0].upper() + fits[1:]}. To run it anyway (the CPU will saturate and the run be judged NOT "
            f"faithful): 'testbed run --over-capacity' or fidelity.max_capacity_ratio: off")
    return (f"{what}: the CPU may saturate and the run be judged NOT faithful; {fits}")
