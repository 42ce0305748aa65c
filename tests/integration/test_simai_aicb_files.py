"""Every AICB workload file in $TESTBED_SHARED_WORKLOADS/aicb (tests/shared_files.py) replayed as published (issue 29
item 1), on a fabric of this machine's size: 4 hosts (1 spine, 2 leaves), 10 Mbit/s, compute waits off, 1 iteration,
sizes scaled so each run moves a few MB at most. The files have no all_gpus: (and the model files no ep:, pp:, vpp:,
ga:): each run prints one warning naming what it assumed; the BROADCAST rows run as broadcasts with a note that SimAI
skips them. L65B-M1-C05 (declares 839 rows, holds 33) is refused naming its line 2, before anything is built.

Per file (1 iteration): all_reduce.txt 19 DP all-reduces of 4 ranks (4 KiB .. 1 GiB x 1e-3); all_to_all.txt 19
all-to-alls; L7B (TP 2, all_gpus = the 4 hosts) 142 ops on the two TP pairs and the two DP pairs, its norm
BROADCAST among them on the fabric; L65B_D1_C08 (DeepSpeed ZeRO-3, TP 1) its DP reduce-scatter (its 12 TP
all-gathers are over groups of one rank: skipped, as SimAI's groups make them); G13B (TP 8) with
``workload.simai.all_gpus: 32``: servers of 8 GPUs, its 173 TP collectives (the BROADCAST among them) in the
scale-up domain, its DP reduce-scatter across the 4 hosts. A run is judged by the testbed's own verdict:
faithful, NOT JUDGED, or NOT faithful on the machine's pacing only (every byte delivered in every case).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import (EXIT_FAITHFUL, EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED, assert_faithful_or_only_pacing_failed,
                      run_cli, run_scenario_file)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from shared_files import needs, shared  # noqa: E402

pytestmark = pytest.mark.integration

AICB = shared("aicb")
SCENARIO = """
name: aicb-{tag}
fabric: {{spines: 1, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: 100KB,
          mtu_bytes: 4200}}
transport: {{payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}}
workload:
  simai: {{path: {path}, size_scale: {scale}, time_unit: ns, iterations: 1, compute_scale: off{extra}}}
"""
ABSENT = "has no ep:, pp:, vpp:, ga:, all_gpus:; assumed all_gpus "
# file -> (size_scale, extra keys, fabric ops of one iteration by (collective, group), start of the warning)
MICRO = "has no all_gpus:; assumed all_gpus 4 (the fabric's hosts)"
FILES = {
    "all_reduce.txt": (1e-3, "", {("allreduce", "DP"): 19}, MICRO),
    "all_to_all.txt": (1e-3, "", {("alltoall", "DP"): 19}, MICRO),
    "L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt": (
        1e-4, "", {("broadcast", "TP"): 1, ("allgather", "TP"): 1, ("allreduce", "TP"): 139,
                   ("reducescatter", "DP"): 1}, ABSENT + "4 (the fabric's hosts), ep 1"),
    "L65B_D1_C08_Llama65B_deepspeed_zero3_A100.txt": (
        1e-3, "", {("reducescatter", "DP"): 1}, ABSENT + "4 (the fabric's hosts), ep 1"),
    "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt": (
        1e-5, ", all_gpus: 32", {("reducescatter", "DP"): 1}, ABSENT + "32 (workload.simai.all_gpus), ep 1"),
}
BROKEN = "L65B-M1-C05_Llama65B_megatron_tp8_pp1_mbs1_A100.txt"
needs_aicb = needs(AICB)


@needs_aicb
@pytest.mark.parametrize("name", sorted(FILES))
def test_aicb_file_replays_on_4_hosts(tmp_path, name):
    scale, extra, ops, warning = FILES[name]
    text = SCENARIO.format(tag=name.split("_")[0].split(".")[0].lower(), path=AICB / name, scale=scale, extra=extra)
    res, s = run_scenario_file(tmp_path, text, expect_rc=None, timeout=300)
    judged = {k: c["status"] for k, c in s["checks"].items() if c["status"] != "passed"}
    print(f"{name}: exit {res.returncode}, faithful {s['faithful']}, iteration {s['replay']['iteration_s']:.3f} s, "
          f"checks not passed {judged}, violations {s.get('violations')}")
    assert res.returncode in (EXIT_FAITHFUL, EXIT_NOT_JUDGED, EXIT_NOT_FAITHFUL)
    if res.returncode == EXIT_NOT_FAITHFUL:
        assert_faithful_or_only_pacing_failed(res, s)
    # one warning line naming what was assumed
    warnings = [line for line in res.stderr.splitlines() if line.startswith("testbed: warning: simai:")]
    assert warnings == [f"testbed: warning: simai: {s['replay']['reader']['warning'][len('simai: '):]}"]
    assert warnings[0].startswith(f"testbed: warning: simai: {AICB / name} {warning}")
    # every op ran and every posted byte arrived
    t = s["transport"]
    assert s["ops_done"] == sum(ops.values())
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] > 0 and t["order_errors"] == 0
    steps = s["replay"]["steps"]
    fabric = {}
    for st in steps:
        if st["where"] == "fabric":
            key = ({"BROADCAST": "broadcast", "ALLGATHER": "allgather", "ALLREDUCE": "allreduce",
                    "REDUCESCATTER": "reducescatter", "ALLTOALL": "alltoall"}[st["collective"]], st["group"])
            fabric[key] = fabric.get(key, 0) + 1
    assert fabric == ops
    # BROADCAST: run as a broadcast, noted as what SimAI skips
    has_broadcast = name.startswith(("L7B", "G13B"))
    assert s["replay"]["reader"]["simai_skips"] == (["line 3 norm:fwd"] if has_broadcast else [])
    assert ("SimAI's reader skips BROADCAST" in res.stderr) == has_broadcast
    if name.startswith("L7B"):
        (bc,) = [st for st in steps if st["collective"] == "BROADCAST"]
        assert (bc["line"], bc["algorithm"], bc["where"], bc["group_size"], bc["size_bytes"]) == \
            (3, "ring", "fabric", 2, 2)     # 16384 B x 1e-4
        assert bc["comm_s"] > 0


@needs_aicb
def test_aicb_file_with_a_wrong_row_count_is_refused_naming_its_line(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO.format(tag="c05", path=AICB / BROKEN, scale=1e-5, extra=""))
    res = run_cli("run", p, "--results", tmp_path / "r", timeout=120)
    assert res.returncode == 2, res.stderr
    assert f"{AICB / BROKEN}:2: column 'row_count' value 839: line 2 declares 839 rows, the file holds 33; the " \
           "last row read is line 35" in res.stderr
    assert not (tmp_path / "r").exists()
