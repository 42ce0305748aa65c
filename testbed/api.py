"""Scenario scripts: build a scenario in code, run it, change it between runs, get the DataFrames.

>>> from testbed import Scenario, run, sweep
>>> base = Scenario.from_yaml("quickstart")                    # a shipped name, or a path
>>> small = base.with_({"fabric.leaves": 2, "workload.sizes.max_bytes": "256KiB"})
>>> r = run(small, results="/tmp/runs")                        # root; the runner of `testbed run`
>>> r.exit_code, r.faithful, r.run_dir, r.sizes.busbw_bps.max()
>>> for rate, r in sweep(small, "fabric.host_link_bps", ["10M", "20M"]): ...

A :class:`Scenario` is the scenario's raw mapping (as a YAML file holds it),
validated on every construction by the same pydantic spec and error messages
as ``testbed run`` (testbed.spec.scenario.parse_scenario: ScenarioError naming
every bad key path). ``with_`` returns a changed copy: dotted keys
(``fabric.host_link_bps``) set values, making the mappings on the way.

:func:`run` is ``testbed run``: the same validation of the results root and
duration cap (raising ScenarioError / DurationError before anything is
built), then the runner (testbed.pipeline.runner.run) with the same cleanup of
leftovers, teardown on errors and signals, results directory and exit code
(testbed.process.exitcodes); ``quiet`` (the default) prints nothing on stdout. It returns a :class:`RunResult` with the
run directory the runner made; an interrupted run (exit code 128+N) is torn
down and then raises KeyboardInterrupt. :func:`run_spec` runs a ScenarioSpec
and returns the exit code instead of raising on an interrupt: the command
line (testbed.cli) is a thin adapter over it.
"""
from __future__ import annotations

import argparse
import copy
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from testbed.process.exitcodes import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_FAITHFUL, EXIT_INTERRUPTED_BASE,
                                       EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED)
from testbed.measure.capacity_check import CapacityError
from testbed.spec.estimate import DurationError
from testbed.spec.scenario import ScenarioError, ScenarioSpec, parse_scenario
from testbed.workloads import load_scenario
from testbed.spec.yaml_loader import load_yaml

SCENARIOS_DIR = Path(__file__).resolve().parents[1] / "scenarios"
#: errors that mean bad input (exit code 2, nothing built): :func:`run_spec` raises them
BAD_INPUT_ERRORS = (ScenarioError, FileNotFoundError, IsADirectoryError, DurationError, CapacityError)
_VERDICTS = {EXIT_FAITHFUL: "faithful", EXIT_NOT_FAITHFUL: "NOT faithful", EXIT_NOT_JUDGED: "NOT judged",
             EXIT_FAILED: "failed", EXIT_BAD_INPUT: "bad input"}


def shipped() -> list[str]:
    """Names of the scenarios shipped in ``scenarios/`` (``quickstart``, ``incast_both``, ...)."""
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))


class Scenario:
    """A validated scenario: ``data`` (its raw mapping, a copy), ``spec`` (the frozen ScenarioSpec),
    ``source`` (where it came from, named in errors), ``path`` (its YAML file, unchanged; else None).

    Raises ScenarioError (the message ``testbed run`` prints) when ``data`` is not a valid scenario.
    """

    def __init__(self, data: Mapping, source: str = "scenario", path: Path | None = None):
        self._data = copy.deepcopy(dict(data)) if isinstance(data, Mapping) else data
        self.source, self.path = source, path
        self.spec: ScenarioSpec = parse_scenario(self._data, source)

    @classmethod
    def from_dict(cls, data: Mapping, source: str = "scenario from a dict") -> "Scenario":
        """The scenario ``data`` (the mapping a YAML file would hold). Raises ScenarioError."""
        return cls(data, source)

    @classmethod
    def from_yaml(cls, name_or_path: str | os.PathLike) -> "Scenario":
        """A scenario file: a path, or the name of a shipped one (``quickstart``, see :func:`shipped`).

        Checked as ``testbed run`` checks a file (testbed.workloads.load_scenario; a relative
        ``workload.simai.path``, ``workload.chakra.path`` or ``comm_groups`` is made absolute). Raises ScenarioError, FileNotFoundError naming the
        shipped names.
        """
        p = Path(name_or_path)
        if not p.exists() and p.suffix == "" and len(p.parts) == 1:
            p = SCENARIOS_DIR / f"{p}.yaml"
        if not p.exists():
            raise FileNotFoundError(f"no scenario file {str(name_or_path)!r}; shipped: {', '.join(shipped())}")
        spec = load_scenario(p)
        data = load_yaml(p.read_text(encoding="utf-8"), str(p))
        if spec.workload is not None:  # the files it names, made absolute (WorkloadSpec.resolved)
            for section, keys in spec.workload.files().items():
                data["workload"][section].update(keys)
        return cls(data, str(p), p)

    @property
    def data(self) -> dict:
        """A copy of the raw mapping (change it and pass it to :meth:`from_dict`, or use :meth:`with_`)."""
        return copy.deepcopy(self._data)

    @property
    def name(self) -> str:
        return self.spec.name

    def get(self, key: str) -> Any:
        """The validated value of dotted ``key`` (``fabric.host_link_bps`` -> 10000000). Raises KeyError."""
        node: Any = self.spec
        for part in key.split("."):
            if not hasattr(node, part):
                raise KeyError(f"{key}: no key {part!r} in the scenario")
            node = getattr(node, part)
        return node

    def with_(self, changes: Mapping[str, Any] | None = None, /, **kw: Any) -> "Scenario":
        """A copy with dotted keys set: ``with_({"fabric.host_link_bps": "20M"})`` or
        ``with_(fabric__host_link_bps="20M")`` (``__`` stands for the dot). Mappings on the way are made.

        Raises ScenarioError naming the key when a key crosses a value that is not a mapping, or
        (as ``testbed run``) every bad key path of the result.
        """
        data = self.data
        for key, value in {**(changes or {}), **{k.replace("__", "."): v for k, v in kw.items()}}.items():
            *parents, last = key.split(".")
            node = data
            for i, part in enumerate(parents):
                nxt = node.get(part)
                if nxt is None:
                    nxt = node[part] = {}
                if not isinstance(nxt, dict):
                    raise ScenarioError(f"{key}: {'.'.join(parents[:i + 1])} is {nxt!r}, not a mapping")
                node = nxt
            node[last] = copy.deepcopy(value)
        src = f"{self.source} with {', '.join([*(changes or {}), *(k.replace('__', '.') for k in kw)])}"
        return Scenario(data, src)  # no longer the file's content: manifest.json's scenario_path stays null

    def estimate_s(self) -> float:
        """The duration ``testbed run`` prints before a run, s (testbed.spec.estimate)."""
        from testbed.workloads import workload_for

        workload = workload_for(self.spec)
        return workload.estimate_s(workload.plan().ops)

    def __repr__(self) -> str:
        return f"Scenario({self.name!r}, source={self.source!r})"


@dataclass
class RunResult:
    """One run: ``scenario``, ``exit_code`` (testbed.process.exitcodes; ``testbed run``'s), ``run_dir`` (None when
    no directory was made). ``summary`` (summary.json), ``tables`` (the run directory,
    testbed.results.rundir.RunDir) and every table by name (``r.sizes``, ``r.qps``, ...: pandas DataFrames,
    docs/tables.md; a table the run did not record raises TableError)."""

    scenario: Scenario
    exit_code: int
    run_dir: Path | None

    @property
    def verdict(self) -> str:
        """faithful, NOT faithful, failed or bad input."""
        return _VERDICTS.get(self.exit_code, f"exit code {self.exit_code}")

    @property
    def ok(self) -> bool:
        """Completed and faithful (exit code 0)."""
        return self.exit_code == EXIT_FAITHFUL

    @property
    def faithful(self) -> bool | None:
        """summary.json's ``faithful`` (None when the run was not judged)."""
        return self.summary.get("faithful")

    @property
    def tables(self):
        from testbed.results.rundir import RunDir, TableError

        if self.run_dir is None:
            raise TableError(f"the run of {self.scenario.name!r} made no run directory ({self.verdict})")
        return RunDir.open(self.run_dir)

    @property
    def summary(self) -> dict:
        return self.tables.summary if self.run_dir is not None else {}

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        from testbed.results.schema import TABLES

        if name not in TABLES:
            raise AttributeError(f"RunResult has no attribute {name!r} (tables: {', '.join(TABLES)})")
        return self.tables[name]


def run(scenario: Scenario, results: str | os.PathLike = "results", quiet: bool = True,
        max_duration_s: float | None = None, over_capacity: bool = False) -> RunResult:
    """Run ``scenario`` as ``testbed run`` does (root); return its :class:`RunResult`.

    ``results``: the results root (default ./results); ``quiet``: nothing on stdout and no progress lines
    (errors and warnings still on stderr; the figures are in the returned :class:`RunResult`); False: the
    progress, table and verdict of ``testbed run``; ``max_duration_s``: the duration cap (default 2 h); ``over_capacity``: run a scenario
    above ``fidelity.max_capacity_ratio`` x this machine's faithful capacity (``testbed run
    --over-capacity``). Raises PermissionError without root, ScenarioError / estimate.DurationError /
    capacity_check.CapacityError on bad input (nothing built), KeyboardInterrupt after an interrupted run
    was torn down.
    """
    if os.geteuid() != 0:
        raise PermissionError("testbed.run needs root (it builds network namespaces, veths, OVS bridges); "
                              "run the script with sudo")
    outcome = run_spec(scenario.spec, results, scenario_path=scenario.path, quiet=quiet,
                       max_duration_s=max_duration_s, over_capacity=over_capacity, print_results=not quiet)
    if outcome.exit_code >= EXIT_INTERRUPTED_BASE:
        raise KeyboardInterrupt(f"run of {scenario.name!r} interrupted (exit code {outcome.exit_code}); "
                                f"results in {outcome.run_dir or 'none'}")
    return RunResult(scenario, outcome.exit_code, outcome.run_dir)


def run_spec(spec: ScenarioSpec, results: str | os.PathLike = "results", *, scenario_path: Path | None = None,
             quiet: bool = False, max_duration_s: float | None = None, debug: bool = False, cli: bool = False,
             over_capacity: bool = False, solo: bool = False, solo_from: str | os.PathLike | None = None,
             print_results: bool = True):
    """Run a validated ScenarioSpec (testbed.pipeline.runner.run: same checks, cleanup, teardown, printed lines);
    return its testbed.pipeline.runner.RunOutcome (exit code, run directory or None). The entry of ``testbed run``
    and ``testbed nccl``; :func:`run` for scripts.

    ``scenario_path``: the scenario file the manifest names (None: built in code); ``debug``: a failed run
    prints its traceback; ``cli``: the Mininet CLI on the live fabric after the workload; ``over_capacity``:
    warn instead of refusing a scenario above this machine's capacity; ``print_results``: the results on stdout
    at the end (False: nothing on stdout); ``solo``: a jobs scenario's jobs
    each alone first, then together, with slowdowns and the interference matrix (testbed.workloads.jobs.solo); ``solo_from``:
    the same, with the solo runs an earlier ``solo`` run stored under this folder (testbed.workloads.jobs.solo_store:
    each checked to match its job exactly, SoloBaselineError, a ScenarioError, naming the job otherwise). The caller's
    SIGINT/SIGTERM handlers are restored afterwards (the runner routes them to its teardown meanwhile).
    Raises :data:`BAD_INPUT_ERRORS` on bad input (nothing built); an interrupted run is exit code
    128+N, not an exception.
    """
    from testbed.pipeline import runner

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        def run_one(s, root):
            return runner.run(s, root, scenario_path=scenario_path, quiet=quiet, max_duration_s=max_duration_s,
                              debug=debug, cli=cli, over_capacity=over_capacity, print_results=print_results)
        if solo or solo_from is not None:
            from testbed.workloads.jobs.solo import run_with_solo
            return run_with_solo(spec, results, run_one, solo_from, quiet=quiet)
        return run_one(spec, results)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def sweep_name(base: str, value: Any) -> str:
    """``BASE-VALUE`` as a scenario name (``[A-Za-z0-9_.-]``, at most 64 characters): each run of a sweep
    is named for its value, so its run directory and summary say what it ran (``quickstart-20M``)."""
    text = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(value)).strip("_") or "value"
    return f"{base[:63 - min(len(text), 31)]}-{text[:31]}"


def sweep(scenario: Scenario, key: str | Iterable[str], values: Iterable[Any],
          **run_kw: Any) -> Iterator[tuple[Any, RunResult]]:
    """Run ``scenario`` once per value, in order, with dotted ``key`` (or every key of a tuple of keys, e.g.
    both link rates) set to it; yield (value, RunResult) after each run.

    Every changed scenario is validated before any run (ScenarioError names the key) and named
    :func:`sweep_name` (base name and value). ``run_kw``: :func:`run`'s.
    """
    keys = (key,) if isinstance(key, str) else tuple(key)
    changed = [(value, scenario.with_({**{k: value for k in keys}, "name": sweep_name(scenario.name, value)}))
               for value in values]
    for value, s in changed:
        yield value, run(s, **run_kw)


def script_args(doc: str, quick_help: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The options every scenario script takes (scenarios/scripts/): ``--quick`` (``quick_help``: the short
    version the tests run) and ``--results DIR`` (default ./results); the first paragraph of ``doc`` is the
    description. Exits 2 on a bad option (argparse)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--results", default="results", help="results root (default ./results)")
    return ap.parse_args(argv)
