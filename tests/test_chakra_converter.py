"""A trace made by Chakra's own converter (mlc-chakra 1.0.0, pinned in requirements-chakra.txt) from a
PyTorch-style execution trace (tests/data/chakra_pytorch_et) reads and plans: its METADATA node is skipped
and counted in one warning, the ctrl_deps on the root it dropped are left out, its c10d ops are CPU-side
compute, its NCCL kernels the collectives (comm_size as ASTRA-sim means it: the all-gather's input)."""
import subprocess
import sys
from pathlib import Path

from testbed.workloads.chakra.plan import chakra_plan
from testbed.spec.scenario import parse_scenario
from traffic.workloads.chakra.trace import read_traces

ET = Path(__file__).resolve().parent / "data/chakra_pytorch_et/pytorch_et.json"
CONVERTER = Path(sys.executable).parent / "chakra_converter"


def convert(out_dir: Path, ranks: int = 2) -> Path:
    """Run Chakra's converter on the PyTorch-style trace once per rank: ``out_dir/trace.<rank>.et``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        res = subprocess.run([str(CONVERTER), "--log-filename", str(out_dir / f"convert.{r}.log"), "PyTorch",
                              "--input", str(ET), "--output", str(out_dir / f"trace.{r}.et")],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
    return out_dir


def test_chakras_converter_output_reads_with_its_metadata_node_skipped(tmp_path):
    traces = read_traces(str(convert(tmp_path / "et")))
    for t in traces:
        assert t.skipped == ((3, "## process_group:init ## (METADATA_NODE)"),)
        assert t.dropped_ctrl_deps == 1                       # the thread root's ctrl_dep on the dropped process root
        colls = [n for n in t.nodes if n.kind == "coll"]
        assert [(n.comm_type, n.size_bytes, n.pg_name) for n in colls] == [
            ("ALL_REDUCE", 65536 * 4, "0"), ("BROADCAST", 16384 * 4, "0"), ("ALL_GATHER", 16384 * 4, "0")]
        cpu = {n.name for n in t.nodes if n.kind == "comp" and n.cpu}
        assert {"c10d::allreduce_", "c10d::broadcast_", "c10d::allgather_", "record_param_comms"} <= cpu
        # the kernel after the init: aten::mm (4) depended on the metadata node (3), which depended on the thread (2)
        assert next(n for n in t.nodes if n.node_id == 4).deps == (2,)


def test_chakras_converter_output_plans_with_one_warning(tmp_path):
    path = convert(tmp_path / "et")
    spec = parse_scenario({"fabric": {"leaves": 1, "hosts_per_leaf": 2},
                           "workload": {"chakra": {"path": str(path), "size_scale": 0.25}}})
    plan = chakra_plan(spec)
    assert [(op.collective, op.size_bytes) for op in plan.ops] == [
        ("allreduce", 65536), ("broadcast", 16384), ("allgather", 2 * 16384)]
    warnings = [x for x in plan.notes if x.startswith("warning: ")]
    assert warnings == [f"warning: {path}: skipped 2 nodes a network replay cannot run (kinds: ## process_group:init "
                        "## (METADATA_NODE) x 2); the nodes that depended on them wait for what they depended on"]
    assert any("2 ctrl_deps name nodes the files do not have" in x for x in plan.notes)
