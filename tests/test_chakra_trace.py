"""Chakra traces: the schema matches its .proto text, the generator's files read back, malformed input is refused
naming file, node id (or byte) and reason."""
import gzip
import re
from pathlib import Path

import pytest

from traffic.workloads.chakra import schema
from traffic.workloads.chakra.generate import DEFAULTS, comm_groups, generate, job_nodes, metadata, node, write_trace
from traffic.workloads.chakra.stream import encode_varint, read_frames
from traffic.workloads.chakra.trace import ChakraFormatError, read_trace, read_traces, trace_files

PROTO = Path(__file__).resolve().parents[1] / "traffic/workloads/chakra/et_def.proto"
SHIPPED = Path(__file__).resolve().parents[1] / "scenarios/workloads/chakra"


def _proto_text_fields() -> dict:
    """message -> [(name, number, type, repeated)] and enum -> {name: number} parsed from et_def.proto."""
    text = re.sub(r"//[^\n]*", "", PROTO.read_text())
    out = {}
    for kind, name, body in re.findall(r"(message|enum)\s+(\w+)\s*\{((?:[^{}]|\{[^{}]*\})*)\}", text):
        if kind == "enum":
            out[name] = {k: int(v) for k, v in re.findall(r"(\w+)\s*=\s*(\d+);", body)}
        else:
            out[name] = [(n, int(num), t, bool(rep)) for rep, t, n, num in
                         re.findall(r"(repeated\s+)?(\w+)\s+(\w+)\s*=\s*(\d+);", body)]
    return out


def test_proto_text_and_runtime_descriptor_agree():
    parsed = _proto_text_fields()
    assert {k: v for k, v in parsed.items() if isinstance(v, dict)} == schema.ENUMS
    messages = {k: v for k, v in parsed.items() if isinstance(v, list)}
    assert messages == {m: [(n, num, t, rep) for n, num, t, rep, _ in fields]
                        for m, fields in schema.MESSAGES.items()}
    # the published numbers ASTRA-sim and Chakra's converters use
    node_fields = {f.name: f.number for f in schema.Node.DESCRIPTOR.fields}
    assert node_fields == {"id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5, "start_time_micros": 6,
                           "duration_micros": 7, "inputs": 8, "outputs": 9, "attr": 10}
    attr = schema.AttributeProto.DESCRIPTOR.fields_by_name
    assert (attr["int64_val"].number, attr["string_val"].number, attr["bool_val"].number) == (9, 29, 27)
    assert schema.NODE_TYPES["COMM_COLL_NODE"] == 7 and schema.COMM_TYPES["ALL_TO_ALL"] == 6


def test_wire_bytes_of_a_node_are_protobufs():
    n = node(3, "x", "COMM_COLL_NODE", deps=[1, 2], comm_type="ALL_REDUCE", comm_size=300, pg_name="dp")
    raw = n.SerializeToString()
    # field 1 (id) varint 3; field 5 (data_deps) packed: tag 0x2a, length 2, 1, 2
    assert raw.startswith(b"\x08\x03") and b"\x2a\x02\x01\x02" in raw
    back = schema.Node()
    back.ParseFromString(raw)
    assert back == n and schema.attr_value(back.attr[0]) == 0 and schema.attr_value(back.attr[2]) == "dp"


def test_varint_framing_round_trip():
    from google.protobuf.internal.encoder import _VarintBytes  # the library's own varint, as a reference
    for v in (0, 1, 127, 128, 300, 2 ** 32, 2 ** 63):
        assert encode_varint(v) == _VarintBytes(v)
    data = b"".join(encode_varint(len(p)) + p for p in (b"a", b"", b"b" * 300))
    assert [p for _, p in read_frames(data)] == [b"a", b"", b"b" * 300]
    assert encode_varint(300) == b"\xac\x02"


def test_generator_round_trip(tmp_path):
    files = generate(tmp_path, ranks=4, prefix="job")
    assert [f.name for f in files] == [f"job.{r}.et" for r in range(4)]
    traces = read_traces(str(tmp_path))
    assert [t.rank for t in traces] == [0, 1, 2, 3]
    for t in traces:
        assert t.metadata["rank"] == t.rank and t.metadata["world_size"] == 4
        expect = job_nodes(t.rank, 4, **DEFAULTS)
        assert [(n.node_id, n.name) for n in t.nodes] == [(e.id, e.name) for e in expect]
        assert all(n.deps == ((n.node_id - 1,) if n.node_id else ()) for n in t.nodes)
    r1 = {n.name: n for n in traces[1].nodes}
    assert (r1["tp_allreduce"].kind, r1["tp_allreduce"].collective, r1["tp_allreduce"].pg_name,
            r1["tp_allreduce"].size_bytes) == ("coll", "allreduce", "tp0", 2 << 20)
    assert (r1["ep_alltoall"].comm_type, r1["ep_alltoall"].pg_name) == ("ALL_TO_ALL", "ep")
    assert (r1["recv_from_0"].kind, r1["recv_from_0"].src, r1["recv_from_0"].dst) == ("recv", 0, 1)
    assert (r1["send_to_2"].kind, r1["send_to_2"].src, r1["send_to_2"].dst, r1["send_to_2"].tag) == ("send", 1, 2, 0)
    assert r1["fwd"].duration_us == 20 and r1["moe_gate"].duration_us == 10
    assert "recv_from_0" not in {n.name for n in traces[0].nodes} and "send_to_4" not in r1
    # the prefix form of the path, and a gzipped file (Chakra's protolib opens both)
    assert [t.path for t in read_traces(str(tmp_path / "job"))] == [str(f) for f in files]
    (tmp_path / "job.3.et").write_bytes(gzip.compress(files[3].read_bytes()))
    assert read_traces(str(tmp_path))[3].nodes == traces[3].nodes


def test_shipped_traces_are_what_the_generator_writes(tmp_path):
    generate(tmp_path, ranks=4, prefix="tiny_moe_pp")
    for r in range(4):
        assert (SHIPPED / f"tiny_moe_pp.{r}.et").read_bytes() == (tmp_path / f"tiny_moe_pp.{r}.et").read_bytes()
    assert (SHIPPED / "comm_groups.json").read_text() == (tmp_path / "comm_groups.json").read_text()
    assert comm_groups(4) == {"tp0": [0, 1], "tp1": [2, 3], "ep": [0, 1, 2, 3], "dp": [0, 1, 2, 3]}


def _one(tmp_path, nodes, meta="default", rank=0):
    f = tmp_path / f"t.{rank}.et"
    write_trace(f, metadata(rank, 2) if meta == "default" else meta, nodes)
    return f


@pytest.mark.parametrize("nodes,message", [
    ([node(7, "m", "MEM_LOAD_NODE")], "node 7 (m): node type MEM_LOAD_NODE is not replayed"),
    ([node(1, "", "COMP_NODE"), node(1, "", "COMP_NODE")], "node 1: a second node with this id"),
    ([node(1, "c", "COMP_NODE", deps=[9])], "node 1 (c): depends on node 9, which this file does not have"),
    ([node(2, "r", "COMM_COLL_NODE", comm_type="REDUCE", comm_size=8, pg_name="a")],
     "node 2 (r): collective REDUCE is not replayed"),
    ([node(2, "r", "COMM_COLL_NODE", comm_type=42, comm_size=8)], "comm_type number 42 (not in the schema)"),
    ([node(2, "r", "COMM_COLL_NODE", comm_type="ALL_REDUCE")], "node 2 (r): attr 'comm_size' missing"),
    ([node(2, "r", "COMM_COLL_NODE", comm_type="ALL_REDUCE", comm_size=0)], "comm_size = 0"),
    ([node(2, "r", "COMM_COLL_NODE", comm_type="ALL_REDUCE", comm_size="big")],
     "attr 'comm_size' holds string_val; an integer value"),
    ([node(3, "s", "COMM_SEND_NODE", comm_size=8)], "node 3 (s): attr 'comm_dst' missing"),
    ([node(3, "s", "COMM_SEND_NODE", comm_size=8, comm_dst=0)], "comm_src = comm_dst = 0"),
    ([node(3, "s", "COMM_SEND_NODE", comm_size=8, comm_dst=1, comm_src=1)], "a send with comm_src = 1 in the file "
                                                                            "of rank 0"),
    ([node(3, "s", "COMM_RECV_NODE", comm_size=8, comm_src=1, comm_dst=1)], "a recv with comm_dst = 1"),
])
def test_malformed_nodes_are_refused_naming_file_and_node(tmp_path, nodes, message):
    f = _one(tmp_path, nodes)
    with pytest.raises(ChakraFormatError) as e:
        read_trace(f, 0)
    assert str(e.value).startswith(f"{f}: ") and message in str(e.value)


def test_an_unknown_node_type_number_is_refused(tmp_path):
    n = schema.Node(id=4, type=42)
    f = _one(tmp_path, [n])
    with pytest.raises(ChakraFormatError, match=r"node 4: node type type number 42 \(not in the schema\)"):
        read_trace(f, 0)


def test_malformed_files_are_refused_naming_the_byte(tmp_path):
    f = _one(tmp_path, [node(1, "c", "COMP_NODE", duration_us=5)])
    data = f.read_bytes()
    f.write_bytes(data[:-2])
    meta_len = data[0] + 1
    with pytest.raises(ChakraFormatError, match=rf"{f}: byte {meta_len}: a frame of \d+ bytes but only"):
        read_trace(f, 0)
    f.write_bytes(data + b"\x03\xff\xff\xff")  # a frame whose bytes are no Node (a truncated varint field)
    with pytest.raises(ChakraFormatError, match=rf"byte {len(data)}: not a Node message"):
        read_trace(f, 0)
    f.write_bytes(b"")
    with pytest.raises(ChakraFormatError, match="empty: a trace starts with a GlobalMetadata"):
        read_trace(f, 0)
    f.write_bytes(b"\xff" * 12)
    with pytest.raises(ChakraFormatError, match="byte 0: a length prefix longer than 10 bytes"):
        read_trace(f, 0)
    _one(tmp_path, [], meta=metadata(1, 2))
    with pytest.raises(ChakraFormatError, match="GlobalMetadata says rank 1 but the file name says rank 0"):
        read_trace(f, 0)


def test_trace_sets_need_every_rank_file(tmp_path):
    generate(tmp_path, ranks=4)
    (tmp_path / "trace.2.et").unlink()
    with pytest.raises(ChakraFormatError, match=r"trace\.2\.et: missing: the set has rank files up to .*trace\.3\.et"):
        trace_files(str(tmp_path))
    (tmp_path / "other.0.et").write_bytes(b"")
    with pytest.raises(ChakraFormatError, match="several prefixes"):
        trace_files(str(tmp_path))
    with pytest.raises(ChakraFormatError, match="no Chakra trace files"):
        trace_files(str(tmp_path / "nothing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ChakraFormatError, match="no Chakra trace files"):
        trace_files(str(empty))


def test_nodes_a_network_replay_cannot_run_are_skipped_and_their_dependents_keep_the_order(tmp_path):
    """METADATA/INVALID nodes and CPU-side communication nodes (is_cpu_op, or none of comm_type/comm_size, as
    Chakra's converter writes c10d ops) are skipped by kind; a node depending on one waits for its deps."""
    nodes = [node(1, "## process_group:init ##", "METADATA_NODE"),
             node(2, "aten::mm", "COMP_NODE", deps=[1], duration_us=5),
             node(3, "c10d::broadcast_(0)", "COMM_COLL_NODE", deps=[2]),                       # no comm attrs
             node(4, "c10d::allreduce_(1)", "COMM_COLL_NODE", deps=[3], is_cpu_op=True,
                  comm_type="ALL_REDUCE", comm_size=64),                                       # on the CPU
             node(5, "c10d::send(2)", "COMM_SEND_NODE", deps=[4]),                              # no comm_size
             node(6, "", "INVALID_NODE", ctrl_deps=[5]),
             node(7, "ncclDevKernel_AllReduce", "COMM_COLL_NODE", deps=[6, 2], comm_type="ALL_REDUCE", comm_size=64),
             node(8, "c10d::broadcast_(3)", "COMM_COLL_NODE", deps=[7])]
    t = read_trace(_one(tmp_path, nodes), 0)
    assert [n.node_id for n in t.nodes] == [2, 7]
    assert t.skipped == ((1, "## process_group:init ## (METADATA_NODE)"),
                         (3, "c10d::broadcast_ (COMM_COLL_NODE without comm_type or comm_size)"),
                         (4, "c10d::allreduce_ (COMM_COLL_NODE on the CPU: is_cpu_op)"),
                         (5, "c10d::send (COMM_SEND_NODE without comm_size)"),
                         (6, "(no name) (INVALID_NODE)"),
                         (8, "c10d::broadcast_ (COMM_COLL_NODE without comm_type or comm_size)"))
    # 2 depended on 1 (skipped, no deps): none left; 7 on 6 -> 5 -> 4 -> 3 -> 2, and on 2
    assert t.nodes[0].deps == () and t.nodes[1].deps == (2,)


def test_a_collective_with_comm_type_but_no_comm_size_is_still_refused(tmp_path):
    f = _one(tmp_path, [node(2, "r", "COMM_COLL_NODE", comm_type="ALL_GATHER")])
    with pytest.raises(ChakraFormatError, match=r"node 2 \(r\): attr 'comm_size' missing"):
        read_trace(f, 0)


def test_ctrl_deps_on_missing_ids_are_dropped_and_counted_data_deps_refused(tmp_path):
    """Chakra's PyTorch converter removes dangling nodes (the trace's root) but keeps their ids in ctrl_deps."""
    f = _one(tmp_path, [node(2, "thread", "COMP_NODE", ctrl_deps=[1]),
                        node(3, "mm", "COMP_NODE", deps=[2], ctrl_deps=[2, 99], duration_us=4)])
    t = read_trace(f, 0)
    assert [n.deps for n in t.nodes] == [(), (2,)] and t.dropped_ctrl_deps == 2
    f = _one(tmp_path, [node(2, "x", "METADATA_NODE", deps=[1])])
    with pytest.raises(ChakraFormatError, match=r"node 2 \(skipped: x \(METADATA_NODE\)\): depends on node 1"):
        read_trace(f, 0)
