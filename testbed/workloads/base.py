"""The interface every workload mode implements: :class:`Workload`.

A workload is what the hosts do during a run's measurement: its plan
(operations, sizes, notes, the duration estimate), its peers (which ranks
open queue pairs with which), how it drives the agents (over
traffic.protocol) and what it adds to the results (tables, summary.json
blocks, printed lines). One subclass per kind, each in its package
testbed/workloads/<kind>/ and registered in testbed.workloads.WORKLOADS, which
asks each :meth:`Workload.selects` a scenario; the runner, the scenario's
loading (:meth:`Workload.validate`), the verdict and the results call these
methods and never ask which kind runs.

One instance per run: :meth:`Workload.run` keeps what the results need (a
pattern's trials, a replay's timeline figures) on the instance. The ranks are
the fabric's hosts in rank order; a job of a ``jobs`` list is one workload on a
subset of them: one instance per job (testbed.workloads.job_workload), driven
through the ``job_*`` methods by testbed.workloads.jobs.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

from testbed.workloads.plan import PlannedOp, WorkloadPlan, plan_streams
from testbed.spec import estimate


class Workload:
    """One workload mode on a validated scenario ``spec`` (testbed.spec.scenario.ScenarioSpec).

    Subclasses set :attr:`section` (the ``workload.<section>`` key that selects them) and override what
    differs; the defaults are those of a mode that runs nothing extra.
    """

    #: the key of the scenario's ``workload`` mapping that selects this mode
    section: str = ""
    #: the plan reads files the scenario names (a SimAI file, Chakra traces): :meth:`validate` plans
    reads_files: bool = False

    def __init__(self, spec):
        self.spec = spec

    @classmethod
    def selects(cls, spec) -> bool:
        """Whether this kind runs the validated scenario ``spec``: its ``workload.<section>`` is set (a kind that
        is not a section of the workload mapping overrides this; testbed.workloads.workload_for asks each
        registered kind in turn)."""
        return spec.workload is not None and getattr(spec.workload, cls.section, None) is not None

    def validate(self, scenario_path) -> None:
        """What the scenario's schema cannot check without a plan, for a scenario read from the file
        ``scenario_path`` (testbed.workloads.load_scenario): nothing by default; a kind that reads files (a
        SimAI file, Chakra traces: :attr:`reads_files`) plans here. Raises ScenarioError starting with
        ``scenario_path``."""
        if self.reads_files:
            from testbed.spec.yaml_loader import ScenarioError
            try:
                self.plan()
            except ScenarioError as e:
                raise ScenarioError(f"{scenario_path}: {e}") from None

    # -- plan: before anything is built --------------------------------------------------------------
    def plan(self) -> WorkloadPlan:
        """The operations in run order and the notes to print (testbed.workloads.plan.WorkloadPlan).

        Raises ScenarioError naming the key (and file line) when the workload cannot run on this fabric."""
        raise NotImplementedError

    def check_machine(self) -> None:
        """Refuse a workload this machine cannot run (a kernel module or program it lacks), before anything is
        built; the runner calls it after :meth:`plan`. Raises ScenarioError naming the key and the fix."""

    def estimate_s(self, ops: tuple[PlannedOp, ...]) -> float:
        """Estimated seconds of the run's traffic with set-up and teardown (testbed.spec.estimate), s;
        manifest.json's ``estimated_duration_s``."""
        raise NotImplementedError

    def extra_s(self, plan: WorkloadPlan) -> float:
        """Seconds the run spends beyond :meth:`estimate_s` (a replay's compute waits), s; added to the
        printed estimate and the duration cap check."""
        return 0.0

    def operations(self, ops: tuple[PlannedOp, ...]) -> tuple[int, Optional[str]]:
        """(operations the estimate covers, what they are or None), for the estimate's printed line: the op
        plan's length; a kind that runs outside the op plan (the pattern's trials) counts its own."""
        return len(ops), None

    def scaling_keys(self) -> str:
        """The scenario keys that make a run longer or shorter, for the duration cap's error message."""
        raise NotImplementedError

    def fan_in(self, ops: tuple[PlannedOp, ...]) -> int:
        """Most queue pairs that can send into one switch port at once (testbed.spec.estimate.loss_regime)."""
        raise NotImplementedError

    def loss_note(self, ops: tuple[PlannedOp, ...]) -> Optional[str]:
        """The clause the printed estimate carries when the scenario can drop packets, else None."""
        return estimate.loss_note(self.spec, self.fan_in(ops))

    # -- peers: the queue pairs to open ----------------------------------------------------------------
    def peers(self, ops: tuple[PlannedOp, ...]) -> dict[int, list[int]]:
        """rank -> the ranks it needs queue pairs with (sizes the transport's send buffers before the
        fabric is built, and the agents' QPs)."""
        raise NotImplementedError

    def streams(self, ops: tuple[PlannedOp, ...]) -> int:
        """Streams (communicators, each with its own queue pairs) the agents start with (testbed.workloads.plan
        .plan_streams); sizes the transport's send buffers."""
        return plan_streams(ops)

    # -- run: drive the agents -----------------------------------------------------------------------
    @contextmanager
    def session(self, ctx, fab) -> Iterator[object]:
        """What the workload needs up on the running fabric ``fab`` before the measurement starts; yields
        what :meth:`run` drives (an agent group, or None when :meth:`run` starts its own)."""
        yield None

    def run(self, ctx, agents, rec, progress) -> None:
        """Run the workload while the runner measures: append the agents' records and statistics to
        ``rec`` (testbed.pipeline.context.Recording), say progress on ``progress``; hold signals back
        (testbed.process.signals.defer) once the traffic is done. Raises what the agents raise."""
        raise NotImplementedError

    # -- as one job of a jobs list: this workload on a subset of the ranks (testbed.workloads.jobs) ---------
    # One instance per job (testbed.workloads.job_workload); ``self.spec`` is the whole scenario and ``index``
    # the job's place in its ``jobs`` list; ``job`` a testbed.workloads.jobs.plan.PlacedJob. A kind a job
    # cannot be (testbed.spec.jobs refuses it) keeps the defaults that raise.
    def job_placed(self, index: int, job):
        """``job`` (placed on its hosts, its index as its stream) with this kind's passes (and flows)."""
        raise NotImplementedError(f"a job's workload cannot be workload.{self.section}")

    def job_plan(self, index: int, job, first_stream: int, first_op: int) -> tuple:
        """(``job`` on its streams from ``first_stream``, its fabric ops from op id ``first_op`` on, each tagged
        with the job and its stream; the notes to print). Raises ScenarioError naming ``jobs.N.``."""
        raise NotImplementedError(f"a job's workload cannot be workload.{self.section}")

    def job_s(self, job, ops: tuple[PlannedOp, ...]) -> float:
        """Seconds ``job`` takes from its start on an idle fabric (``ops``: its ops), s."""
        raise NotImplementedError(f"a job's workload cannot be workload.{self.section}")

    def job_peers(self, job) -> dict[int, list[int]]:
        """rank -> ranks the job needs queue pairs with beyond its ops' (a pattern job's flows); {} here."""
        return {}

    def job_fan_in(self, job) -> int:
        """Most queue pairs of the job beyond its ops' that can send into one port at once; 1 here."""
        return 1

    def job_session(self, ctx, fab, index: int, job) -> None:
        """What the job needs on the running fabric ``fab`` before the jobs start (a pattern's flows)."""

    def run_job(self, ctx, agents, rec, progress, job, mine: list, record, lock, stop) -> None:
        """Run ``job`` on the run's agent group from its start: ``mine``: its (op id, PlannedOp) in order;
        ``record(k, op, recs, last)`` keeps each op's records; ``lock`` guards shared results; stop when
        ``stop`` (a threading.Event) is set. Raises what the agents raise."""
        raise NotImplementedError(f"a job's workload cannot be workload.{self.section}")

    def job_results(self, job) -> dict:
        """What the job adds to its summary.json entry, as keyword arguments of
        testbed.workloads.jobs.results.job_entries (``replays`` or ``patterns``: job name -> its block)."""
        return {}

    def job_tables(self, job, qps) -> dict:
        """Table name -> the job's rows of a table of the run (a pattern job's fct.csv rows)."""
        return {}

    def job_lines(self, ctx, index: int, entry: dict) -> list[str]:
        """Text printed after the jobs table for the job (``entry``: its summary.json ``jobs.jobs[]``)."""
        return []

    # -- results ---------------------------------------------------------------------------------
    def cpu_while_traffic(self, cpu):
        """The rows of ``cpu`` (cpu.csv) the fidelity verdict judges: all of them unless the workload
        restarts agents between measurements."""
        return cpu

    def add_results(self, ctx, rec, summary: dict, qps, ports, faults) -> None:
        """Write this workload's own tables and add its blocks to ``summary`` (summary.json's content),
        the common tables being written (``qps``, ``ports``: qps.csv, ports.csv frames; ``faults``: the
        faults block or None)."""

    def lines_before(self, ctx, summary: dict) -> list[str]:
        """Text printed before the common results table."""
        return []

    def lines_after(self, ctx, summary: dict) -> list[str]:
        """Text printed after the common results blocks."""
        return []
