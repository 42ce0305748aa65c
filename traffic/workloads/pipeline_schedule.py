"""Pipeline-parallel schedules: the order in which each stage runs its micro-batches' forward and backward passes.

A training iteration splits the batch into m micro-batches; p stages each hold a
slice of the layers. Stage s runs forward pass F(i) of micro-batch i after
stage s - 1 sent it F(i)'s activations, and backward pass B(i) after stage
s + 1 sent it B(i)'s gradients (the last stage starts B(i) from its own F(i)).

- GPipe (Huang et al., "GPipe: Efficient Training of Giant Neural Networks
  using Pipeline Parallelism", NeurIPS 2019): every stage runs F(0..m-1), then
  B(0..m-1) (gradients accumulate; the optimizer step follows the last B).
- 1F1B (PipeDream-Flush; Narayanan et al., "Efficient Large-Scale Language
  Model Training on GPU Clusters Using Megatron-LM", SC 2021, section 2.2.1;
  Megatron-LM ``forward_backward_pipelining_without_interleaving``, which AICB
  copies in ``workload_generator/generate_megatron_workload.py``
  ``with_pipeline_forward_backward``): stage s first runs
  w = min(p - s - 1, m) warm-up forwards, then alternates one forward and one
  backward (F(w+j), B(j)) while forwards remain, then the last w backwards.
  Same bubble as GPipe, at most p - s micro-batches' activations in flight
  instead of m.

Bubble (both papers): with every stage taking t_f per forward and t_b per
backward and free communication, each stage idles (p - 1)(t_f + t_b) of an
iteration of (m + p - 1)(t_f + t_b), an idle fraction of (p - 1) / (m + p - 1)
(:func:`bubble_fraction`; the papers write it as the ratio bubble / ideal
time = (p - 1) / m).
"""
from __future__ import annotations

from typing import Tuple

SCHEDULES = ("1f1b", "gpipe")

#: one pass of a stage: ("F" or "B", micro-batch index)
Pass = Tuple[str, int]


def _check(schedule: str, stage: int, n_stages: int, micro_batches: int) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"pipeline schedule {schedule!r} unknown: allowed {', '.join(SCHEDULES)}")
    for name, v in (("n_stages", n_stages), ("micro_batches", micro_batches)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} = {v!r}: must be a positive integer")
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < n_stages:
        raise ValueError(f"stage {stage!r} outside 0..{n_stages - 1}")


def stage_passes(schedule: str, stage: int, n_stages: int, micro_batches: int) -> Tuple[Pass, ...]:
    """The passes stage ``stage`` (0-based, of ``n_stages``) runs in one iteration of ``micro_batches``, in order.

    ``schedule``: ``1f1b`` or ``gpipe`` (module docstring). Every micro-batch appears once as F and once as
    B, each B after its F. Raises ValueError for an unknown schedule, a non-positive count or a stage out of
    range.
    """
    _check(schedule, stage, n_stages, micro_batches)
    m = micro_batches
    if schedule == "gpipe":
        return tuple(("F", i) for i in range(m)) + tuple(("B", i) for i in range(m))
    warmup = min(n_stages - stage - 1, m)
    out = [("F", i) for i in range(warmup)]
    for j in range(m - warmup):
        out += [("F", warmup + j), ("B", j)]
    out += [("B", i) for i in range(m - warmup, m)]
    return tuple(out)


def bubble_fraction(n_stages: int, micro_batches: int) -> float:
    """(p - 1) / (m + p - 1): the share of an iteration each stage idles with uniform stages and free
    communication (GPipe and 1F1B alike; Huang et al. 2019, Narayanan et al. 2021). Raises ValueError for a
    non-positive count."""
    _check("gpipe", 0, n_stages, micro_batches)
    return (n_stages - 1) / (micro_batches + n_stages - 1)
