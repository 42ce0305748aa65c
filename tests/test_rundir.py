"""RunDir (one reader and writer of a run directory: CSV or Parquet, the rule for a table not recorded, the
JSON files), the table schema (one source for RunDir and docs/tables.md: tests/test_run_summary.py) and Parquet
beside CSV."""
import dataclasses
import warnings
from pathlib import Path

import pandas as pd
import pytest

from controllers.loop_result import PFC_EVENT_NAMES
from testbed.emulation.faults import CSV_COLUMNS as FAULT_COLUMNS
from testbed.workloads.pattern.results import FCT_COLUMNS, RATE_COLUMNS, UPLINK_COLUMNS
from testbed.results import tables
from testbed.results.rundir import NotARunDir, RunDir, TableError, read_csv_table
from testbed.workloads.jobs.results import TENANTS_COLUMNS
from testbed.measure.class_queues import CLASS_QUEUE_COLUMNS
from testbed.results.schema import TABLES
from traffic.protocol import QpCnpLog, QpRateLog
from traffic.transport.qp import QPCounters
from traffic.transport.responder import ResponderCounters


@pytest.mark.parametrize("table, columns", [
    ("ops", tables.OPS_COLUMNS), ("sizes", tables.SIZES_COLUMNS), ("fct", FCT_COLUMNS),
    ("flow_rates", RATE_COLUMNS), ("uplinks", UPLINK_COLUMNS), ("pfc_events", PFC_EVENT_NAMES),
    ("faults", [*FAULT_COLUMNS, "detect_ms", "reroute_ms", "detected_by", "measured_loss"]),
    ("qp_rates", list(QpRateLog(rank=1, peer=0, qpn=0x10000, channel=0, time_ns=[5], event=["cnp"], stage=[""],
                                rate_bps=[5e6], target_rate_bps=[1e7], alpha=[1.0]).rows()[0])),
    ("cnp_events", list(QpCnpLog(rank=1, peer=0, qpn=0x20000, channel=0, role="np", time_ns=[5]).rows()[0])),
    ("class_queues", CLASS_QUEUE_COLUMNS), ("tenants", TENANTS_COLUMNS),
    ("qps", ["rank", "peer", "role", "qpn", "udp_sport", "first_psn", "channel", "dscp",
             *(f.name for f in dataclasses.fields(QPCounters)), *(f.name for f in dataclasses.fields(ResponderCounters))]),
])
def test_schema_matches_the_columns_the_code_writes(table, columns):
    assert TABLES[table].problems(columns) == []
    if table in ("qps", "qp_rates", "cnp_events"):  # pattern runs add the trial
        assert TABLES[table].problems(["trial", *columns]) == []


def test_every_column_has_a_type_and_a_description():
    for t in TABLES.values():
        assert t.description and t.written
        for c in t.columns:
            assert c.dtype in ("int", "float", "str", "bool") and c.description, (t.name, c.name)
            assert not c.optional or c.when, (t.name, c.name)


def test_family_columns_match_by_number():
    cpu = TABLES["cpu"]
    assert cpu.problems(["time_ns", "idle_pct", "min_cpu_idle_pct", "cpu0_idle_pct", "cpu11_idle_pct"]) == []
    assert cpu.problems(["time_ns", "idle_pct", "min_cpu_idle_pct", "cpux_idle_pct"]) == \
        ["undocumented column 'cpux_idle_pct'"]


def _run_dir(tmp_path: Path) -> Path:
    """A run directory as the runner writes it: manifest, summary and tables of two all-reduces."""
    d = tmp_path / "20261201T000000Z-quickstart-tb0001"
    d.mkdir()
    run = RunDir(d)
    run.write_manifest({"run_id": "tb0001"})
    run.write_summary({"faithful": True, "complete": True})
    rows = [{"op_id": k, "rank": r, "group_index": 0, "group_size": 2, "t_start_ns": 10**9 * k,
             "t_end_ns": 10**9 * k + 5 * 10**8, "sent_bytes": 65536, "rx_msgs": 1, "t_rx_done_ns": 10**9 * k + 1}
            for k in range(2) for r in range(2)]
    meta = {k: {"size_bytes": 65536, "iteration": k, "warmup": k == 0, "layer": ""} for k in range(2)}
    tables.write_tables(run, 2, 1e7, rows, meta, [], None, None)
    run.write_table("ports", pd.DataFrame({"time_ns": [1, 2], "port": ["tb0001l1-eth1"] * 2, "tx_bytes": [0, 4200],
                                           "tx_pkts": [0, 1], "drops_pkts": [0, 0], "backlog_bytes": [0, 0],
                                           "backlog_pkts": [0, 0]}))
    return d


def test_csv_run_and_parquet_run_read_alike(tmp_path):
    d = _run_dir(tmp_path)
    from_csv = RunDir.open(d)
    assert from_csv.names == ["sizes", "ops", "rank_ops", "ports"]
    assert from_csv.summary == {"faithful": True, "complete": True} and from_csv.manifest["run_id"] == "tb0001"
    assert from_csv.run_id == "tb0001" and from_csv.incomplete is None and from_csv.t0_ns == 0
    ops_csv = from_csv.ops
    assert list(ops_csv.columns) == tables.OPS_COLUMNS and ops_csv["layer"].tolist() == ["", ""]
    assert from_csv.write_parquet() == ["sizes", "ops", "rank_ops", "ports"]
    for name in from_csv.names:  # only the Parquet copies are left: they are read, with the same frames
        (d / f"{name}.csv").unlink()
    from_parquet = RunDir.open(d)
    assert from_parquet.names == from_csv.names
    for name in from_csv.names:
        pd.testing.assert_frame_equal(from_parquet[name], from_csv[name])
    assert from_parquet.sizes.busbw_bps.iloc[0] == pytest.approx(65536 * 8 / 0.5)
    assert dict(from_parquet).keys() == set(from_csv.names)


def test_a_table_rewritten_after_the_parquet_copies_is_read_as_rewritten(tmp_path):
    """testbed run --solo adds columns to jobs.csv after the run wrote its Parquet copies; a reader (who
    prefers NAME.parquet) sees them."""
    d = _run_dir(tmp_path)
    RunDir(d).write_parquet()
    run = RunDir.open(d)
    sizes = run.sizes.assign(extra_ratio=0.5)
    with pytest.warns(UserWarning, match="extra_ratio"):
        run.write_table("sizes", sizes)
        assert list(RunDir.open(d).sizes["extra_ratio"]) == [0.5]
    assert pd.read_parquet(d / "sizes.parquet")["extra_ratio"].tolist() == [0.5]


def test_a_table_the_run_did_not_record_is_absent(tmp_path):
    r = RunDir.open(_run_dir(tmp_path))
    assert r.table("qp_rates") is None and "qp_rates" not in r and r.get("qp_rates") is None
    with pytest.raises(TableError, match=r"has no table 'qp_rates' .*congestion control.*present: sizes"):
        r.qp_rates
    with pytest.raises(TableError, match=r"has no table 'fct'"):
        r["fct"]


def test_an_unknown_table_name_is_refused_naming_it(tmp_path):
    r = RunDir.open(_run_dir(tmp_path))
    for read in (lambda: r.table("nope"), lambda: r["nope"], lambda: r.write_table("nope", pd.DataFrame())):
        with pytest.raises(TableError, match="'nope' is not a table of a run; documented tables: sizes, ops"):
            read()
    with pytest.raises(AttributeError):
        r.nope
    assert not (r.path / "nope.csv").exists()


def test_empty_tables_have_the_documented_columns_and_types(tmp_path):
    d = _run_dir(tmp_path)
    (d / "rank_ops.csv").write_text("\n")  # a pattern run writes no rank rows
    RunDir(d).write_table("ops", pd.DataFrame(columns=tables.OPS_COLUMNS))
    r = RunDir.open(d)
    assert r.rank_ops.empty and TABLES["rank_ops"].problems(r.rank_ops.columns) == []
    assert r.ops.empty and r.ops["op_id"].dtype == "int64" and r.ops["time_us"].dtype == "float64"


def test_not_a_run_directory_is_refused_naming_it(tmp_path):
    with pytest.raises(NotARunDir, match="'.*nowhere': no such directory"):
        RunDir.open(tmp_path / "nowhere")
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotARunDir, match="not a directory"):
        RunDir.open(tmp_path / "f")
    with pytest.raises(TableError, match=r"not a run directory \(no manifest.json"):
        RunDir.open(tmp_path)


def test_a_missing_column_is_an_error_and_an_extra_one_a_warning(tmp_path):
    d = _run_dir(tmp_path)
    RunDir(d).write_table("ports", RunDir(d).ports.drop(columns=["backlog_bytes"]))
    with pytest.raises(TableError, match="ports.csv: missing column 'backlog_bytes'"):
        RunDir.open(d).ports
    RunDir(d).write_table("sizes", RunDir(d).sizes.assign(extra_bps=1.0))
    with pytest.warns(UserWarning, match="undocumented column 'extra_bps'"):
        assert "extra_bps" in RunDir.open(d).sizes


def test_json_files_events_and_writes_are_atomic(tmp_path):
    d = _run_dir(tmp_path)
    r = RunDir.open(d)
    assert r.topology == {} and r.congestion_loop is None and r.events() == []
    from controllers.contract import EVENTS_FILE, LinkDown, event_line
    down = LinkDown(link=["l1", "s1"], cause="port_status", switch="l1", port=3, seq=1, lost_pkts=None,
                    tx_pkts=None, loss=None, window_ms=None, time_ns=5)
    (d / EVENTS_FILE).write_text(event_line(down) + '{"event": "rer')
    assert r.events() == [down]  # typed records; a torn last line is skipped
    r.summary  # cached, then replaced by a write
    r.write_summary({"faithful": False})
    assert r.summary == {"faithful": False} and RunDir(d).summary == {"faithful": False}
    assert not list(d.glob(".*.tmp"))
    r.mark_incomplete("SIGINT during the traffic")
    assert RunDir(d).incomplete == "SIGINT during the traffic"
    r.mark_complete()
    assert RunDir(d).incomplete is None
    (d / "topology.json").write_text("{not json")
    with pytest.raises(TableError, match="topology.json: not JSON"):
        RunDir(d).topology


def test_topology_facts(tmp_path):
    d = _run_dir(tmp_path)
    RunDir(d).write_json("topology.json", {
        "switches": [{"name": "tb0001l1"}], "hosts": [{"name": "tb0001h1", "rank": 0}],
        "links": [{"a": "tb0001h1", "a_port": 0, "b": "tb0001l1", "b_port": 1, "rate_bps": 1e7}]})
    r = RunDir.open(d)
    assert r.port_links == {"tb0001l1-eth1": ("tb0001h1", 1e7)} and r.host_names == {0: "tb0001h1"}


def test_read_csv_table_text_and_bool_columns(tmp_path):
    p = tmp_path / "pfc_events.csv"
    p.write_text("time_ns,port,class,event,charged_bytes,upstream,upstream_port,actuation_us,pfc_frame\n"
                 "5,s1-eth1,3,pause,100,h1,h1-eth0,12.5,True\n6,s1-eth1,3,storm,-1,,,0.0,False\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = read_csv_table(p, TABLES["pfc_events"])
    assert f["upstream"].tolist() == ["h1", ""] and f["pfc_frame"].tolist() == [True, False]
    assert f["pfc_frame"].dtype == bool and f["time_ns"].dtype == "int64"
