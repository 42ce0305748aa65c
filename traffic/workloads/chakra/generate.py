"""The testbed's own Chakra trace generator: small valid traces, one file per rank.

``python -m traffic.workloads.chakra generate --ranks 4 --out DIR`` writes
``DIR/<prefix>.<rank>.et`` (rank 0..N-1) and ``DIR/comm_groups.json`` (ASTRA-sim's
``--comm-group-configuration`` format: process group name -> member ranks). The files are
what Chakra's converters write (:mod:`.stream` framing, :mod:`.schema` messages): a
GlobalMetadata (``version``; attrs ``rank``, ``world_size``, ``generator``), then Nodes
with ``data_deps``; communication attrs as int64_val (``comm_type``, ``comm_size``,
``comm_src``, ``comm_dst``, ``comm_tag``), ``pg_name`` as string_val and ``is_cpu_op``
false, as Chakra's PyTorch converter writes them.

The job (:func:`job_nodes`) is one training step of a small model with tensor, expert,
data and pipeline traffic, on N >= 2 ranks (N even for the TP pairs):

1. ``fwd`` compute; 2. a TP all-reduce inside each pair (2r, 2r+1) (pg ``tp<r>``);
3. ``moe_gate`` compute; 4. an all-to-all over every rank (pg ``ep``); 5. ``expert``
compute; 6. a pipeline chain: rank 0 sends its activations to rank 1, which receives,
computes (``stage``) and sends on to rank 2, ... up to rank N-1 (tag 0); 7. ``bwd``
compute; 8. the gradient all-reduce over every rank (pg ``dp``); 9. ``optimizer`` compute.

Each node depends on the one before it on its rank, so every rank's file is a chain and the
replay's dependency order is the order above; the ranks meet in the collectives and the
send/recv pairs.
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Iterable, Optional

from traffic.workloads.chakra import schema
from traffic.workloads.chakra.stream import write_frame

SCHEMA_VERSION = "0.0.4"
GENERATOR = "aifabric-testbed traffic.workloads.chakra.generate"


def attr(name: str, value) -> object:
    """An AttributeProto: bool -> bool_val, int -> int64_val, str -> string_val, list[int] -> int64_list."""
    a = schema.AttributeProto(name=name)
    if isinstance(value, bool):
        a.bool_val = value
    elif isinstance(value, int):
        a.int64_val = value
    elif isinstance(value, str):
        a.string_val = value
    elif isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        a.int64_list.values.extend(value)
    else:
        raise TypeError(f"attr {name!r}: no AttributeProto value for {type(value).__name__}")
    return a


def node(node_id: int, name: str, type_name: str, deps: Iterable[int] = (), duration_us: int = 0,
         ctrl_deps: Iterable[int] = (), **attrs) -> object:
    """A Node: ``type_name`` a NodeType name; ``attrs`` become AttributeProtos (:func:`attr`); a
    ``comm_type`` given by name (``ALL_REDUCE``) is stored as its number."""
    n = schema.Node(id=node_id, name=name, type=schema.NODE_TYPES[type_name], duration_micros=duration_us)
    n.data_deps.extend(deps)
    n.ctrl_deps.extend(ctrl_deps)
    if "comm_type" in attrs and isinstance(attrs["comm_type"], str):
        attrs["comm_type"] = schema.COMM_TYPES[attrs["comm_type"]]
    if type_name.startswith("COMM_"):
        attrs.setdefault("is_cpu_op", False)
    n.attr.extend(attr(k, v) for k, v in attrs.items())
    return n


def metadata(rank: int, world_size: int) -> object:
    """The GlobalMetadata the generator writes first in rank ``rank``'s file."""
    return schema.GlobalMetadata(version=SCHEMA_VERSION, attr=[attr("rank", rank), attr("world_size", world_size),
                                                               attr("generator", GENERATOR)])


def write_trace(path, meta, nodes: Iterable) -> None:
    """Write one rank's file: ``meta`` (a GlobalMetadata, or None for a file of nodes only, to test
    readers) then ``nodes``, each length-prefixed (:mod:`.stream`)."""
    with open(path, "wb") as f:
        if meta is not None:
            write_frame(f, meta.SerializeToString())
        for n in nodes:
            write_frame(f, n.SerializeToString())


def job_nodes(rank: int, ranks: int, allreduce_bytes: int, alltoall_bytes: int, tp_bytes: int, p2p_bytes: int,
              compute_us: int) -> list:
    """Rank ``rank``'s nodes of the job of the module docstring (node ids 0, 1, ... in order)."""
    out: list = []

    def add(name, type_name, **kw):
        out.append(node(len(out), name, type_name, deps=[len(out) - 1] if out else [], **kw))

    add("fwd", "COMP_NODE", duration_us=compute_us)
    add("tp_allreduce", "COMM_COLL_NODE", comm_type="ALL_REDUCE", comm_size=tp_bytes, pg_name=f"tp{rank // 2}")
    add("moe_gate", "COMP_NODE", duration_us=compute_us // 2)
    add("ep_alltoall", "COMM_COLL_NODE", comm_type="ALL_TO_ALL", comm_size=alltoall_bytes, pg_name="ep")
    add("expert", "COMP_NODE", duration_us=compute_us // 2)
    if rank > 0:
        add(f"recv_from_{rank - 1}", "COMM_RECV_NODE", comm_src=rank - 1, comm_dst=rank, comm_tag=0,
            comm_size=p2p_bytes)
        add("stage", "COMP_NODE", duration_us=compute_us // 2)
    if rank < ranks - 1:
        add(f"send_to_{rank + 1}", "COMM_SEND_NODE", comm_src=rank, comm_dst=rank + 1, comm_tag=0,
            comm_size=p2p_bytes)
    add("bwd", "COMP_NODE", duration_us=compute_us)
    add("dp_allreduce", "COMM_COLL_NODE", comm_type="ALL_REDUCE", comm_size=allreduce_bytes, pg_name="dp")
    add("optimizer", "COMP_NODE", duration_us=compute_us // 2)
    return out


def comm_groups(ranks: int) -> dict[str, list[int]]:
    """The job's process groups: ``tp<i>`` = (2i, 2i+1), ``ep`` and ``dp`` = every rank."""
    groups = {f"tp{i}": [2 * i, 2 * i + 1] for i in range(ranks // 2)}
    return {**groups, "ep": list(range(ranks)), "dp": list(range(ranks))}


#: the job's default sizes (bytes) and compute (us): MiB-scale messages as a small model's step at a
#: real fabric's rate; a scenario scales them down with workload.chakra.size_scale (time dilation)
DEFAULTS = {"allreduce_bytes": 4 << 20, "alltoall_bytes": 4 << 20, "tp_bytes": 2 << 20, "p2p_bytes": 2 << 20,
            "compute_us": 20}


def generate(out_dir, ranks: int = 4, prefix: str = "trace", allreduce_bytes: int = DEFAULTS["allreduce_bytes"],
             alltoall_bytes: int = DEFAULTS["alltoall_bytes"], tp_bytes: int = DEFAULTS["tp_bytes"],
             p2p_bytes: int = DEFAULTS["p2p_bytes"], compute_us: int = DEFAULTS["compute_us"]) -> list[Path]:
    """Write the job's trace set into ``out_dir`` (made if missing); return the rank files in rank order.

    Sizes in bytes (Chakra's comm_size: nccl-tests' S of each collective, the bytes sent for a
    send/recv), compute_us: the ``fwd`` and ``bwd`` nodes' duration_micros (the others half of it).
    Raises ValueError for an odd or < 2 ``ranks`` or a size or duration < 1."""
    if ranks < 2 or ranks % 2:
        raise ValueError(f"ranks = {ranks}: the job needs an even number of ranks >= 2 (TP pairs)")
    if min(allreduce_bytes, alltoall_bytes, tp_bytes, p2p_bytes) < 1 or compute_us < 2:
        raise ValueError("sizes must be >= 1 byte and compute_us >= 2")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for r in range(ranks):
        f = out / f"{prefix}.{r}.et"
        write_trace(f, metadata(r, ranks),
                    job_nodes(r, ranks, allreduce_bytes, alltoall_bytes, tp_bytes, p2p_bytes, compute_us))
        files.append(f)
    (out / "comm_groups.json").write_text(json.dumps(comm_groups(ranks), indent=1) + "\n")
    return files


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traffic.workloads.chakra",
                                description="Chakra execution traces of the testbed (docs/chakra.md)")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write a small valid trace set, one file per rank")
    g.add_argument("--ranks", type=int, default=4)
    g.add_argument("--out", required=True, help="output directory")
    g.add_argument("--prefix", default="trace", help="file names <prefix>.<rank>.et")
    for key, value in DEFAULTS.items():
        g.add_argument("--" + key.replace("_", "-"), type=int, default=value)
    s = sub.add_parser("show", help="print a trace set's nodes, matched and in replay order")
    s.add_argument("path", help="directory or <prefix> of the rank files")
    s.add_argument("--comm-groups", help="ASTRA-sim comm group JSON (default: inferred)")
    a = p.parse_args(argv)
    if a.cmd == "generate":
        try:
            files = generate(a.out, a.ranks, a.prefix, a.allreduce_bytes, a.alltoall_bytes, a.tp_bytes,
                             a.p2p_bytes, a.compute_us)
        except ValueError as e:
            p.error(str(e))
        print(f"wrote {len(files)} rank files {files[0].parent}/{a.prefix}.<rank>.et and comm_groups.json")
        return 0
    from traffic.workloads.chakra.graph import replay_graph
    from traffic.workloads.chakra.trace import ChakraFormatError, read_traces
    try:
        groups = json.loads(Path(a.comm_groups).read_text()) if a.comm_groups else None
        traces = read_traces(a.path)
        graph = replay_graph(traces, groups)
    except (ChakraFormatError, OSError, ValueError) as e:
        print(f"error: {e}")
        return 2
    for u in graph.units:
        deps = ",".join(map(str, sorted(graph.preds[u.index])))
        print(f"{u.index:>4} {u.kind:<5} ranks {','.join(map(str, u.ranks)):<10} after [{deps}] {u.label}")
    for n in graph.notes:
        print(f"note: {n}")
    skipped = Counter(kind for t in traces for _, kind in t.skipped)
    if skipped:
        print(f"skipped {sum(skipped.values())} nodes a network replay cannot run: "
              + "; ".join(f"{k} x {v}" for k, v in skipped.items()))
    return 0
