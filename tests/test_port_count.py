"""A fabric too big for its switches is refused naming ``fabric.ports_per_switch`` and the value it needs
(issue 31, item 9): 960 hosts as 16 leaves x 60 or 40 leaves x 24 were refused by a fixed "less than or
equal to 32" on ``fabric.hosts_per_leaf`` / ``fabric.leaves`` that never named the switch radix."""
import pytest

from testbed.spec.scenario import ScenarioError, parse_scenario

WORKLOAD = {"sizes": {"min_bytes": "64KiB", "max_bytes": "64KiB"}}


def _refusal(**fabric) -> str:
    with pytest.raises(ScenarioError) as e:
        parse_scenario({"name": "big960", "fabric": fabric, "workload": WORKLOAD})
    print(e.value)
    return str(e.value)


def test_960_hosts_on_16_leaves_name_the_leaf_radix_needed():
    msg = _refusal(spines=2, leaves=16, hosts_per_leaf=60)
    assert "fabric.hosts_per_leaf + fabric.spines = 62 ports per leaf" in msg
    assert "fabric.ports_per_switch = 32" in msg and "fabric.ports_per_switch: 62" in msg
    assert "allowed 2..254" in msg


def test_960_hosts_on_40_leaves_name_the_spine_radix_needed():
    msg = _refusal(spines=2, leaves=40, hosts_per_leaf=24)
    assert "fabric.leaves = 40 ports per spine" in msg and "fabric.ports_per_switch: 40" in msg


def test_the_named_radix_is_enough():
    spec = parse_scenario({"name": "big960", "workload": WORKLOAD,
                           "fabric": {"spines": 2, "leaves": 16, "hosts_per_leaf": 60, "ports_per_switch": 62}})
    assert spec.fabric.leaves * spec.fabric.hosts_per_leaf == 960


def test_dual_plane_names_the_radix_needed():
    msg = _refusal(kind="dual_plane", spines=2, leaves=4, hosts_per_leaf=40)
    assert "fabric.ports_per_switch = 32" in msg and "fabric.ports_per_switch: 42" in msg


@pytest.mark.parametrize("fabric,needs", [
    ({"kind": "rail_optimized", "servers": 30, "spines": 4}, "= 34 ports per rail leaf"),
    ({"kind": "dci", "sites": 8, "dci_links": 8, "spines": 4}, "= 60 ports per border switch"),
])
def test_other_kinds_name_the_radix_needed(fabric, needs):
    msg = _refusal(**fabric)
    n = needs.split()[1]
    assert needs in msg and f"fabric.ports_per_switch: {n} or more (allowed 2..254)" in msg
