"""The security probes' plan and table (issue 31 item 3; the probes themselves run in
tests/integration/test_tenant_security.py)."""
import pytest

from testbed.spec.scenario import parse_scenario
from testbed.spec.tenants import tenant_map
from testbed.tenants.security_probes import FIELDS, run_security_probes, security_probes, table

TMAP = tenant_map(parse_scenario({
    "name": "t", "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2},
    "tenants": {"alpha": {"hosts": ["h1", "h3"]}, "beta": {"hosts": ["h2"]}}, "shared_hosts": ["h4"],
    "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}}))


def test_attacks_on_the_victim_spoofs_to_every_reachable_host_and_controls_inside_the_tenant():
    got = [(p.id, p.expect_through) for p in security_probes(TMAP, "alpha", "beta")]
    assert got == [("arp-h1-h2", False), ("ping-h1-h2", False), ("roce-h1-h2", False),
                   ("spoof-h1-h3-as-h2", False), ("spoof-h1-h4-as-h2", False), ("arp-h1-h3", True), ("ping-h1-h3", True)]
    # a one-host attacker tenant has no control pair
    assert [p.id for p in security_probes(TMAP, "beta", "alpha")] == [
        "arp-h2-h1", "ping-h2-h1", "roce-h2-h1", "spoof-h2-h4-as-h1"]
    with pytest.raises(ValueError, match=r"tenant 'gamma': allowed \['alpha', 'beta'\]"):
        security_probes(TMAP, "gamma", "beta")


def test_one_attacker_only_and_the_table_has_a_line_per_probe():
    probes = security_probes(TMAP, "alpha", "beta") + security_probes(TMAP, "beta", "alpha")
    with pytest.raises(ValueError, match=r"several hosts \['h1', 'h2'\]: allowed one"):
        run_security_probes(None, probes)
    rows = [{"probe": "arp-h1-h2", "src": "h1", "dst": "h2", "expected": "fail", "sent": 5, "answered": 0,
             "delivered": None, "passed": True}]
    lines = table(rows).splitlines()
    assert lines[0].split() == list(FIELDS) and lines[1].split() == ["arp-h1-h2", "h1", "h2", "fail", "5", "0", "-",
                                                                     "True"]
