"""Channels: one collective split into C concurrent copies, each on its own share of the data
and its own queue pairs (NCCL's channels: ``NCCL_MIN_NCHANNELS``/``NCCL_MAX_NCHANNELS``; each
channel is a ring of its own, carrying a contiguous slice of the buffer, and runs on its own
connections, so ECMP hashes, and planes carry, the channels apart).

The buffer of S bytes is split into C shares differing by at most one byte, larger first
(:func:`channel_sizes`); channel c runs the algorithm over share c, so an all-reduce ring on n
ranks with C channels moves, in channel c, chunks of share_c / n (again split to the byte).
Every rank's traffic over all channels adds up to what one channel of S moves in total
(2(n-1) S over all ranks for an all-reduce), so busbw factors do not change.
"""
from __future__ import annotations

import threading
from typing import Mapping, MutableMapping, Sequence

from traffic.collectives.base import Algorithm, Step, chunk_sizes
from traffic.collectives.executor import execute

#: NCCL allows up to 32 channels (MAXCHANNELS); more than a few only cost QPs here
MAX_CHANNELS = 32


def channel_sizes(size_bytes: int, channels: int) -> list[int]:
    """Bytes of each channel's share of ``size_bytes`` (C shares, larger first, summing to S).

    Raises ValueError unless 1 <= channels <= MAX_CHANNELS and size_bytes >= 0."""
    if not 1 <= channels <= MAX_CHANNELS:
        raise ValueError(f"channels = {channels!r} is outside 1..{MAX_CHANNELS}")
    return chunk_sizes(size_bytes, channels)


def channel_schedules(alg: Algorithm, pos: int, n: int, size_bytes: int, channels: int) -> list[tuple[Step, ...]]:
    """The schedule of position ``pos`` in each channel (index c: channel c on its share).

    Raises ValueError as :func:`channel_sizes` and ``alg.schedule``."""
    return [alg.schedule(pos, n, share) for share in channel_sizes(size_bytes, channels)]


def execute_channels(alg: Algorithm, pos: int, group: Sequence[int], size_bytes: int,
                     send_qps: Sequence[Mapping[int, object]], recv_qps: Sequence[Mapping[int, object]],
                     rx_consumed: Sequence[MutableMapping[int, int]], timeout_s: float) -> dict:
    """Run ``alg`` in ``len(send_qps)`` channels at once, channel c on share c with the queue pairs
    ``send_qps[c]`` / ``recv_qps[c]`` (see :func:`traffic.collectives.executor.execute`), one thread
    per channel beyond the first.

    Returns the sum of ``sent_bytes`` and ``rx_msgs`` over the channels and the latest
    ``t_rx_done_ns``. Raises what ``execute`` raises (the first failing channel's error)."""
    channels = len(send_qps)
    shares = channel_sizes(size_bytes, channels)
    if channels == 1:
        return execute(alg, pos, group, size_bytes, send_qps[0], recv_qps[0], rx_consumed[0], timeout_s)
    results: list = [None] * channels

    def one(c: int) -> None:
        try:
            results[c] = execute(alg, pos, group, shares[c], send_qps[c], recv_qps[c], rx_consumed[c], timeout_s)
        except BaseException as e:  # handed to the caller below
            results[c] = e

    threads = [threading.Thread(target=one, args=(c,), name=f"channel-{c}", daemon=True) for c in range(1, channels)]
    for t in threads:
        t.start()
    one(0)
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return {"sent_bytes": sum(r["sent_bytes"] for r in results), "rx_msgs": sum(r["rx_msgs"] for r in results),
            "t_rx_done_ns": max(r["t_rx_done_ns"] for r in results)}
