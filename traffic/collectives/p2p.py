"""A one-way point-to-point transfer: pipeline-parallel stages passing activations (or gradients) on.

Megatron-LM's pipeline schedules (``megatron/core/pipeline_parallel/p2p_communication.py``: ``send_forward``
/ ``recv_forward``; AICB ``workload_generator/generate_megatron_workload.py`` logs them as ``isend``/``irecv``
of the ``pp_group``) move S bytes from one stage to the next, in one direction. Positions in the group are
the stages in sending order: every position p < n - 1 sends S bytes to p + 1 in one step (n = 2: position 0
to position 1, the usual case, one op per stage boundary and direction). Total bytes (n - 1) x S; busbw =
algbw (factor 1, as nccl-tests' sendrecv).
"""
from __future__ import annotations

from traffic.collectives.base import COLLECTIVES, Algorithm, Step, transfers


class ChainSend(Algorithm):
    """One step: S bytes to the next position (none from the last), S from the previous (none at 0)."""

    collective = COLLECTIVES["send"]
    name = "chain"

    def schedule(self, pos: int, n: int, size_bytes: int) -> tuple[Step, ...]:
        self.check(pos, n, size_bytes)
        step = Step(transfers((pos + 1, size_bytes)) if pos < n - 1 else (),
                    transfers((pos - 1, size_bytes)) if pos > 0 else ())
        return (step,) if step.sends or step.recvs else ()

    def peers(self, pos: int, n: int) -> frozenset[int]:
        self.check(pos, n)
        return frozenset(p for p in (pos - 1, pos + 1) if 0 <= p < n)
