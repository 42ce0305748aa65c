"""Workload kinds behind one interface (:class:`testbed.workloads.base.Workload`): plan, peers, run, results.

:data:`WORKLOADS` is the one registry: each kind's Workload class, one line each; :func:`workload_for` asks
each in turn whether it runs a scenario (``Workload.selects``):

- ``sizes``: the size sweep of one collective (testbed.workloads.sweep);
- ``simai``: a SimAI/AICB replay (testbed.workloads.simai);
- ``pattern``: traffic pattern trials (testbed.workloads.pattern);
- ``chakra``: a Chakra execution-trace replay (testbed.workloads.chakra);
- ``perftest``: perftest runs over Soft-RoCE devices (testbed.workloads.perftest);
- ``open_loop``: open-loop flows, Poisson arrivals at a load, sizes from a flow-size CDF
  (testbed.workloads.open_loop);
- ``jobs``: the scenario's ``jobs`` list instead of ``workload``: several jobs at once, each a workload of
  the kinds above on its own hosts (testbed.workloads.jobs).

A new kind is its package (testbed/workloads/<kind>/, a Workload subclass) and one line in :data:`WORKLOADS`
(docs/development.md). The kind of workload is dispatched in three places only (tests/test_workload_dispatch.py):

1. here: :func:`workload_for` (a run's kind) and :func:`job_workload` (a job's kind);
2. testbed/spec/workload.py: the schema of the ``workload`` section (exactly one kind's section, which keys
   apply to which kind);
3. testbed/spec/jobs.py: the schema of the ``jobs`` list (which kinds a job may be, and what its workload
   section may hold).

Everything else asks the Workload. :func:`load_scenario` reads a scenario file for a run: the spec's schema
(testbed.spec.scenario.read_scenario), then what needs a plan (``Workload.validate``), before anything is built.
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

from testbed.spec.scenario import ScenarioSpec, read_scenario
from testbed.workloads.plan import WorkloadPlan
from testbed.workloads.base import Workload
from testbed.workloads.chakra.workload import ChakraReplay
from testbed.workloads.jobs.workload import Jobs
from testbed.workloads.open_loop.workload import OpenLoopFlows
from testbed.workloads.pattern.workload import PatternTrials
from testbed.workloads.perftest.workload import PerftestRuns
from testbed.workloads.simai.workload import SimaiReplay
from testbed.workloads.sweep.workload import SizeSweep

#: every workload kind: ``workload.<section>`` (or ``jobs``) -> its Workload class; one line per kind
WORKLOADS: dict[str, type[Workload]] = {
    "sizes": SizeSweep,
    "simai": SimaiReplay,
    "pattern": PatternTrials,
    "chakra": ChakraReplay,
    "perftest": PerftestRuns,
    "open_loop": OpenLoopFlows,
    "jobs": Jobs,
}


def workload_for(spec) -> Workload:
    """A fresh Workload for the validated scenario ``spec``: the first registered kind that selects it
    (``Workload.selects``).

    Raises ValueError when none does (a spec the schema would have refused)."""
    for cls in WORKLOADS.values():
        if cls.selects(spec):
            return cls(spec)
    raise ValueError(f"workload needs exactly one of {', '.join(f'workload.{s}' for s in WORKLOADS if s != 'jobs')}")


def job_workload(spec, index: int) -> Workload:
    """A fresh Workload of the kind of jobs.``index``'s workload, on the whole scenario ``spec``: its ``job_*``
    methods plan and run the job on its own hosts (testbed.workloads.jobs). Raises ValueError as
    :func:`workload_for` does."""
    kind = type(workload_for(spec.model_copy(update={"workload": spec.jobs[index].workload, "jobs": ()})))
    return kind(spec)


def load_scenario(path: Union[str, Path]) -> ScenarioSpec:
    """Read and validate a scenario YAML file for a run: testbed.spec.scenario.read_scenario (the schema;
    relative file paths resolved against the file's folder), then the checks that need its workload's plan
    (``Workload.validate``: a SimAI file's world size and groups, Chakra traces). Raises ScenarioError (bad
    content or YAML, naming the file and the key) or FileNotFoundError; nothing is built."""
    spec = read_scenario(path)
    workload_for(spec).validate(Path(path))
    return spec


def plan_workload(spec) -> WorkloadPlan:
    """The op plan of a validated scenario (testbed.workloads.plan.WorkloadPlan); reads the SimAI file if any.

    Raises ScenarioError naming the key (and file line) when the workload cannot run on this fabric."""
    return workload_for(spec).plan()
