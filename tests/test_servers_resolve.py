"""A server of ``--servers`` (or ``cluster.servers``) this machine cannot resolve is bad input (issue 31,
item 9): exit 2 with one line naming the host, before the run takes its lock, probes or builds anything.
Before: the probe's ssh failed ("Could not resolve hostname"), exit 4 (refused), and the line showed the
internal call ``testbed.cluster.run_probe:probe_server``."""
import os
import socket
from pathlib import Path

import pytest

from testbed import cli

QUICKSTART = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"


def test_unresolvable_server_is_bad_input_naming_the_host(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    results = tmp_path / "results"
    rc = cli.main(["run", str(QUICKSTART), "--servers", "127.0.0.1,nosuchhost.invalid", "--results", str(results)])
    err = capsys.readouterr().err
    print(err)
    assert rc == 2, err
    line = [x for x in err.splitlines() if "error" in x]
    assert len(line) == 1 and "nosuchhost.invalid" in line[0] and "--servers" in line[0], err
    assert "does not resolve" in line[0]
    assert "testbed.cluster" not in err and "probe_server" not in err
    assert not results.exists() or not any(results.iterdir())  # no run directory: nothing was started


def test_resolvable_servers_pass_with_their_addresses():
    from testbed.cluster.run_probe import resolve_servers

    assert resolve_servers(("127.0.0.1", "localhost")) == {"127.0.0.1": "127.0.0.1", "localhost": "127.0.0.1"}
    with pytest.raises(ValueError, match=r"server 'nosuchhost\.invalid' does not resolve"):
        resolve_servers(("localhost", "nosuchhost.invalid"))


def test_a_probe_that_fails_names_the_server_not_the_internal_call(monkeypatch):
    from testbed.cluster import run_probe
    from testbed.cluster.remote import RemoteError
    from testbed.measure.send_buffer import RunRefused

    class Session:  # the ssh session as it fails for a server that resolves but does not answer
        def __init__(self, server, run_id):
            self.server = server

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def call(self, function, *args):
            raise RemoteError(f"{self.server}: {function}: no answer (process ended, exit 255): "
                              f"ssh: connect to host {self.server} port 22: Connection refused")

    monkeypatch.setattr(run_probe, "ServerSession", Session)
    spec = type("Spec", (), {"cluster": type("C", (), {"servers": ("10.9.9.9",)})()})()
    with pytest.raises(RunRefused) as e:
        run_probe.probe_servers(spec, "tb0001")
    msg = str(e.value)
    assert msg.startswith("server 10.9.9.9: ") and "Connection refused" in msg, msg
    assert "testbed.cluster" not in msg and "probe_server" not in msg and msg.count("10.9.9.9:") == 1, msg
