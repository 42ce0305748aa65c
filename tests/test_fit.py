"""The Hockney latency-bandwidth fit of a size sweep (testbed.results.fit)."""
import pandas as pd
import pytest

from testbed.results.fit import fit_line, fit_rows

RATE_BPS, EFF = 10e6, 0.9
FACTOR = 2 * 7 / 8  # ring all-reduce on 8 ranks


def sweep(a_s: float, b_s_per_byte: float, sizes=(4096, 65536, 1 << 20, 4 << 20), noise_us=()) -> pd.DataFrame:
    t_us = [(a_s + b_s_per_byte * s) * 1e6 for s in sizes]
    t_us = [t + (noise_us[i] if i < len(noise_us) else 0.0) for i, t in enumerate(t_us)]
    return pd.DataFrame({"size_bytes": sizes, "time_us": t_us, "collective": "all_reduce", "algorithm": "ring",
                         "group_size": 8, "busbw_factor": FACTOR})


def test_an_exact_line_is_recovered_and_b_compared_with_the_busbw_factor():
    b = FACTOR / (RATE_BPS * EFF / 8)
    (row,) = fit_rows(sweep(0.002, b), RATE_BPS, EFF)
    assert row["a_s"] == pytest.approx(0.002, rel=1e-6) and row["b_ratio"] == pytest.approx(1.0, rel=1e-9)
    assert row["r2"] == pytest.approx(1.0) and row["a_burst_floor_s"] == 0.0
    assert "T = 2.00 ms + " in fit_line(row) and "a <" not in fit_line(row)


@pytest.mark.parametrize("a_s, explained", [(-0.003, True), (-0.006, False)])
def test_a_negative_start_up_time_is_measured_and_said_whether_htbs_burst_explains_it(a_s, explained):
    from testbed.measure.link_model import early_bytes

    early_s = early_bytes(RATE_BPS, 1024) * 8 / RATE_BPS  # 3 frames of burst + one frame: 4.2 ms at 10 Mbit/s
    assert early_s == pytest.approx(4 * 1038 * 8 / RATE_BPS)
    b = FACTOR / (RATE_BPS * EFF / 8)
    (row,) = fit_rows(sweep(a_s, b), RATE_BPS, EFF, early_s)
    assert row["a_s"] == pytest.approx(a_s, abs=1e-6) and row["a_burst_floor_s"] == -early_s
    line = fit_line(row)
    assert ("may end up to 3.32 ms early" in line) == explained and ("below the" in line) == (not explained)


def test_fewer_than_three_sizes_give_no_fit():
    assert fit_rows(sweep(0.001, 1e-6, sizes=(4096, 65536)), RATE_BPS, EFF) is None


def test_busbw_above_the_link_is_explained_by_the_burst_bound_or_named():
    from testbed.measure.link_model import above_link_note, early_bytes, size_error_bound
    from testbed.spec.scenario import parse_scenario
    import yaml
    from pathlib import Path

    spec = parse_scenario(yaml.safe_load((Path(__file__).parents[1] / "scenarios" / "quickstart.yaml").read_text()))
    early = early_bytes(spec.fabric.host_link_bps, spec.fabric.mtu_bytes)  # 3 + 1 frames of 4214 B
    assert early == 4 * 4214
    bound = size_error_bound(1.0, 16384, spec, 0.9)
    assert bound == pytest.approx(early / (16384 / 0.9), rel=1e-9)  # 0.926
    rows = pd.DataFrame({"size_bytes": [16384, 1 << 20], "busbw_ratio": [1.637, 0.99], "busbw_factor": [1.0, 1.0]})
    note = above_link_note(rows, spec, 0.9)
    assert "1 size row(s) (highest 1.637 at 16384 B): each within its bound" in note
    rows.loc[0, "busbw_ratio"] = 2.5
    assert "beyond the HTB burst bound, e.g. 16384 B at 2.500 > 1 + 0.926: not explained" in above_link_note(rows, spec, 0.9)
    assert above_link_note(rows.iloc[1:], spec, 0.9) is None
