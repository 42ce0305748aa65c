"""A full results file system (seen: "OSError: [Errno 28] No space left on device", naming neither file nor
directory): the atomic writers name the file, the failed run's closing line says which file, where, why and
what to do. On a real full file system: a 64 KiB tmpfs mounted in the test (root), filled to the last page."""
import errno
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from testbed.pipeline.printing import print_run_failed, write_error_line
from testbed.results.rundir import RunDir

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def full_fs(tmp_path):
    """A directory on a 64 KiB tmpfs with no page left (a directory entry still fits, a byte of data not)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mnt)], check=True)
    try:
        with open(mnt / "filler", "wb") as fh:  # fill it: the write stops at the last page
            try:
                fh.write(b"\0" * 128 * 1024)
            except OSError as e:
                assert e.errno == errno.ENOSPC
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@root_only
def test_a_full_file_system_error_names_the_file_and_leaves_no_temporary_file(full_fs):
    run_dir = full_fs / "20261202T150000Z-quickstart-tb12ab"
    run_dir.mkdir()
    run = RunDir(run_dir)
    with pytest.raises(OSError) as caught:
        run.write_summary({"run_id": "tb12ab", "complete": True})
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(run_dir / "summary.json")
    with pytest.raises(OSError) as caught:
        run.write_table("ops", pd.DataFrame({"op_id": range(1000)}))
    assert caught.value.filename == str(run_dir / "ops.csv")
    assert list(run_dir.iterdir()) == []  # no half file, no temporary file


@root_only
def test_the_failed_runs_line_says_which_file_where_and_what_to_do(full_fs, capsys):
    run_dir = full_fs / "20261202T150000Z-quickstart-tb12ab"
    run_dir.mkdir()
    with pytest.raises(OSError) as caught:
        RunDir(run_dir).write_summary({"complete": True})
    print_run_failed(caught.value, debug=False)
    assert capsys.readouterr().err == (
        f"testbed: error: run failed: could not write summary.json in {run_dir}: No space left on device (ENOSPC); "
        f"free space on that file system (df -h {run_dir}) or give --results (results= in a script) a directory "
        f"on another one\n")


def test_other_errors_keep_their_line():
    assert write_error_line(RuntimeError("fabric down")) is None
    assert write_error_line(OSError(errno.ENOSPC, "No space left on device")) is None  # names no file
    line = write_error_line(OSError(errno.EROFS, "Read-only file system", "/res/r1/ops.csv"))
    assert line == ("could not write ops.csv in /res/r1: Read-only file system (EROFS); the file system is read-only: "
                    "give --results (results= in a script) a writable directory")


@pytest.mark.integration
@root_only
def test_testbed_run_on_a_full_results_file_system_fails_naming_file_and_directory(full_fs):
    """``testbed run`` with ``--results`` on the full tmpfs: the root passes its check (a file can still be
    created there), the run directory is made, its first write (INCOMPLETE) hits ENOSPC: exit 4, one line
    naming INCOMPLETE and the run directory, nothing of the run left (the fabric was never built)."""
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(REPO / "scenarios" / "quickstart.yaml"),
                           "--results", str(full_fs), "--quiet"], capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    assert proc.returncode == 4, proc.stderr
    [run_dir] = [p for p in full_fs.iterdir() if p.is_dir()]
    assert (f"testbed: error: run failed: could not write INCOMPLETE in {run_dir}: No space left on device (ENOSPC); "
            f"free space on that file system (df -h {run_dir})") in proc.stderr, proc.stderr
    assert "Errno" not in proc.stderr and proc.stdout == ""
    rid = run_dir.name.rsplit("-", 1)[1]
    assert subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.count(rid) == 0
