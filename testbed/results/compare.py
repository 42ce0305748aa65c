"""``testbed compare RUN_A RUN_B``: the headline figures of two runs side by side, each judged in its band.

RUN_A is the reference, RUN_B the run judged. Each figure common to both
(:mod:`testbed.results.figures`) is marked ``ok`` when |B - A| is inside its
band, ``REGRESSED`` when B is worse by more than the band (lower where higher
is better, or the reverse), ``improved`` when B is better by more than the
band. A run is a run directory, its summary.json, or a regression baseline
file (regress/baselines/<name>.json: its ``figures``).

Two runs of different experiments compare nothing meaningful: before any figure, their scenarios
(:mod:`testbed.results.experiment`: a run directory's manifest.json, a baseline file's scenario file
with its overrides) are compared, and runs whose fabric, workload, jobs, background, congestion or
transport differ are refused (exit 2), naming first how: the names, then per section how many settings
differ and the first of them; ``--allow-different`` (alias ``--force``) compares them all the same
under ``WARNING`` lines saying the same. A differing scenario name alone is a warning. A run whose
scenario cannot be told (no manifest.json; a baseline without its scenario file) is compared as it is.

Exit codes: 0 no figure regressed; 5 (:data:`testbed.process.exitcodes.EXIT_REGRESSED`)
at least one did; 2 bad input (no summary.json, a bad ``--band``, different experiments).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional

from testbed.process.exitcodes import EXIT_BAD_INPUT, EXIT_REGRESSED
from testbed.results.experiment import experiment_differences, scenario_of
from testbed.results.figures import FAMILIES, Band, band_for, check_pattern, family_of, figures, parse_band, select
from testbed.results.rundir import SUMMARY_FILE, RunDir, TableError

OK, REGRESSED, IMPROVED = "ok", "REGRESSED", "improved"


@dataclass(frozen=True)
class Row:
    """One figure compared: reference ``a``, judged ``b``, the band used and the mark."""

    name: str
    a: float
    b: float
    band: Band
    status: str  # OK, REGRESSED or IMPROVED

    @property
    def better(self) -> str:
        fam = FAMILIES.get(family_of(self.name))
        return fam.better if fam else "higher"

    def message(self, a_label: str = "reference") -> str:
        """``busbw_ratio@64KiB = 0.801, reference 0.997, band ±0.03 (higher is better): REGRESSED``."""
        return (f"{self.name} = {_fmt(self.b)}, {a_label} {_fmt(self.a)}, band {self.band.text()} "
                f"({self.better} is better): {self.status}")


@dataclass(frozen=True)
class Comparison:
    """Rows of the figures both sides have, and the names only one side has."""

    rows: list
    only_a: list
    only_b: list

    @property
    def regressed(self) -> list:
        return [r for r in self.rows if r.status == REGRESSED]

    @property
    def improved(self) -> list:
        return [r for r in self.rows if r.status == IMPROVED]


def judge(name: str, a: float, b: float, band: Band) -> str:
    """OK, REGRESSED or IMPROVED for reference ``a`` and value ``b`` of figure ``name`` in ``band``."""
    if abs(b - a) <= band.allowed(a) + 1e-12:
        return OK
    fam = FAMILIES.get(family_of(name))
    worse = b < a if (fam is None or fam.better == "higher") else b > a
    return REGRESSED if worse else IMPROVED


def compare_figures(a: Mapping[str, float], b: Mapping[str, float], bands: Mapping[str, Band] | None = None,
                    only: Iterable[str] | None = None) -> Comparison:
    """Compare figure sets ``a`` (reference) and ``b``: one Row per figure both have (selected by the
    patterns ``only``, all when None), bands from ``bands`` overrides else the defaults."""
    names = select(set(a) | set(b), only)
    rows = [Row(n, a[n], b[n], band_for(n, bands), judge(n, a[n], b[n], band_for(n, bands)))
            for n in names if n in a and n in b]
    return Comparison(rows, [n for n in names if n not in b], [n for n in names if n not in a])


def load_figures(path: Path) -> tuple[dict, str]:
    """The figures of a run directory, a summary.json or a baseline file, and a label for it.

    Raises FileNotFoundError or ValueError naming the path."""
    path = Path(path)
    run = RunDir(path if path.is_dir() else path.parent)
    file = run.path / SUMMARY_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no summary.json (give a run directory, its summary.json or a "
                                f"baseline file)")
    try:
        doc = run.read_json(file.name)
    except TableError as e:
        raise ValueError(str(e)) from None
    if isinstance(doc, dict) and isinstance(doc.get("figures"), dict):  # a baseline
        return {k: float(v) for k, v in doc["figures"].items()}, str(file)
    if not isinstance(doc, dict):
        raise ValueError(f"{file}: not a summary.json or a baseline")
    if doc.get("complete") is False:
        raise ValueError(f"{file}: the run is incomplete ({doc.get('incomplete_reason')}); nothing to compare")
    try:
        return figures(doc), str(path)
    except ValueError as e:
        raise ValueError(f"{file}: {e}") from None


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def _diff(r: Row) -> str:
    d = r.b - r.a
    rel = f" ({d / abs(r.a) * 100:+.1f}%)" if r.a else ""
    return f"{d:+.4g}{rel}"


def format_comparison(c: Comparison, a_label: str, b_label: str) -> str:
    """The comparison table: figure, A, B, B - A, band, mark; then the one-sided figures and a verdict."""
    lines = [f"A (reference): {a_label}", f"B:             {b_label}"]
    w = max([len("figure")] + [len(r.name) for r in c.rows])
    lines.append(f"{'figure':<{w}} {'A':>12} {'B':>12} {'B - A':>20} {'band':>16}  mark")
    for r in c.rows:
        lines.append(f"{r.name:<{w}} {_fmt(r.a):>12} {_fmt(r.b):>12} {_diff(r):>20} {r.band.text():>16}  {r.status}")
    for label, names in (("only in A", c.only_a), ("only in B", c.only_b)):
        if names:
            lines.append(f"{label} (not compared): {', '.join(names)}")
    lines.append(f"{len(c.rows)} figures compared: {len(c.regressed)} REGRESSED, {len(c.improved)} improved, "
                 f"{len(c.rows) - len(c.regressed) - len(c.improved)} ok")
    for r in c.regressed:
        lines.append(f"REGRESSED: {r.message('A')}")
    return "\n".join(lines)


def parse_band_options(items: Iterable[str] | None) -> dict[str, Band]:
    """``NAME=BAND`` strings (``--band``) -> overrides; ValueError naming the bad item."""
    out: dict[str, Band] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--band {item!r}: give FIGURE=BAND, e.g. busbw_ratio=0.05 or busbw_bps=5%")
        check_pattern(name)
        out[name] = parse_band(value)
    return out


def add_parser(sub, parents) -> None:
    """Add ``compare`` to the subcommands ``sub``."""
    p = sub.add_parser("compare", parents=parents, help="compare the headline figures of two runs",
                       description="RUN_A is the reference, RUN_B the run judged: each headline figure both "
                       "have is marked ok inside its band, REGRESSED when B is worse by more than the band, "
                       "improved when better. A run is a run directory, its summary.json or a baseline file.",
                       epilog="exit codes: 0 no figure regressed; 5 a figure REGRESSED; 2 bad input. "
                       "Figures and default bands: " + ", ".join(
                           f"{f.name} ({f.better} is better, {f.band.text()})" for f in FAMILIES.values()))
    p.add_argument("run_a", metavar="RUN_A", help="reference: run directory, summary.json or baseline file")
    p.add_argument("run_b", metavar="RUN_B", help="run judged against RUN_A")
    p.add_argument("--band", action="append", metavar="FIGURE=BAND", default=None,
                   help="override a band: FIGURE is a name, family or glob; BAND a number (absolute), "
                   "N%% (relative) or A,N%% (the larger); repeatable")
    p.add_argument("--figures", metavar="F1,F2", default=None,
                   help="compare only these figures (names, families or globs, comma-separated)")
    p.add_argument("--allow-different", "--force", dest="allow_different", action="store_true",
                   help="compare runs of different scenarios (fabric, workload, jobs, background, congestion or "
                   "transport differ; refused without it), after WARNING lines saying how they differ")


def run(args) -> int:
    """Entry of ``testbed compare``: print the table; EXIT_REGRESSED when a figure regressed."""
    import sys

    try:
        bands = parse_band_options(args.band)
        only: Optional[list] = None
        if args.figures:
            only = [p.strip() for p in args.figures.split(",") if p.strip()]
            for p in only:
                check_pattern(p)
        a, a_label = load_figures(Path(args.run_a))
        b, b_label = load_figures(Path(args.run_b))
    except (ValueError, FileNotFoundError) as e:
        print(f"testbed: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    diff, name = experiment_differences(scenario_of(Path(args.run_a)), scenario_of(Path(args.run_b)))
    if diff and not args.allow_different:
        print(f"testbed: error: {args.run_a} and {args.run_b} ran different experiments, so their figures do not "
              "compare:\n" + "".join(f"  {line}\n" for line in name + diff)
              + "(--allow-different compares them anyway)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if diff:
        print("WARNING: different experiments, compared because of --allow-different:")
        for line in name + diff:
            print(f"WARNING:   {line}")
    elif name:
        print(f"WARNING: scenario names differ: {name[0].split(': ', 1)[1]}")
    for path, figs in ((args.run_a, a), (args.run_b, b)):
        if figs.get("faithful") == 0.0:  # its figures may be the machine's, not the emulated network's
            print(f"WARNING: {path} is NOT faithful (its summary.json names the violations): its figures may show "
                  "the machine, not the emulated network")
    c = compare_figures(a, b, bands, only)
    print(format_comparison(c, a_label, b_label))
    return EXIT_REGRESSED if c.regressed else 0
