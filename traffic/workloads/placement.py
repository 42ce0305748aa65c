"""Where a training job's rank groups run: inside a server (scale-up domain) or across the fabric.

A SimAI/AICB file names ``all_gpus`` ranks; the fabric has ``n_hosts`` hosts
(NICs). The placement is a function of those two numbers and the layout's
servers:

- ``gpus_per_host = all_gpus / n_hosts`` must be a whole number (else
  :class:`PlacementError` naming both). Rank r runs on host ``r //
  gpus_per_host``, ranks numbered server-major as NCCL numbers them (SimAI's TP
  groups are consecutive ranks, so with TP <= gpus_per_host every TP group sits
  inside one host). With ``gpus_per_host`` > 1 a host stands for a server of
  that many GPUs that share its NIC, joined by the server's scale-up domain
  (NVLink-like).
- A rank group whose ranks all sit on one host runs in that scale-up domain:
  no packet crosses the fabric (:attr:`GroupPlacement.where` ``scale_up``).
- A rank group whose ranks sit on distinct hosts runs over the fabric between
  those hosts, in the group's ring order.
- The concurrent groups of one scope that span the same hosts (e.g. EP group
  (i, k) for every GPU k of the servers: the same four servers) share those
  hosts' NICs: they run as one host group carrying ``multiplicity`` times the
  size, which puts on every NIC exactly the bytes the separate groups would.
- A group that puts two of its ranks on one host and others elsewhere (a ring
  half inside, half across servers) is refused, naming the group and the fix;
  so is a scope whose host groups overlap without being equal.

Layouts with servers of their own (``rail_optimized``: GPU i of server s is
host (s-1) x G + i - 1, one NIC per GPU) keep one rank per host; their
consecutive ranks are the GPUs of one server, so TP groups of at most G ranks
stay on one server's hosts (their traffic crosses only the rail leaves then).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

Groups = Tuple[Tuple[int, ...], ...]


class PlacementError(ValueError):
    """A job that cannot be placed on the fabric; the message names the numbers and what is allowed."""


@dataclass(frozen=True)
class GroupPlacement:
    """Where one scope's groups run.

    where: ``fabric`` (host groups exchange packets) or ``scale_up`` (every
    group inside one host: no fabric traffic); host_groups: the concurrent
    host groups in ring order (``()`` for scale_up); multiplicity: rank groups
    folded into each host group (its size is multiplied by this); group_size:
    ranks in each rank group (the n of the collective's busbw factor inside a
    server).
    """

    where: str
    host_groups: Groups
    multiplicity: int
    group_size: int


def gpus_per_host(all_gpus: int, n_hosts: int) -> int:
    """Ranks (GPUs) each host runs: ``all_gpus / n_hosts``.

    Raises PlacementError when n_hosts does not divide all_gpus or all_gpus < n_hosts.
    """
    if all_gpus < n_hosts or all_gpus % n_hosts:
        raise PlacementError(
            f"all_gpus: {all_gpus} GPUs cannot be spread evenly over the fabric's {n_hosts} hosts: "
            f"allowed all_gpus = a multiple of {n_hosts} (each host a server of all_gpus / {n_hosts} GPUs "
            "sharing one NIC)")
    return all_gpus // n_hosts


def place(groups: Groups, per_host: int) -> GroupPlacement:
    """Place one scope's rank groups (traffic.workloads.parallel_groups.rank_groups) on hosts.

    ``per_host``: :func:`gpus_per_host`. Raises PlacementError naming the
    group when its ranks are neither all on one host nor all on distinct hosts,
    or when two host groups overlap without being equal (module docstring).
    """
    host_sets: dict = {}
    inside = 0
    for g in groups:
        hosts = tuple(r // per_host for r in g)
        if len(set(hosts)) == 1:
            inside += 1
            continue
        if len(set(hosts)) != len(hosts):
            raise PlacementError(
                f"rank group {g} puts several ranks on one host and others on other hosts "
                f"(hosts {hosts}, {per_host} GPUs per host): allowed a group inside one server or one "
                "rank per server; use a fabric with as many hosts as all_gpus, or a file whose "
                "model_parallel_NPU_group (TP) equals the GPUs per host")
        key = frozenset(hosts)
        host_sets.setdefault(key, [hosts, 0])[1] += 1
    if inside and host_sets:
        raise PlacementError(f"rank groups {groups} lie partly inside servers, partly across them")
    size = len(groups[0])
    if inside:
        return GroupPlacement("scale_up", (), 1, size)
    seen: set = set()
    for key in host_sets:
        if seen & key:
            raise PlacementError(f"rank groups {groups} map to host groups that overlap without being equal "
                                 f"({per_host} GPUs per host): every host may run one group of a scope")
        seen |= key
    counts = {c for _, c in host_sets.values()}
    if len(counts) != 1:
        raise PlacementError(f"rank groups {groups} fold unevenly onto hosts ({sorted(counts)} groups per host "
                             "group)")
    return GroupPlacement("fabric", tuple(h for h, _ in host_sets.values()), counts.pop(), size)
