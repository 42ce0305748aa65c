"""SimAI's rank layout: which ranks form each TP, DP, EP and DP_EP group of a training job.

Source: aliyun/SimAI, ``astra-sim-alibabacloud/astra-sim/system/MockNcclGroup.cc``
(the ``MockNcclGroup`` constructor builds every group) with the sizes of
``Sys::mock_nccl_grobal_group_init`` (``Sys.cc``): TP size t =
``model_parallel_NPU_group``, PP size 1, DP size d = all_gpus / t, EP size e =
``ep``, DP_EP size = d / e. For N = all_gpus ranks (0-based):

- TP group k (k < N/t): ranks k*t .. k*t+t-1 (consecutive ranks);
- DP group i (i < t): ranks i, i+t, i+2t, ... (the rank with index i inside its
  TP group, across all TP groups; SimAI: rank = i + j * (N/d));
- EP group (i, k) (i < N/(t*e), k < t): ranks (i*e + m)*t + k for m < e (the
  rank with index k inside each of e consecutive TP groups);
- DP_EP group (i, k) (i < e, k < t): ranks (i + m*e)*t + k for m < d/e (the rank
  with index k inside TP groups i, i+e, i+2e, ...).

Every scope partitions the N ranks. Groups are listed in SimAI's order, ranks
ascending; with one rank per host (one GPU per node) SimAI's ring
(``genringchannels``) visits a group's ranks in that ascending order, so the
list is also the ring order. SimAI builds no group of one rank (a collective
over it moves no data) and no PP group; pipeline parallelism (pp > 1) is refused
here because SimAI's group layout ignores pipeline stages (it fixes PP size 1).
"""
from __future__ import annotations

from typing import Tuple

#: group scopes a SimAI collective can name (traffic.workloads.simai: plain names are TP or DP by phase)
SCOPES = ("TP", "DP", "EP", "DP_EP")

Groups = Tuple[Tuple[int, ...], ...]


def rank_groups(scope: str, all_gpus: int, tp_size: int = 1, ep_size: int = 1,
                pp_size: int = 1) -> Groups:
    """The rank groups of one scope, as SimAI lays them out (see the module docstring).

    Returns a tuple of groups, each a tuple of ranks in ring order; the groups
    partition range(all_gpus) and have equal sizes (possibly 1).
    Raises ValueError naming the value when ``scope`` is not one of
    :data:`SCOPES`, a size is not a positive integer, ``pp_size`` > 1, TP
    does not divide all_gpus, or EP does not divide the DP size.
    """
    if scope not in SCOPES:
        raise ValueError(f"group scope {scope!r} unknown: allowed {', '.join(SCOPES)}")
    for name, v in (("all_gpus", all_gpus), ("tp_size", tp_size), ("ep_size", ep_size),
                    ("pp_size", pp_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} = {v!r}: must be a positive integer")
    if pp_size != 1:
        raise ValueError(f"pp {pp_size} not supported: SimAI's group layout has no pipeline stages "
                         "(Sys::mock_nccl_grobal_group_init fixes PP size 1); allowed: pp 1")
    if all_gpus % tp_size:
        raise ValueError(f"model_parallel_NPU_group (TP) {tp_size} does not divide all_gpus {all_gpus}")
    n_tp = all_gpus // tp_size          # number of TP groups = DP size
    if n_tp % ep_size:
        raise ValueError(f"ep {ep_size} does not divide the DP size {n_tp} (all_gpus {all_gpus} / TP "
                         f"{tp_size}): SimAI's layout needs DP = EP x DP_EP")
    t, e = tp_size, ep_size
    if scope == "TP":
        return tuple(tuple(range(k * t, k * t + t)) for k in range(n_tp))
    if scope == "DP":
        return tuple(tuple(range(i, all_gpus, t)) for i in range(t))
    if scope == "EP":
        return tuple(tuple((i * e + m) * t + k for m in range(e))
                     for i in range(n_tp // e) for k in range(t))
    return tuple(tuple((i + m * e) * t + k for m in range(n_tp // e))       # DP_EP
                 for i in range(e) for k in range(t))
