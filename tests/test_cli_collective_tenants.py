"""The CLI's ``collective`` on a fabric with tenant isolation: it runs over every host, so the isolation would drop
its packets (seen: ``sendto failed with errno 113 (EHOSTUNREACH)`` after the agents started). It is refused first,
naming a pair the isolation drops and what to run instead; without isolation it runs as before."""
from types import SimpleNamespace

from testbed.pipeline import interactive

RID = "tb12ab"


class _Tenants:
    """What the CLI uses of controllers.tenants.TenantFilter: red h1, h3; blue h2."""
    tenant = {"h1": "red", "h3": "red", "h2": "blue"}

    def allows(self, src, dst):
        return self.tenant[src.removeprefix(RID)] == self.tenant[dst.removeprefix(RID)]


def _cli(isolation):
    hosts = [SimpleNamespace(name=RID + n) for n in ("h1", "h2", "h3")]
    cli = SimpleNamespace(rid=RID, fab=SimpleNamespace(isolation=isolation, layout=SimpleNamespace(hosts=hosts)),
                          ctx=None, _collectives_run=0)
    cli._short = lambda name: interactive.TestbedCLI._short(cli, name)
    cli._pairs_isolation_drops = lambda: interactive.TestbedCLI._pairs_isolation_drops(cli)
    return cli


def test_collective_on_a_tenants_fabric_is_refused_naming_a_dropped_pair(capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(interactive, "run_collective", lambda *a, **k: ran.append(a))
    interactive.TestbedCLI.do_collective(_cli(_Tenants()), "allreduce 1MiB")
    out = capsys.readouterr().out
    assert out.startswith("collective: error: tenant isolation drops 4 host pairs of a collective over every host "
                          "(e.g. h1->h2)"), out
    assert "docs/jobs.md" in out and ran == []


def test_without_isolation_the_collective_runs(capsys, monkeypatch):
    ran = []

    def fake_run(ctx, fab, kind, algorithm, size, k):
        ran.append((kind, algorithm, size))
        return {"ranks": 3, "time_us": 1000.0, "algbw_bps": 1e6, "busbw_bps": 1.3e6, "busbw_ratio": 0.99}

    monkeypatch.setattr(interactive, "run_collective", fake_run)
    interactive.TestbedCLI.do_collective(_cli(None), "allreduce 1MiB ring")
    assert ran == [("allreduce", "ring", 1 << 20)]
    assert "allreduce/ring 1048576 B on 3 ranks" in capsys.readouterr().out
