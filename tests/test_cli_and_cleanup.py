"""CLI argument handling, run-id matching, and cleanup of real leftovers.

Integration tests (root, OVS running) create a fake dead run and check that
``testbed clean RID`` removes exactly it. They always name the run id: a bare
``testbed clean`` would consider every run on the machine.
"""
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import psutil
import pytest

from testbed import cli
from testbed.host.cleanup import CleanReport, RunCleanup, clean
from testbed.host.leftovers import process_run_ids
from topology.naming import new_run_id
from testbed.host.runlock import RunLock

TESTBED = Path(sys.executable).parent / "testbed"  # the venv's console script
SLEEP = "import time; time.sleep(60)"


# ------------------------------------------------------------------ unit


@pytest.mark.parametrize("argv, expected", [
    (["python", "-m", "controllers.run", "--run-id", "tb12ab", "--port", "6653"], {"tb12ab"}),
    (["agent", "--run-id=tb00ff"], {"tb00ff"}),
    (["ryu-manager", "--config-file", "c.conf", "--testbed-run-id", "tb12ab", "controllers.app"], {"tb12ab"}),
    (["x", "--testbed-run-id=tb00ff"], {"tb00ff"}),
    (["bash", "--norc", "--noediting", "-is", "mininet:tb12abh1"], {"tb12ab"}),
    (["bash", "--norc", "-is", "mininet:tb12abs12"], {"tb12ab"}),
    (["bash", "--norc", "-is", "mininet:h1"], set()),             # plain Mininet, no run
    (["bash", "--norc", "-is", "mininet:tb12ab"], set()),         # no node after the id
    (["x", "--run-id", "tb12ab0"], set()),                        # 5 hex digits: not a run id
    (["x", "--run-id", "TB12AB"], set()),
    (["x", "--run-id"], set()),
    (["x", "tb12ab", "--run-idx", "tb12ab"], set()),
    (["grep", "mininet:tb12abh1x", "--run-id", "tb3456"], {"tb12ab", "tb3456"}),
])
def test_process_run_ids(argv, expected):
    assert process_run_ids(argv) == expected


@pytest.mark.parametrize("names, need_own, expected", [
    (["lo", "eth0", "tb12abh1-eth0"], False, False),   # the machine's own namespace
    (["lo", "tb12abh1-eth0", "tb9999h1-eth0"], False, False),  # two runs: not ours alone
    (["lo", "tb12abh1-eth0"], True, True),             # a Mininet host of the run
    (["lo"], False, True),                              # claimed by a shell, links gone
    (["lo"], True, False),                              # nothing says it is the run's
    (None, False, False),                               # unreadable: never
])
def test_netns_attribution_is_strict(monkeypatch, names, need_own, expected):
    from testbed.host import leftovers

    monkeypatch.setattr(leftovers, "_netns_link_names", lambda pid: names)
    assert leftovers.netns_is_runs("tb12ab", 123, need_own_link=need_own) is expected


def test_clean_rejects_bad_run_id():
    with pytest.raises(ValueError, match="'tb-all' is not 'tb' followed by 4 hex digits"):
        clean(["tb-all"])


def test_report_lines():
    r = RunCleanup("tb12ab", processes=["1 a", "2 b", "3 c"], bridges=["tb12abs1"],
                   interfaces=["tb12abh1-eth0", "tb12abl1-eth1"])
    rep = CleanReport(runs=[r, RunCleanup("tb0000")], skipped_live=["tb9999"])
    assert rep.lines() == [
        "removed run tb12ab: 3 processes, 1 bridge, 2 interfaces",
        "skipped live run tb9999 (its lock is held; use --force to clean it anyway)",
    ]
    assert rep.total == 6 and not rep.empty
    assert CleanReport().lines() == ["nothing to clean"] and CleanReport().empty


def _main(capsys, argv):
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_no_command_prints_help(capsys):
    rc, out, _ = _main(capsys, [])
    assert rc == 2 and "usage: testbed" in out


def test_cli_unknown_command(capsys):
    rc, _, err = _main(capsys, ["frobnicate"])
    assert rc == 2
    assert err.startswith("testbed: error: ") and "'frobnicate'" in err and "'run'" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_run_needs_scenario(capsys):
    rc, _, err = _main(capsys, ["run"])
    assert rc == 2 and "SCENARIO.yaml" in err


@pytest.mark.parametrize("command", [["run", "scenarios/quickstart.yaml"], ["clean"]])
def test_cli_requires_root(capsys, monkeypatch, command):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    rc, _, err = _main(capsys, command)
    assert rc == 2
    assert f"testbed: error: 'testbed {command[0]}' needs root" in err


def test_cli_clean_bad_run_id(capsys, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    rc, _, err = _main(capsys, ["clean", "tb12ab", "mininet"])
    assert rc == 2
    assert err.strip() == "testbed: error: run id 'mininet' is not 'tb' followed by 4 hex digits"


def _fake_api(monkeypatch, run_spec):
    """``testbed run`` over a stand-in testbed.api.run_spec; the scenario file is not read."""
    from testbed.api import BAD_INPUT_ERRORS
    monkeypatch.setattr("testbed.workloads.load_scenario", lambda path: f"spec of {path}")
    monkeypatch.setitem(sys.modules, "testbed.api",
                        types.SimpleNamespace(run_spec=run_spec, BAD_INPUT_ERRORS=BAD_INPUT_ERRORS))


def test_cli_run_delegates_to_the_api(capsys, monkeypatch):
    seen = {}

    def run_spec(spec, results, **kw):
        seen.update(kw, spec=spec, results=results)
        return types.SimpleNamespace(exit_code=7, run_dir=None)

    _fake_api(monkeypatch, run_spec)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    rc, _, _ = _main(capsys, ["run", "s.yaml", "--results", "out", "--quiet"])
    assert rc == 7
    assert seen["spec"] == "spec of s.yaml" and seen["scenario_path"].name == "s.yaml"
    assert seen["results"] == "out" and seen["quiet"] is True and seen["max_duration_s"] is None


def test_cli_runner_exception_is_one_line(capsys, monkeypatch):
    def run_spec(spec, results, **kw):
        raise RuntimeError("fabric did not come up\nmore detail")

    _fake_api(monkeypatch, run_spec)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    rc, _, err = _main(capsys, ["run", "s.yaml"])
    assert rc == 2
    assert err == "testbed: error: RuntimeError: fabric did not come up\n"


def test_cli_doctor_json(capsys, monkeypatch):
    from testbed.host.capabilities import Capabilities, Feature

    caps = Capabilities(run_id="tb0001", kernel="6.1.0", features={"ovs": Feature(True, "x")},
                        datapath="user", ecn_marker="nftables", delay="none")
    monkeypatch.setattr("testbed.host.capabilities.probe", lambda run_id=None: caps)
    rc, out, _ = _main(capsys, ["doctor", "--json"])
    assert rc == 0
    assert '"datapath": "user"' in out


# ----------------------------------------------------------- integration

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def _bridges() -> list[str]:
    p = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True)
    return p.stdout.split()


def _links() -> set[str]:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return {link.get("ifname") for link in ipr.get_links()}


def _netns() -> set[str]:
    from pyroute2 import netns

    return set(netns.listnetns())


def _fresh_run_id() -> str:
    """A run id that no object on this machine carries yet."""
    names = set(_bridges()) | _links() | _netns()
    for _ in range(50):
        rid = new_run_id()
        if any(n.startswith(rid) for n in names):
            continue
        if any(rid in " ".join(p.info["cmdline"] or []) for p in
               psutil.process_iter(["cmdline"])):
            continue
        return rid
    raise RuntimeError("no free run id found")


@pytest.fixture
def ovs():
    if subprocess.run(["ovs-vsctl", "--timeout=2", "show"], capture_output=True).returncode:
        pytest.fail("Open vSwitch is not running: start it with scripts/start-ovs")


class Leftovers:
    """Objects made by a test; everything is removed in :meth:`remove`."""

    def __init__(self):
        self.bridges, self.links, self.procs = [], [], []

    def bridge(self, name):
        subprocess.run(["ovs-vsctl", "--timeout=5", "add-br", name, "--", "set", "bridge", name,
                        "datapath_type=netdev"], check=True, capture_output=True)
        self.bridges.append(name)

    def veth(self, a, b):
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            ipr.link("add", ifname=a, kind="veth", peer=b)
        self.links += [a, b]

    def proc(self, argv):
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def remove(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for br in self.bridges:
            subprocess.run(["ovs-vsctl", "--timeout=5", "--if-exists", "del-br", br],
                           capture_output=True)
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            for name in self.links:
                for idx in ipr.link_lookup(ifname=name):
                    try:
                        ipr.link("del", index=idx)
                    except Exception:
                        pass


def _run_clean(state_dir, *args):
    env = dict(os.environ, TESTBED_STATE_DIR=str(state_dir))
    return subprocess.run([str(TESTBED), "clean", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def _wait_gone(proc, timeout=5.0):
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


@pytest.mark.integration
@root_only
def test_doctor_names_this_machines_backends():
    assert TESTBED.exists(), f"console script missing: {TESTBED} (run scripts/install)"
    p = subprocess.run([str(TESTBED), "doctor"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    if not os.path.isdir("/sys/module/openvswitch"):
        assert "ovs datapath ...... userspace (netdev): no openvswitch kernel module" in out
    # check sch_red / sch_netem independently with iproute2's tc in a throwaway netns
    rid = _fresh_run_id()
    ns = f"{rid}chk"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        def tc_ok(*qdisc):
            return subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo",
                                   "root", *qdisc], capture_output=True).returncode == 0
        red = tc_ok("red", "limit", "400000", "min", "30000", "max", "90000", "avpkt", "1000",
                    "burst", "55", "bandwidth", "10mbit", "probability", "0.1", "ecn")
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "lo", "root"],
                       capture_output=True)
        netem = tc_ok("netem", "delay", "1ms")
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    assert ("sch_red ........... present" in out) == red, out
    assert ("sch_netem ......... present" in out) == netem, out
    if not red:
        assert "sch_red ........... absent" in out
    if not netem:
        assert "sch_netem ......... absent" in out
    assert "backends: datapath=" in out


@pytest.mark.integration
@root_only
def test_clean_removes_dead_run_and_nothing_else(ovs, tmp_path):
    rid, other = _fresh_run_id(), _fresh_run_id()
    unrelated = f"unrel{rid[2:]}br"  # does not match the run-id pattern
    made = Leftovers()
    try:
        made.bridge(f"{rid}l1")
        made.bridge(unrelated)
        made.veth(f"{rid}h1-eth0", f"{rid}l1-eth1")
        made.veth(f"unrel{rid[2:]}a", f"unrel{rid[2:]}b")
        subprocess.run(["ovs-vsctl", "--timeout=5", "add-port", f"{rid}l1", f"{rid}l1-eth1"],
                       check=True, capture_output=True)
        victim = made.proc([sys.executable, "-c", SLEEP, "--run-id", rid])
        # a Mininet-style host: a shell-like process in its own netns, and a program
        # started in that host with mnexec -a (no run id in its argv)
        host = made.proc(["mnexec", "-n", sys.executable, "-c", SLEEP, f"mininet:{rid}h1"])
        time.sleep(0.3)
        in_host = made.proc(["mnexec", "-a", str(host.pid), sys.executable, "-c", SLEEP])
        survivors = [
            made.proc([sys.executable, "-c", SLEEP, "--run-id", other]),
            made.proc([sys.executable, "-c", SLEEP, "--run-id", rid + "0"]),
            made.proc([sys.executable, "-c", SLEEP, f"mininet:{other}h1"]),
        ]
        (tmp_path / f"{rid}.json").write_text('{"pid": 1}')
        (tmp_path / f"{rid}.lock").write_text("")  # stale: nobody holds it
        time.sleep(0.3)

        p = _run_clean(tmp_path, rid)
        assert p.returncode == 0, p.stderr
        line = p.stdout.strip()
        assert line.startswith(f"removed run {rid}: 3 processes, 1 bridge, ")
        assert "2 interfaces" in line and "2 state files" in line, line

        assert _wait_gone(victim) and _wait_gone(host) and _wait_gone(in_host)
        assert f"{rid}l1" not in _bridges()
        links = _links()
        assert not {f"{rid}h1-eth0", f"{rid}l1-eth1", f"{rid}l1"} & links
        assert not list(tmp_path.iterdir())
        # everything unrelated survived
        assert unrelated in _bridges()
        assert {f"unrel{rid[2:]}a", f"unrel{rid[2:]}b"} <= links
        assert all(s.poll() is None for s in survivors)

        p = _run_clean(tmp_path, rid)
        assert p.returncode == 0 and p.stdout.strip() == "nothing to clean"
    finally:
        made.remove()


@pytest.mark.integration
@root_only
def test_clean_skips_live_run(ovs, tmp_path):
    rid = _fresh_run_id()
    made = Leftovers()
    try:
        made.bridge(f"{rid}s1")
        worker = made.proc([sys.executable, "-c", SLEEP, "--run-id", rid])
        with RunLock(rid, tmp_path):
            p = _run_clean(tmp_path, rid)
            assert p.returncode == 0, p.stderr
            assert p.stdout.strip() == (f"skipped live run {rid} (its lock is held; "
                                        "use --force to clean it anyway)")
            assert worker.poll() is None and f"{rid}s1" in _bridges()
            assert (tmp_path / f"{rid}.lock").exists()
        # lock released: now it is a dead run's leftovers
        p = _run_clean(tmp_path, rid)
        assert p.stdout.strip() == f"removed run {rid}: 1 process, 1 bridge", p.stdout
        assert _wait_gone(worker) and f"{rid}s1" not in _bridges()
    finally:
        made.remove()


@pytest.mark.integration
@root_only
def test_clean_force_cleans_live_run(ovs, tmp_path):
    rid = _fresh_run_id()
    made = Leftovers()
    try:
        made.bridge(f"{rid}s1")
        with RunLock(rid, tmp_path):
            p = _run_clean(tmp_path, "--force", rid)
            assert p.stdout.strip().startswith(f"removed run {rid}: 1 bridge"), p.stdout
            assert f"{rid}s1" not in _bridges()
    finally:
        made.remove()


# a run that holds its lock and ignores SIGTERM (seen: a run hung at op 16/24 ignoring SIGTERM for 75 s)
HUNG_RUN = """
import signal, sys, time
from pathlib import Path
from testbed.host.runlock import RunLock
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with RunLock(sys.argv[1], Path(sys.argv[2])):
    print("locked", flush=True)
    time.sleep(120)
"""


@pytest.mark.integration
@root_only
def test_clean_force_ends_the_live_run_holding_the_lock(ovs, tmp_path):
    rid = _fresh_run_id()
    made = Leftovers()
    try:
        made.bridge(f"{rid}s1")
        hung = subprocess.Popen([sys.executable, "-c", HUNG_RUN, rid, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        assert hung.stdout.readline().strip() == "locked"
        p = _run_clean(tmp_path, "--force", rid)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip().startswith(f"removed run {rid}: 1 process, 1 bridge"), p.stdout
        assert _wait_gone(hung) and hung.returncode == -9  # SIGTERM ignored: SIGKILL after the grace period
        assert f"{rid}s1" not in _bridges() and not (tmp_path / f"{rid}.json").exists()
    finally:
        made.remove()


@pytest.mark.integration
@root_only
def test_clean_warns_and_skips_bridges_when_ovs_unreachable(tmp_path, monkeypatch):
    rid = _fresh_run_id()
    made = Leftovers()
    try:
        made.veth(f"{rid}h1-eth0", f"{rid}l1-eth1")
        made.proc([sys.executable, "-c", SLEEP, "--run-id", rid])
        env_dir = tmp_path / "ovs-run"  # an empty OVS run dir: ovs-vsctl cannot connect
        env_dir.mkdir()
        monkeypatch.setenv("OVS_RUNDIR", str(env_dir))
        monkeypatch.setattr("testbed.host.runlock.STATE_DIR", tmp_path)
        rep = clean([rid], grace_s=1.0)
        assert any("OVS is not reachable" in w for w in rep.warnings), rep.warnings
        assert rep.runs[0].counts()["processes"] == 1
        assert rep.runs[0].counts()["interfaces"] == 2
        assert rep.runs[0].bridges == []
    finally:
        made.remove()


MININET_RUN = """
import sys, time
from mininet.net import Mininet
from mininet.node import OVSSwitch
rid = sys.argv[1]
net = Mininet(switch=lambda name, **kw: OVSSwitch(name, datapath='user', failMode='standalone', **kw),
              controller=None, build=False, autoSetMacs=True)
h1, h2 = net.addHost(rid + 'h1'), net.addHost(rid + 'h2')
s1 = net.addSwitch(rid + 's1', dpid='1')
net.addLink(h1, s1)
net.addLink(h2, s1)
net.build()
net.start()
agent = h1.popen([sys.executable, '-c', 'import time; time.sleep(120)'])  # mnexec, no run id
print('ready', agent.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.integration
@root_only
def test_clean_after_sigkilled_mininet(ovs, tmp_path):
    """A Mininet driver killed with SIGKILL leaves a bridge, a veth and an orphan in a host netns."""
    rid = _fresh_run_id()
    script = tmp_path / "mn.py"
    script.write_text(MININET_RUN)
    driver = subprocess.Popen([sys.executable, str(script), rid], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    agent_pid = None
    bystander = subprocess.Popen([sys.executable, "-c", SLEEP], stdin=subprocess.DEVNULL)
    vswitchd = Path("/var/run/openvswitch/ovs-vswitchd.pid").read_text().strip()
    try:
        words = driver.stdout.readline().split()
        assert words and words[0] == "ready", "Mininet did not start"
        agent_pid = int(words[1])
        driver.kill()
        driver.wait(timeout=10)
        time.sleep(0.5)
        assert f"{rid}s1" in _bridges()
        p = _run_clean(tmp_path, rid)
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith(f"removed run {rid}: 1 process, 1 bridge, "), p.stdout
        assert not psutil.pid_exists(agent_pid) or \
            psutil.Process(agent_pid).status() == psutil.STATUS_ZOMBIE
        assert f"{rid}s1" not in _bridges()
        assert not any(n.startswith(rid) for n in _links())
        # nothing in the machine's own namespace was touched
        assert bystander.poll() is None
        assert Path("/var/run/openvswitch/ovs-vswitchd.pid").read_text().strip() == vswitchd
        assert psutil.pid_exists(int(vswitchd))
    finally:
        bystander.kill()
        bystander.wait()
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        driver.stdout.close()
        if agent_pid:
            try:
                os.kill(agent_pid, 9)
            except ProcessLookupError:
                pass
        subprocess.run(["ovs-vsctl", "--timeout=5", "--if-exists", "del-br", f"{rid}s1"],
                       capture_output=True)
        leftover = Leftovers()
        leftover.links = [n for n in _links() if n.startswith(rid)]
        leftover.remove()


def test_run_refused_naming_the_fix_when_ovs_is_not_running(capsys, monkeypatch, tmp_path):
    """No usable OVS datapath (ovs-vswitchd down): refused before any bridge, naming scripts/start-ovs."""
    from testbed.host.capabilities import Capabilities, Feature

    caps = Capabilities(run_id="tb0001", kernel="6.1.0",
                        features={"ovs": Feature(False, "ovs-vsctl show failed: database connection failed")},
                        datapath="none", ecn_marker="nftables", delay="none")
    monkeypatch.setattr("testbed.host.capabilities.probe", lambda run_id=None: caps)
    before = _bridges() if os.geteuid() == 0 else []
    rc, _, err = _main(capsys, ["run", "scenarios/quickstart.yaml", "--results", str(tmp_path), "--quiet"])
    assert rc == 4
    assert "Open vSwitch is not usable (ovs-vsctl show failed: database connection failed)" in err
    assert err.count("scripts/start-ovs") == 1, err  # once, also when the probe's own detail names it
    if os.geteuid() == 0:
        assert _bridges() == before


def test_run_refused_names_start_ovs_once_when_the_probe_already_does(capsys, monkeypatch, tmp_path):
    """The probe's detail for a stopped ovsdb already says to start it (testbed.host.capabilities): the
    refusal says it once (it said it twice: "...; start it with scripts/start-ovs as root); start it with ...")."""
    from testbed.host.capabilities import Capabilities, Feature

    detail = "OVS not reachable (database connection failed); start it with scripts/start-ovs as root"
    caps = Capabilities(run_id="tb0001", kernel="6.1.0", features={"ovs": Feature(False, detail)},
                        datapath="none", ecn_marker="nftables", delay="none")
    monkeypatch.setattr("testbed.host.capabilities.probe", lambda run_id=None: caps)
    rc, _, err = _main(capsys, ["run", "scenarios/quickstart.yaml", "--results", str(tmp_path), "--quiet"])
    assert rc == 4 and err.count("scripts/start-ovs") == 1, err


@pytest.mark.skipif(os.geteuid() != 0, reason="testbed clean lists kernel objects: root")
def test_clean_with_spare_control_ends_a_runs_processes_but_not_its_cluster_sessions():
    """A cluster run's teardown cleans its run on each server with spare_control: the run's other processes
    end, its sessions (argv naming testbed.cluster.remote: the driver's ssh clients, the servers' Python) do not."""
    from testbed.host.cleanup import clean
    from topology.naming import new_run_id

    rid = new_run_id()
    code = "import time; time.sleep(60)"
    leftover = subprocess.Popen([sys.executable, "-c", code, "--run-id", rid])
    session = subprocess.Popen([sys.executable, "-c", code, "testbed.cluster.remote", "--run-id", rid])
    try:
        report = clean([rid], include_live=True, grace_s=1.0, spare_control=True)
        assert leftover.wait(timeout=10) is not None
        assert session.poll() is None
        assert len(report.runs) == 1 and len(report.runs[0].processes) == 1, report
        clean([rid], include_live=True, grace_s=1.0)  # without: the session ends too
        assert session.wait(timeout=10) is not None
    finally:
        for p in (leftover, session):
            p.kill()
            p.wait()
