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
over it moves no data).

Pipeline parallelism (pp > 1). SimAI builds no PP group: its simulator runs
one pipeline stage (``Sys::mock_nccl_grobal_group_init`` fixes PP size 1) and
adds the pipeline analytically at the end of the run (``Layer.cc``
``report``: bubble = the stage's time x (PP - 1) / (GA x vpp), exposed PP
communication from ``pp_comm``). Here the stages run for real, laid out as
Megatron-LM and AICB lay them out: tensor parallelism innermost, then data
parallelism, pipeline stages outermost (AICB ``utils/utils.py``
``RankGenerator``, order ``tp-..-dp-pp``; ``generate_megatron_workload.py``
``get_pp_rank``: pp_rank = rank // (world_size / pp)). With S = N / pp ranks
per stage:

- rank = stage x S + dp_idx x t + tp_idx (stage < pp, dp_idx < S / t, tp_idx < t);
- the TP, DP, EP and DP_EP groups of each stage are SimAI's groups above over
  that stage's S ranks, shifted by stage x S (DP size d = S / t = N / (t x pp),
  as SimAI's ``Layer.cc`` computes it);
- PP group j (j < S): ranks j, j + S, j + 2S, ... (the rank with local index j
  in every stage, in stage order: the order activations travel).

With pp = 1 this is exactly SimAI's layout above.
"""
from __future__ import annotations

from typing import Tuple

#: group scopes a SimAI collective can name (traffic.workloads.simai: plain names are TP or DP by phase)
SCOPES = ("TP", "DP", "EP", "DP_EP")
#: every scope a plan names: the file's scopes and PP (the pipeline's stage-to-stage transfers)
ALL_SCOPES = SCOPES + ("PP",)

Groups = Tuple[Tuple[int, ...], ...]


def rank_groups(scope: str, all_gpus: int, tp_size: int = 1, ep_size: int = 1,
                pp_size: int = 1) -> Groups:
    """The rank groups of one scope over the whole job (every stage), laid out as the module docstring says.

    scope: one of :data:`ALL_SCOPES`. Returns a tuple of groups, each a tuple of
    ranks in ring order (PP: stage order); the groups partition range(all_gpus)
    and have equal sizes (possibly 1). Raises ValueError naming the value when
    ``scope`` is unknown, a size is not a positive integer, TP x PP does not
    divide all_gpus, or EP does not divide the DP size.
    """
    return tuple(g for st in range(_sizes(scope, all_gpus, tp_size, ep_size, pp_size))
                 for g in stage_groups(scope, st, all_gpus, tp_size, ep_size, pp_size))


def _sizes(scope: str, all_gpus: int, tp_size: int, ep_size: int, pp_size: int) -> int:
    """Check the arguments (ValueError, see :func:`rank_groups`); the number of stages whose groups differ
    (pp_size for stage-local scopes, 1 for PP)."""
    if scope not in ALL_SCOPES:
        raise ValueError(f"group scope {scope!r} unknown: allowed {', '.join(ALL_SCOPES)}")
    for name, v in (("all_gpus", all_gpus), ("tp_size", tp_size), ("ep_size", ep_size),
                    ("pp_size", pp_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} = {v!r}: must be a positive integer")
    if all_gpus % (tp_size * pp_size):
        raise ValueError(f"model_parallel_NPU_group (TP) {tp_size} x pp {pp_size} does not divide all_gpus "
                         f"{all_gpus}")
    d = all_gpus // (tp_size * pp_size)
    if d % ep_size:
        raise ValueError(f"ep {ep_size} does not divide the DP size {d} (all_gpus {all_gpus} / (TP {tp_size} "
                         f"x pp {pp_size})): SimAI's layout needs DP = EP x DP_EP")
    return 1 if scope == "PP" else pp_size


def stage_groups(scope: str, stage: int, all_gpus: int, tp_size: int = 1, ep_size: int = 1,
                 pp_size: int = 1) -> Groups:
    """The groups of ``scope`` inside pipeline stage ``stage`` (0-based; ranks stage x S .. stage x S + S - 1,
    S = all_gpus / pp_size); for ``PP`` every PP group (they span all stages; ``stage`` must be 0).

    Raises ValueError as :func:`rank_groups`, and for a stage outside 0..pp_size-1 (0 for PP).
    """
    n_stages = _sizes(scope, all_gpus, tp_size, ep_size, pp_size)
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < n_stages:
        raise ValueError(f"stage {stage!r} outside 0..{n_stages - 1} (pp {pp_size}, scope {scope})")
    per_stage = all_gpus // pp_size
    if scope == "PP":
        return tuple(tuple(j + st * per_stage for st in range(pp_size)) for j in range(per_stage))
    t, e, base = tp_size, ep_size, stage * per_stage
    n_tp = per_stage // t               # TP groups in the stage = DP size
    if scope == "TP":
        local = tuple(tuple(range(k * t, k * t + t)) for k in range(n_tp))
    elif scope == "DP":
        local = tuple(tuple(range(i, per_stage, t)) for i in range(t))
    elif scope == "EP":
        local = tuple(tuple((i * e + m) * t + k for m in range(e)) for i in range(n_tp // e) for k in range(t))
    else:                               # DP_EP
        local = tuple(tuple((i + m * e) * t + k for m in range(n_tp // e)) for i in range(e) for k in range(t))
    return tuple(tuple(base + r for r in g) for g in local)
