"""The run context and the manifest built from it (no root, no fabric)."""
import json
from pathlib import Path

import pytest

from testbed.emulation.agents import transport_params
from testbed.host.capabilities import Capabilities, Feature
from testbed.workloads import plan_workload
from testbed.pipeline import manifest
from testbed.pipeline.context import Recording, RunContext
from testbed.spec.rto import rto_basis, run_rto_us
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.workloads import load_scenario

QUICKSTART = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
CAPS = Capabilities(run_id="tb0001", kernel="6.1.0", features={"ovs": Feature(True, "x")},
                    datapath="user", ecn_marker="nftables", delay="none")


def quickstart_ctx(tmp_path) -> RunContext:
    spec = load_scenario(QUICKSTART)
    ctx = RunContext.new(spec, QUICKSTART, tmp_path, "tb0001", plan_workload(spec).ops)
    return ctx.probed("user", transport_params(spec, run_rto_us(spec)), {"ok": True, "source": "socket"})


def test_context_names_the_run_directory_and_derives_goodput(tmp_path):
    ctx = quickstart_ctx(tmp_path)
    assert ctx.run_dir.parent == tmp_path.resolve()
    assert ctx.run_dir.name == f"{ctx.started_utc}-quickstart-tb0001" and not ctx.run_dir.exists()
    assert ctx.n_ranks == 8 and len(ctx.ops_plan) == 41
    assert ctx.efficiency == pytest.approx(4096 / (4096 + 58))  # Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4
    assert ctx.goodput_bps == pytest.approx(10e6 * ctx.efficiency)
    with pytest.raises(AttributeError):
        ctx.datapath = "kernel"  # frozen: a step returns a new context
    assert Recording(ops_planned=41).phase == "start-up"


def test_context_carries_the_layout_built_once_with_the_run_id(tmp_path):
    ctx = quickstart_ctx(tmp_path)
    assert ctx.layout.run_id == "tb0001" and ctx.probed("user", ctx.transport, {}).layout is ctx.layout
    assert [h.name for h in ctx.layout.hosts][:2] == ["tb0001h1", "tb0001h2"]
    preview = ctx.spec.fabric.layout_preview()  # before any run: the scenario's own names
    assert preview.run_id == "" and [h.name for h in preview.hosts][:2] == ["h1", "h2"]
    assert len(preview.links) == len(ctx.layout.links)


def test_manifest_records_backends_rto_and_rank_groups(tmp_path):
    ctx = quickstart_ctx(tmp_path)
    m = manifest.build(ctx, CAPS)
    json.dumps(m)  # JSON-ready
    assert m["backends"] == {"datapath": "user", "ecn_marker": "off (the machine offers nftables)", "delay": "none",
                                "queues": "htb_bfifo", "pfc": "off"}
    assert m["rto"] == {"source": "auto", **rto_basis(ctx.spec), "text": m["rto"]["text"]}
    assert m["rto"]["rto_us"] == 506_585 and m["rto"]["text"].startswith("retransmission timeout 506.585 ms (auto")
    assert m["rank_groups"] == {"all": [list(range(8))]}
    assert m["transport"] == {"payload_bytes": 4096, "window_pkts": 16, "ack_every_pkts": 4, "rto_us": 506_585,
                              "sndbuf_bytes": 16384, "line_rate_bps": 10e6, "congestion_control": "none",
                              "entropy": "per_flow", "entropy_ports": 1, "flowlet_gap_us": 0, "loss_recovery": "go_back_n",
                              "reorder_window_us": 0, "rto_low_us": 0, "rto_low_pkts": 0,
                              "bdp_cap_pkts": 0, "cc_settings": {},
                              "cc_module": "traffic.transport.cc.none"}
    assert m["ovs_send_buffer"] == ctx.send_buffer
    assert m["scenario_path"] == str(QUICKSTART) and m["scenario"]["fabric"]["queue_backend"] == "htb_bfifo"


def test_manifest_with_a_given_rto(tmp_path):
    spec = parse_scenario({"transport": {"rto_us": 20_000}, "workload": {"sizes": {"min_bytes": 65536,
                                                                                   "max_bytes": 65536}}})
    ctx = RunContext.new(spec, None, tmp_path, "tb0002", plan_workload(spec).ops).probed(
        "user", transport_params(spec, run_rto_us(spec)), {})
    m = manifest.build(ctx, CAPS)
    assert m["rto"] == {"source": "transport.rto_us", "rto_us": 20_000,
                        "text": "retransmission timeout 20 ms (transport.rto_us)"}
    assert m["scenario_path"] is None


def test_manifest_refuses_a_delay_this_kernel_cannot_add(tmp_path):
    spec = parse_scenario({"fabric": {"link_delay_us": 100},
                           "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})
    ctx = RunContext.new(spec, None, tmp_path, "tb0003", plan_workload(spec).ops).probed(
        "user", transport_params(spec, run_rto_us(spec)), {})
    with pytest.raises(ScenarioError, match="link_delay_us"):
        manifest.build(ctx, CAPS)


def test_iterations_cut_by_the_byte_cap_are_announced():
    """Fresh-user review 2026-12-01: the quickstart asked for 5 iterations and 4 MiB ran 4, silently."""
    w = {"sizes": {"min_bytes": "1MiB", "max_bytes": "4MiB", "factor": 4}, "iterations": 5,
         "max_bytes_per_size": "16MiB"}
    (note,) = plan_workload(parse_scenario({"workload": w})).notes
    assert "workload.max_bytes_per_size = 16777216 B cuts the 5 iterations" in note and "4194304 B: 4" in note
    assert plan_workload(parse_scenario({"workload": {**w, "max_bytes_per_size": "off"}})).notes == ()
