"""testbed compare on summary.json files: figures read, bands applied, marks and exit codes."""
from __future__ import annotations

import copy
import json

import pytest

from testbed import cli
from testbed.process.exitcodes import EXIT_BAD_INPUT, EXIT_REGRESSED
from testbed.results import compare
from testbed.results.figures import Band, band_for, figures, parse_band, size_label

# the shape of a quickstart run's summary.json (values of a real run, trimmed to the keys read)
QUICKSTART = {
    "run_id": "tb320c", "scenario": "quickstart", "complete": True, "faithful": True, "violations": [],
    "transport": {"retx_pkts": 0, "timeouts": 0, "switch_drops_pkts": 0, "unexplained_lost_pkts": 0},
    "sizes": [
        {"size_bytes": 65536, "group_size": 8, "collective": "allreduce", "algorithm": "ring",
         "busbw_bps": 9831802.46, "busbw_ratio": 0.99710, "algbw_bps": 5618172.83, "p50_us": 93317.657,
         "p99_us": None},
        {"size_bytes": 1048576, "group_size": 8, "collective": "allreduce", "algorithm": "ring",
         "busbw_bps": 9812000.0, "busbw_ratio": 0.995, "algbw_bps": 5607000.0, "p50_us": 1494608.0,
         "p99_us": None},
    ],
    "congestion": None,
    "fit": [{"collective": "allreduce", "algorithm": "ring", "group_size": 8, "b_ratio": 1.0035, "r2": 0.99999}],
}
# the shape of an incast_dcqcn run's summary.json
INCAST = {
    "run_id": "tba059", "complete": True, "faithful": True, "violations": [], "sizes": [],
    "transport": {"retx_pkts": 19, "timeouts": 0, "switch_drops_pkts": 8, "unexplained_lost_pkts": 0},
    "congestion": {"jain_index": 0.9949, "bottleneck_util": 0.9742, "queue_p99_bytes": 66464.0,
                   "lossless_queue_p99_bytes": 29078.0, "lossless_drops_pkts": 8, "ce_marked_pkts": 163},
    "load_balance": {"throughput_ratio_mean": 0.8348, "completion_ratio_mean": 0.8105, "slowdown_p99": 1.2338},
    "fit": None,
}


def _write(tmp_path, name, summary):
    d = tmp_path / name
    d.mkdir()
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def test_figures_of_a_collective_run():
    f = figures(QUICKSTART)
    assert f["faithful"] == 1.0
    assert f["busbw_ratio@64KiB"] == pytest.approx(0.9971)
    assert f["busbw_bps@1MiB"] == pytest.approx(9812000.0)
    assert f["p50_us@64KiB"] == pytest.approx(93317.657)
    assert "p99_us@64KiB" not in f  # n < 100: no p99, no figure
    assert f["fit_b_ratio@allreduce-ring-n8"] == pytest.approx(1.0035)
    assert f["retx_pkts"] == 0.0
    assert not any(k.startswith(("jain", "throughput")) for k in f)  # blocks the run did not have


def test_figures_of_an_incast_run_and_several_groups_per_size():
    f = figures(INCAST)
    assert f["jain_index"] == pytest.approx(0.9949)
    assert f["lossless_drops_pkts"] == 8.0
    assert f["slowdown_p99"] == pytest.approx(1.2338)
    assert "ce_marked_pkts" not in f
    two = copy.deepcopy(QUICKSTART)
    two["sizes"][1] = {**two["sizes"][0], "algorithm": "tree"}
    names = figures(two)
    assert "busbw_ratio@64KiB/allreduce-ring-n8" in names and "busbw_ratio@64KiB/allreduce-tree-n8" in names


def test_size_labels():
    assert [size_label(s) for s in (65536, 1 << 20, 3 << 30, 1000, 1536)] == ["64KiB", "1MiB", "3GiB", "1000B",
                                                                             "1536B"]


def test_not_a_summary_is_refused():
    with pytest.raises(ValueError, match="not a run's summary.json"):
        figures({"figures": {}})


@pytest.mark.parametrize("text, band", [
    ("3%", Band(rel=0.03)), (0.05, Band(abs=0.05)), ("10,50%", Band(abs=10, rel=0.5)),
    ({"abs": 2, "rel": 0.1}, Band(abs=2, rel=0.1)), ("7", Band(abs=7)),
])
def test_bands_parse(text, band):
    assert parse_band(text) == band


@pytest.mark.parametrize("bad, msg", [("x%", "'x' is not a number"), (-1, "must be a finite number >= 0"),
                                      ({"abs": 1, "pct": 2}, "unknown key"), ([1], "give a number")])
def test_bad_bands_are_named(bad, msg):
    with pytest.raises(ValueError, match=msg):
        parse_band(bad)


def test_band_lookup_order():
    over = {"busbw_ratio@1MiB": Band(abs=0.5), "busbw_*@64KiB": Band(abs=0.2), "busbw_ratio": Band(abs=0.1)}
    assert band_for("busbw_ratio@1MiB", over) == Band(abs=0.5)   # exact name
    assert band_for("busbw_ratio@64KiB", over) == Band(abs=0.2)  # glob before family
    assert band_for("busbw_ratio@128KiB", over) == Band(abs=0.1)  # family
    assert band_for("busbw_bps@128KiB", over) == Band(rel=0.03)   # default
    assert Band(abs=10, rel=0.5).allowed(100) == 50 and Band(abs=10, rel=0.5).allowed(4) == 10


def test_same_run_is_all_ok():
    c = compare.compare_figures(figures(QUICKSTART), figures(QUICKSTART))
    assert c.rows and all(r.status == compare.OK for r in c.rows) and not c.only_a and not c.only_b


def test_marks_follow_direction_and_band():
    slow = copy.deepcopy(QUICKSTART)
    slow["sizes"][0].update(busbw_bps=8.0e6, busbw_ratio=0.81, p50_us=114700.0)  # 20% slower
    slow["sizes"][1].update(busbw_ratio=0.98)  # -0.015: inside +-0.03
    slow["transport"]["retx_pkts"] = 21  # 21 > max(20, 50% of 0)
    slow["faithful"] = False
    c = compare.compare_figures(figures(QUICKSTART), figures(slow))
    marks = {r.name: r.status for r in c.rows}
    assert marks["busbw_bps@64KiB"] == marks["busbw_ratio@64KiB"] == marks["p50_us@64KiB"] == compare.REGRESSED
    assert marks["busbw_ratio@1MiB"] == compare.OK
    assert marks["retx_pkts"] == compare.REGRESSED and marks["faithful"] == compare.REGRESSED
    back = compare.compare_figures(figures(slow), figures(QUICKSTART))  # the other way round: improvements
    assert {r.name for r in back.improved} == {r.name for r in c.regressed}
    assert not back.regressed
    row = next(r for r in c.rows if r.name == "busbw_ratio@64KiB")
    assert row.message("baseline") == ("busbw_ratio@64KiB = 0.81, baseline 0.9971, band ±0.03 "
                                       "(higher is better): REGRESSED")


def test_edge_of_band_is_ok():
    a = {"busbw_ratio@1MiB": 0.99, "retx_pkts": 40.0}
    b = {"busbw_ratio@1MiB": 0.96, "retx_pkts": 60.0}  # exactly -0.03 and +max(20, 20)
    assert all(r.status == compare.OK for r in compare.compare_figures(a, b).rows)


def test_cli_compare_exit_codes_and_table(tmp_path, capsys):
    a = _write(tmp_path, "a", QUICKSTART)
    slow = copy.deepcopy(QUICKSTART)
    slow["sizes"][1]["busbw_bps"] = 9.0e6  # -8.3%
    b = _write(tmp_path, "b", slow)
    assert cli.main(["compare", str(a), str(a / "summary.json")]) == 0
    assert cli.main(["compare", str(a), str(b)]) == EXIT_REGRESSED
    out = capsys.readouterr().out
    assert "REGRESSED: busbw_bps@1MiB = 9e+06, A 9.812e+06, band ±3% (higher is better): REGRESSED" in out
    # a wider band for that figure: no regression
    assert cli.main(["compare", str(a), str(b), "--band", "busbw_bps=10%"]) == 0
    # only some figures
    assert cli.main(["compare", str(a), str(b), "--figures", "busbw_ratio,fit_*"]) == 0
    assert "busbw_bps" not in capsys.readouterr().out.split("B:")[-1].split("figures compared")[0]


def test_cli_compare_warns_about_a_run_that_is_not_faithful(tmp_path, capsys):
    """Two NOT faithful runs compared all "ok" and exit 0 without a word (fresh-user pass): each is named first."""
    bad = copy.deepcopy(QUICKSTART)
    bad["faithful"], bad["violations"] = False, ["CPU saturated: idle < 5% in 36 of 66 s"]
    a, b = _write(tmp_path, "a", bad), _write(tmp_path, "b", bad)
    assert cli.main(["compare", str(a), str(b)]) == 0
    warned = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("WARNING:")]
    assert warned == [f"WARNING: {d} is NOT faithful (its summary.json names the violations): its figures may show the "
                      "machine, not the emulated network" for d in (a, b)]
    assert cli.main(["compare", str(_write(tmp_path, "c", QUICKSTART)), str(a)]) == EXIT_REGRESSED  # faithful 1 -> 0
    assert len([ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("WARNING:")]) == 1


def test_cli_compare_blocks_only_one_run_has_are_listed(tmp_path, capsys):
    assert cli.main(["compare", str(_write(tmp_path, "q", QUICKSTART)), str(_write(tmp_path, "i", INCAST))]) == 0
    out = capsys.readouterr().out
    assert "only in A (not compared): busbw_bps@64KiB" in out and "only in B (not compared): jain_index" in out


def test_cli_compare_against_a_baseline_file(tmp_path):
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"name": "q", "figures": figures(QUICKSTART)}))
    assert cli.main(["compare", str(base), str(_write(tmp_path, "a", QUICKSTART))]) == 0


@pytest.mark.parametrize("argv, msg", [
    (["--band", "nosuch=3%"], "unknown figure 'nosuch'"),
    (["--band", "busbw_bps"], "give FIGURE=BAND"),
    (["--band", "busbw_bps=abc"], "'abc' is not a number"),
    (["--figures", "jain"], "unknown figure 'jain'"),
])
def test_cli_compare_bad_options(tmp_path, capsys, argv, msg):
    a = _write(tmp_path, "a", QUICKSTART)
    assert cli.main(["compare", str(a), str(a), *argv]) == EXIT_BAD_INPUT
    assert msg in capsys.readouterr().err


def test_cli_compare_missing_or_incomplete_run(tmp_path, capsys):
    assert cli.main(["compare", str(tmp_path), str(tmp_path)]) == EXIT_BAD_INPUT
    assert "no summary.json" in capsys.readouterr().err
    cut = _write(tmp_path, "cut", {**QUICKSTART, "complete": False, "incomplete_reason": "SIGINT during traffic"})
    assert cli.main(["compare", str(cut), str(cut)]) == EXIT_BAD_INPUT
    assert "the run is incomplete (SIGINT during traffic)" in capsys.readouterr().err


def _with_manifest(d, scenario):
    (d / "manifest.json").write_text(json.dumps({"scenario": scenario}))
    return d


def test_cli_compare_refuses_runs_of_different_experiments_unless_forced(tmp_path, capsys):
    import yaml
    from pathlib import Path

    from testbed.spec.scenario import parse_scenario

    root = Path(__file__).parents[1] / "scenarios"
    quick = parse_scenario(yaml.safe_load((root / "quickstart.yaml").read_text())).model_dump(mode="json")
    faster = copy.deepcopy(quick)
    faster["fabric"]["host_link_bps"] = 2 * quick["fabric"]["host_link_bps"]
    a = _with_manifest(_write(tmp_path, "a", QUICKSTART), quick)
    b = _with_manifest(_write(tmp_path, "b", INCAST), faster)
    assert cli.main(["compare", str(a), str(b)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "ran different experiments" in err and "fabric.host_link_bps: 10000000.0 vs 20000000.0" in err
    assert "--allow-different" in err
    for flag in ("--allow-different", "--force"):   # --force: the flag's first name, kept
        assert cli.main(["compare", str(a), str(b), flag]) == 0
        out = capsys.readouterr().out
        assert out.startswith("WARNING: different experiments, compared because of --allow-different:\n"
                              "WARNING:   fabric: 1 setting differs: fabric.host_link_bps")
    renamed = copy.deepcopy(quick)
    renamed["name"] = "quickstart-again"
    c = _with_manifest(_write(tmp_path, "c", QUICKSTART), renamed)
    assert cli.main(["compare", str(a), str(c)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("WARNING: scenario names differ: 'quickstart' vs 'quickstart-again'") and "0 REGRESSED" in out
