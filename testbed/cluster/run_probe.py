"""The probe step of a run over several servers: each server's capabilities and Open vSwitch send buffer.

A cluster run's switches run on the servers, so what the single-server runner probes on its own machine
(testbed.host.capabilities.probe, testbed.measure.send_buffer.check_run_send_buffer) is probed on every
server, by the testbed's process there (testbed.cluster.remote).
"""
from __future__ import annotations

import dataclasses
import socket

from testbed.cluster.remote import RemoteError, ServerSession
from testbed.measure.send_buffer import RunRefused

#: the call each server answers in the probe step
PROBE_CALL = "testbed.cluster.run_probe:probe_server"


def resolve_servers(servers) -> dict[str, str]:
    """server -> its IPv4 address as this machine resolves it (/etc/hosts, DNS), as the run will reach it
    (testbed.cluster.run_fabric.driver_address). Nothing is sent. Raises ValueError naming the first server
    that does not resolve and what to give instead."""
    out = {}
    for srv in servers:
        try:
            out[srv] = socket.getaddrinfo(srv, 22, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        except (socket.gaierror, UnicodeError) as e:
            why = getattr(e, "strerror", None) or str(e)
            raise ValueError(f"server {srv!r} does not resolve on this machine ({why}): give a host name it "
                             f"resolves (/etc/hosts or DNS) or an IPv4 address") from None
    return out


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
                found[srv] = session.call(PROBE_CALL, spec, run_id)
        except RemoteError as e:  # "<server>: <call>: <what>" or "<server>: <call> failed: <what>"
            first = str(e).splitlines()[0].removeprefix(f"{srv}: ").removeprefix(f"{PROBE_CALL}: ")
            first = first.removeprefix(f"{PROBE_CALL} failed: ")
            raise RunRefused(f"server {srv}: probing it (over ssh) failed: {first}") from None
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
