"""The labs' bands files and the lab checker (testbed.labcheck, ``testbed lab check``), without a fabric:
every lab's expected.yaml is valid and agrees with its README and its own per-run values; the checker
judges run directories written here the way a run writes them (manifest.json with the validated
scenario, summary.json), passes them inside the bands and fails them outside, on an edited scenario,
a missing run or another lab's runs."""
import json
import shutil
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.labcheck import bands as bands_mod
from testbed.labcheck.bands import LabBands, band_of, load, render
from testbed.labcheck.check import LabCheckError, check, lab_dir
from testbed.labcheck.figures import FigureMissing, summary_value
from testbed.workloads import load_scenario

LABS = Path(__file__).resolve().parents[1] / "labs"
LAB_DIRS = sorted(p for p in LABS.iterdir() if p.is_dir())


@pytest.mark.parametrize("lab", LAB_DIRS, ids=lambda p: p.name)
def test_every_lab_has_a_bands_file_that_agrees_with_its_readme_and_runs(lab):
    bands = load(lab)
    assert bands.lab == lab.name
    stems = {p.stem for p in bands_mod.scenario_files(lab)}
    assert {f.scenario for f in bands.figures if f.scenario} == stems, "every scenario of the lab has figures"
    readme = (lab / "README.md").read_text()
    assert bands_mod.readme_block(readme) == render(bands), "README's expected figures = render(expected.yaml)"
    if bands.measured is None:
        return
    assert bands.measured.n_runs >= 1 and set(bands.wall_s) == stems
    for f in bands.figures:
        assert len(f.runs) == bands.measured.n_runs, f.name
        assert f.band == band_of(f.runs, bands.widen(f), f.widen_abs, f.digits, f.clip), f.name
        assert f.band[0] <= min(f.runs) and max(f.runs) <= f.band[1], f.name


def test_band_is_min_max_widened_rounded_outward_and_clipped():
    assert band_of([50, 64], 0.1, 0, 0) == (36, 78)            # w = the spread, 14
    assert band_of([60, 62], 0.1, 0, 0) == (53, 69)            # w = 10 % of 62
    assert band_of([0.648, 0.706], 0.1, 0, 3, (0, 1)) == (0.577, 0.777)
    assert band_of([0.25, 0.95], 0.1, 0, 3, (0, 1)) == (0.0, 1.0)
    assert band_of([0, 0], 0.1, 0, 0) == (0, 0)                # a structural zero stays zero
    assert band_of([0, 0], 0.1, 5, 0, (0, None)) == (0, 5)
    with pytest.raises(ValueError, match="at least one"):
        band_of([], 0.1, 0, 3)


def test_summary_paths_select_keys_positions_and_fields():
    s = {"congestion": {"jain_index": 0.9, "victim": [{"dip_depth": 0.5}]},
         "sizes": [{"size_bytes": 1024, "p50_us": 10.0}, {"size_bytes": 4096, "p50_us": 20.0}],
         "jobs": {"jobs": [{"name": "a", "busbw_ratio": 0.5}]}, "nothing": None}
    assert summary_value(s, "congestion.jain_index") == 0.9
    assert summary_value(s, "congestion.victim[0].dip_depth") == 0.5
    assert summary_value(s, "sizes[size_bytes=4096].p50_us") == 20.0
    assert summary_value(s, "jobs.jobs[name=a].busbw_ratio") == 0.5
    with pytest.raises(FigureMissing, match="sizes\\[size_bytes=65536\\]"):
        summary_value(s, "sizes[size_bytes=65536].p50_us")
    with pytest.raises(FigureMissing, match="nothing"):
        summary_value(s, "nothing.x")
    with pytest.raises(ValueError, match="bad figure path"):
        summary_value(s, "a-b")


def test_bands_file_refuses_unknown_keys_and_dangling_ratios():
    with pytest.raises(ValueError, match="bandz"):
        LabBands.model_validate({"lab": "x", "figures": [{"name": "a", "label": "A", "scenario": "s",
                                                          "read": "x.y", "bandz": [0, 1]}]})
    with pytest.raises(ValueError, match="not a figure"):
        LabBands.model_validate({"lab": "x", "figures": [{"name": "r", "label": "R", "ratio": ["a", "b"]}]})


# ------------------------------------------------------------------ the checker on written run dirs
def _lab(tmp_path: Path) -> Path:
    """A copy of lab 2's scenario files with a bands file of known bands."""
    lab = tmp_path / "labs" / "02_incast_dcqcn"
    lab.mkdir(parents=True)
    for p in bands_mod.scenario_files(LABS / "02_incast_dcqcn"):
        shutil.copy(p, lab)
    (lab / "README.md").write_text("# Lab 2: incast\n")
    bands = LabBands.model_validate({"lab": "02_incast_dcqcn", "figures": [
        {"name": "n_drops", "label": "lossless drops", "scenario": "no_cc", "read": "congestion.lossless_drops_pkts",
         "digits": 0, "runs": [50, 64], "band": [43, 71]},
        {"name": "d_queue", "label": "queue p99", "scenario": "dcqcn", "read": "congestion.queue_p99_bytes",
         "digits": 0, "runs": [4000, 75000], "band": [0, 82500]},
        {"name": "n_queue", "label": "queue p99", "scenario": "no_cc", "read": "congestion.queue_p99_bytes",
         "digits": 0, "runs": [199000], "band": [179000, 219000]},
        {"name": "n_jain", "label": "Jain index", "scenario": "no_cc", "read": "congestion.jain_index",
         "digits": 3, "clip": [0, 1], "runs": [0.25, 0.94], "band": [0, 1]},
        {"name": "ratio", "label": "dcqcn / no_cc", "ratio": ["d_queue", "n_queue"], "digits": 3, "runs": [0.2],
         "band": [0, 0.5]}],
        "measured": {"date": "2026-12-02", "n_runs": 2, "machine": {"cores": 2, "datapath": "user"}}})
    bands_mod.save(bands, lab)
    return lab


def _run(results: Path, scenario: Path, congestion: dict, started: str, edit=None) -> Path:
    spec = load_scenario(scenario).model_dump(mode="json")
    if edit:
        edit(spec)
    d = results / f"{started}-{spec['name']}-tb0001"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"run_id": "tb0001", "started_utc": started, "scenario": spec}))
    t = {"posted_bytes": 10, "acked_bytes": 10, "delivered_bytes": 10, "order_errors": 0, "retx_pkts": 1}
    (d / "summary.json").write_text(json.dumps({"complete": True, "faithful": True, "transport": t,
                                                "congestion": congestion}))
    return d


def _both(tmp_path, lab, no_cc_drops=60, edit=None):
    results = tmp_path / "results"
    _run(results, lab / "no_cc.yaml", {"lossless_drops_pkts": no_cc_drops, "queue_p99_bytes": 199392,
                                       "jain_index": 0.7}, "20261202T100000Z",
         edit)
    _run(results, lab / "dcqcn.yaml", {"queue_p99_bytes": 54002}, "20261202T100100Z")
    return results


def test_checker_passes_runs_inside_their_bands(tmp_path, capsys):
    lab = _lab(tmp_path)
    v = check(str(lab), _both(tmp_path, lab))
    assert v.ok and v.failed == 0, v.text()
    assert "RESULT: PASS" in v.text() and "0.271" in v.text()   # the ratio 54002 / 199392
    # a band as wide as the figure's whole range cannot fail a run: said, not counted as a pass
    (jain,) = [t for st, t in v.lines if "Jain index" in t]
    assert ("INFO", jain) in v.lines and "not checked: the reference runs spread over its whole range" in jain
    assert main(["lab", "check", str(lab), str(tmp_path / "results")]) == 0
    assert "PASS" in capsys.readouterr().out


def test_checker_fails_a_figure_outside_its_band_naming_value_and_band(tmp_path, capsys):
    lab = _lab(tmp_path)
    results = _both(tmp_path, lab, no_cc_drops=98)
    assert main(["lab", "check", str(lab), str(results)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "98" in out and "43 .. 71" in out and "above the band" in out


def test_checker_fails_an_edited_scenario_naming_the_setting(tmp_path):
    lab = _lab(tmp_path)
    v = check(str(lab), _both(tmp_path, lab, edit=lambda s: s["transport"].update(window_pkts=8)))
    assert not v.ok and "transport.window_pkts: 8 (lab file: 16)" in v.text()


def test_checker_fails_a_missing_run_and_refuses_another_labs_runs(tmp_path):
    lab = _lab(tmp_path)
    results = tmp_path / "results"
    _run(results, lab / "dcqcn.yaml", {"queue_p99_bytes": 54002}, "20261202T100100Z")
    v = check(str(lab), results)
    assert not v.ok and "no run of no_cc.yaml (lab2-incast-no-cc)" in v.text()
    other = tmp_path / "other"
    _run(other, LABS / "03_pfc_hol" / "pfc.yaml", {}, "20261202T100200Z")
    v = check(str(lab), other)
    assert not v.ok and "holds no run of lab 02_incast_dcqcn: it holds runs of lab3-pfc" in v.text()


def test_bad_input_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(LabCheckError, match="no lab '99'"):
        lab_dir("99")
    assert lab_dir("2") == LABS / "02_incast_dcqcn" == lab_dir("02_incast_dcqcn")
    assert main(["lab", "check", "2", str(tmp_path)]) == 2
    assert "no run directory" in capsys.readouterr().err
    assert main(["lab", "check", "2", str(tmp_path / "absent")]) == 2


def test_a_lab_files_auto_matches_what_the_run_resolved():
    from testbed.labcheck.check import scenario_differences
    lab = {"congestion": {"ecn": {"marker": "auto", "kmin_bytes": 5}}}
    assert scenario_differences({"congestion": {"ecn": {"marker": "nftables", "kmin_bytes": 5}}}, lab) == []
    assert scenario_differences({"congestion": {"ecn": {"marker": "red", "kmin_bytes": 6}}}, lab) == \
        ["congestion.ecn.kmin_bytes: 6 (lab file: 5)"]
