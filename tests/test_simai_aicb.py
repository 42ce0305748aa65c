"""AICB's published workload files ($TESTBED_SHARED_WORKLOADS/aicb, tests/shared_files.py; skipped when absent)
read as SimAI reads them, and files of our own (tests/data/aicb) that exercise each tolerance (issue 29 item 1).

SimAI's reader (astra-sim-alibabacloud/astra-sim/workload/Workload.cc ``initialize_workload``) tolerates a
header without ep:, pp:, vpp:, ga:, all_gpus: (it warns "Input workload format mismatch"), reads tokens with
``>>`` (tabs, runs of spaces, leading spaces, blank lines) and matches BROADCAST to no collective type (it
skips it). The expected figures below were counted from the files with awk, not with the reader:
``awk 'NR>2 && $4!="NONE" {c[$4]++; s[$4]+=$5}'`` per phase (fwd $4/$5, ig $7/$8, wg $10/$11).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from shared_files import needs, shared
from testbed.spec.scenario import ScenarioError
from testbed.workloads import load_scenario
from traffic.workloads.simai import (SimaiFormatError, collective_ops, iteration_compute_ns, load_simai,
                                     parse_simai)

AICB = shared("aicb")
OURS = Path(__file__).resolve().parent / "data" / "aicb"
G13B = "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt"
L7B = "L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt"
DS = "L65B_D1_C08_Llama65B_deepspeed_zero3_A100.txt"
BROKEN = "L65B-M1-C05_Llama65B_megatron_tp8_pp1_mbs1_A100.txt"
needs_aicb = needs(AICB)

# file -> (policy, TP, header keys absent, rows, {(phase, token): (entries, sum of sizes in bytes)},
#          compute ticks of one iteration in SimAI's order)
EXPECTED = {
    G13B: ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", 8, ("ep", "pp", "vpp", "ga", "all_gpus"), 92,
           {("fwd", "BROADCAST"): (1, 16384), ("fwd", "ALLGATHER"): (1, 3248619520),
            ("fwd", "ALLREDUCE"): (89, 2026397712), ("ig", "ALLREDUCE"): (82, 4947312640),
            ("wg", "REDUCESCATTER"): (1, 6497239040)}, 74645010 + 73471011 + 60080012),
    L7B: ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", 2, ("ep", "pp", "vpp", "ga", "all_gpus"), 76,
          {("fwd", "BROADCAST"): (1, 16384), ("fwd", "ALLGATHER"): (1, 6754926592),
           ("fwd", "ALLREDUCE"): (73, 1352687632), ("ig", "ALLREDUCE"): (66, 7845445632),
           ("wg", "REDUCESCATTER"): (1, 13509853184)}, 32842123 + 35888012 + 35888012),
    DS: ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", 1, ("ep", "pp", "vpp", "ga", "all_gpus"), 12,
         {("ig", "ALLGATHER"): (12, 3496004), ("wg", "REDUCESCATTER"): (1, 1889785610)},
         127472500 + 195190000 + 12),
    "all_reduce.txt": ("MICRO", 1, ("all_gpus",), 19, {("wg", "ALLREDUCE"): (19, 2147479552)}, 19),
    "all_to_all.txt": ("MICRO", 1, ("all_gpus",), 19, {("wg", "ALLTOALL"): (19, 2147479552)}, 19),
}


def _scenario(tmp_path, path, hosts=4, extra=""):
    p = tmp_path / "s.yaml"
    p.write_text(f"fabric: {{spines: 1, leaves: 2, hosts_per_leaf: {hosts // 2}, host_link_bps: 10M, "
                 f"fabric_link_bps: 10M}}\n"
                 f"workload: {{simai: {{path: {path}, size_scale: 0.000001, compute_scale: off{extra}}}}}\n")
    return p


def _plan(tmp_path, path, hosts=4, extra=""):
    from testbed.workloads import plan_workload
    return plan_workload(load_scenario(_scenario(tmp_path, path, hosts, extra)))


@needs_aicb
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_aicb_file_parses_with_the_counts_and_sizes_it_holds(name):
    policy, tp, absent, n_rows, phases, compute = EXPECTED[name]
    wl = load_simai(AICB / name)
    h = wl.header
    assert (h.policy, h.tp_size, h.ep_size, h.pp_size, h.vpp, h.ga, h.all_gpus) == (policy, tp, 1, 1, 1, 1, None)
    assert h.absent == absent and len(wl.rows) == n_rows
    assert [r.line for r in wl.rows] == list(range(3, 3 + n_rows))
    got: dict = {}
    for op in collective_ops(wl, collectives=None):
        token = op.collective + ("" if op.group in ("TP", "DP") else "_" + op.group)
        n, s = got.get((op.phase, token), (0, 0))
        got[(op.phase, token)] = (n + 1, s + op.size_bytes)
        assert op.group == ("DP" if op.phase == "wg" else "TP")   # plain names: TP in fwd/ig, DP in wg
    assert got == phases
    assert iteration_compute_ns(wl) == compute


@needs_aicb
def test_aicb_broadcast_row_is_megatrons_tp_broadcast_of_the_batch():
    """The ``norm`` row: fwd BROADCAST of 8 x micro_batch 1 x seq_length 2048 = 16384 B over the TP group."""
    for name in (G13B, L7B):
        (op,) = [o for o in collective_ops(load_simai(AICB / name), collectives=["BROADCAST"])]
        assert (op.line, op.layer, op.phase, op.collective, op.group, op.size_bytes, op.blocking) == \
            (3, "norm", "fwd", "BROADCAST", "TP", 16384, True)


@needs_aicb
def test_aicb_deepspeed_file_runs_of_spaces_between_fields():
    """L65B_D1_C08 separates some fields by runs of spaces instead of a tab (lines 3, 8, 11), has leading
    spaces before numbers and no newline at its end."""
    raw = (AICB / DS).read_text()
    assert "0   4756000" in raw and "NONE    0" in raw and not raw.endswith("\n")
    wl = load_simai(AICB / DS)
    r3, r8, r11 = wl.rows[0], wl.rows[5], wl.rows[8]
    assert (r3.fwd_size_bytes, r3.ig_compute_ticks, r3.ig_collective, r3.wg_collective, r3.wg_size_bytes) == \
        (0, 4756000, "ALLGATHER", "REDUCESCATTER", 1889785610)
    assert (r8.line, r8.ig_compute_ticks) == (8, 46148000)
    assert (r11.line, r11.wg_collective, r11.wg_size_bytes, r11.wg_update_ticks) == (11, "NONE", 0, 100)


@needs_aicb
def test_aicb_file_with_a_wrong_row_count_is_refused_naming_its_line():
    with pytest.raises(SimaiFormatError) as info:
        load_simai(AICB / BROKEN)
    e = info.value
    assert (e.line, e.column, e.value) == (2, "row_count", 839)
    assert str(e).startswith(f"{AICB / BROKEN}:2: column 'row_count' value 839: line 2 declares 839 rows, "
                             "the file holds 33; the last row read is line 35")


@needs_aicb
@pytest.mark.parametrize("name,extra,all_gpus,source,n_ops,fabric_ops", [
    ("all_reduce.txt", "", 4, "the fabric's hosts", {("allreduce", "DP"): 19}, 19),
    ("all_to_all.txt", "", 4, "the fabric's hosts", {("alltoall", "DP"): 19}, 19),
    (L7B, "", 4, "the fabric's hosts", {("broadcast", "TP"): 1, ("allgather", "TP"): 1, ("allreduce", "TP"): 139,
                                        ("reducescatter", "DP"): 1}, 142),
    (DS, "", 4, "the fabric's hosts", {("reducescatter", "DP"): 1}, 1),
    # TP 8 on 4 hosts: servers of 8 GPUs, the TP collectives in the scale-up domain, DP of 4 on the fabric
    (G13B, ", all_gpus: 32", 32, "workload.simai.all_gpus", {("reducescatter", "DP"): 1}, 1),
])
def test_aicb_file_plans_on_4_hosts_with_one_warning(tmp_path, name, extra, all_gpus, source, n_ops, fabric_ops):
    plan = _plan(tmp_path, AICB / name, extra=extra)
    assert Counter((o.collective, o.group) for o in plan.ops) == n_ops and len(plan.ops) == fabric_ops
    warnings = [n for n in plan.notes if n.startswith("warning: ")]
    assert len(warnings) == 1, plan.notes
    absent = EXPECTED[name][2]
    assert warnings[0].startswith(f"warning: simai: {AICB / name} has no {', '.join(k + ':' for k in absent)}; "
                                  f"assumed all_gpus {all_gpus} ({source})")
    reader = plan.replay.reader
    assert (reader["all_gpus"], reader["all_gpus_from"], reader["file_all_gpus"]) == (all_gpus, source, None)
    assert reader["absent_keys"] == list(absent) and reader["warning"] == warnings[0][len("warning: "):]
    tolerated = {k: 1 for k in absent if k != "all_gpus"}
    assert reader["assumed"] == (tolerated if extra else {**tolerated, "all_gpus": all_gpus})
    has_broadcast = name in (G13B, L7B)
    assert reader["simai_skips"] == (["line 3 norm:fwd"] if has_broadcast else [])
    notes = [n for n in plan.notes if "SimAI's reader skips BROADCAST" in n]
    assert len(notes) == int(has_broadcast)
    if has_broadcast:
        where = "in the scale-up domain" if name == G13B else "on the fabric"
        assert f"1 BROADCAST entry (line 3 norm:fwd) runs here as broadcasts from each group's first rank " \
               f"({where})" in notes[0]
    if name == L7B:    # TP 2 on 4 hosts: the TP pairs (h1 h2), (h3 h4); 16384 B x 1e-6 rounds to 0: at least 1 byte
        (bc,) = [o for o in plan.ops if o.collective == "broadcast"]
        assert (bc.groups, bc.algorithm, bc.size_bytes, bc.layer) == (((0, 1), (2, 3)), "ring", 1, "norm:fwd")


@needs_aicb
def test_aicb_tp8_file_on_4_hosts_without_all_gpus_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ScenarioError) as info:
        _plan(tmp_path, AICB / G13B)
    msg = str(info.value)
    assert f"workload.simai.all_gpus: 4 (the fabric's hosts; {AICB / G13B} has no all_gpus:) is not a multiple of " \
           "the file's model_parallel_NPU_group x pp = 8 x 1: allowed a positive multiple of 8; on 4 hosts e.g. " \
           "workload.simai.all_gpus: 32 (each host a server of 8 GPUs), or a fabric of a multiple of 8 hosts" in msg


# --- our own files: one tolerance each ---------------------------------------------------------------------------

def test_whitespace_as_aicb_writes_it_parses_as_the_tab_separated_file():
    """tests/data/aicb/whitespace.txt: a leading space before the policy, tabs and runs of spaces between header
    keys and values, line 2 as `` \\t3  ``, rows with leading tabs or spaces, runs of spaces between fields,
    trailing spaces and a blank line between rows (SimAI: ``iss >> token``, ``std::stoi``, ``inFile >>``)."""
    path = OURS / "whitespace.txt"
    raw = path.read_text()
    assert raw.startswith("  HYBRID") and "\n \t3  \n" in raw and "\n\n\t\tmlp  -1  1000" in raw
    canonical = "\n".join("\t".join(line.split()) for line in raw.splitlines() if line.strip())
    ours, tabs = load_simai(path), parse_simai(canonical)
    assert ours.header == tabs.header
    assert (ours.header.tp_size, ours.header.all_gpus, ours.header.absent) == (2, 4, ("vpp", "ga"))
    assert [r.line for r in ours.rows] == [3, 4, 6]          # the blank line 5 is skipped, lines keep their number
    assert [r.__dict__ | {"line": 0} for r in ours.rows] == [r.__dict__ | {"line": 0} for r in tabs.rows]
    mlp = ours.rows[2]
    assert (mlp.layer_name, mlp.fwd_size_bytes, mlp.wg_collective, mlp.wg_size_bytes, mlp.wg_update_ticks) == \
        ("mlp", 8192, "REDUCESCATTER", 65536, 100)
    # Windows line ends read the same
    assert parse_simai(raw.replace("\n", "\r\n")).rows == ours.rows


def test_header_with_only_the_tp_size_takes_aicbs_defaults(tmp_path):
    """tests/data/aicb/bare_header.txt: no ep:, pp:, vpp:, ga:, all_gpus: (as AICB's model files); one warning
    line names them and the values taken, all_gpus the fabric's 4 hosts."""
    wl = load_simai(OURS / "bare_header.txt")
    h = wl.header
    assert (h.tp_size, h.ep_size, h.pp_size, h.vpp, h.ga, h.all_gpus, h.pp_comm_bytes) == (2, 1, 1, 1, 1, None, 0)
    assert h.absent == ("ep", "pp", "vpp", "ga", "all_gpus")
    plan = _plan(tmp_path, OURS / "bare_header.txt")
    (w,) = [n for n in plan.notes if n.startswith("warning: ")]
    assert w == (f"warning: simai: {OURS / 'bare_header.txt'} has no ep:, pp:, vpp:, ga:, all_gpus:; assumed all_gpus "
                 "4 (the fabric's hosts), ep 1, pp 1, vpp 1, ga 1 (AICB's defaults; SimAI warns 'Input workload "
                 "format mismatch' and runs on)")


def test_missing_tp_size_and_the_expert_group_spelling(tmp_path):
    """No model_parallel_NPU_group: TP 1, named as ``TP 1``; AICB's multi-all-reduce header spells ep
    ``expert_parallel_npu_group:`` (it counts as ep given)."""
    row = "l\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLREDUCE\t4096\t1\n"
    wl = parse_simai("HYBRID_TRANSFORMER pp: 1\n1\n" + row)
    assert (wl.header.tp_size, wl.header.absent) == (1, ("model_parallel_NPU_group", "ep", "vpp", "ga", "all_gpus"))
    (tmp_path / "w.txt").write_text("HYBRID_TRANSFORMER pp: 1\n1\n" + row)
    (w,) = [n for n in _plan(tmp_path, tmp_path / "w.txt").notes if n.startswith("warning: ")]
    assert "has no model_parallel_NPU_group:, ep:, vpp:, ga:, all_gpus:; assumed all_gpus 4 (the fabric's hosts), " \
           "TP 1, ep 1, vpp 1, ga 1" in w
    # AICB's f-string continues its lines with a backslash: runs of spaces inside the header
    multi = parse_simai("HYBRID_TRANSFORMER_FWD_IN_BCKWD\tmodel_parallel_NPU_group: 1                         "
                        "expert_parallel_npu_group: 1 pp: 1                         ga: 1 all_gpus: 4 checkpoints: 0 "
                        "checkpoint_initiates: 0\n1\n" + row)
    assert multi.header.absent == ("vpp",)


def test_all_gpus_from_the_scenario_the_file_or_the_fabric(tmp_path):
    from testbed.workloads.simai.reader import world_size
    whitespace = OURS / "whitespace.txt"                     # all_gpus: 4 in the file
    spec = load_scenario(_scenario(tmp_path, whitespace))
    assert world_size(spec, load_simai(whitespace)) == (4, "the file", {"vpp": 1, "ga": 1})
    # the scenario's value wins over the file's, with the warning saying so
    plan = _plan(tmp_path, whitespace, extra=", all_gpus: 8")
    (w,) = [n for n in plan.notes if n.startswith("warning: ")]
    assert "; all_gpus 8 from workload.simai.all_gpus instead of the file's 4" in w
    assert (plan.replay.reader["all_gpus"], plan.replay.reader["all_gpus_from"]) == (8, "workload.simai.all_gpus")
    assert plan.replay.gpus_per_host == 2
    # the scenario fills a missing all_gpus: named as its source
    plan = _plan(tmp_path, OURS / "bare_header.txt", extra=", all_gpus: 8")
    (w,) = [n for n in plan.notes if n.startswith("warning: ")]
    assert "assumed all_gpus 8 (workload.simai.all_gpus), ep 1" in w and "all_gpus" not in plan.replay.reader["assumed"]
    # a file that gives every key: nothing assumed, no warning
    full = tmp_path / "full.txt"
    full.write_text("HYBRID_TRANSFORMER model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 4\n1\n"
                    "l\t-1\t1\tALLREDUCE\t4096\t1\tNONE\t0\t1\tNONE\t0\t1\n")
    plan = _plan(tmp_path, full)
    assert not [n for n in plan.notes if n.startswith("warning: ")]
    assert plan.replay.reader["assumed"] == {} and "warning" not in plan.replay.reader


@pytest.mark.parametrize("value,fragment", [
    (6, "workload.simai.all_gpus: 6 (replaying {path}) is not a multiple of the file's model_parallel_NPU_group x "
        "pp = 4 x 1"),
    (0, "all_gpus"), ("eight", "all_gpus"), ("true", "all_gpus"), (-4, "all_gpus"),
])
def test_all_gpus_key_is_validated_naming_it(tmp_path, value, fragment):
    """A positive integer (a bool refused) and a multiple of the file's TP x pp (TP 4 here: 6 is not)."""
    (tmp_path / "w.txt").write_text("HYBRID_TRANSFORMER model_parallel_NPU_group: 4\n1\n"
                                    "l\t-1\t1\tALLREDUCE\t4096\t1\tNONE\t0\t1\tNONE\t0\t1\n")
    with pytest.raises(ScenarioError) as info:
        _plan(tmp_path, tmp_path / "w.txt", extra=f", all_gpus: {value}")
    assert fragment.format(path=tmp_path / "w.txt") in str(info.value)


def test_broadcast_tokens_run_as_broadcasts_and_the_note_says_simai_skips_them(tmp_path):
    """bare_header.txt: fwd BROADCAST (TP pairs across the 4 hosts) and wg BROADCAST_DP_EP (the DP pairs):
    ring broadcasts from each group's first rank, sizes the root's buffer x size_scale (at least 1 byte)."""
    wl = load_simai(OURS / "bare_header.txt")
    ops = collective_ops(wl, collectives=["BROADCAST"])
    assert [(o.line, o.phase, o.group, o.size_bytes) for o in ops] == [(3, "fwd", "TP", 16384),
                                                                       (5, "wg", "DP_EP", 65536)]
    assert collective_ops(wl, collectives=["BROADCAST_DP_EP"])[0].line == 5
    plan = _plan(tmp_path, OURS / "bare_header.txt")
    bcast = [(o.group, o.groups, o.algorithm, o.size_bytes) for o in plan.ops if o.collective == "broadcast"]
    assert bcast == [("TP", ((0, 1), (2, 3)), "ring", 1), ("DP_EP", ((0, 2), (1, 3)), "ring", 1)]
    assert plan.replay.reader["simai_skips"] == ["line 3 norm:fwd", "line 5 mlp:wg"]
    (note,) = [n for n in plan.notes if "SimAI's reader skips BROADCAST" in n]
    assert "2 BROADCAST entries (line 3 norm:fwd, line 5 mlp:wg) run here as broadcasts from each group's first " \
           "rank (on the fabric)" in note


# --- where a refusal points: the path, the world size ---------------------------------------------------------

MICRO_ROW = "micro_test\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLREDUCE\t4096\t1\n"


def test_a_directory_as_the_path_is_named_a_directory_not_a_missing_file(tmp_path):
    """workload.simai.path naming a folder: said to be a directory, a file expected, one of its .txt files
    proposed (as workload.chakra.path's check names a folder's trace set); an empty folder, a missing file
    and a device (not a regular file) each say what they are."""
    d = tmp_path / "files" / "adir"
    d.mkdir(parents=True)
    (d / "notes.md").write_text("x")
    with pytest.raises(ScenarioError) as info:
        load_scenario(_scenario(tmp_path, "files/adir"))
    assert str(info.value) == (f"{tmp_path / 's.yaml'}: workload.simai.path: {str(d)!r} is a directory; a SimAI/AICB "
                               "workload file is expected (one workload per file); it holds no .txt file")
    for name in ("b.txt", "a.txt"):
        (d / name).write_text("MICRO\n1\n" + MICRO_ROW)
    with pytest.raises(ScenarioError) as info:
        load_scenario(_scenario(tmp_path, "files/adir"))
    assert str(info.value).endswith(f"{str(d)!r} is a directory; a SimAI/AICB workload file is expected (one "
                                    f"workload per file); it holds 2 .txt files: name one as the path, e.g. "
                                    f"{str(d / 'a.txt')!r}")
    with pytest.raises(ScenarioError) as info:
        load_scenario(_scenario(tmp_path, "files/nothing.txt"))
    assert str(info.value).endswith(f"workload.simai.path: no such file {str(tmp_path / 'files' / 'nothing.txt')!r}")
    with pytest.raises(ScenarioError) as info:
        load_scenario(_scenario(tmp_path, "/dev/null"))
    assert str(info.value).endswith("workload.simai.path: '/dev/null' is not a regular file; a SimAI/AICB workload "
                                    "file is expected")
    assert load_scenario(_scenario(tmp_path, "files/adir/a.txt")).workload.simai.path == str(d / "a.txt")


@pytest.mark.parametrize("header,extra,refused", [
    # the scenario's all_gpus: 8 on 4 hosts (2 per host) puts the one DP group of 8 ranks two to a host
    ("MICRO", ", all_gpus: 8", "workload.simai.all_gpus: 8 (replaying {w}) on the fabric's 4 hosts: "),
    ("MICRO all_gpus: 8", "", "workload.simai.path: {w}:1: all_gpus: 8 on the fabric's 4 hosts: "),
])
def test_a_world_size_that_does_not_place_names_where_it_came_from(tmp_path, header, extra, refused):
    """The world size refused on the fabric is blamed on the key that set it: ``workload.simai.all_gpus`` (the
    file only as context) when the scenario set it, the file's line 1 when the file did."""
    w = tmp_path / "w.txt"
    w.write_text(f"{header}\n1\n{MICRO_ROW}")
    with pytest.raises(ScenarioError) as info:
        _plan(tmp_path, w, extra=extra)
    assert str(info.value) == (
        f"{tmp_path / 's.yaml'}: {refused.format(w=w)}rank group (0, 1, 2, 3, 4, 5, 6, 7) puts several ranks on one "
        "host and others on other hosts (hosts (0, 0, 1, 1, 2, 2, 3, 3), 2 GPUs per host): allowed a group inside "
        "one server or one rank per server; use a fabric with as many hosts as all_gpus, or a file whose "
        "model_parallel_NPU_group (TP) equals the GPUs per host; mappings that fit: 8 GPUs fit a fabric of 8 hosts "
        "(1 GPU each); on these 4 hosts, workload.simai.all_gpus: 4 fits (1 GPU per host, DP 4)")


@pytest.mark.parametrize("header,extra,refused", [
    ("MICRO", ", all_gpus: 6", "workload.simai.all_gpus: 6 (replaying {w}) but the fabric has 4 hosts"),
    ("MICRO all_gpus: 6", "", "workload.simai.path: {w}:1: all_gpus: 6 but the fabric has 4 hosts"),
])
def test_a_world_size_the_hosts_do_not_divide_names_where_it_came_from(tmp_path, header, extra, refused):
    w = tmp_path / "w.txt"
    w.write_text(f"{header}\n1\n{MICRO_ROW}")
    with pytest.raises(ScenarioError) as info:
        _plan(tmp_path, w, extra=extra)
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path / 's.yaml'}: {refused.format(w=w)} (spine_leaf (spines 1, leaves 2")
    assert msg.endswith("mappings that fit: 6 GPUs fit a fabric of 6 hosts (1 GPU each); on these 4 hosts, "
                        "workload.simai.all_gpus: 4 fits (1 GPU per host, DP 4)")


def test_a_quoted_all_gpus_reads_as_the_number_as_every_count_key_does(tmp_path):
    """Scenario numbers are read in pydantic's lax mode (testbed.spec.units.SpecModel, strict=False): a quoted
    decimal is the number written, for all_gpus as for fabric.spines or iterations; a word or a bool is not."""
    from testbed.spec.scenario import parse_scenario
    w = tmp_path / "w.txt"
    w.write_text(f"MICRO\n1\n{MICRO_ROW}")
    spec = parse_scenario({"fabric": {"spines": "1", "leaves": 2, "hosts_per_leaf": 2},
                           "workload": {"simai": {"path": str(w), "all_gpus": "8", "iterations": "2"}}})
    assert (spec.fabric.spines, spec.workload.simai.all_gpus, spec.workload.simai.iterations) == (1, 8, 2)
    for bad, words in (("eight", "valid integer"), (True, "is a boolean, not a number"), ("8.5", "valid integer")):
        with pytest.raises(ScenarioError, match=rf"workload\.simai\.all_gpus: .*{words}"):
            parse_scenario({"workload": {"simai": {"path": str(w), "all_gpus": bad}}})


def test_counts_of_one_are_singular_in_the_notes_and_the_mapping(tmp_path):
    """TP 1 on 4 hosts: the TP entry runs over groups of one rank, the DP one over one ring of all 4 hosts."""
    w = tmp_path / "w.txt"
    w.write_text("HYBRID_TRANSFORMER model_parallel_NPU_group: 1 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 4\n1\n"
                 "l\t-1\t1\tALLREDUCE\t4096\t1\tNONE\t0\t1\tALLREDUCE\t4096\t1\n")
    plan = _plan(tmp_path, w)
    assert plan.notes[0] == (f"{w}: replaying 1 fabric op per iteration x 1 iteration on 1 fabric stream, compute "
                             "x 0, overlap off: 1 DP-scoped allreduce/ring (1 concurrent ring of 4 ranks)")
    assert plan.notes[1] == ("simai: 4 ranks (TP 1 x DP 4 x PP 1) on 4 hosts, one rank per host; on the fabric: DP "
                             "1 group of 4 ranks (1 file entry), one rank per host: 1 host group of 4 hosts, 1 group "
                             "each; no data moves (groups of one rank): TP 4 groups of 1 rank")
    assert f"{w}: skipped 1 ALLREDUCE (TP) entry over groups of 1 rank: no data moves (line 3 l:fwd)" in plan.notes
