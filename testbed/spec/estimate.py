"""How long a run will take, known before anything is built; the cap on it.

The estimate adds, for every planned operation, the time its collective
needs at the bottleneck link rate plus a fixed per-operation overhead, and a
fixed setup-and-teardown time for the whole run:

    op_s   = F(n) * S * 8 / (link_bps * payload_efficiency) + OP_OVERHEAD_S
    run_s  = SETUP_S + sum(op_s)

F(n) is the op's busbw factor (nccl-tests: busbw = algbw x F(n), the rate each
rank's link carries in a bandwidth-optimal algorithm), so ``F(n) * S`` is the
data each rank sends: 2 (n - 1) / n * S in a ring all-reduce of S bytes over n
ranks (reduce-scatter then all-gather: Patarasuk and Yuan, JPDC 2009), the
default for mappings without collective and algorithm; ``payload_efficiency`` is payload / frame
bytes of a full data packet (:func:`traffic.transport.payload_efficiency`);
``link_bps`` is the host link rate, or the fabric link rate when that is
slower and the ring crosses leaves (one queue pair takes one path). n is the
op's ``group_size`` when the op plan gives one (a collective over a group of
ranks), else every host. OP_OVERHEAD_S and SETUP_S are measured on the
quickstart scenario (2 cores, userspace OVS, 2026-11-30): 41 operations whose
ideal times add to 67.7 s took 69.2 s from the first rank's start to the last
rank's end (0.037 s more per op), and the whole command 77.2 s (8 s of
set-up and teardown); this estimate says 79.3 s.

The estimate assumes no loss. Where the scenario can drop packets in its
switch queues (:func:`loss_regime`: no PFC, and a window's worth of data
from one QP, or from several converging on one port, does not fit the
buffer in front of a slower link), the printed estimate says so, and names
the loss recovery: a loss costs go-back-N up to a window of resends and
often a timeout, selective repeat about one resend (measured on the
quickstart with 5 Mbit/s fabric links and 8 KB buffers, README "Loss
recovery": go-back-N took several times the estimate). The loss rate
depends on burst timing the estimate does not model, so it is not added.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from traffic import collectives
from traffic.transport import payload_efficiency

#: fabric build, controller, agents, teardown and results (quickstart on 2 cores: 8 s measured)
SETUP_S = 10.0
#: runner <-> agent round trips and the last ACKs of each operation (quickstart: 0.037 s measured)
OP_OVERHEAD_S = 0.04
#: longest run allowed without ``testbed run --max-duration``: 2 hours
MAX_DURATION_S = 2 * 3600.0


class DurationError(ValueError):
    """The estimated run time exceeds the allowed maximum; the message names the keys that scale it."""


def collective_s(size_bytes: int, n_ranks: int, link_bps: float, payload_bytes: int,
                 collective: str = collectives.DEFAULT_COLLECTIVE,
                 algorithm: str = collectives.DEFAULT_ALGORITHM) -> float:
    """Seconds a collective of ``size_bytes`` over ``n_ranks`` needs at ``link_bps`` (module formula).

    Raises ValueError when ``n_ranks < 2`` or ``link_bps <= 0``, UnknownAlgorithm
    (a ValueError) for an unregistered collective/algorithm.
    """
    if n_ranks < 2 or not link_bps > 0:
        raise ValueError(f"n_ranks = {n_ranks} (needs >= 2), link_bps = {link_bps} (needs > 0)")
    factor = collectives.busbw_factor(collective, algorithm, n_ranks)
    return factor * size_bytes * 8 / (link_bps * payload_efficiency(payload_bytes))


def estimate_run_s(ops: Iterable[Mapping], n_hosts: int, host_link_bps: float, fabric_link_bps: float,
                   hosts_per_leaf: int, payload_bytes: int) -> float:
    """Estimated seconds of a whole run (module docstring formula).

    Args:
        ops: the op plan (:func:`testbed.runner.workload_ops`: testbed.plan.PlannedOp,
            whose ``group_size`` is the ranks of each of its groups), or mappings with
            ``size_bytes`` and optionally ``group_size``, ``collective``, ``algorithm``.
        n_hosts: ranks when an op names no group size.
        host_link_bps, fabric_link_bps: link rates, bit/s.
        hosts_per_leaf: a group larger than this crosses leaves and runs at
            min(host_link_bps, fabric_link_bps).
        payload_bytes: transport payload per packet (path MTU).
    """
    total = SETUP_S
    for op in ops:
        op = op.meta() if hasattr(op, "meta") else op
        n = int(op.get("group_size") or n_hosts)
        link = host_link_bps if n <= hosts_per_leaf else min(host_link_bps, fabric_link_bps)
        total += collective_s(int(op["size_bytes"]), n, link, payload_bytes,
                              op.get("collective", collectives.DEFAULT_COLLECTIVE),
                              op.get("algorithm", collectives.DEFAULT_ALGORITHM)) + OP_OVERHEAD_S
    return total


def estimate_for_spec(spec, ops: Iterable[Mapping]) -> float:
    """:func:`estimate_run_s` with the rates and ranks of a :class:`testbed.spec.scenario.ScenarioSpec`."""
    f = spec.fabric
    if spec.workload.pattern is not None:  # flows: trials of the pattern's ideal completion time
        from testbed.patterns.plan import estimate_s
        return SETUP_S + estimate_s(spec)
    return estimate_run_s(ops, f.n_hosts, f.host_link_bps, f.fabric_link_bps, f.ranks_per_switch,
                          spec.transport.payload_bytes)


#: senders that can converge on one receiver's port, per (collective, algorithm); others: 1 (a ring's
#: rank receives from one neighbour). ``None``: the group size - 1 (every other rank at once).
_FAN_IN = {("alltoall", "direct"): None, ("allreduce", "tree"): 2, ("reduce", "tree"): 2}


def _fan_in(spec, ops: Iterable[Mapping]) -> int:
    """Most QPs that can send into one switch port at once (pattern flows per receiver; a collective's
    senders per receiver, :data:`_FAN_IN`); per-flow ECMP can put 2 flows on one uplink when flows
    cross leaves."""
    if spec.workload.pattern is not None:
        from testbed.patterns.plan import pattern_flows
        flows = pattern_flows(spec, spec.fabric.layout_preview())
        per_dst: dict = {}
        for f in flows:
            per_dst[f.dst] = per_dst.get(f.dst, 0) + 1
        fan = max(per_dst.values(), default=1)
        hashed = spec.transport.entropy != "spray" and spec.fabric.leaves > 1 and len(flows) > 1
        return max(fan, 2 if hashed else 1)
    fan = 1
    for op in ops:
        op = op.meta() if hasattr(op, "meta") else op
        key = (op.get("collective", collectives.DEFAULT_COLLECTIVE), op.get("algorithm", collectives.DEFAULT_ALGORITHM))
        if key in _FAN_IN:
            n = int(op.get("group_size") or spec.fabric.n_hosts)
            fan = max(fan, _FAN_IN[key] or n - 1)
    return fan


def loss_regime(spec, ops: Iterable[Mapping] = ()) -> str | None:
    """Why the scenario's switch queues can drop its packets, or None (the estimate then holds).

    Lossless with PFC on: None. Otherwise a drop is possible when the data a port may have to hold
    does not fit its buffer (the lossless class's buffer under ``congestion.buffers``, else
    ``fabric.buffer_bytes``): one QP's window (``window_pkts`` full frames) in front of a fabric link
    slower than the host link, or (fan-in - 1) windows where several QPs converge on one port
    (:func:`_fan_in`). A rule of thumb, not a queue model: it names the cause in one clause.
    """
    from traffic import wire
    from traffic.transport import wire_bytes

    if spec.congestion.pfc_on:
        return None
    f, t = spec.fabric, spec.transport
    frame = wire_bytes(wire.BTH_BYTES + t.payload_bytes + wire.ICRC_BYTES)
    window = t.window_pkts * frame
    buf = spec.congestion.buffers.lossless_bytes or f.buffer_bytes
    if f.fabric_link_bps < f.host_link_bps and buf < window and f.leaves > 1:
        return (f"a QP's window ({t.window_pkts} x {frame} B) does not fit the {buf} B switch buffer in front of "
                f"{f.fabric_link_bps / 1e6:g} Mbit/s fabric links, slower than the {f.host_link_bps / 1e6:g} Mbit/s "
                f"host links")
    fan = _fan_in(spec, ops)
    if fan >= 2 and buf < (fan - 1) * window:
        return (f"up to {fan} QPs converge on one port and {fan - 1} windows ({t.window_pkts} x {frame} B each) do "
                f"not fit its {buf} B buffer")
    return None


def loss_note(spec, ops: Iterable[Mapping] = ()) -> str | None:
    """The clause the printed estimate carries when :func:`loss_regime` finds the scenario lossy, else None."""
    why = loss_regime(spec, ops)
    if why is None:
        return None
    rec = spec.transport.loss_recovery
    cost = ("each loss can cost go-back-N a window of resends and a timeout: expect it to take several times "
            "longer" if rec == "go_back_n" else "selective repeat resends about one packet per loss")
    return f"assumes no loss, but packets can be dropped: {why}; {cost} (transport.loss_recovery: {rec})"


def scaling_keys(spec) -> str:
    """The scenario keys that make a run longer or shorter, for error messages."""
    if spec.workload.pattern is not None:
        return "workload.pattern.size_bytes, workload.pattern.trials (or fabric.host_link_bps)"
    if spec.workload.simai is not None:
        return "workload.simai.size_scale, workload.simai.iterations (or fabric.host_link_bps)"
    return ("workload.sizes.max_bytes, workload.iterations, workload.max_bytes_per_size "
            "(or fabric.host_link_bps)")


def format_duration(seconds: float) -> str:
    """``95 s``, ``12.5 min`` or ``2.02 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def check_duration(spec, estimate_s: float, max_duration_s: float = MAX_DURATION_S) -> None:
    """Raise :class:`DurationError` when ``estimate_s > max_duration_s``, naming the keys that scale it."""
    if estimate_s > max_duration_s:
        raise DurationError(
            f"estimated duration {format_duration(estimate_s)} exceeds the cap of "
            f"{format_duration(max_duration_s)}: reduce {scaling_keys(spec)}, "
            f"or allow it with 'testbed run --max-duration {int(estimate_s) + 1}'")


def parse_duration_s(text: str) -> float:
    """Seconds from ``7200``, ``90s``, ``30m`` or ``3h``; ValueError names the text and the forms allowed."""
    t = str(text).strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], None)
    num = t[:-1] if mult else t
    try:
        value = float(num) * (mult or 1)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration: use seconds (7200) or 90s, 30m, 3h") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{text!r} is not a duration: it must be above 0 and finite")
    return value
