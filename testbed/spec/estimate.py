"""How long a run will take, known before anything is built; the cap on it.

The estimate adds, for every planned operation, the time its collective
needs at the bottleneck link rate plus a fixed per-operation overhead, and
the time the run spends around its traffic: building and tearing down the
fabric, per switch, link and host, and starting the agents, per host:

    op_s       = F(n) * S * 8 / (link_bps * payload_efficiency) + OP_OVERHEAD_S
    build_s    = BUILD_S_FIXED + BUILD_S_PER_SWITCH * switches + BUILD_S_PER_LINK * links + BUILD_S_PER_HOST * hosts
    teardown_s = the same with the TEARDOWN_S_* constants
    setup_s    = RUN_FIXED_S + AGENT_S_PER_HOST * hosts + build_s + teardown_s
    run_s      = setup_s + sum(op_s)

F(n) is the op's busbw factor (nccl-tests: busbw = algbw x F(n), the rate each
rank's link carries in a bandwidth-optimal algorithm), so ``F(n) * S`` is the
data each rank sends: 2 (n - 1) / n * S in a ring all-reduce of S bytes over n
ranks (reduce-scatter then all-gather: Patarasuk and Yuan, JPDC 2009), the
default for mappings without collective and algorithm; ``payload_efficiency`` is payload / frame
bytes of a full data packet (:func:`traffic.transport.payload_efficiency`);
``link_bps`` is the host link rate, or the fabric link rate when that is
slower and the ring crosses leaves (one queue pair takes one path). n is the
op's ``group_size`` when the op plan gives one (a collective over a group of
ranks), else every host. OP_OVERHEAD_S is measured on the quickstart scenario
(2 cores, userspace OVS, 2026-11-30): 41 operations whose ideal times add to
67.7 s took 69.2 s from the first rank's start to the last rank's end (0.037 s
more per op). Switches, links (host links and links between switches alike)
and hosts are the layout's (``fabric.layout_preview()``); the set-up constants
are measured with benchmarks/fabric_setup_cost.py (see :data:`BUILD_S_PER_LINK`).

The estimate assumes no loss. Where the scenario can drop packets in its
switch queues (:func:`loss_regime`: no PFC, and a window's worth of data
from one QP, or from several converging on one port, does not fit the
buffer in front of a slower link), the printed estimate says so, and names
the loss recovery: a loss costs go-back-N up to a window of resends and
often a timeout, selective repeat about one resend (measured on the
quickstart with 5 Mbit/s fabric links and 8 KB buffers, docs/how-a-run-works.md "Loss
recovery": go-back-N took several times the estimate). The loss rate
depends on burst timing the estimate does not model, so it is not added.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from traffic import collectives
from traffic.transport import payload_efficiency

# Fabric build and teardown, and the rest of a run around its traffic, s. Least-squares fits (every
# coefficient >= 0) of benchmarks/fabric_setup_cost.py on this project's machine class (2 vCPUs, Intel
# Xeon, kernel 6.18, userspace Open vSwitch, 2026-12-02): `testbed run` of one 64 KiB all-reduce
# on 8 spine-leaf fabrics of 3 to 20 switches, 4 to 128 links and 2 to 64 hosts, each twice (largest
# residual 1.6 s build, 0.5 s teardown, at 20 switches / 128 links: 16.2-17.1 s build, 11.7-12.2 s
# teardown measured); build =
# from the "run tb..." line to "fabric up" (controller, hosts, bridges, veths, MTU, queues, flows
# confirmed), teardown = from "tearing down" to the process's exit, the rest = start-up, probe, run
# directory, agents and results.
BUILD_S_FIXED = 0.0
BUILD_S_PER_SWITCH = 0.0   # an OVS bridge's own cost is lost in the noise of its links (fit: 0)
BUILD_S_PER_LINK = 0.094   # veth pair, offloads, MTU, egress queues on both ends, rate read back
BUILD_S_PER_HOST = 0.058   # network namespace, its shell, IPv6 off, static neighbours
TEARDOWN_S_FIXED = 2.07
TEARDOWN_S_PER_SWITCH = 0.048
TEARDOWN_S_PER_LINK = 0.069
TEARDOWN_S_PER_HOST = 0.003
RUN_FIXED_S = 2.10
AGENT_S_PER_HOST = 0.147
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


def fabric_s(n_switches: int, n_links: int, n_hosts: int) -> tuple[float, float]:
    """(build_s, teardown_s) of a fabric of ``n_switches``, ``n_links`` and ``n_hosts`` (module docstring)."""
    build = BUILD_S_FIXED + BUILD_S_PER_SWITCH * n_switches + BUILD_S_PER_LINK * n_links + BUILD_S_PER_HOST * n_hosts
    down = (TEARDOWN_S_FIXED + TEARDOWN_S_PER_SWITCH * n_switches + TEARDOWN_S_PER_LINK * n_links
            + TEARDOWN_S_PER_HOST * n_hosts)
    return build, down


def fabric_counts(fabric) -> tuple[int, int, int]:
    """(switches, links, hosts) of a testbed.spec.fabric.FabricSpec's layout."""
    layout = fabric.layout_preview()
    return len(layout.switches), len(layout.links), len(layout.hosts)


def setup_s(fabric) -> float:
    """Seconds a run of ``fabric`` (a FabricSpec) spends besides its traffic (module docstring ``setup_s``)."""
    n_sw, n_links, n_hosts = fabric_counts(fabric)
    build, down = fabric_s(n_sw, n_links, n_hosts)
    return RUN_FIXED_S + AGENT_S_PER_HOST * n_hosts + build + down


def describe_setup(fabric) -> str:
    """``fabric build ~3 s, teardown ~4 s (6 switches, 16 links, 8 hosts)`` for the printed estimate."""
    n_sw, n_links, n_hosts = fabric_counts(fabric)
    build, down = fabric_s(n_sw, n_links, n_hosts)
    return (f"fabric build ~{format_duration(build)}, teardown ~{format_duration(down)} ({n_sw} switches, "
            f"{n_links} links, {n_hosts} hosts)")


def estimate_run_s(ops: Iterable[Mapping], n_hosts: int, host_link_bps: float, fabric_link_bps: float,
                   hosts_per_leaf: int, payload_bytes: int, setup_s: float) -> float:
    """Estimated seconds of a whole run (module docstring formula).

    Args:
        ops: the op plan (testbed.workloads.plan_workload: testbed.workloads.plan.PlannedOp,
            whose ``group_size`` is the ranks of each of its groups), or mappings with
            ``size_bytes`` and optionally ``group_size``, ``collective``, ``algorithm``.
        n_hosts: ranks when an op names no group size.
        host_link_bps, fabric_link_bps: link rates, bit/s.
        hosts_per_leaf: a group larger than this crosses leaves and runs at
            min(host_link_bps, fabric_link_bps).
        payload_bytes: transport payload per packet (path MTU).
        setup_s: the run's time around its traffic (:func:`setup_s` of the fabric).
    """
    total = setup_s
    for op in ops:
        op = op.meta() if hasattr(op, "meta") else op
        n = int(op.get("group_size") or n_hosts)
        link = host_link_bps if n <= hosts_per_leaf else min(host_link_bps, fabric_link_bps)
        total += collective_s(int(op["size_bytes"]), n, link, payload_bytes,
                              op.get("collective", collectives.DEFAULT_COLLECTIVE),
                              op.get("algorithm", collectives.DEFAULT_ALGORITHM)) + OP_OVERHEAD_S
    return total


#: senders that can converge on one receiver's port, per (collective, algorithm); others: 1 (a ring's
#: rank receives from one neighbour). ``None``: the group size - 1 (every other rank at once).
_FAN_IN = {("alltoall", "direct"): None, ("allreduce", "tree"): 2, ("reduce", "tree"): 2}


def collective_fan_in(spec, ops: Iterable[Mapping]) -> int:
    """Most QPs that can send into one switch port at once in a collective op plan: a collective's senders
    per receiver (:data:`_FAN_IN`), at least 1. (A pattern's flows: testbed.workloads.pattern.workload.)"""
    fan = 1
    for op in ops:
        op = op.meta() if hasattr(op, "meta") else op
        key = (op.get("collective", collectives.DEFAULT_COLLECTIVE), op.get("algorithm", collectives.DEFAULT_ALGORITHM))
        if key in _FAN_IN:
            n = int(op.get("group_size") or spec.fabric.n_hosts)
            fan = max(fan, _FAN_IN[key] or n - 1)
    return fan


def loss_regime(spec, fan_in: int = 1) -> str | None:
    """Why the scenario's switch queues can drop its packets, or None (the estimate then holds).

    Lossless with PFC on: None. Otherwise a drop is possible when the data a port may have to hold
    does not fit its buffer (the lossless class's buffer under ``congestion.buffers``, else
    ``fabric.buffer_bytes``): one QP's window (``window_pkts`` full frames) in front of a fabric link
    slower than the host link, or (fan-in - 1) windows where ``fan_in`` QPs converge on one port
    (the workload's, testbed.workloads.base.Workload.fan_in). A rule of thumb, not a queue model: it names the cause in one clause.
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
    fan = fan_in
    if fan >= 2 and buf < (fan - 1) * window:
        return (f"up to {fan} QPs converge on one port and {fan - 1} windows ({t.window_pkts} x {frame} B each) do "
                f"not fit its {buf} B buffer")
    return None


def loss_note(spec, fan_in: int = 1) -> str | None:
    """The clause the printed estimate carries when :func:`loss_regime` finds the scenario lossy, else None."""
    why = loss_regime(spec, fan_in)
    if why is None:
        return None
    rec = spec.transport.loss_recovery
    cost = ("each loss can cost go-back-N a window of resends and a timeout: expect it to take several times "
            "longer" if rec == "go_back_n" else "selective repeat resends about one packet per loss")
    return f"assumes no loss, but packets can be dropped: {why}; {cost} (transport.loss_recovery: {rec})"


def format_duration(seconds: float) -> str:
    """``95 s``, ``12.5 min`` or ``2.02 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def check_duration(scaling_keys: str, estimate_s: float, max_duration_s: float = MAX_DURATION_S) -> None:
    """Raise :class:`DurationError` when ``estimate_s > max_duration_s``, naming ``scaling_keys`` (the keys
    that scale the run: testbed.workloads.base.Workload.scaling_keys)."""
    if estimate_s > max_duration_s:
        raise DurationError(
            f"estimated duration {format_duration(estimate_s)} exceeds the cap of "
            f"{format_duration(max_duration_s)}: reduce {scaling_keys}, "
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
