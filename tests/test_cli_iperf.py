"""testbed.pipeline.cli_iperf (issue 31 item 1) without a fabric: both ends on this machine's loopback (a
"host" here runs its processes in the root namespace). A result when both ends work; when a step passes its
limit, one line saying which, and no iperf or other process of it left. The fabric test:
tests/integration/test_cli_piped.py."""
import io
import shutil
import socket
import subprocess
import time

import pytest
from mininet.log import lg, setLogLevel

from testbed.pipeline import cli_iperf

pytestmark = pytest.mark.skipif(shutil.which("iperf") is None, reason="needs iperf (2)")


class LoopbackHost:
    """What cli_iperf uses of a Mininet host, on 127.0.0.1; ``server_argv`` replaces the iperf server."""

    def __init__(self, name, server_argv=None):
        self.name, self.server_argv, self.procs = name, server_argv, []

    def IP(self):  # noqa: N802 (Mininet's name)
        return "127.0.0.1"

    def popen(self, args, **kwargs):
        p = subprocess.Popen(self.server_argv if self.server_argv and "-s" in args else args, **kwargs)
        self.procs.append(p)
        return p


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def printed(monkeypatch):
    monkeypatch.setattr(cli_iperf, "SECONDS", 1)
    monkeypatch.setattr(cli_iperf, "PORT", _free_tcp_port())  # loopback is shared with whatever else runs
    monkeypatch.setattr(cli_iperf, "LISTEN_TIMEOUT_S", 1.0)
    setLogLevel("output")
    stream, lg.ch.stream = lg.ch.stream, io.StringIO()
    try:
        yield lg.ch.stream
    finally:
        lg.ch.stream = stream
        setLogLevel("warning")


def test_a_result_and_no_iperf_left(printed):
    client, server = LoopbackHost("h1"), LoopbackHost("h2")
    t0 = time.monotonic()
    result = cli_iperf.iperf(client, server)
    took_s = time.monotonic() - t0
    assert result is not None and len(result) == 2 and all(r.endswith("bits/sec") for r in result), printed.getvalue()
    assert printed.getvalue().startswith("*** Iperf: testing TCP bandwidth between h1 and h2\n*** Results: [")
    assert took_s < 1 + 2 + 2, took_s  # 1 s of test, the server's stop (SIGINT) within 2 s
    assert [p.poll() is not None for p in client.procs + server.procs] == [True, True]


def test_a_server_that_never_listens_is_stopped_with_a_message(printed):
    client, server = LoopbackHost("h1"), LoopbackHost("h2", server_argv=["sleep", "60"])
    t0 = time.monotonic()
    assert cli_iperf.iperf(client, server) is None
    took_s = time.monotonic() - t0
    assert (f"*** iperf: the iperf server on h2 did not listen on TCP port {cli_iperf.PORT} within 1 s: stopped the "
            "server and the client, no result") in printed.getvalue(), printed.getvalue()
    assert took_s < 1 + 2 + 1, took_s  # the limit, then SIGINT (sleep ends at once)
    assert client.procs == [] and server.procs[0].poll() is not None
