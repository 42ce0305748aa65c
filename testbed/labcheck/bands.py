"""A lab's bands file (``labs/NN_name/expected.yaml``): its figures, their bands, how they were measured.

Layout (the keys of :class:`LabBands`; unknown keys are refused with their path)::

    lab: 02_incast_dcqcn
    widen_rel: 0.1            # band rule, see band_of()
    measured: {date: 2026-12-02, n_runs: 10, machine: {cores: 2, cpu_model: ..., datapath: user},
               git_commit: ..., by: benchmarks/lab_bands.py}
    wall_s: {no_cc: [13.5, ...], dcqcn: [15.0, ...]}     # each fresh run's wall time, set-up included
    figures:
      - {name: no_cc_jain, scenario: no_cc, label: Jain index, read: congestion.jain_index,
         digits: 3, clip: [0, 1], runs: [0.648, ...], band: [0.55, 1.0]}
      - {name: tree_over_ring_1KiB, ratio: [tree_p50_1KiB, ring_p50_1KiB], ...}

A figure is read from one scenario's run (``scenario``: the stem of a scenario file of the lab;
``read``: testbed.labcheck.figures) or is the ``ratio`` of two other figures of the file. The band
is the min..max of the N runs widened on each side (band_of()); ``runs`` keeps every run's value so
the band can be recomputed. The README quotes the bands in a block :func:`render` writes between
:data:`BEGIN` and :data:`END`; a unit test checks that block equals the file's.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import yaml
from pydantic import BaseModel, ConfigDict, model_validator

BEGIN = "<!-- expected figures: generated from expected.yaml by benchmarks/lab_bands.py; do not edit -->"
END = "<!-- end of expected figures -->"
FILE = "expected.yaml"


class Figure(BaseModel):
    """One expected figure: where it is read, how it is printed, its per-run values and band."""

    model_config = ConfigDict(extra="forbid")
    name: str
    label: str
    scenario: Optional[str] = None          # scenario file stem; None for a ratio
    read: Optional[str] = None              # testbed.labcheck.figures syntax
    ratio: Optional[tuple[str, str]] = None  # names of two figures: value = first / second
    digits: int = 3                         # decimals printed and kept (0 for counts)
    clip: tuple[Optional[float], Optional[float]] = (None, None)  # physical bounds of the figure
    widen_rel: Optional[float] = None       # overrides the file's
    widen_abs: float = 0.0
    runs: list[float] = []
    band: Optional[tuple[float, float]] = None

    @model_validator(mode="after")
    def _one_source(self):
        if (self.read is None) == (self.ratio is None):
            raise ValueError(f"figure {self.name}: give exactly one of read (with scenario) or ratio")
        if self.read is not None and self.scenario is None:
            raise ValueError(f"figure {self.name}: read needs the scenario it is read from")
        return self


class Measured(BaseModel):
    model_config = ConfigDict(extra="forbid")
    date: str
    n_runs: int
    machine: dict
    git_commit: Optional[str] = None
    by: str = "benchmarks/lab_bands.py"
    note: str = ""


class LabBands(BaseModel):
    """The whole bands file of one lab."""

    model_config = ConfigDict(extra="forbid")
    lab: str
    run_flags: dict[str, list[str]] = {}    # scenario stem -> extra ``testbed run`` flags (e.g. --solo)
    widen_rel: float = 0.1
    measured: Optional[Measured] = None
    wall_s: dict[str, list[float]] = {}
    figures: list[Figure]

    @model_validator(mode="after")
    def _names(self):
        names = [f.name for f in self.figures]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"figure names repeat: {', '.join(sorted(dup))}")
        for f in self.figures:
            for other in f.ratio or ():
                if other not in names:
                    raise ValueError(f"figure {f.name}: ratio names {other!r}, not a figure of the file")
        return self

    def figure(self, name: str) -> Figure:
        return next(f for f in self.figures if f.name == name)

    def widen(self, f: Figure) -> float:
        return self.widen_rel if f.widen_rel is None else f.widen_rel


def scenario_files(lab_dir: Path) -> list[Path]:
    """The lab's scenario files: its ``*.yaml`` but the bands file, in name order."""
    return sorted(p for p in Path(lab_dir).glob("*.yaml") if p.name != FILE)


def load(lab_dir: Path) -> LabBands:
    """``lab_dir/expected.yaml``; FileNotFoundError when absent, ValueError naming a bad key."""
    path = Path(lab_dir) / FILE
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    try:
        return LabBands.model_validate(doc)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def save(bands: LabBands, lab_dir: Path) -> Path:
    """Write the bands file, figures one per block, keys in the model's order."""
    path = Path(lab_dir) / FILE
    head = (f"# Lab {bands.lab}: the figures its README quotes and their bands over N fresh runs.\n"
            "# Written by benchmarks/lab_bands.py; read by `testbed lab check` (testbed/labcheck/bands.py).\n"
            f"# Band: min..max of the runs, widened on each side by max(max - min, widen_rel x the "
            "larger |bound|, widen_abs), rounded outward to the figure's digits, clipped to its physical bounds.\n")
    doc = bands.model_dump(mode="json", exclude_defaults=False)
    path.write_text(head + yaml.safe_dump(doc, sort_keys=False, width=120, default_flow_style=None),
                    encoding="utf-8")
    return path


#: the band reaches this fraction of the runs' spread (max - min) beyond each extreme run
SPREAD_WIDEN = 1.0


def band_of(values: list[float], widen_rel: float, widen_abs: float, digits: int,
            clip: tuple[Optional[float], Optional[float]] = (None, None)) -> tuple[float, float]:
    """The band of ``values`` (the per-run figures): [min - w, max + w], w = max(SPREAD_WIDEN x (max -
    min), widen_rel x max(|min|, |max|), widen_abs), rounded outward to ``digits`` decimals and clipped
    to ``clip``. The spread term keeps a fresh run of a noisy figure inside (a new run falls outside the
    min..max of N earlier ones with probability 2 / (N + 1)); the relative term covers figures that
    barely moved in N runs. ValueError for no values."""
    if not values:
        raise ValueError("a band needs at least one run's value")
    lo, hi = min(values), max(values)
    w = max(SPREAD_WIDEN * (hi - lo), widen_rel * max(abs(lo), abs(hi)), widen_abs)
    scale = 10 ** digits
    lo, hi = math.floor(round((lo - w) * scale, 6)) / scale, math.ceil(round((hi + w) * scale, 6)) / scale
    if clip[0] is not None:
        lo = max(lo, clip[0])
    if clip[1] is not None:
        hi = min(hi, clip[1])
    return lo, hi


def fmt(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals and thousands separators (``1,049``, ``0.812``)."""
    return f"{value:,.{max(digits, 0)}f}"


def _range(lo: float, hi: float, digits: int) -> str:
    return fmt(lo, digits) if fmt(lo, digits) == fmt(hi, digits) else f"{fmt(lo, digits)}-{fmt(hi, digits)}"


def render(bands: LabBands) -> str:
    """The README block (between BEGIN and END): the measurement, the lab's time, one row per figure."""
    m = bands.measured
    lines = [BEGIN, ""]
    if m is None:
        lines += ["No bands measured yet.", "", END]
        return "\n".join(lines)
    machine = f"{m.machine.get('cores')} cores, {m.machine.get('datapath')} datapath"
    lines.append(f"Measured {m.date} on {machine} (shared with other jobs): {m.n_runs} fresh runs of each file "
                 f"({m.by}). Band: min..max of the runs, widened on each side by their spread (max - min) or "
                 f"{bands.widen_rel * 100:g} % of the larger bound, whichever is more (unless the row says "
                 f"otherwise; expected.yaml gives every run's value). "
                 f"{m.note}".rstrip())
    lines.append("")
    if bands.wall_s:
        per = ", ".join(f"`{s}` {_range(min(v), max(v), 0)} s" for s, v in bands.wall_s.items())
        total = sum(sum(v) / len(v) for v in bands.wall_s.values())
        lasts = f"{total:.0f} s" if total < 90 else f"{total / 60:.1f} min"
        lines += [f"**Time:** one run of each file takes {per} (measured, set-up and teardown included); "
                  f"the lab's {len(bands.wall_s)} runs take about {lasts} of machine time, plus reading "
                  "and questions.", ""]
    lines += ["| figure | run | band | the runs (min-max) | read from |", "|---|---|---|---|---|"]
    for f in bands.figures:
        band = _range(*f.band, f.digits) if f.band else "not measured"
        if f.band and (f.widen_rel is not None or f.widen_abs):
            band += f" (widened {bands.widen(f) * 100:g} %{f', at least {f.widen_abs:g}' if f.widen_abs else ''})"
        runs = _range(min(f.runs), max(f.runs), f.digits) if f.runs else "-"
        where = f"`{f.read}`" if f.read else f"{f.ratio[0]} / {f.ratio[1]}"
        run = f"`{f.scenario}`" if f.scenario else "-"
        lines.append(f"| {f.label} | {run} | {band} | {runs} | {where} |")
    lines += ["", f"Check a results directory against these bands: `.venv/bin/testbed lab check {bands.lab} "
              "results/`.", "", END]
    return "\n".join(lines)


def readme_block(readme: str) -> Optional[str]:
    """The generated block of a README (BEGIN..END, both included), None when it has none."""
    if BEGIN not in readme or END not in readme:
        return None
    start = readme.index(BEGIN)
    return readme[start:readme.index(END, start) + len(END)]


def sync_readme(readme: str, bands: LabBands) -> str:
    """``readme`` with its generated block replaced by render(bands); ValueError when it has no block."""
    block = readme_block(readme)
    if block is None:
        raise ValueError(f"the README has no {BEGIN!r} ... {END!r} block")
    return readme.replace(block, render(bands))
