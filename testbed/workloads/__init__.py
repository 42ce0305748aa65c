"""Workload modes behind one interface (:class:`testbed.workloads.base.Workload`): plan, peers, run, results.

The scenario's ``workload`` holds exactly one mode section (testbed.spec.workload); :data:`WORKLOADS`
maps each section to its class:

- ``sizes``: the size sweep of one collective (testbed.workloads.sweep.workload.SizeSweep);
- ``simai``: a SimAI/AICB replay (testbed.workloads.simai.workload.SimaiReplay);
- ``pattern``: traffic pattern trials (testbed.workloads.pattern.workload.PatternTrials);
- ``chakra``: a Chakra execution-trace replay (testbed.workloads.chakra.workload.ChakraReplay);
- ``perftest``: perftest runs over Soft-RoCE devices (testbed.workloads.perftest.workload.PerftestRuns);
- the scenario's ``jobs`` list instead of ``workload``: several jobs at once (testbed.workloads.jobs.workload.Jobs).

A new mode is one module with a Workload subclass and one line here.
"""
from __future__ import annotations

from testbed.workloads.plan import WorkloadPlan
from testbed.workloads.base import Workload
from testbed.workloads.chakra.workload import ChakraReplay
from testbed.workloads.jobs.workload import Jobs
from testbed.workloads.pattern.workload import PatternTrials
from testbed.workloads.perftest.workload import PerftestRuns
from testbed.workloads.simai.workload import SimaiReplay
from testbed.workloads.sweep.workload import SizeSweep

#: ``workload.<section>`` -> the Workload class that runs it
WORKLOADS: dict[str, type[Workload]] = {cls.section: cls for cls in (SizeSweep, SimaiReplay, PatternTrials,
                                                                     ChakraReplay, PerftestRuns)}


def workload_for(spec) -> Workload:
    """A fresh Workload for the validated scenario ``spec`` (its one mode section that is set).

    Raises ValueError when none is set (a spec the schema would have refused)."""
    if getattr(spec, "jobs", ()):
        return Jobs(spec)
    for section, cls in WORKLOADS.items():
        if getattr(spec.workload, section, None) is not None:
            return cls(spec)
    raise ValueError(f"workload needs exactly one of {', '.join(f'workload.{s}' for s in WORKLOADS)}")


def plan_workload(spec) -> WorkloadPlan:
    """The op plan of a validated scenario (testbed.workloads.plan.WorkloadPlan); reads the SimAI file if any.

    Raises ScenarioError naming the key (and file line) when the workload cannot run on this fabric."""
    return workload_for(spec).plan()
