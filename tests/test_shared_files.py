"""tests/shared_files.py: the published workload files the tests read come from ``$TESTBED_SHARED_WORKLOADS``
(default ../shared/workloads beside the repository); a test whose file is absent skips naming the variable."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import shared_files
from shared_files import DEFAULT, ENV, needs, shared, shared_workloads

REPO = Path(__file__).resolve().parents[1]


def test_the_variable_names_the_directory_else_shared_workloads_beside_the_repository(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, str(tmp_path))
    assert shared_workloads() == tmp_path.resolve()
    assert shared("simai/workload_ep_test.txt") == tmp_path.resolve() / "simai" / "workload_ep_test.txt"
    monkeypatch.setenv(ENV, "")
    assert shared_workloads() == DEFAULT == REPO.parent / "shared" / "workloads"
    monkeypatch.delenv(ENV)
    assert shared("aicb") == REPO.parent / "shared" / "workloads" / "aicb"


def test_an_absent_file_skips_with_a_reason_naming_the_variable(tmp_path):
    mark = needs(tmp_path / "aicb").mark
    assert mark.args == (True,)
    assert mark.kwargs["reason"] == (f"{tmp_path / 'aicb'} is not here: set TESTBED_SHARED_WORKLOADS to a directory "
                                     f"holding aicb/, simai/, chakra_astrasim/ (default {DEFAULT})")
    (tmp_path / "aicb").mkdir()
    assert needs(tmp_path / "aicb").mark.args == (False,)


def _run(files: str, env_dir: Path) -> str:
    env = {**os.environ, ENV: str(env_dir)}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *files.split()],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def test_the_tests_that_read_shared_files_follow_the_variable(tmp_path):
    """Every test module that reads the shared files takes them from the variable: pointed at an empty
    directory, each of its shared-file tests skips, naming the variable (none reads ../shared behind it)."""
    modules = ("tests/test_simai.py", "tests/test_simai_aicb.py", "tests/test_simai_scale.py", "tests/test_replay.py",
               "tests/test_chakra_astrasim.py")
    out = _run(" ".join(modules), tmp_path)          # exit 0: nothing read the default folder behind the variable
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert skipped and all(f"{tmp_path}/" in line and f"is not here: set {ENV} to a directory" in line
                           for line in skipped), skipped
    assert {m for m in modules if any(f" {m}:" in line for line in skipped)} == set(modules)
    assert shared_files.__file__ == str(REPO / "tests" / "shared_files.py")
