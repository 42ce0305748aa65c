"""The workload interface (testbed.workloads): one class per mode, chosen by the scenario's section; the
runner, estimate, manifest, verdict and results ask it, never which mode runs."""
from pathlib import Path

import pytest

from testbed.workloads.plan import plan_peers
from testbed.spec import estimate
from testbed.workloads import load_scenario
from testbed.workloads import WORKLOADS, PatternTrials, SimaiReplay, SizeSweep, workload_for
from testbed.workloads.chakra.workload import ChakraReplay
from testbed.workloads.perftest.workload import PerftestRuns
from testbed.workloads.base import Workload
from testbed.workloads.jobs.workload import Jobs
from testbed.workloads.open_loop.workload import OpenLoopFlows

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def test_registry_maps_each_section_to_its_class():
    assert WORKLOADS == {"sizes": SizeSweep, "simai": SimaiReplay, "pattern": PatternTrials, "chakra": ChakraReplay,
                         "perftest": PerftestRuns, "open_loop": OpenLoopFlows, "jobs": Jobs}
    for section, cls in WORKLOADS.items():
        assert issubclass(cls, Workload) and cls.section == section


@pytest.mark.parametrize("name, cls", [("quickstart", SizeSweep), ("simai_replay", SimaiReplay),
                                       ("lb_flows_ecmp", PatternTrials), ("chakra_replay", ChakraReplay),
                                       ("perftest_rxe", PerftestRuns)])
def test_a_shipped_scenario_gets_its_mode(name, cls):
    spec = load_scenario(SCENARIOS / f"{name}.yaml")
    w = workload_for(spec)
    assert type(w) is cls
    plan = w.plan()
    est = w.estimate_s(plan.ops)
    assert est > estimate.setup_s(spec.fabric) and w.extra_s(plan) >= 0
    assert w.scaling_keys().startswith(f"workload.{cls.section}")
    assert w.fan_in(plan.ops) >= 1
    assert w.peers(plan.ops)  # every mode opens queue pairs
    assert w.cpu_while_traffic("cpu") == "cpu"  # nothing ran: every row judged


def test_collectives_peer_with_their_algorithms_and_patterns_with_their_flows():
    sweep = workload_for(load_scenario(SCENARIOS / "quickstart.yaml"))
    ops = sweep.plan().ops
    assert sweep.peers(ops) == plan_peers(ops)
    pattern = workload_for(load_scenario(SCENARIOS / "incast.yaml"))
    assert pattern.plan().ops == ()
    peers = pattern.peers(())
    assert all(r in peers[p] for r, ps in peers.items() for p in ps)  # a flow's two ends see each other


def test_a_replay_adds_its_compute_to_the_estimate():
    w = workload_for(load_scenario(SCENARIOS / "simai_replay.yaml"))
    plan = w.plan()
    r = plan.replay
    assert w.extra_s(plan) == pytest.approx(len(r.modes) * (r.compute_s_per_iteration + r.scale_up_s_per_iteration))
    assert w.lines_after(None, {}) == []  # no timeline before the run
