"""Chakra's file framing: a stream of protobuf messages, each preceded by its length as a varint.

As Chakra's ``src/third_party/utils/protolib.py`` writes and reads it (``encodeMessage``,
``decodeMessage``; the framing of gem5's protobuf traces): ``varint(len(msg)) msg`` repeated,
the first message a ``GlobalMetadata``, every later one a ``Node``. A file may be gzipped
(protolib opens gzip first); :func:`read_frames` takes both. Varints are the protobuf
base-128 encoding (7 bits per byte, low group first, high bit = more bytes follow).
"""
from __future__ import annotations

import gzip
from typing import BinaryIO, Iterator

#: a frame longer than this is refused (a corrupt length prefix would otherwise ask for gigabytes)
MAX_FRAME_BYTES = 64 * 1024 * 1024


class FramingError(ValueError):
    """The byte stream is not a sequence of varint-length-prefixed frames (the message says where)."""


def encode_varint(value: int) -> bytes:
    """``value`` (>= 0) as a protobuf base-128 varint. Raises ValueError for a negative value."""
    if value < 0:
        raise ValueError(f"varint of a negative value {value}")
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def write_frame(f: BinaryIO, payload: bytes) -> None:
    """Write one length-prefixed frame (protolib's ``encodeMessage`` of a serialized message)."""
    f.write(encode_varint(len(payload)))
    f.write(payload)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    start = pos
    while True:
        if pos >= len(data):
            raise FramingError(f"byte {start}: the stream ends inside a length prefix")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift >= 64:
            raise FramingError(f"byte {start}: a length prefix longer than 10 bytes")


def read_frames(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(byte offset of the frame's prefix, payload) for every frame of ``data`` (gunzipped first when it
    starts with the gzip magic). Raises FramingError naming the byte offset of a truncated frame, an
    over-long prefix or a frame above MAX_FRAME_BYTES."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise FramingError(f"a gzip file that does not decompress: {e}") from None
    pos = 0
    while pos < len(data):
        start = pos
        size, pos = _read_varint(data, pos)
        if size > MAX_FRAME_BYTES:
            raise FramingError(f"byte {start}: a frame of {size} bytes (at most {MAX_FRAME_BYTES})")
        if pos + size > len(data):
            raise FramingError(f"byte {start}: a frame of {size} bytes but only {len(data) - pos} bytes follow")
        yield start, data[pos:pos + size]
        pos += size
