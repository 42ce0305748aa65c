"""C06: after SIGKILL of a run, ``testbed clean`` removes exactly what the run made."""
import configparser
import os
import re
import signal
import socket
import subprocess
import sys
import time

import psutil

from conftest import EXIT_FAITHFUL, EXIT_NOT_JUDGED, run_scenario_file, run_cli

LONG = """
name: killme
fabric: {spines: 1, leaves: 2, hosts_per_leaf: 2}
workload: {sizes: {min_bytes: 4MiB, max_bytes: 4MiB}, iterations: 50, max_bytes_per_size: 1GiB}
"""
SHORT = """
name: after
fabric: {spines: 1, leaves: 2, hosts_per_leaf: 1}
workload: {sizes: {min_bytes: 64KiB, max_bytes: 64KiB}, iterations: 2}
"""


def run_leftovers(rid: str) -> dict:
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    bridges = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True).stdout.split()
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    procs = [p.pid for p in psutil.process_iter(["cmdline"])
             if rid in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid()]
    return {"links": [l for l in links.splitlines() if re.search(rf"\d+: {rid}", l)],
            "bridges": [b for b in bridges if b.startswith(rid)],
            "netns": [n for n in netns if n.startswith(rid)], "procs": procs}




def test_sigkill_then_clean(tmp_path):
    proc = None
    subprocess.run(["ovs-vsctl", "--may-exist", "add-br", "unrelbr0", "--", "set", "bridge", "unrelbr0",
                    "datapath_type=netdev"], check=True)
    try:
        scen = tmp_path / "long.yaml"
        scen.write_text(LONG)
        proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(scen), "--results",
                                 str(tmp_path / "res")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rid = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            m = re.match(r"run (tb[0-9a-f]{4}): ", line)  # not "removed run tbXXXX: ..." of a dead run
            rid = rid or (m and m.group(1))
            if "fabric up" in line:
                break
        assert rid, "run never reported its id"
        ctl = [p for p in psutil.process_iter(["cmdline"]) if "controllers.run" in " ".join(p.info["cmdline"] or [])
               and rid in " ".join(p.info["cmdline"])]
        assert ctl, "controller process not found"
        argv = ctl[0].info["cmdline"]
        conf = configparser.ConfigParser()
        conf.read(argv[argv.index("--config-file") + 1])
        port = conf.getint("DEFAULT", "ofp_tcp_listen_port")
        time.sleep(3)  # mid-run: agents are sending
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert any(run_leftovers(rid).values()), "SIGKILL left nothing behind: the test proves nothing"
        # the controller watches its parent (controllers.parent_watch): it ends itself within seconds
        _, alive = psutil.wait_procs([ctl[0]], timeout=6)
        assert not alive, "the controller outlived the SIGKILLed testbed"

        res = run_cli("clean")
        assert res.returncode == 0, res.stderr
        assert run_leftovers(rid) == {"links": [], "bridges": [], "netns": [], "procs": []}
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, "controller port still open"
        assert "unrelbr0" in subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout

        again = tmp_path / "again"
        again.mkdir()
        # the point is that a run works again after clean, not its verdict: a 2-rank 64 KiB run is judged
        # faithful or NOT JUDGED (exit 6) by whether a host happened to have packets ready for 0.1 s
        res, summary = run_scenario_file(again, SHORT, expect_rc=None)
        assert summary["complete"] is True and res.returncode in (EXIT_FAITHFUL, EXIT_NOT_JUDGED), res.stdout
        assert "File exists" not in res.stderr
        assert summary["transport"]["delivered_bytes"] == summary["transport"]["posted_bytes"] > 0
    finally:
        if proc is not None and proc.poll() is None:  # a failed assertion must not leave the long run going
            proc.kill()
            proc.wait(timeout=10)
            run_cli("clean")
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", "unrelbr0"], check=False)
