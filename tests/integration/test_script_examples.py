"""Every scenario script example (scenarios/scripts/) runs with ``--quick`` on real fabrics (6 short runs,
about 60 s of fabric time), and the tables of those real runs match their documented columns
(testbed.results.schema, docs/tables.md), in CSV and Parquet alike."""
import contextlib
import importlib.util
import io
from pathlib import Path

import pandas as pd
import pytest

from testbed.process.exitcodes import EXIT_FAITHFUL, EXIT_NOT_FAITHFUL
from testbed.results.rundir import read_csv_table
from testbed.results.schema import TABLES

SCRIPTS = Path(__file__).resolve().parents[2] / "scenarios" / "scripts"
EXAMPLES = sorted(p.stem for p in SCRIPTS.glob("*.py"))


def _main(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """{example: ({label: RunResult}, printed text)}; each example run once with --quick."""
    out = {}
    capture = tmp_path_factory.mktemp("printed")
    for name in EXAMPLES:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            results = _main(name)(["--quick", "--results", str(tmp_path_factory.mktemp(name))])
        (capture / f"{name}.txt").write_text(buf.getvalue())
        out[name] = (results, buf.getvalue())
    return out


def test_there_are_examples():
    assert set(EXAMPLES) >= {"sweep_link_rate", "ecmp_vs_spray", "incast_dcqcn"}


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_complete(ran, name):
    results, printed = ran[name]
    assert len(results) == 2
    for label, r in results.items():
        # 3 (not faithful) is allowed: the CI machine's cores may be shared; the figures are checked below
        assert r.exit_code in (EXIT_FAITHFUL, EXIT_NOT_FAITHFUL), (name, label, r.verdict, r.summary.get("violations"))
        assert r.summary["complete"] is True
        assert r.run_dir is not None and r.run_dir.is_dir()
        assert r.summary["run_dir"] == str(r.run_dir) and r.summary["scenario"] == r.scenario.name
    # run(quiet=True), the default: the runs print nothing on stdout (was testbed run's 12 lines per run);
    # what is printed is the script's own table
    for line in ("# results:", "# transport:", "# report:", "# controller"):
        assert line not in printed, (name, line)


def test_sweep_link_rate_busbw_scales_with_the_rate(ran):
    results, printed = ran["sweep_link_rate"]
    assert list(results) == ["5M", "10M"]
    for rate, r in results.items():
        assert list(r.sizes.size_bytes) == [131072, 262144]
        assert r.sizes.busbw_ratio.between(0.85, 1.02).all(), r.sizes
        assert r.scenario.get("fabric.host_link_bps") == r.scenario.get("fabric.fabric_link_bps")
    ratio = results["10M"].sizes.busbw_bps.to_numpy() / results["5M"].sizes.busbw_bps.to_numpy()
    assert ((ratio > 1.8) & (ratio < 2.2)).all(), ratio
    assert ["rate", "size_bytes", "busbw(Mb/s)", "busbw/link"] in [line.split() for line in printed.splitlines()]


def test_spray_balances_the_uplinks_better_than_ecmp(ran):
    results, printed = ran["ecmp_vs_spray"]
    ecmp, spray = results["ecmp"], results["spray"]
    assert len(ecmp.fct) == len(spray.fct) == 3 * 4  # 3 trials x 4 flows
    assert ecmp.fct.size_bytes.eq(512 * 1024).all()
    assert spray.scenario.get("transport.entropy") == "spray"
    # ECMP's per-flow hash put two flows on one spine (share 0.5) in some trial; spraying spreads each
    # trial's bytes over the 4 spines
    assert ecmp.uplinks.share.max() >= 0.45
    assert spray.uplinks.share.between(0.15, 0.35).all(), spray.uplinks
    assert spray.fct.slowdown.mean() < ecmp.fct.slowdown.mean()


def test_dcqcn_answers_marks_and_pauses_less(ran):
    results, printed = ran["incast_dcqcn"]
    none, dcqcn = results["none"], results["dcqcn"]
    assert none.qps.ce_pkts.sum() == 0 and none.qps.cnps_tx.sum() == 0  # no congestion control: Not-ECT
    assert dcqcn.qps.ce_pkts.sum() > 0 and dcqcn.qps.cnps_tx.sum() > 0
    assert len(dcqcn.qp_rates) > 0
    assert dcqcn.pfc_ports.pauses_sent.sum() < none.pfc_ports.pauses_sent.sum()
    assert dcqcn.lossless_queues.backlog_bytes.quantile(0.99) < none.lossless_queues.backlog_bytes.quantile(0.99)


def test_real_tables_match_their_documented_columns(ran):
    """Every CSV table of every run is documented, has exactly the documented columns, and its Parquet
    copy holds the same DataFrame; the runs cover collectives, patterns, ECN/PFC and DCQCN."""
    seen = set()
    for name, (results, _) in ran.items():
        for label, r in results.items():
            csvs = sorted(p.stem for p in r.run_dir.glob("*.csv"))
            assert set(csvs) <= set(TABLES), (name, label, set(csvs) - set(TABLES))
            assert sorted(p.stem for p in r.run_dir.glob("*.parquet")) == csvs
            for table in csvs:
                spec = TABLES[table]
                frame = read_csv_table(r.run_dir / f"{table}.csv", spec)
                assert spec.problems(frame.columns) == [], (name, label, table)
                pd.testing.assert_frame_equal(r.tables[table], frame)  # read from the Parquet copy
            seen.update(csvs)
    assert seen >= {"sizes", "ops", "rank_ops", "qps", "msgs", "ports", "cpu", "fct", "flow_rates", "uplinks",
                    "lossless_queues", "ecn_marking", "pfc_events", "pfc_ports", "qp_rates", "cnp_events"}
