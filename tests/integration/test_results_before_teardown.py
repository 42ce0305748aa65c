"""Results are on disk before teardown starts (issue 16, item 6): ``testbed run`` is SIGKILLed right after
it says ``results written to DIR; tearing down`` (the line it prints once every table and summary.json
are written, before the agents and the fabric are torn down); the directory then holds the complete
results, as a complete run writes them: summary.json with ``"complete": true`` and the fidelity
verdict, every table readable with its documented columns, no INCOMPLETE; the controller's congestion
loop (ECN on) stopped and wrote its tables before too. The kill caught the teardown (the run's
objects were still there); ``testbed clean RUN_ID`` then removes them all."""
import re
import signal
import subprocess
import sys
import time


from conftest import REPO, run_cli
from test_c06_cleanup import run_leftovers
from testbed.results.rundir import RunDir

#: scenarios/ecn_marking.yaml (4 hosts, 2 leaves, ECN on the lossless class) at 10 Mbit/s everywhere,
#: 3 small sizes, 1 iteration each
SIZES = [65536, 131072, 262144]


def _scenario() -> str:
    text = (REPO / "scenarios" / "ecn_marking.yaml").read_text()
    text = text.replace("name: ecn_marking", "name: killed_in_teardown").replace("fabric_link_bps: 5M",
                                                                               "fabric_link_bps: 10M")
    text = text.replace("sizes: {min_bytes: 256KiB, max_bytes: 1MiB, factor: 4}",
                        "sizes: {min_bytes: 64KiB, max_bytes: 256KiB, factor: 2}")
    text = text.replace("iterations: 3", "iterations: 1").replace("warmup_iterations: 1", "warmup_iterations: 0")
    assert "64KiB" in text and "iterations: 1" in text and "10M" in text and "5M" not in text
    return text


def test_sigkill_in_teardown_keeps_complete_results(tmp_path):
    scen = tmp_path / "killed.yaml"
    scen.write_text(_scenario())
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(scen), "--results",
                             str(tmp_path / "res")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rid, seen, killed = None, [], False
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            m = re.match(r"run (tb[0-9a-f]{4}): ", line)  # not "removed run tbXXXX: ..." of a dead run
            rid = rid or (m and m.group(1))
            if re.match(r"results written to .*; tearing down$", line.strip()):
                proc.send_signal(signal.SIGKILL)
                killed = True
                break
        proc.wait(timeout=30)
        err = "".join(seen)
        assert killed and rid, f"never saw the line before the teardown:\n{err}"
        left = run_leftovers(rid)
        print(f"left by the kill in teardown: { {k: len(v) for k, v in left.items()} }")
        assert left["bridges"] and left["procs"], f"the kill did not catch the teardown: {left}"

        (run_dir,) = (tmp_path / "res").iterdir()
        assert not (run_dir / "INCOMPLETE").exists()
        r = RunDir.open(run_dir)
        s = r.summary
        assert s["complete"] is True and s["teardown"] == "pending" and s["interrupted"] is None
        assert s["ops_done"] == s["ops_planned"] == len(SIZES)
        assert isinstance(s["faithful"], bool) and s["checks"]["controller"]["status"] == "passed", s["checks"]
        assert s["controller"]["deaths"] == 0 and s["controller"]["openflow_errors"] == 0
        t = s["transport"]
        assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] > 0
        assert [r["size_bytes"] for r in s["sizes"]] == SIZES
        # the congestion loop stopped on request and wrote its tables before the teardown
        c = s["congestion"]
        assert c is not None and c["ect_pkts"] > 0 and c["ecn_loop_ticks"] > 100, c
        assert (run_dir / "congestion_loop.stopped").exists()
        # every table a complete collective run writes, readable with its documented columns
        want = {"ops", "rank_ops", "sizes", "qps", "msgs", "ports", "cpu", "lossless_queues", "ecn_marking"}
        assert want <= set(r.names), r.names
        for name in want:  # ecn_marking.csv may hold no row: at 10 Mbit/s spines no queue reaches Kmin
            assert len(r[name]) > 0 or name == "ecn_marking", name
            assert (run_dir / f"{name}.parquet").exists(), name
        assert r.ops["size_bytes"].tolist() == SIZES and (r.ops["time_us"] > 0).all()
        assert len(r.rank_ops) == 4 * len(SIZES)
        sizes = r.sizes
        assert sizes["size_bytes"].tolist() == SIZES and (sizes["busbw_ratio"] > 0.5).all()
        assert (r.msgs["fct_us"].notna()).all()
        assert r.ports["time_ns"].max() >= r.ops["t_end_ns"].max() - 1e6   # sampled to the last collective
        print(f"SIGKILL in teardown: summary.json complete, faithful {s['faithful']}, "
              f"tables {sorted(r.names)}")

        res = run_cli("clean", rid)
        assert res.returncode == 0, res.stderr
        assert f"removed run {rid}" in res.stdout + res.stderr
        assert run_leftovers(rid) == {"links": [], "bridges": [], "netns": [], "procs": []}
    finally:
        if proc.poll() is None:  # a failed assertion must not leave the run going
            proc.kill()
            proc.wait(timeout=10)
        if rid:
            run_cli("clean", rid)
