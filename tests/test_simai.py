"""SimAI / AICB workload reader: shared samples, our own files, malformed inputs (the op plan of a replay:
tests/test_simai_plan.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from shared_files import needs, shared
from traffic.workloads.parallel_groups import SCOPES, rank_groups
from traffic.workloads.simai import (COLLECTIVES, ROW_COLUMNS, CollectiveOp, SimaiFormatError,
                           collective_ops, load_simai, parse_simai)

REPO = Path(__file__).resolve().parents[1]
SHARED = shared("simai")
OURS = REPO / "scenarios" / "workloads"

needs_shared = needs(SHARED)

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 "
          "vpp: 1 ga: 1 all_gpus: 8 checkpoints: 0 checkpoint_initiates: 0")
ROW_A = "layer_a\t-1\t1000\tALLREDUCE\t4096\t2000\tNONE\t0\t3000\tALLREDUCE\t8192\t10"
ROW_B = "layer_b\t-1\t100\tALLGATHER\t1024\t200\tREDUCESCATTER\t1024\t300\tALLTOALL_EP\t512\t10"


# --- shared samples (written outside this project) ----------------------------------

@needs_shared
def test_micro_allreduce_sample():
    w = load_simai(SHARED / "microAllReduce.txt")
    h = w.header
    assert (h.policy, h.tp_size, h.ep_size, h.pp_size, h.vpp, h.ga, h.all_gpus) == \
        ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", 8, 1, 1, 1, 1, 8)
    assert h.checkpoints == () and h.checkpoint_initiates == ()
    (row,) = w.rows
    assert (row.layer_name, row.layer_id, row.fwd_compute_ticks, row.fwd_collective,
            row.fwd_size_bytes, row.wg_collective, row.wg_update_ticks, row.line) == \
        ("embedding_layer", -1, 556000, "ALLREDUCE", 536870912, "NONE", 1, 3)
    (op,) = collective_ops(w, {"ALLREDUCE"}, time_unit="ns")
    assert op == CollectiveOp(index=0, layer="embedding_layer", layer_index=0, line=3, phase="fwd",
                              collective="ALLREDUCE", group="TP", size_bytes=536870912,
                              compute_time_ns=556000, update_time_ns=1, blocking=True)
    (scaled,) = collective_ops(w, size_scale=1 / 1024, time_unit="us")
    assert (scaled.size_bytes, scaled.compute_time_ns) == (524288, 556000000)


@needs_shared
def test_ep_sample_parses_and_orders_like_simai():
    path = SHARED / "workload_ep_test.txt"
    w = load_simai(path)
    h = w.header
    assert (h.tp_size, h.ep_size, h.pp_size, h.vpp, h.ga, h.all_gpus) == (4, 4, 1, 1, 1, 32)
    assert len(w.rows) == 43
    # independent count of collectives: every non-NONE token in columns 3, 6, 9
    raw_rows = [line.split() for line in path.read_text().splitlines()[2:] if line.strip()]
    expected = sum(tok != "NONE" for r in raw_rows for tok in (r[3], r[6], r[9]))
    ops = collective_ops(w, None)
    assert len(ops) == expected == 78
    assert [o.index for o in ops] == list(range(len(ops)))
    # forward pass first, rows ascending; then backward, rows descending, ig before wg
    phases = [o.phase for o in ops]
    n_fwd = phases.count("fwd")
    assert phases[:n_fwd] == ["fwd"] * n_fwd and "fwd" not in phases[n_fwd:]
    fwd_rows = [o.layer_index for o in ops[:n_fwd]]
    bwd_rows = [o.layer_index for o in ops[n_fwd:]]
    assert fwd_rows == sorted(fwd_rows) and bwd_rows == sorted(bwd_rows, reverse=True)
    first, last = ops[0], ops[-1]
    assert (first.layer, first.layer_index, first.collective, first.group) == \
        ("embedding_layer", 6, "ALLREDUCE", "TP")
    assert (last.layer, last.phase, last.collective, last.group, last.blocking) == \
        ("grad_gather", "wg", "ALLGATHER", "DP", False)
    groups = {(o.layer, o.phase, o.collective, o.group) for o in ops}
    assert ("mlp_moelayer", "fwd", "ALLTOALL", "EP") in groups          # ALLTOALL_EP
    assert ("mlp_moelayer", "ig", "ALLTOALL", "TP") in groups           # plain, ig -> TP
    assert ("moe_grad_norm1", "wg", "ALLGATHER", "DP_EP") in groups     # ALLGATHER_DP_EP
    assert ("grad_param_comm", "wg", "REDUCESCATTER", "DP") in groups   # plain, wg -> DP
    # a zero-byte collective in the file stays a zero-byte op
    assert any(o.layer == "attention_column" and o.phase == "ig" and o.size_bytes == 0
               for o in ops)
    # filters: base name keeps every group; a full token only that group
    assert {o.group for o in collective_ops(w, {"ALLTOALL"})} == {"TP", "EP"}
    assert {o.group for o in collective_ops(w, {"ALLTOALL_EP"})} == {"EP"}
    allreduce = collective_ops(w)        # default: ALLREDUCE only
    assert [(o.layer, o.phase) for o in allreduce] == \
        [("embedding_layer", "fwd"), ("embedding_grads", "ig")]


@needs_shared
def test_compute_time_is_conserved_up_to_the_last_op():
    """compute_time_ns sums every phase's compute before the last selected op, exactly."""
    w = load_simai(SHARED / "workload_ep_test.txt")
    ops = collective_ops(w, {"ALLREDUCE"}, time_unit="ns")
    # the last ALLREDUCE is embedding_grads' ig (row 3): everything before it in order
    fwd = sum(r.fwd_compute_ticks for r in w.rows)
    bwd = sum(r.ig_compute_ticks + r.wg_compute_ticks for r in w.rows[4:])
    assert sum(o.compute_time_ns for o in ops) == fwd + bwd + w.rows[3].ig_compute_ticks


# --- our own files --------------------------------------------------------------------

def test_tiny_allreduce_file():
    w = load_simai(OURS / "tiny_allreduce.txt")
    assert (w.header.tp_size, w.header.all_gpus) == (1, 8)
    ops = collective_ops(w, {"ALLREDUCE"}, time_unit="ns")
    assert [(o.layer, o.phase, o.group, o.size_bytes) for o in ops] == [
        ("mlp_layer", "wg", "DP", 1 << 20),
        ("attention_layer", "wg", "DP", 2 << 20),
        ("embedding_layer", "wg", "DP", 1 << 20)]
    total_ticks = sum(r.fwd_compute_ticks + r.ig_compute_ticks + r.wg_compute_ticks
                      for r in w.rows)
    assert sum(o.compute_time_ns for o in ops) == total_ticks
    # small enough to replay in seconds at 10 Mbit/s: ring all-reduce moves 2(n-1)/n x size
    ring_bits = sum(2 * 7 / 8 * o.size_bytes * 8 for o in ops)
    assert ring_bits / 10e6 < 10


def test_tiny_moe_file():
    w = load_simai(OURS / "tiny_moe_tp2_ep2.txt")
    assert (w.header.tp_size, w.header.ep_size, w.header.all_gpus) == (2, 2, 8)
    ops = collective_ops(w, None)
    assert {o.group for o in ops} == {"TP", "EP", "DP", "DP_EP"}
    assert {o.collective for o in ops} == {"ALLREDUCE", "ALLGATHER", "REDUCESCATTER",
                                           "ALLTOALL"}
    assert max(o.size_bytes for o in ops) <= 1 << 20


# --- options ----------------------------------------------------------------------------

def test_size_scale_rounding_and_time_units():
    w = parse_simai(f"{HEADER}\n2\n{ROW_A}\n"
                    "tiny\t-1\t1\tALLREDUCE\t3\t0\tALLREDUCE\t0\t0\tNONE\t0\t0\n")
    ops = collective_ops(w, size_scale=0.001, time_unit="ms")
    assert [(o.layer, o.phase, o.size_bytes) for o in ops] == [
        ("layer_a", "fwd", 4), ("tiny", "fwd", 1), ("tiny", "ig", 0), ("layer_a", "wg", 8)]
    assert ops[0].compute_time_ns == 1000 * 1_000_000
    us = collective_ops(w, time_unit="us")
    ns = collective_ops(w, time_unit="ns")
    assert [a.compute_time_ns for a in us] == [1000 * b.compute_time_ns for b in ns]


@pytest.mark.parametrize("kwargs,match", [
    (dict(time_unit="min"), r"time_unit 'min' not allowed: one of ns, us, ms, s"),
    (dict(size_scale=0), r"size_scale 0 not allowed: must be > 0"),
    (dict(collectives={"ALLREDUCE", "BCAST"}), r"collectives \['BCAST'\] unknown: allowed"),
])
def test_collective_ops_bad_arguments(kwargs, match):
    w = parse_simai(f"{HEADER}\n1\n{ROW_A}\n")
    with pytest.raises(ValueError, match=match):
        collective_ops(w, **kwargs)


def test_data_and_micro_policies():
    data = parse_simai(f"DATA\n2\n{ROW_A}\n{ROW_B}\n")
    assert [(o.layer, o.phase, o.group) for o in collective_ops(data, None)] == [
        ("layer_b", "wg", "EP"), ("layer_a", "wg", "DP")]
    micro = parse_simai(f"MICRO\n2\n{ROW_A}\n{ROW_B}\n")
    assert [o.layer for o in collective_ops(micro, None)] == ["layer_a", "layer_b"]
    model = parse_simai(f"MODEL\n1\n{ROW_A}\n")
    with pytest.raises(ValueError, match=r"policy 'MODEL' is not supported by collective_ops"):
        collective_ops(model)


def test_lenient_forms_aicb_writes():
    """pp_comm as a float (AICB divides by TP), tabs or spaces, blank lines, checkpoints."""
    text = (HEADER.replace("checkpoints: 0", "checkpoints: 2 0 1")
            + " pp_comm: 8192.0\n2\n\n" + ROW_A.replace("\t", "   ") + "\n" + ROW_B + "\n\n")
    w = parse_simai(text, "x.txt")
    assert (w.header.pp_comm_bytes, w.header.checkpoints) == (8192, (0, 1))
    assert [r.line for r in w.rows] == [4, 5]


# --- malformed inputs ----------------------------------------------------------------------

MALFORMED = [
    # (name, text, line, column, value, message fragment)
    ("unknown policy", f"HYBRID_FOO model_parallel_NPU_group: 2\n1\n{ROW_A}\n",
     1, "policy", "HYBRID_FOO", "unknown parallelism policy; allowed: HYBRID_TRANSFORMER_FWD_IN_BCKWD"),
    ("bad header value", HEADER.replace("group: 2", "group: two") + f"\n1\n{ROW_A}\n",
     1, "model_parallel_NPU_group", "two", "is not a positive integer"),
    ("unknown header key", HEADER + f" tp: 2\n1\n{ROW_A}\n",
     1, "header key", "tp:", "unknown key; allowed: model_parallel_NPU_group:"),
    ("all_gpus not a multiple of TP", HEADER.replace("all_gpus: 8", "all_gpus: 7")
     + f"\n1\n{ROW_A}\n", 1, "all_gpus", 7, "is not a multiple of"),
    ("checkpoint list too short", HEADER.replace("checkpoints: 0", "checkpoints: 3 1")
     + f"\n1\n{ROW_A}\n", 1, "checkpoints", "3", "announces 3 layer numbers"),
    ("row count not a number", f"{HEADER}\nforty\n{ROW_A}\n",
     2, "row_count", "forty", "is not a non-negative integer (the number of layer rows)"),
    ("fewer rows than declared", f"{HEADER}\n3\n{ROW_A}\n{ROW_B}\n",
     2, "row_count", 3, "line 2 declares 3 rows, the file holds 2; the last row read is line 4"),
    ("more rows than declared", f"{HEADER}\n1\n{ROW_A}\n{ROW_B}\n",
     4, None, None, "more rows than the 1 declared on line 2"),
    ("non-integer size", f"{HEADER}\n2\n{ROW_A}\n" + ROW_B.replace("1024", "1024.5", 1) + "\n",
     4, "fwd_size_bytes", "1024.5", "is not a non-negative integer byte count"),
    ("negative compute time", f"{HEADER}\n1\n" + ROW_A.replace("1000", "-1000", 1) + "\n",
     3, "fwd_compute_ticks", "-1000", "is not a non-negative integer time in ticks"),
    ("unknown collective", f"{HEADER}\n1\n" + ROW_A.replace("ALLREDUCE", "ALLREDUCE_TP", 1) + "\n",
     3, "fwd_collective", "ALLREDUCE_TP", "unknown collective; allowed: NONE, ALLREDUCE,"),
    ("too few columns", f"{HEADER}\n1\n" + ROW_A.rsplit("\t", 1)[0] + "\n",
     3, None, None, "11 columns, expected 12 (layer_name, layer_id, fwd_compute_ticks"),
    ("too many columns", f"{HEADER}\n1\n{ROW_A}\textra\n",
     3, None, None, "13 columns, expected 12"),
    ("empty file", "", 1, "policy", "", "line 1 is empty"),
]


@pytest.mark.parametrize("name,text,line,column,value,fragment", MALFORMED,
                         ids=[m[0] for m in MALFORMED])
def test_malformed_inputs(tmp_path, name, text, line, column, value, fragment):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(SimaiFormatError) as info:
        load_simai(path)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.path, err.line, err.column, err.value) == (str(path), line, column, value)
    msg = str(err)
    assert msg.startswith(f"{path}:{line}:")
    assert fragment in msg
    if column:
        assert repr(column) in msg


def test_constants_agree():
    assert len(ROW_COLUMNS) == 12
    assert "ALLTOALL_EP" in COLLECTIVES and "ALLGATHER_DP_EP" in COLLECTIVES


# --- huge values: read exactly or refused naming the line (C11) --------------------------

def test_huge_compute_times_are_exact_integers():
    row = "big\t-1\t3000000000\tALLREDUCE\t4096\t4294967296\tNONE\t0\t1\tNONE\t0\t18446744073709551615"
    w = parse_simai(f"{HEADER}\n1\n{row}\n")
    r = w.rows[0]
    assert (r.fwd_compute_ticks, r.ig_compute_ticks, r.wg_update_ticks) == \
        (3000000000, 4294967296, 2**64 - 1)
    assert all(type(v) is int for v in (r.fwd_compute_ticks, r.ig_compute_ticks, r.wg_update_ticks))
    (op,) = collective_ops(w, time_unit="us")
    assert op.compute_time_ns == 3_000_000_000_000 and type(op.compute_time_ns) is int
    assert op.update_time_ns == (2**64 - 1) * 1000


def test_huge_sizes_scale_exactly():
    row = "big\t-1\t1\tALLREDUCE\t18446744073709551615\t1\tNONE\t0\t1\tNONE\t0\t1"
    w = parse_simai(f"{HEADER}\n1\n{row}\n")
    assert w.rows[0].fwd_size_bytes == 2**64 - 1
    assert collective_ops(w)[0].size_bytes == 2**64 - 1
    # 0.1 x (2^64 - 1) = 1844674407370955161.5 -> ties to even; a float product would give ...264
    assert collective_ops(w, size_scale=0.1)[0].size_bytes == 1844674407370955162


@pytest.mark.parametrize("column,index", [("fwd_compute_ticks", 2), ("wg_size_bytes", 10),
                                          ("wg_update_ticks", 11)])
def test_two_to_the_64_is_refused_naming_the_line(tmp_path, column, index):
    cells = ROW_B.split("\t")
    cells[index] = str(2**64)
    path = tmp_path / "huge.txt"
    path.write_text(f"{HEADER}\n2\n{ROW_A}\n" + "\t".join(cells) + "\n")
    with pytest.raises(SimaiFormatError) as info:
        load_simai(path)
    err = info.value
    assert (err.line, err.column, err.value) == (4, column, "18446744073709551616")
    assert str(err).startswith(f"{path}:4:")
    assert "larger than 18446744073709551615" in str(err)


def test_header_values_beyond_int32_are_refused():
    with pytest.raises(SimaiFormatError, match=r":1: column 'all_gpus' value '2147483648': is larger"):
        parse_simai(HEADER.replace("all_gpus: 8", "all_gpus: 2147483648") + f"\n1\n{ROW_A}\n")


# --- rank layout of groups (SimAI MockNcclGroup) -----------------------------------------

def _simai_loops(ngpus, tp, ep):
    """The loops of SimAI's MockNcclGroup constructor, transcribed line by line (PP size 1)."""
    dp = ngpus // tp
    dp_ep = dp // ep
    tp_nums, dp_nums = ngpus // tp, ngpus // dp
    out = {"TP": [], "DP": [], "EP": [], "DP_EP": []}
    for i in range(tp_nums):
        out["TP"].append(tuple(i * tp + j for j in range(tp)))
    for i in range(dp_nums):
        out["DP"].append(tuple(i + j * dp_nums for j in range(dp)))
    all_tp = out["TP"]
    for i in range(tp_nums // ep):
        tp_idx = i * ep
        for k in range(len(all_tp[tp_idx])):
            out["EP"].append(tuple(all_tp[l][k] for l in range(tp_idx, tp_idx + ep)))
    for i in range(tp_nums // dp_ep):
        for k in range(len(all_tp[i])):
            out["DP_EP"].append(tuple(all_tp[l][k] for l in range(i, i + dp_ep * ep, ep)))
    return {scope: tuple(g) for scope, g in out.items()}


def test_layout_tp2_ep2_on_8():
    assert rank_groups("TP", 8, tp_size=2, ep_size=2) == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert rank_groups("DP", 8, tp_size=2, ep_size=2) == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert rank_groups("EP", 8, tp_size=2, ep_size=2) == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert rank_groups("DP_EP", 8, tp_size=2, ep_size=2) == ((0, 4), (1, 5), (2, 6), (3, 7))


def test_layout_of_the_shared_moe_sample_tp4_ep4_on_32():
    assert rank_groups("TP", 32, 4, 4)[1] == (4, 5, 6, 7)
    assert rank_groups("DP", 32, 4, 4)[3] == (3, 7, 11, 15, 19, 23, 27, 31)
    assert rank_groups("EP", 32, 4, 4)[:2] == ((0, 4, 8, 12), (1, 5, 9, 13))
    assert rank_groups("EP", 32, 4, 4)[4] == (16, 20, 24, 28)
    assert rank_groups("DP_EP", 32, 4, 4)[:2] == ((0, 16), (1, 17))


@pytest.mark.parametrize("ngpus,tp,ep", [(8, 1, 1), (8, 2, 1), (8, 2, 2), (8, 2, 4), (8, 4, 2),
                                         (8, 8, 1), (16, 2, 4), (32, 4, 4), (64, 8, 2), (12, 3, 2)])
def test_layout_matches_simai_loops_and_partitions_the_ranks(ngpus, tp, ep):
    oracle = _simai_loops(ngpus, tp, ep)
    for scope in SCOPES:
        groups = rank_groups(scope, ngpus, tp_size=tp, ep_size=ep)
        assert sorted(r for g in groups for r in g) == list(range(ngpus)), scope
        assert len({len(g) for g in groups}) == 1 and all(list(g) == sorted(g) for g in groups)
        assert groups == oracle[scope], scope
    assert len(rank_groups("TP", ngpus, tp, ep)[0]) == tp
    assert len(rank_groups("DP", ngpus, tp, ep)[0]) == ngpus // tp
    assert len(rank_groups("EP", ngpus, tp, ep)[0]) == ep
    assert len(rank_groups("DP_EP", ngpus, tp, ep)[0]) == ngpus // tp // ep


@pytest.mark.parametrize("args,match", [
    (("MP", 8, 2), r"group scope 'MP' unknown: allowed TP, DP, EP, DP_EP, PP"),
    (("DP", 8, 2, 1, 3), r"model_parallel_NPU_group \(TP\) 2 x pp 3 does not divide all_gpus 8"),
    (("EP", 8, 2, 3), r"ep 3 does not divide the DP size 4 \(all_gpus 8 / \(TP 2 x pp 1\)\)"),
    (("TP", 8, 3), r"model_parallel_NPU_group \(TP\) 3 x pp 1 does not divide all_gpus 8"),
    (("TP", 0, 1), r"all_gpus = 0: must be a positive integer"),
])
def test_layout_refusals(args, match):
    with pytest.raises(ValueError, match=match):
        rank_groups(*args)


def test_binary_and_oversized_files_are_refused(tmp_path, monkeypatch):
    import traffic.workloads.simai as simai
    garbage = tmp_path / "garbage.txt"
    garbage.write_bytes(bytes(range(128, 256)))
    with pytest.raises(SimaiFormatError, match=r"garbage.txt: not UTF-8 text \(invalid start byte at byte 0\)"):
        load_simai(garbage)
    monkeypatch.setattr(simai, "MAX_FILE_BYTES", 100)
    big = tmp_path / "big.txt"
    big.write_text(f"{HEADER}\n1\n{ROW_A}\n")
    with pytest.raises(SimaiFormatError, match=r"big.txt: larger than 100 bytes"):
        load_simai(big)


def test_layout_with_pipeline_stages_tp2_dp2_pp2_on_8():
    """Megatron/AICB order (TP innermost, then DP, stages outermost): rank = stage x 4 + dp x 2 + tp."""
    from traffic.workloads.parallel_groups import stage_groups
    assert rank_groups("TP", 8, 2, 1, 2) == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert rank_groups("DP", 8, 2, 1, 2) == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert rank_groups("PP", 8, 2, 1, 2) == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert stage_groups("DP", 1, 8, 2, 1, 2) == ((4, 6), (5, 7))
    assert stage_groups("TP", 0, 8, 2, 1, 2) == ((0, 1), (2, 3))
    for st in (0, 1):      # AICB get_pp_rank: rank // (world_size / pp)
        assert all(r // 4 == st for g in stage_groups("DP", st, 8, 2, 1, 2) for r in g)
    with pytest.raises(ValueError, match=r"stage 2 outside 0..1"):
        stage_groups("TP", 2, 8, 2, 1, 2)


@pytest.mark.parametrize("ngpus,tp,ep,pp", [(8, 2, 1, 2), (16, 2, 2, 2), (24, 2, 2, 3), (16, 1, 4, 4)])
def test_pipeline_layout_is_simai_layout_per_stage_and_partitions(ngpus, tp, ep, pp):
    per_stage = ngpus // pp
    for scope in SCOPES:
        groups = rank_groups(scope, ngpus, tp, ep, pp)
        assert sorted(r for g in groups for r in g) == list(range(ngpus)), scope
        # each stage's groups are SimAI's pp-1 layout over the stage's ranks, shifted
        flat = rank_groups(scope, per_stage, tp, ep)
        assert groups == tuple(tuple(r + st * per_stage for r in g) for st in range(pp) for g in flat)
    pp_groups = rank_groups("PP", ngpus, tp, ep, pp)
    assert len(pp_groups) == per_stage and all(len(g) == pp for g in pp_groups)
    assert sorted(r for g in pp_groups for r in g) == list(range(ngpus))
    assert all(b - a == per_stage for g in pp_groups for a, b in zip(g, g[1:]))
