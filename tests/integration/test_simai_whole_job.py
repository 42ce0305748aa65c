"""A whole job's traffic: scenarios/simai_tp2_dp2_pp2.yaml (TP 2, DP 2, PP 2 on 8 hosts, 10 Mbit/s host links,
20 Mbit/s fabric links) with overlap compare: serialized iterations (every collective alone, the job waiting)
against overlapped ones (each group scope of each stage on its own stream, the stages' programs concurrent).

Checked: per-group communication time and exposed communication in summary.json; the serialized run takes
W + sum of its collectives' times (W: the compute-only pipeline schedule); the overlapped run takes what the
model's critical path gives from its own measured collective times; the overlapped run is faster by
T_off - T_on = sum_g C_g(off) - E_on (the communication hidden under compute and other groups' traffic),
within a band of the model's prediction; the pipeline bubble is reported per stage against (p-1)/(m+p-1).
Seen here: T_off 2.50 s, T_on 2.06 s, saving 0.44 s (formula 0.44 s, model 0.45 s); about 12 s of traffic.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import run_scenario_file

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_tp2_dp2_pp2_overlap_saves_what_the_formula_says(tmp_path):
    text = (REPO / "scenarios" / "simai_tp2_dp2_pp2.yaml").read_text().replace(
        "path: workloads/", f"path: {REPO}/scenarios/workloads/")
    res, s = run_scenario_file(tmp_path, text, expect_rc=None)
    assert s["ops_done"] == 4 * 44 and s["transport"]["delivered_bytes"] == s["transport"]["posted_bytes"]
    r = s["replay"]
    assert r["order"] == ["off", "on", "on", "off"]
    # how the ranks map onto the hosts (summary.json replay.mapping): one rank per host, every scope on the fabric
    m = r["mapping"]
    assert (m["all_gpus"], m["hosts"], m["ranks_per_host"]) == (8, 8, 1)
    assert {k: (v["where"], v["groups"], v["host_groups"], v["hosts_per_host_group"])
            for k, v in m["scopes"].items()} == {"TP": ("fabric", 4, 2, 2), "DP": ("fabric", 4, 2, 2),
                                                 "PP": ("fabric", 4, 4, 2)}
    off, on = r["off"], r["on"]
    w = off["compute_s_per_iteration"]
    assert w == pytest.approx(on["compute_s_per_iteration"]) and w == pytest.approx(5 * 0.3, rel=0.01)
    for b in (off, on):
        assert set(b["groups"]) == {"TP", "DP", "PP"}
        assert {g: v["ops"] for g, v in b["groups"].items()} == {"TP": 32, "DP": 4, "PP": 8}
        # each group's time against its bytes at the host link rate (2-rank rings: each rank sends S): DP
        # 4 x 167,772 B; TP 32 x 20,972 B and PP 8 x 20,972 B messages fit the shaper's burst, so half of it
        assert b["groups"]["DP"]["comm_s"] > 0.9 * 4 * 167772 * 8 / 10e6
        assert b["groups"]["TP"]["comm_s"] > 0.5 * 32 * 20972 * 8 / 10e6
        assert b["groups"]["PP"]["comm_s"] > 0.5 * 8 * 20972 * 8 / 10e6
        # T - W = exposed communication min(T - W, C) + overhead (testbed.workloads.replay.run.exposed_split)
        assert b["exposed_comm_s"] + b["overhead_s"] == pytest.approx(b["iteration_s"] - w)
        assert b["exposed_comm_s"] <= b["comm_s_per_iteration"] + 1e-9 and b["overhead_s"] >= 0
        assert len(b["stages"]) == 2 and b["pipeline"]["bubble_fraction_formula"] == pytest.approx(1 / 5)
        for st in b["stages"]:
            assert st["bubble_fraction_schedule"] == pytest.approx(0.2, abs=0.01)
            # the stage idles at least the compute-only bubble (p - 1)(t_f + t_b) = 0.3 s
            assert st["bubble_fraction"] * b["iteration_s"] >= 0.9 * 0.3
    # serialized: W + every collective's time, nothing hidden
    serial = sum(g["comm_s"] for g in off["groups"].values())
    assert off["iteration_s"] == pytest.approx(w + serial, rel=0.03)
    # overlapped: the model's critical path over the measured collective times
    assert on["iteration_s"] == pytest.approx(on["predicted_iteration_s"], rel=0.05)
    # the groups really overlapped: the overlapped run's streams were busy together
    assert sum(on["streams"].values()) > 1.2 * (on["iteration_s"] - w)
    sv = r["saving"]
    assert sv["measured_s"] == pytest.approx(off["iteration_s"] - on["iteration_s"])
    assert sv["formula_s"] == pytest.approx(serial - on["exposed_comm_s"])
    assert sv["measured_s"] > 0.15 * off["iteration_s"]
    assert sv["measured_s"] == pytest.approx(sv["formula_s"], abs=0.03 * off["iteration_s"])
    assert sv["measured_s"] == pytest.approx(sv["model_s"], rel=0.25)
    assert "T_off - T_on = sum_g C_g(off) - E_on" in sv["formula"]
    assert "overlap saved" in res.stdout and "bubble" in res.stdout
