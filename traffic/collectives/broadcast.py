"""Ring broadcast: a pipelined chain from the root (position 0) through positions 1, 2, ..., n-1, as
NCCL's ring broadcast runs it (each rank forwards each chunk to the next one; the last rank only
receives).

The root's buffer is cut into chunks of at most
:attr:`RingBroadcast.chunk_bytes` (:func:`~traffic.collectives.dataflow.pipeline_chunks`);
chunk k crosses the edge p -> p+1 at step k + p, so the chain is full after
n-2 steps and every link then carries one chunk per step. Every rank but the
last sends S: busbw = algbw (nccl-tests factor 1).
"""
from __future__ import annotations

from functools import lru_cache

from traffic.collectives.base import COLLECTIVES
from traffic.collectives.dataflow import Message, MessageAlgorithm, pipeline_chunks


@lru_cache(maxsize=64)
def _messages(n: int, size_bytes: int, chunk_bytes: int) -> tuple[Message, ...]:
    chunks = pipeline_chunks(size_bytes, chunk_bytes)
    return tuple(Message(k + p, p, p + 1, b) for k, b in enumerate(chunks) for p in range(n - 1))


class RingBroadcast(MessageAlgorithm):
    """Pipelined chain broadcast from position 0 (module docstring); ``chunk_bytes``: pipeline chunk size."""

    collective = COLLECTIVES["broadcast"]
    name = "ring"
    chunk_bytes = 8 * 1024

    def messages(self, n: int, size_bytes: int) -> tuple[Message, ...]:
        return _messages(n, size_bytes, self.chunk_bytes)
