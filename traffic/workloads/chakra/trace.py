"""Read Chakra execution traces: one file per rank, checked node by node.

Files (Chakra's and ASTRA-sim's naming, ``src/pg_extractor``): ``<prefix>.<rank>.et``, ranks
0..N-1, every rank present. :func:`trace_files` takes a directory holding one such set, or
the prefix itself. Each file is a length-delimited stream (:mod:`.stream`): a
``GlobalMetadata``, then ``Node`` messages (:mod:`.schema`).

What a replay runs (:class:`TraceNode`, one per Node):

- ``COMP_NODE``: a compute wait of ``duration_micros``;
- ``COMM_COLL_NODE``: attrs ``comm_type`` (CollectiveCommType: ALL_REDUCE, ALL_GATHER,
  REDUCE_SCATTER, ALL_TO_ALL, BROADCAST), ``comm_size`` (bytes, > 0) and ``pg_name`` (the
  process group; absent = the group named ``""``);
- ``COMM_SEND_NODE``: ``comm_dst``, ``comm_size``, optional ``comm_tag`` (default 0) and
  ``comm_src`` (must be the file's rank); ``COMM_RECV_NODE``: ``comm_src``, ``comm_size``,
  optional ``comm_tag`` and ``comm_dst`` (must be the file's rank).

Skipped, counted per kind (:attr:`RankTrace.skipped`; :func:`skip_kind` says which): nodes a network
replay cannot run and ASTRA-sim does not run either (astra-sim/workload/Workload.cc, ``Workload::issue``):
``METADATA_NODE`` (Chakra's PyTorch converter writes ``## process_group:init ##`` as one; ASTRA-sim reads
it and skips it) and ``INVALID_NODE`` (``skip_invalid``); and CPU-side communication nodes: a
``COMM_*_NODE`` whose ``is_cpu_op`` attr is true (ASTRA-sim's ``issue_comm`` refuses "Comm node should not
be on CPU"), or that carries none of the attrs a transfer needs (no ``comm_type`` and no ``comm_size``
for a collective, no ``comm_size`` for a send/recv: the c10d ops of the CPU thread, such as
``c10d::broadcast_``, beside the GPU-side NCCL kernel node that holds the communication). A node that
depended on a skipped node depends on what the skipped node depended on, so the order is kept.

Dependencies: ``data_deps`` and ``ctrl_deps`` alike (a node starts after every node it names
ended; ASTRA-sim's Chakra feeder, FeederV3, resolves both), ids of nodes of the same file. A
``ctrl_deps`` id the file lacks is left out, counted (Chakra's PyTorch converter removes "dangling"
nodes, ``remove_dangling_nodes``, but not their ids from the ctrl_deps of their children); a
``data_deps`` id the file lacks is refused. Integer attrs may use any integer value of
AttributeProto (Chakra's converters write int64_val, its pg_extractor reads comm_src as
int32_val). Anything else (another node type or collective, a missing or
ill-typed attr, a duplicate node id, a dependency on an id the file lacks) is refused with
:class:`ChakraFormatError` naming the file, the node id and the reason.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from google.protobuf.message import DecodeError

from traffic.workloads.chakra import schema
from traffic.workloads.chakra.stream import FramingError, read_frames

#: Chakra collective -> collective of traffic.collectives
COLLECTIVES = {"ALL_REDUCE": "allreduce", "ALL_GATHER": "allgather", "REDUCE_SCATTER": "reducescatter",
               "ALL_TO_ALL": "alltoall", "BROADCAST": "broadcast"}
#: node types a replay runs -> TraceNode.kind
KINDS = {"COMP_NODE": "comp", "COMM_COLL_NODE": "coll", "COMM_SEND_NODE": "send", "COMM_RECV_NODE": "recv"}
_INT_VALUES = {f"{t}_val" for t in ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
                                     "fixed64", "sfixed32", "sfixed64")}
#: the biggest trace file read, bytes
MAX_TRACE_BYTES = 256 * 1024 * 1024


class ChakraFormatError(ValueError):
    """A trace file (or set of files) the replay cannot run; the message names file, node id and reason."""


@dataclass(frozen=True)
class TraceNode:
    """One node of one rank's trace, as the replay runs it.

    rank: the file's rank; node_id, name: the Node's; kind: ``comp``, ``coll``, ``send`` or
    ``recv``; deps: data_deps then ctrl_deps, duplicates removed; duration_us: COMP_NODE's
    duration_micros (0 for communication); comm_type: the CollectiveCommType name (``SEND`` /
    ``RECV`` for point-to-point, '' for compute); collective: its traffic.collectives name ('' when
    none); size_bytes: comm_size; pg_name: the process group of a collective; src, dst, tag:
    point-to-point peers (ranks) and tag (-1 when not point-to-point); path: the file; cpu: the
    ``is_cpu_op`` attr (a host-side operator; absent = False).
    """

    rank: int
    node_id: int
    name: str
    kind: str
    deps: tuple[int, ...]
    path: str
    duration_us: int = 0
    comm_type: str = ""
    collective: str = ""
    size_bytes: int = 0
    pg_name: str = ""
    src: int = -1
    dst: int = -1
    tag: int = -1
    cpu: bool = False

    @property
    def where(self) -> str:
        """``FILE: node ID (NAME)`` for messages."""
        return f"{self.path}: node {self.node_id}" + (f" ({self.name})" if self.name else "")


@dataclass(frozen=True)
class RankTrace:
    """One rank's file: ``metadata`` (GlobalMetadata attrs: name -> value; ``version`` under its own
    key), its nodes in file order (skipped ones left out) and ``skipped``: (node id, kind) of every node
    skipped (:func:`skip_kind`), in file order; ``dropped_ctrl_deps``: ctrl_deps naming an id the file lacks,
    left out (module docstring)."""

    rank: int
    path: str
    metadata: dict
    nodes: tuple[TraceNode, ...]
    skipped: tuple[tuple[int, str], ...] = ()
    dropped_ctrl_deps: int = 0


_FILE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et$")


def trace_files(path: str) -> list[Path]:
    """The rank files of ``path`` (a directory holding one ``<prefix>.<rank>.et`` set, or the prefix), in
    rank order. Raises ChakraFormatError when there are none, several prefixes in a directory, or a rank
    of 0..max is missing (naming the missing file)."""
    p = Path(path)
    if p.is_dir():
        found = [(m["prefix"], int(m["rank"]), f) for f in sorted(p.iterdir())
                 if f.is_file() and (m := _FILE.match(f.name))]
        prefixes = sorted({pre for pre, _, _ in found})
        if not prefixes:
            raise ChakraFormatError(f"{p}: no Chakra trace files (<prefix>.<rank>.et) in this directory")
        if len(prefixes) > 1:
            raise ChakraFormatError(f"{p}: trace files of several prefixes ({', '.join(prefixes)}); name one "
                                    f"as the path: {p}/{prefixes[0]}")
        base = p / prefixes[0]
        ranks = {r: f for _, r, f in found}
    else:
        base = p
        pat = re.compile(rf"^{re.escape(p.name)}\.(\d+)\.et$")
        parent = p.parent if str(p.parent) else Path(".")
        ranks = ({int(m[1]): f for f in sorted(parent.iterdir()) if f.is_file() and (m := pat.match(f.name))}
                 if parent.is_dir() else {})
        if not ranks:
            raise ChakraFormatError(f"{p}: no Chakra trace files {p}.<rank>.et (nor a directory of them)")
    missing = [r for r in range(max(ranks) + 1) if r not in ranks]
    if missing:
        raise ChakraFormatError(f"{base}.{missing[0]}.et: missing: the set has rank files up to "
                                f"{base}.{max(ranks)}.et, so every rank 0..{max(ranks)} needs its file")
    return [ranks[r] for r in sorted(ranks)]


def _attrs(where: str, attrs) -> dict:
    out = {}
    for a in attrs:
        if a.name in out:
            raise ChakraFormatError(f"{where}: attr {a.name!r} appears twice")
        out[a.name] = a
    return out


def _int_attr(where: str, attrs: dict, name: str, default: Optional[int] = None) -> int:
    a = attrs.get(name)
    if a is None:
        if default is None:
            raise ChakraFormatError(f"{where}: attr {name!r} missing")
        return default
    which = a.WhichOneof("value")
    if which not in _INT_VALUES:
        raise ChakraFormatError(f"{where}: attr {name!r} holds {which or 'no value'}; an integer value "
                                "(int64_val, int32_val, ...) is needed")
    return int(getattr(a, which))


def _str_attr(where: str, attrs: dict, name: str) -> str:
    a = attrs.get(name)
    if a is None:
        return ""
    which = a.WhichOneof("value")
    if which == "string_val":
        return a.string_val
    if which in _INT_VALUES:  # pg_extractor reads pg_name as a number; some writers store it as one
        return str(getattr(a, which))
    raise ChakraFormatError(f"{where}: attr {name!r} holds {which or 'no value'}; string_val is needed")


def _bool_attr(attrs: dict, name: str) -> bool:
    a = attrs.get(name)
    if a is None:
        return False
    which = a.WhichOneof("value")
    return bool(getattr(a, which)) if which == "bool_val" or which in _INT_VALUES else False


def skip_kind(node) -> Optional[str]:
    """What a parsed Node is when a network replay skips it (module docstring), else None: ``NAME (TYPE: why)``
    with NAME the node's name up to its first ``(`` (``c10d::broadcast_(0)`` -> ``c10d::broadcast_``)."""
    type_name = schema.NODE_TYPE_NAMES.get(node.type, "")
    stem = node.name.split("(", 1)[0].strip() or "(no name)"
    if type_name in ("METADATA_NODE", "INVALID_NODE"):
        return f"{stem} ({type_name})"
    if not type_name.startswith("COMM_"):
        return None
    names = {a.name: a for a in node.attr}
    if _bool_attr(names, "is_cpu_op"):
        return f"{stem} ({type_name} on the CPU: is_cpu_op)"
    needs = ("comm_type", "comm_size") if type_name == "COMM_COLL_NODE" else ("comm_size",)
    if not any(k in names for k in needs):
        return f"{stem} ({type_name} without {' or '.join(needs)})"
    return None


def trace_node(rank: int, path: str, node) -> TraceNode:
    """The TraceNode of a parsed Node of rank ``rank``'s file ``path``; ChakraFormatError when the replay
    cannot run it (module docstring)."""
    where = f"{path}: node {node.id}" + (f" ({node.name})" if node.name else "")
    type_name = schema.NODE_TYPE_NAMES.get(node.type, f"type number {node.type} (not in the schema)")
    kind = KINDS.get(type_name)
    if kind is None:
        raise ChakraFormatError(f"{where}: node type {type_name} is not replayed; allowed "
                                f"{', '.join(KINDS)}")
    deps = tuple(dict.fromkeys([*node.data_deps, *node.ctrl_deps]))
    base = dict(rank=rank, node_id=node.id, name=node.name, kind=kind, deps=deps, path=path)
    attrs = _attrs(where, node.attr)
    if kind == "comp":
        return TraceNode(**base, duration_us=node.duration_micros, cpu=_bool_attr(attrs, "is_cpu_op"))
    size = _int_attr(where, attrs, "comm_size")
    if size <= 0:
        raise ChakraFormatError(f"{where}: comm_size = {size}: a communication node needs comm_size > 0 bytes")
    if kind == "coll":
        number = _int_attr(where, attrs, "comm_type")
        comm = schema.COMM_TYPE_NAMES.get(number, f"comm_type number {number} (not in the schema)")
        if comm not in COLLECTIVES:
            raise ChakraFormatError(f"{where}: collective {comm} is not replayed; allowed "
                                    f"{', '.join(COLLECTIVES)}")
        return TraceNode(**base, comm_type=comm, collective=COLLECTIVES[comm], size_bytes=size,
                         pg_name=_str_attr(where, attrs, "pg_name"))
    tag = _int_attr(where, attrs, "comm_tag", 0)
    if kind == "send":
        src, dst = _int_attr(where, attrs, "comm_src", rank), _int_attr(where, attrs, "comm_dst")
        if src != rank:
            raise ChakraFormatError(f"{where}: a send with comm_src = {src} in the file of rank {rank}")
    else:
        src, dst = _int_attr(where, attrs, "comm_src"), _int_attr(where, attrs, "comm_dst", rank)
        if dst != rank:
            raise ChakraFormatError(f"{where}: a recv with comm_dst = {dst} in the file of rank {rank}")
    if src == dst:
        raise ChakraFormatError(f"{where}: comm_src = comm_dst = {src}: a rank cannot send to itself")
    return TraceNode(**base, comm_type=kind.upper(), size_bytes=size, pg_name=_str_attr(where, attrs, "pg_name"),
                     src=src, dst=dst, tag=tag)


def read_trace(path, rank: int) -> RankTrace:
    """Read and check rank ``rank``'s file ``path``. Raises ChakraFormatError (framing, a message that does
    not parse, a node the replay cannot run, duplicate ids, a dependency on a missing id, a GlobalMetadata
    ``rank`` attr that differs from the file name's) and OSError (cannot read)."""
    p = str(path)
    size = Path(path).stat().st_size
    if size > MAX_TRACE_BYTES:
        raise ChakraFormatError(f"{p}: {size} bytes; a trace file may have at most {MAX_TRACE_BYTES}")
    data = Path(path).read_bytes()
    metadata: Optional[dict] = None
    nodes: list[TraceNode] = []
    ids: set[int] = set()
    skipped: dict[int, tuple[str, tuple[int, ...]]] = {}   # node id -> (kind, its deps)
    data_of: dict[int, frozenset] = {}                      # node id -> its data_deps
    try:
        for offset, payload in read_frames(data):
            msg = schema.GlobalMetadata() if metadata is None else schema.Node()
            try:
                msg.ParseFromString(payload)
            except DecodeError as e:
                what = "GlobalMetadata" if metadata is None else "Node"
                raise ChakraFormatError(f"{p}: byte {offset}: not a {what} message ({e})") from None
            if metadata is None:
                metadata = {"version": msg.version, **{a.name: schema.attr_value(a) for a in msg.attr}}
                continue
            if msg.id in ids:
                raise ChakraFormatError(f"{p}: node {msg.id}: a second node with this id (byte {offset})")
            ids.add(msg.id)
            data_of[msg.id] = frozenset(msg.data_deps)
            kind = skip_kind(msg)
            if kind is None:
                nodes.append(trace_node(rank, p, msg))
            else:
                skipped[msg.id] = (kind, tuple(dict.fromkeys([*msg.data_deps, *msg.ctrl_deps])))
    except FramingError as e:
        raise ChakraFormatError(f"{p}: {e}") from None
    if metadata is None:
        raise ChakraFormatError(f"{p}: empty: a trace starts with a GlobalMetadata message")
    if "rank" in metadata and metadata["rank"] != rank:
        raise ChakraFormatError(f"{p}: GlobalMetadata says rank {metadata['rank']!r} but the file name says "
                                f"rank {rank}")
    # Chakra's PyTorch converter drops "dangling" nodes (remove_dangling_nodes) but keeps their ids in
    # other nodes' ctrl_deps: a ctrl_dep on a missing id is dropped (counted); a data_dep on one is refused
    dropped = 0
    kept = []
    for n in nodes:
        missing = [d for d in n.deps if d not in ids]
        for d in missing:
            if d in data_of[n.node_id]:
                raise ChakraFormatError(f"{n.where}: depends on node {d}, which this file does not have")
        dropped += len(missing)
        kept.append(replace(n, deps=tuple(d for d in n.deps if d in ids)) if missing else n)
    for i, (kind, deps) in list(skipped.items()):
        missing = [d for d in deps if d not in ids]
        for d in missing:
            if d in data_of[i]:
                raise ChakraFormatError(f"{p}: node {i} (skipped: {kind}): depends on node {d}, which this file "
                                        "does not have")
        dropped += len(missing)
        skipped[i] = (kind, tuple(d for d in deps if d in ids))
    if skipped:
        kept = [replace(n, deps=_through_skipped(n.deps, skipped)) for n in kept]
    return RankTrace(rank=rank, path=p, metadata=metadata, nodes=tuple(kept),
                     skipped=tuple((i, k) for i, (k, _) in skipped.items()), dropped_ctrl_deps=dropped)


def _through_skipped(deps: tuple, skipped: dict) -> tuple:
    """``deps`` with every skipped node replaced by what it depends on, transitively (order kept, no
    duplicates)."""
    out: dict[int, None] = {}
    stack, seen = list(reversed(deps)), set()
    while stack:
        d = stack.pop()
        if d not in skipped:
            out[d] = None
        elif d not in seen:
            seen.add(d)
            stack.extend(reversed(skipped[d][1]))
    return tuple(out)


def read_traces(path: str) -> list[RankTrace]:
    """Every rank's trace of ``path`` (:func:`trace_files`), in rank order. Raises ChakraFormatError
    (ranks missing, a file the replay cannot run) and OSError."""
    return [read_trace(f, r) for r, f in enumerate(trace_files(path))]
