"""A regression suite file (``testbed regress SUITE.yaml``): scenarios, their overrides, figures and bands.

Shape (unknown keys refused naming their path)::

    name: default                         # optional; default the file's stem
    baselines: baselines                  # folder of <baseline>.json, relative to the suite file
    overrides: {fabric: {datapath: auto}} # merged into every scenario (then each entry's own)
    scenarios:
      - name: allreduce_ring              # the testcase name; also the baseline's default name
        scenario: ../scenarios/quickstart.yaml   # relative to the suite file
        overrides: {workload: {iterations: 3}}   # deep-merged into the scenario's YAML
        figures: [faithful, busbw_ratio, fit_b_ratio]   # names, families or globs; default: every figure
        bands: {busbw_ratio: 0.03, retx_pkts: "10,50%"}  # overrides of the default bands
        baseline: allreduce_ring           # <baselines>/<baseline>.json (another entry's, for a degraded copy)
        solo: false                        # a jobs scenario: slowdowns against a solo baseline kept in
                                           # <baselines>/<baseline>.solo/ (testbed.workloads.jobs.solo_store)

Overrides merge mappings key by key; any other value (a list, a number)
replaces the scenario's. The merged scenario is validated like a scenario
file before anything runs (errors name the entry and the key path).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from testbed.results.figures import Band, check_pattern, parse_band
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.spec.yaml_loader import load_yaml, merge

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class SuiteError(ValueError):
    """A suite file or one of its entries is malformed; the message names the key path."""


class Entry(BaseModel):
    """One scenario of a suite."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=_NAME, max_length=80)
    scenario: str
    overrides: dict[str, Any] = {}
    figures: Optional[list[str]] = None
    bands: dict[str, Any] = {}
    baseline: Optional[str] = Field(default=None, pattern=_NAME, max_length=80)
    #: run with ``--solo-from <baselines>/<baseline>.solo`` (``--update-baseline``: ``--solo``, then keep its solo runs)
    solo: bool = False

    @field_validator("figures")
    @classmethod
    def _figures(cls, v):
        for p in v or ():
            check_pattern(p)
        return v

    @field_validator("bands")
    @classmethod
    def _bands(cls, v):
        for k, b in v.items():
            check_pattern(k)
            parse_band(b)
        return v

    @property
    def baseline_name(self) -> str:
        return self.baseline or self.name

    def band_overrides(self) -> dict[str, Band]:
        return {k: parse_band(b) for k, b in self.bands.items()}


class Suite(BaseModel):
    """A suite file's content; ``path`` is where it was read from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Optional[str] = Field(default=None, pattern=_NAME, max_length=80)
    baselines: str = "baselines"
    overrides: dict[str, Any] = {}
    scenarios: list[Entry] = Field(min_length=1)
    path: Optional[str] = None

    @field_validator("scenarios")
    @classmethod
    def _unique(cls, v):
        names = [e.name for e in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"entry names must be unique; repeated: {', '.join(dup)}")
        return v

    @property
    def folder(self) -> Path:
        return Path(self.path).parent if self.path else Path.cwd()

    @property
    def title(self) -> str:
        return self.name or (Path(self.path).stem if self.path else "suite")

    def baseline_path(self, entry: Entry) -> Path:
        return (self.folder / self.baselines / f"{entry.baseline_name}.json").resolve()

    def solo_path(self, entry: Entry) -> Path:
        """The entry's solo baseline: the solo runs of a ``--solo`` run, trimmed (testbed.workloads.jobs.solo_store.save)."""
        return (self.folder / self.baselines / f"{entry.baseline_name}.solo").resolve()

    def scenario_path(self, entry: Entry) -> Path:
        p = Path(entry.scenario)
        return p if p.is_absolute() else (self.folder / p).resolve()


def load_suite(path: Path, extra_overrides: dict | None = None) -> Suite:
    """Read and validate a suite file; ``extra_overrides`` (``--set``) merge over the suite's own.

    Raises SuiteError naming the key path, FileNotFoundError."""
    path = Path(path)
    data = load_yaml(path.read_text(encoding="utf-8"), str(path))
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: the top level must be a mapping with keys name, baselines, overrides, scenarios")
    if extra_overrides:
        data = {**data, "overrides": merge(data.get("overrides") or {}, extra_overrides)}
    try:
        return Suite.model_validate({**data, "path": str(path.resolve())})
    except ValidationError as e:
        msgs = [f"{'.'.join(str(x) for x in err['loc']) or '(top)'}: {err['msg']}" for err in e.errors()[:20]]
        raise SuiteError(f"{path}: invalid suite:\n  " + "\n  ".join(msgs)) from None


def scenario_data(suite: Suite, entry: Entry) -> dict:
    """The entry's scenario as YAML data: the file, the suite's overrides, then the entry's.

    A relative ``workload.simai.path`` is made absolute against the scenario file's folder. Raises
    SuiteError naming the entry (bad file, or the merged scenario invalid), FileNotFoundError."""
    src = suite.scenario_path(entry)
    if not src.is_file():
        raise SuiteError(f"scenarios.{entry.name}.scenario: no such file {str(src)!r}")
    try:
        data = load_yaml(src.read_text(encoding="utf-8"), str(src))
    except ScenarioError as e:
        raise SuiteError(f"scenarios.{entry.name}: {e}") from None
    data = merge(merge(data, suite.overrides), entry.overrides)
    simai = (data.get("workload") or {}).get("simai") if isinstance(data.get("workload"), dict) else None
    if isinstance(simai, dict) and isinstance(simai.get("path"), str) and not Path(simai["path"]).is_absolute():
        simai["path"] = str((src.parent / simai["path"]).resolve())
    try:
        parse_scenario(data, f"{src} with the overrides of suite entry {entry.name!r}")
    except ScenarioError as e:
        raise SuiteError(str(e)) from None
    return data


def write_scenario(data: dict, path: Path) -> Path:
    """Write the merged scenario ``data`` as YAML to ``path`` (what the run reads); return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def parse_set(items: list[str] | None) -> dict:
    """``--set fabric.datapath=kernel`` items -> a nested overrides mapping (values read as YAML 1.2).

    Raises SuiteError naming the bad item."""
    out: dict = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise SuiteError(f"--set {item!r}: give KEY.PATH=VALUE, e.g. fabric.datapath=kernel")
        try:
            v = load_yaml(f"v: {value}", f"--set {item}")["v"] if value else ""
        except ScenarioError as e:
            raise SuiteError(str(e)) from None
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SuiteError(f"--set {item!r}: {part} is set to a value and used as a mapping")
        node[parts[-1]] = v
    return out
