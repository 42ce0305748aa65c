"""The probe step of a run over several servers: each server's capabilities and Open vSwitch send buffer.

A cluster run's switches run on the servers, so what the single-server runner probes on its own machine
(testbed.host.capabilities.probe, testbed.measure.send_buffer.check_run_send_buffer) is probed on every
server, by the testbed's process there (testbed.cluster.remote).
"""
from __future__ import annotations

import dataclasses

from testbed.cluster.remote import RemoteError, ServerSession
from testbed.measure.send_buffer import RunRefused


def probe_server(spec, run_id: str) -> tuple:
    """Runs ON a server: (its capabilities, its send-buffer figures for ``spec``'s datapath). Raises RunRefused
    as check_run_send_buffer does."""
    from testbed.host import capabilities
    from testbed.measure.send_buffer import check_run_send_buffer

    caps = capabilities.probe(run_id)
    caps = dataclasses.replace(caps, features=dict(caps.features))  # picklable (a read-only view is not)
    datapath = caps.datapath if spec.fabric.datapath == "auto" else spec.fabric.datapath
    return caps, (check_run_send_buffer(spec, datapath) if caps.datapath != "none" else {})


def probe_servers(spec, run_id: str) -> tuple:
    """(the first server's capabilities, the manifest's ``ovs_send_buffer`` block: each server's figures) for
    ``spec.cluster.servers``. Raises RunRefused naming the server whose Open vSwitch is unusable, whose send
    buffer is too small, that cannot be reached, or whose datapath differs from the first server's."""
    found = {}
    for srv in spec.cluster.servers:
        try:
            with ServerSession(srv, run_id) as session:
                found[srv] = session.call("testbed.cluster.run_probe:probe_server", spec, run_id)
        except RemoteError as e:
            first = str(e).splitlines()[0]
            raise RunRefused(f"server {srv}: {first}") from None
    caps = {srv: c for srv, (c, _) in found.items()}
    first = spec.cluster.servers[0]
    bad = [f"{srv}: {c.features['ovs'].detail}" for srv, c in caps.items() if c.datapath == "none"]
    if bad:
        raise RunRefused("Open vSwitch is not usable on " + "; ".join(bad))
    differ = [srv for srv, c in caps.items() if c.datapath != caps[first].datapath]
    if differ:
        raise RunRefused(f"servers {differ} offer the {caps[differ[0]].datapath} datapath, {first} the "
                         f"{caps[first].datapath} one: every server must offer the same")
    return caps[first], {"sndbuf_bytes": None, "source": "a run over several servers: checked on each server "
                         "before the run (servers)", "servers": {srv: fig for srv, (_, fig) in found.items()}}
