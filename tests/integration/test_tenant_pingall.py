"""``pingall`` in ``testbed run --cli`` on a fabric with tenant isolation (issue 31 item 9): it pings only the pairs
the controller allows and lists the pairs it skipped, instead of waiting ping's 10 s on each pair isolation drops
(4 hosts: alpha h1, h3; beta h2; shared h4 -> 4 forbidden pairs, 40 s before)."""
import io
import os
import sys
import time

from mininet.log import lg, setLogLevel
from test_tenant_security import SCENARIO
from testbed.emulation.fabric import Fabric
from testbed.host.runlock import RunLock
from testbed.pipeline.interactive import TestbedCLI as _CLI  # (not a test class)
from testbed.spec.scenario import parse_scenario
from topology.naming import new_run_id

#: the allowed pairs answer in milliseconds; one blocked pair alone would take ping's 10 s
PINGALL_LIMIT_S = 5.0


def test_pingall_on_a_tenants_fabric_pings_within_tenants_and_names_what_it_skipped(tmp_path, datapath, monkeypatch):
    spec = parse_scenario(SCENARIO)
    rid = new_run_id()
    with RunLock(rid), Fabric(spec, rid, tmp_path, datapath) as fab:
        log = io.StringIO()
        monkeypatch.setattr(lg.ch, "stream", log)  # Mininet's output (the CLI writes it with bare names)
        r, w = os.pipe()  # the CLI polls its input: a real descriptor, as a piped `testbed run --cli`
        os.write(w, b"pingall\n")
        os.close(w)
        with os.fdopen(r) as commands:
            monkeypatch.setattr(sys, "stdin", commands)  # Cmd reads sys.stdin (testbed run: stdin_kept_for_the_cli)
            setLogLevel("output")  # as testbed.pipeline.interactive.run_cli: Mininet's commands print at 'output'
            t0 = time.monotonic()
            try:
                _CLI(None, fab, stdin=commands)
            finally:
                took_s = time.monotonic() - t0
                setLogLevel("warning")
    out = log.getvalue()
    print(out)
    print(f"pingall took {took_s:.1f} s")
    assert took_s < PINGALL_LIMIT_S
    assert rid not in out
    # 12 ordered pairs: 8 allowed (alpha's pair both ways, everyone <-> the shared h4), all answered
    assert "*** Results: 0% dropped (8/8 received)" in out, out
    assert "h1 -> h3 h4" in out and "h2 -> h4" in out and "h4 -> h1 h2 h3" in out, out
    assert "skipped 4 pairs across tenants" in out and "h1->h2, h2->h1, h2->h3, h3->h2" in out, out
