"""The Vagrantfile (docs/vagrant.md) cannot boot here (no real virtualization): check what it says instead.

Its provisioning runs the project's own scripts, the ones CI runs (.ci/run: ``scripts/install --vm``,
``scripts/vm-tier``) plus ``scripts/kernel-modules --install``; every command it runs or documents exists and
answers ``--help``; the tier and suite it names exist (tests/vm has guest tests, regress/default.yaml loads
with its ``--set`` and every scenario in it parses); ``ruby -c`` accepts it where Ruby is installed."""
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VAGRANTFILE = ROOT / "Vagrantfile"
_BLOCK = re.compile(r'config\.vm\.provision\s+"(?P<name>[\w-]+)",(?P<opts>[^\n]*?)inline:\s*<<-SHELL\n'
                    r'(?P<body>.*?)\n\s*SHELL\b', re.S)


def provisioners() -> dict[str, dict]:
    """name -> {"run": "never" | "once", "lines": the shell block's command lines}."""
    out = {}
    for m in _BLOCK.finditer(VAGRANTFILE.read_text()):
        lines = [ln.strip() for ln in m["body"].splitlines() if ln.strip()]
        out[m["name"]] = {"run": "never" if 'run: "never"' in m["opts"] else "once", "lines": lines}
    return out


def documented_commands() -> list[str]:
    """Commands the comment header documents (lines whose first word is a script or the venv's testbed)."""
    cmds = []
    for ln in VAGRANTFILE.read_text().splitlines():
        if not ln.startswith("#"):
            break
        text = ln.lstrip("# ").split("  #")[0].strip()
        m = re.search(r"vagrant ssh -c '(.*?)'", text)
        if m:
            text = m.group(1).split("&&")[-1].strip().removeprefix("sudo ").strip()
        if re.match(r"(scripts/|\.venv/bin/testbed )", text):
            cmds.append(text)
    return cmds


def all_commands() -> list[str]:
    return [ln for p in provisioners().values() for ln in p["lines"] if re.match(r"(scripts/|\.venv/bin/)", ln)] \
        + documented_commands()


def test_provisioning_runs_the_scripts_ci_runs():
    prov = provisioners()
    assert set(prov) == {"setup", "check"}, prov
    setup, check = prov["setup"], prov["check"]
    assert setup["run"] == "once" and check["run"] == "never"
    assert setup["lines"][:2] == ["set -e", "cd /vagrant"] and check["lines"][:2] == ["set -e", "cd /vagrant"]
    assert "scripts/kernel-modules --install" in setup["lines"]
    assert "scripts/install --vm" in setup["lines"]
    ci = (ROOT / ".ci" / "run").read_text()
    for ci_cmd, where in (("scripts/install --vm", setup), ("scripts/vm-tier", check)):
        assert ci_cmd in ci, f".ci/run no longer runs {ci_cmd}: update the Vagrantfile with it"
        assert any(ln.startswith(ci_cmd) for ln in where["lines"]), (ci_cmd, where)
    assert any(ln.startswith(".venv/bin/testbed regress regress/default.yaml") for ln in check["lines"]), check


def test_every_command_exists_and_answers_help():
    cmds = all_commands()
    assert len(cmds) >= 6, cmds
    checked = set()
    for cmd in cmds:
        argv = shlex.split(cmd)
        if argv[0].startswith("scripts/"):
            key = argv[:1]
            exe = ROOT / argv[0]
            assert exe.is_file() and exe.stat().st_mode & 0o111, f"{cmd}: {exe} missing or not executable"
            run = ["bash", str(exe), "--help"]
        else:
            key = argv[:2]
            assert (ROOT / ".venv" / "bin" / "testbed").exists(), "no .venv/bin/testbed (run scripts/install)"
            run = [str(ROOT / argv[0]), argv[1], "--help"]
        if tuple(key) in checked:
            continue
        checked.add(tuple(key))
        res = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert res.returncode == 0 and res.stdout.strip(), f"{' '.join(run)}: exit {res.returncode}\n{res.stderr}"
    assert {("scripts/vm-tier",), ("scripts/install",), ("scripts/kernel-modules",),
            (".venv/bin/testbed", "regress"), (".venv/bin/testbed", "doctor")} <= checked, checked


def test_the_tier_and_the_suite_it_names_exist():
    from testbed.regress.suite import load_suite, parse_set, scenario_data

    (regress,) = [ln for ln in provisioners()["check"]["lines"] if " regress " in ln]
    argv = shlex.split(regress)
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert sets == ["fabric.datapath=kernel"], argv
    suite = load_suite(ROOT / argv[2], parse_set(sets))
    for entry in suite.scenarios:
        assert scenario_data(suite, entry)["fabric"]["datapath"] == "kernel", entry.name
    tier = ROOT / "tests" / "vm"
    files = sorted(tier.glob("test_*.py"))
    assert all("pytestmark = pytest.mark.vm" in f.read_text() for f in files), files
    tests = [t for f in files for t in re.findall(r"^def (test_\w+)", f.read_text(), re.M)]
    # netem delay on the kernel datapath (its manifest: the probe picks the kernel's backends), RED, DCI with
    # DCQCN, Soft-RoCE perftest
    assert len(tests) >= 4, tests
    assert "assert_probe_picks_kernel_features(manifest[" in (tier / "test_guest_tier.py").read_text()
    assert "tests/vm" in (ROOT / "scripts" / "vm-tier").read_text()


@pytest.mark.skipif(shutil.which("ruby") is None, reason="ruby not installed (apt-get install ruby)")
def test_ruby_parses_it():
    res = subprocess.run(["ruby", "-c", str(VAGRANTFILE)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "Syntax OK" in res.stdout, res.stderr
