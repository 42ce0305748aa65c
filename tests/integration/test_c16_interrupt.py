"""C16: results survive interrupts. SIGINT during traffic keeps the collectives that finished (partial
tables, directory marked INCOMPLETE); SIGINT just after the last collective keeps the full results.
Either way nothing of the run is left and the exit code is 130. Also: every table is on one clock."""
import re
import signal
import subprocess
import sys
import time

import pandas as pd

from test_c06_cleanup import run_leftovers
from testbed.results.rundir import RunDir
from testbed.results.shape import SUMMARY_KEYS

SCENARIO = """
name: c16
fabric: {spines: 1, leaves: 2, hosts_per_leaf: 2}
workload: {sizes: {min_bytes: 32KiB, max_bytes: %s, factor: 2}, iterations: 1, warmup_iterations: 0}
"""


def _run_and_interrupt(tmp_path, max_bytes: str, after_op: int, delay_s: float = 0.0):
    """Start ``testbed run``; send SIGINT ``delay_s`` after progress shows ``after_op`` collectives done."""
    scen = tmp_path / "c16.yaml"
    scen.write_text(SCENARIO % max_bytes)
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(scen), "--results",
                             str(tmp_path / "res")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rid, seen = None, []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        m = re.match(r"run (tb[0-9a-f]{4}): ", line)  # not "removed run tbXXXX: ..." of a dead run
        rid = rid or (m and m.group(1))
        if re.match(rf"\[\s*{after_op}/", line):
            time.sleep(delay_s)
            proc.send_signal(signal.SIGINT)
            break
    else:
        proc.kill()  # never reached the collective: do not leave the run going
    out, err = proc.communicate(timeout=120)
    err = "".join(seen) + err
    run_dirs = list((tmp_path / "res").glob("*"))
    assert rid and len(run_dirs) == 1, err
    return proc.returncode, out, err, rid, run_dirs[0]


def _assert_one_clock(run: RunDir, ops: pd.DataFrame) -> None:
    """ops, ports and cpu share the Unix-ns clock: every operation lies inside the sampling spans
    (ports.csv: give or take one sampling period, as a sampler stopped by an interrupt samples no more)."""
    ports, cpu = run.ports, run.cpu
    period_ns = run.manifest["scenario"]["output"]["sample_period_ms"] * 1e6
    assert ports["time_ns"].min() <= ops["t_start_ns"].min()
    assert ops["t_end_ns"].max() <= ports["time_ns"].max() + period_ns
    # cpu.csv stamps each 1 s interval at its end
    assert cpu["time_ns"].min() - 1e9 <= ops["t_start_ns"].min() and ops["t_end_ns"].max() <= cpu["time_ns"].max()
    ranks = run.rank_ops
    assert ranks.groupby("op_id")["t_start_ns"].min().tolist() == ops["t_start_ns"].tolist()
    assert abs(ops["t_start_ns"].min() - time.time_ns()) < 600e9  # epoch ns, not CLOCK_MONOTONIC


def test_sigint_during_traffic_keeps_finished_collectives(tmp_path):
    code, out, err, rid, run_dir = _run_and_interrupt(tmp_path, "4MiB", after_op=3)
    print(err[-600:])
    assert code == 130, err
    assert run_leftovers(rid) == {"links": [], "bridges": [], "netns": [], "procs": []}
    run = RunDir.open(run_dir)
    s = run.summary
    done = s["ops_done"]
    assert s["complete"] is False and s["faithful"] is None and s["ops_planned"] == 8
    assert list(s) == list(SUMMARY_KEYS) and s["verdict"] == "incomplete"   # the shape of a complete one
    assert s["fidelity"] == {} and s["transport"]["posted_bytes"] is None and s["congestion"]["enabled"] is False
    assert s["interrupted"] == "interrupted by SIGINT"   # not null beside an incomplete_reason naming SIGINT
    assert 3 <= done < 8, s
    reason = (run_dir / "INCOMPLETE").read_text()
    assert reason == s["incomplete_reason"] + "\n"
    assert f"interrupted by SIGINT during traffic after {done} of 8 collectives" in reason
    ops = run.ops
    assert ops["op_id"].tolist() == list(range(done))
    assert ops["size_bytes"].tolist() == [32768 << i for i in range(done)]
    assert (ops["time_rank_avg_us"] <= ops["time_us"]).all() and (ops["time_us"] > 0).all()
    sizes = run.sizes
    assert sizes["count"].tolist() == [1] * done and sizes["p99_us"].isna().all()
    assert sizes["p50_us"].tolist() == ops["time_us"].tolist()   # one sample: p50 is that sample
    assert [r["size_bytes"] for r in s["sizes"]] == ops["size_bytes"].tolist()
    assert len(run.rank_ops) == 4 * done
    _assert_one_clock(run, ops)
    assert f"partial results ({done} of 8 collectives) kept in {run_dir}" in err
    assert "INCOMPLETE" in out


def test_sigint_after_the_last_collective_keeps_full_results(tmp_path):
    code, out, err, rid, run_dir = _run_and_interrupt(tmp_path, "128KiB", after_op=3)
    print(err[-400:])
    assert code == 130, err
    assert run_leftovers(rid) == {"links": [], "bridges": [], "netns": [], "procs": []}
    assert not (run_dir / "INCOMPLETE").exists()
    run = RunDir.open(run_dir)
    s = run.summary
    assert s["complete"] is True and s["ops_done"] == 3
    assert list(s)[:len(SUMMARY_KEYS)] == list(SUMMARY_KEYS) and s["incomplete_reason"] is None
    assert s["interrupted"].startswith("interrupted by SIGINT during the teardown")
    assert s["teardown"] == "done" and s["controller"]["deaths"] == 0   # updated after the teardown
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] > 0
    ops = run.ops
    assert ops["size_bytes"].tolist() == [32768, 65536, 131072]
    qps, msgs = run.qps, run.msgs
    assert msgs["fct_us"].notna().all() and len(msgs) == 4 * 3 * 2 * 3   # ranks x ops x 2(n-1) chunks
    assert {"first_psn", "acks_rx"} <= set(qps.columns)
    _assert_one_clock(run, ops)
    assert f"complete results kept in {run_dir}" in err and "removed" in err
    assert "busbw(Mb/s)" in out
