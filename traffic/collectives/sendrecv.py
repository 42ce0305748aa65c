"""Send/recv as nccl-tests' ``sendrecv_perf`` runs it (src/sendrecv.cu): every rank sends S bytes to
position p+1 and receives S from p-1 (mod n), in one step. With n = 2 that is one exchange between the
two; with more ranks a ring shift, the pattern of pipeline-parallel stages passing activations on.
busbw = algbw (factor 1).
"""
from __future__ import annotations

from traffic.collectives.base import COLLECTIVES, Algorithm, Step, transfers


class RingSendRecv(Algorithm):
    """One step: S bytes to the next position, S from the previous one."""

    collective = COLLECTIVES["sendrecv"]
    name = "ring"

    def schedule(self, pos: int, n: int, size_bytes: int) -> tuple[Step, ...]:
        self.check(pos, n, size_bytes)
        step = Step(transfers(((pos + 1) % n, size_bytes)), transfers(((pos - 1) % n, size_bytes)))
        return (step,) if step.sends else ()

    def peers(self, pos: int, n: int) -> frozenset[int]:
        self.check(pos, n)
        return frozenset({(pos + 1) % n, (pos - 1) % n})
