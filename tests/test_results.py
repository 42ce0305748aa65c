"""Results tables: busbw factors, percentiles (C09), the two ways to time a collective, the run directory."""
import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dataplane.atomic_files import write_csv, write_json
from testbed.results import tables as results
from traffic import collectives


@pytest.mark.parametrize("n, factor", [(8, 1.75), (4, 1.5), (2, 1.0), (1, 0.0)])
def test_allreduce_busbw_factor(n, factor):
    assert collectives.busbw_factor("allreduce", "ring", n) == factor


def test_busbw_factor_refuses_no_ranks():
    with pytest.raises(ValueError, match="n_ranks=0"):
        collectives.busbw_factor("allreduce", "ring", 0)


C09 = [100, 101, 102, 103, 500]


def test_c09_percentiles_nearest_rank():
    assert results.percentile_us(C09, 50) == 102
    assert results.percentile_us(C09, 99) == 500           # nearest rank: the maximum, never above it
    assert results.percentile_us(C09, 99.9) == 500
    assert results.percentile_us([250.0], 50) == 250       # one sample gives that sample
    assert math.isnan(results.percentile_us(C09, 99, min_samples=100))
    assert math.isnan(results.percentile_us([], 50))
    with pytest.raises(ValueError, match="q=0"):
        results.percentile_us(C09, 0)


def test_percentiles_are_samples_and_never_above_max():
    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 100, 1001):
        v = rng.lognormal(5, 1, n)
        for q in (50, 90, 99, 99.9):
            p = results.percentile_us(v, q)
            assert p <= v.max() and p in v
            assert p == np.sort(v)[math.ceil(Fraction(str(q)) * n / 100) - 1]   # rank ceil(q/100 n), Hyndman-Fan def. 1


def _ops(times_us, size=1 << 20, warmup=0):
    rows = [{"op_id": i, "size_bytes": size, "iteration": i - warmup, "warmup": i < warmup, "layer": "",
             "time_us": t, "time_rank_avg_us": t} for i, t in enumerate(times_us)]
    return pd.DataFrame(rows)


def test_size_table_c09_and_sample_count():
    sizes = results.size_table(_ops([7777] + C09, warmup=1), n_ranks=8, goodput_bps=10e6)
    r = sizes.iloc[0]
    assert r["count"] == 5 and r["p50_us"] == 102 and r["time_us"] == pytest.approx(181.2)
    assert math.isnan(r["p99_us"]) and math.isnan(r["p999_us"])
    assert r["busbw_bps"] == pytest.approx((1 << 20) * 8 / 181.2e-6 * 1.75)
    assert list(sizes.columns) == results.SIZES_COLUMNS


@pytest.mark.parametrize("n, p99, p999", [(99, None, None), (100, 99.0, None), (999, 990.0, None),
                                          (1000, 990.0, 999.0)])
def test_p99_needs_100_and_p999_1000_samples(n, p99, p999):
    r = results.size_table(_ops(np.arange(1, n + 1, dtype=float)), 8, 10e6).iloc[0]
    assert r["count"] == n
    assert (None if math.isnan(r["p99_us"]) else r["p99_us"]) == p99
    assert (None if math.isnan(r["p999_us"]) else r["p999_us"]) == p999


def test_blank_percentiles_alike_in_csv_json_and_printed_table(tmp_path):
    sizes = pd.concat([results.size_table(_ops(C09, size=65536), 8, 10e6),
                       results.size_table(_ops(np.arange(1, 101, dtype=float), size=1 << 20), 8, 10e6)])
    write_csv(sizes, tmp_path / "sizes.csv")
    csv = pd.read_csv(tmp_path / "sizes.csv")
    assert csv["p99_us"].isna().tolist() == [True, False] and csv["p999_us"].isna().all()
    write_json(tmp_path / "summary.json", {"sizes": results.size_rows_json(sizes)})
    js = json.loads((tmp_path / "summary.json").read_text())["sizes"]
    assert [(r["count"], r["p50_us"], r["p99_us"], r["p999_us"]) for r in js] == [(5, 102.0, None, None),
                                                                                  (100, 50.0, 99.0, None)]
    lines = results.format_size_table(sizes).splitlines()
    head = lines[0].split()
    assert head[-4:] == ["n", "p50(us)", "p99(us)", "p99.9(us)"]
    assert lines[1].split()[-4:] == ["5", "102", "n<100", "n<1000"]
    assert lines[2].split()[-4:] == ["100", "50", "99", "n<1000"]


def test_ops_table_span_and_rank_average():
    # 2 ranks; op 0: rank 0 runs 0..1000 us, rank 1 runs 100..1500 us
    rows = [{"op_id": 0, "rank": 0, "t_start_ns": 10**18, "t_end_ns": 10**18 + 1_000_000},
            {"op_id": 0, "rank": 1, "t_start_ns": 10**18 + 100_000, "t_end_ns": 10**18 + 1_500_000}]
    ops = results.ops_table(rows, {0: {"size_bytes": 1_500_000, "iteration": 0, "warmup": False, "layer": ""}}, 2)
    r = ops.iloc[0]
    assert list(ops.columns) == results.OPS_COLUMNS
    assert r["time_us"] == 1500 and r["time_rank_avg_us"] == 1200
    assert (r["t_start_ns"], r["t_end_ns"]) == (10**18, 10**18 + 1_500_000)
    assert r["algbw_bps"] == pytest.approx(8e9) and r["busbw_bps"] == pytest.approx(8e9)  # factor 1 at n=2
    assert r["busbw_rank_avg_bps"] == pytest.approx(1e10)
    sizes = results.size_table(ops, 2, 8e9)
    assert sizes.iloc[0]["busbw_ratio"] == pytest.approx(1.0)
    assert sizes.iloc[0]["busbw_rank_avg_bps"] == pytest.approx(1e10)


def test_empty_tables_keep_their_columns():
    ops = results.ops_table([], {}, 8)
    assert list(ops.columns) == results.OPS_COLUMNS and ops.empty
    assert list(results.size_table(ops, 8, 10e6).columns) == results.SIZES_COLUMNS


def test_incomplete_marker(tmp_path):
    results.mark_incomplete(tmp_path, "interrupted by SIGINT")
    assert (tmp_path / "INCOMPLETE").read_text() == "interrupted by SIGINT\n"
    results.mark_complete(tmp_path)
    assert not (tmp_path / "INCOMPLETE").exists()
    results.mark_complete(tmp_path)  # twice is fine
