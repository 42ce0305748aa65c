"""``testbed vm -- COMMAND`` hands over to scripts/vm with its options; no command is refused by name."""
import os

from testbed import cli


def test_vm_execs_scripts_vm(monkeypatch):
    seen = {}
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "execv", lambda path, argv: seen.update(path=path, argv=argv))
    cli.main(["vm", "--accel", "tcg", "--results", "/tmp/r", "--", "testbed", "doctor", "--json"])
    assert seen["path"] == "/bin/bash"
    assert seen["argv"][1].endswith("scripts/vm") and os.path.isfile(seen["argv"][1])
    assert seen["argv"][2:] == ["--accel", "tcg", "--results", "/tmp/r", "--", "testbed", "doctor", "--json"]


def test_vm_without_command_refused(capsys):
    assert cli.main(["vm"]) == 2
    assert "needs a command after --" in capsys.readouterr().err


def test_vm_bad_accel_refused(capsys):
    assert cli.main(["vm", "--accel", "hvf", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "--accel" in err and "hvf" in err
