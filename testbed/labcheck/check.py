"""Judge a student's results against a lab's bands (``testbed lab check LAB RESULTS_DIR``).

RESULTS_DIR is one run directory (it holds summary.json) or any folder holding run directories (up
to 3 levels down, e.g. ``results/`` after the lab's ``testbed run`` commands). Each run is matched to
the lab's scenario file by the scenario name in its manifest.json; then, per run of the lab:

- scenario: the run's scenario (manifest.json ``scenario``, the validated spec) must equal the lab
  file's in every setting; a run of an edited file fails, naming the settings that differ;
- complete: the run finished and delivered every posted byte exactly once;
- figures: each figure of that scenario inside its band (PASS) or not (FAIL).

- fidelity: a run whose verdict is NOT faithful or not judged (``testbed run`` exit 3 or 6) fails: its
  figures are not trustworthy (:attr:`Verdict.unfaithful`, ``testbed lab check`` exit 7), unless
  ``include_unfaithful``: then it is flagged (WARN) and its figures count.

Ratio figures are computed from the newest run of each scenario. A scenario of the lab with no run
fails, unless RESULTS_DIR is one run directory: then only that run is checked and the lab's other
runs and the comparisons needing them are skipped (SKIP). A results directory without any run of the
lab is refused, naming the scenarios it holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from testbed.labcheck import bands as bands_mod
from testbed.labcheck.figures import FigureMissing, read_figure
from testbed.results.rundir import RunDir

MAX_DEPTH = 3
PASS, FAIL, SKIP, INFO, WARN = "PASS", "FAIL", "SKIP", "INFO", "WARN"


class LabCheckError(Exception):
    """Bad input: no such lab, no bands file, or no run directory under RESULTS_DIR."""


@dataclass
class Verdict:
    """The checker's lines (status, text) and counts; ``ok`` when nothing failed. ``unfaithful``: the run
    directories' names whose verdict was NOT faithful or not judged and were not counted (each a FAIL);
    ``included``: such runs counted all the same (``include_unfaithful``)."""

    lines: list[tuple[str, str]] = field(default_factory=list)
    failed: int = 0
    passed: int = 0
    unfaithful: list[str] = field(default_factory=list)
    included: list[str] = field(default_factory=list)

    def add(self, status: str, text: str) -> None:
        self.lines.append((status, text))
        self.failed += status == FAIL
        self.passed += status == PASS

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.passed > 0

    def text(self) -> str:
        return "\n".join(f"{status:<5} {text}" if status else text for status, text in self.lines)


def labs_root() -> Path:
    """The repository's labs/ folder (next to the testbed package)."""
    return Path(__file__).resolve().parents[2] / "labs"


def lab_dir(lab: str) -> Path:
    """The folder of ``lab``: a path to a lab folder, its name (``02_incast_dcqcn``) or its number
    (``2``, ``02``). LabCheckError naming the labs there are otherwise."""
    path = Path(lab)
    if (path / bands_mod.FILE).is_file():
        return path
    root = labs_root()
    known = sorted(p.name for p in root.iterdir() if (p / bands_mod.FILE).is_file()) if root.is_dir() else []
    for name in known:
        if lab == name or (lab.isdigit() and name.split("_", 1)[0].lstrip("0") == lab.lstrip("0")):
            return root / name
    raise LabCheckError(f"no lab {lab!r}; labs with a bands file: {', '.join(known) or 'none'} (in {root})")


def find_runs(results: Path) -> list[Path]:
    """Run directories (with summary.json and manifest.json) at or under ``results``, oldest first."""
    results = Path(results)
    if not results.is_dir():
        raise LabCheckError(f"{results}: no such directory")
    found = [results] if (results / "summary.json").is_file() else []
    level = [results]
    for _ in range(MAX_DEPTH):
        level = [d for p in level for d in sorted(p.iterdir()) if d.is_dir()]
        found += [d for d in level if (d / "summary.json").is_file()]
    found = [d for d in found if (d / "manifest.json").is_file()]
    if not found:
        raise LabCheckError(f"{results}: no run directory (summary.json and manifest.json) in it or "
                            f"{MAX_DEPTH} levels below")
    return sorted(found, key=lambda d: (RunDir(d).manifest.get("started_utc") or "", d.name))


def _flat(doc, prefix: str = "") -> dict:
    """{dotted key: value}; a path into a labs/ folder kept from ``labs/`` on (clones live anywhere)."""
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(doc, str) and "/labs/" in doc:
        doc = "labs/" + doc.rsplit("/labs/", 1)[1]
    return {prefix: doc}


def scenario_differences(run_spec: dict, lab_spec: dict) -> list[str]:
    """``key: run value (lab file: value)`` for every setting where two spec dumps differ. A lab file's
    ``auto`` (a setting the run resolves on its machine, e.g. ``congestion.ecn.marker``: red or nftables)
    matches whatever the run resolved it to."""
    a, b = _flat(run_spec), _flat(lab_spec)
    return [f"{k}: {a.get(k)!r} (lab file: {b.get(k)!r})" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k) and b.get(k) != "auto"]


def lab_specs(lab: Path, bands: bands_mod.LabBands) -> dict[str, dict]:
    """Scenario stem -> the lab file's validated spec (as manifest.json stores it)."""
    from testbed.workloads import load_scenario

    return {p.stem: load_scenario(p).model_dump(mode="json") for p in bands_mod.scenario_files(lab)}


def _title(lab: Path) -> str:
    readme = lab / "README.md"
    first = readme.read_text(encoding="utf-8").splitlines()[0] if readme.is_file() else ""
    return first.lstrip("# ").strip() or lab.name


def _complete(s: dict) -> str | None:
    if not s.get("complete", True) or s.get("interrupted"):
        return "the run did not complete"
    t = s.get("transport") or {}
    if not (t.get("delivered_bytes") == t.get("posted_bytes") == t.get("acked_bytes")) or t.get("order_errors"):
        return (f"bytes posted {t.get('posted_bytes')}, acknowledged {t.get('acked_bytes')}, delivered "
                f"{t.get('delivered_bytes')}, order errors {t.get('order_errors')}")
    return None


def _unfaithful(s: dict) -> str | None:
    """Why a complete run's figures are not trustworthy (its fidelity verdict, or with ``--solo`` a solo run
    its slowdowns rest on: ``jobs.jobs[].solo_faithful``), None when it is faithful."""
    jobs = (s.get("jobs") or {}).get("jobs") or []
    solo = [e.get("name") for e in jobs if isinstance(e, dict) and e.get("solo_faithful") is False]
    if solo and s.get("faithful") is True:
        return (f"the solo run of job {', '.join(map(str, solo))} is NOT faithful and the slowdowns rest on it: "
                "see jobs.solo_baseline")
    if s.get("verdict") == "not_judged":
        return "not judged: " + ("; ".join(s.get("not_judged") or []) or "see summary.json not_judged")
    if s.get("faithful") is True:
        return None
    if s.get("faithful") is False:
        return "; ".join(s.get("violations") or []) or "see summary.json violations"
    return "summary.json has no fidelity verdict (faithful: null)"


def _fidelity(v: Verdict, d: Path, s: dict, include_unfaithful: bool) -> None:
    why = None if _complete(s) else _unfaithful(s)
    if why is None:
        return
    if include_unfaithful:
        v.included.append(d.name)
        v.add(WARN, f"  NOT faithful ({why}); counted (--include-unfaithful): its figures may not be trustworthy")
    else:
        v.unfaithful.append(d.name)
        v.add(FAIL, f"  NOT faithful ({why}): its figures are not trustworthy; run it again (a quieter "
                    "machine), or --include-unfaithful to count it")


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def _judge(v: Verdict, bands: bands_mod.LabBands, f: bands_mod.Figure, value: float | None, why: str = "") -> None:
    label = f.label
    if f.band is None:
        shown = "absent" if value is None else bands_mod.fmt(value, max(f.digits, 0))
        v.add(SKIP, f"  {label:<46} {shown:>12}   no band measured yet")
        return
    band = f"{bands_mod.fmt(f.band[0], f.digits)} .. {bands_mod.fmt(f.band[1], f.digits)}"
    if value is None:
        v.add(FAIL, f"  {label:<46} {'absent':>12}   band {band}   ({why})")
        return
    if tuple(f.band) == tuple(f.clip):  # the runs spread over every value the figure can take
        v.add(INFO, f"  {label:<46} {bands_mod.fmt(value, max(f.digits, 0)):>12}   not checked: the reference "
                    f"runs spread over its whole range {band} (the lab's point: it is unpredictable)")
        return
    inside = f.band[0] <= value <= f.band[1]
    v.add(PASS if inside else FAIL, f"  {label:<46} {bands_mod.fmt(value, max(f.digits, 0)):>12}   band {band}"
          + ("" if inside else ("   below the band" if value < f.band[0] else "   above the band")))


def check(lab: str, results: Path, include_unfaithful: bool = False) -> Verdict:
    """Judge the runs under ``results`` against lab ``lab``'s bands (module docstring); a run NOT faithful
    fails unless ``include_unfaithful`` (then it is flagged and counted).

    Raises LabCheckError for bad input (no such lab or results, no run directory)."""
    folder = lab_dir(lab)
    bands = bands_mod.load(folder)
    specs = lab_specs(folder, bands)
    by_name = {spec["name"]: stem for stem, spec in specs.items()}
    runs = find_runs(results)
    one_run = (Path(results) / "summary.json").is_file()  # RESULTS_DIR is one run directory
    v = Verdict()
    m = bands.measured
    v.add("", f"lab {bands.lab}: {_title(folder)}")
    v.add("", f"bands: {m.n_runs} fresh runs per file, {m.date}, {m.machine.get('cores')} cores, "
              f"min..max widened (labs/{folder.name}/expected.yaml)" if m else "bands: not measured yet")
    names = {d: (RunDir(d).manifest.get("scenario") or {}).get("name") for d in runs}
    mine = [d for d in runs if names[d] in by_name]
    if not mine:
        held = ", ".join(sorted({str(n) for n in names.values()}))
        v.add(FAIL, f"{results} holds no run of lab {bands.lab}: it holds runs of {held}; this lab's runs are "
                    + ", ".join(f"{n} ({by_name[n]}.yaml)" for n in sorted(by_name))
                    + ". Wrong results directory, or wrong lab?")
        return v
    newest: dict[str, tuple[Path, dict]] = {}
    for d in runs:
        if d not in mine:
            v.add("", f"ignored: {d.name} (scenario {names[d]}, not part of this lab)")
            continue
        stem = by_name[names[d]]
        run = RunDir(d)
        s = run.summary
        faithful = {True: "faithful", False: "NOT faithful (see summary.json violations)"}.get(s.get("faithful"),
                                                                                              "not judged")
        v.add("", f"run {d.name}: {stem}.yaml, {faithful}")
        diff = scenario_differences(run.manifest.get("scenario") or {}, specs[stem])
        if diff:
            more = f" and {len(diff) - 5} more" if len(diff) > 5 else ""
            v.add(FAIL, f"  scenario differs from labs/{folder.name}/{stem}.yaml: {'; '.join(diff[:5])}{more}")
        else:
            v.add(PASS, f"  scenario is labs/{folder.name}/{stem}.yaml as given")
        incomplete = _complete(s)
        v.add(FAIL if incomplete else PASS, f"  {incomplete}" if incomplete else
              "  complete: every posted byte delivered exactly once")
        _fidelity(v, d, s, include_unfaithful)
        values = {}
        for f in bands.figures:
            if f.scenario == stem:
                try:
                    values[f.name] = read_figure(d, f.read)
                    _judge(v, bands, f, values[f.name])
                except FigureMissing as exc:
                    _judge(v, bands, f, None, str(exc))
        newest[stem] = (d, values)
    for stem in specs:
        if stem not in newest and one_run:
            v.add(SKIP, f"no run of {stem}.yaml ({specs[stem]['name']}): {Path(results).name} is one run "
                        "directory; give the folder holding every run of the lab to check them all")
        elif stem not in newest:
            v.add(FAIL, f"no run of {stem}.yaml ({specs[stem]['name']}) under {results}: run "
                        f"`testbed run labs/{folder.name}/{stem}.yaml`")
    ratios = [f for f in bands.figures if f.ratio]
    if ratios:
        v.add("", "comparisons (the newest run of each file):")
        values = {k: x for _, vals in newest.values() for k, x in vals.items()}
        for f in ratios:
            a, b = (values.get(n) for n in f.ratio)
            absent = [f"{s}.yaml" for s in (bands.figure(n).scenario for n in f.ratio) if s and s not in newest]
            if absent and one_run:
                v.add(SKIP, f"  {f.label:<46} {'-':>12}   needs the run of {', '.join(absent)}: not checked "
                            "on one run directory")
            elif a is None or b is None or b == 0:
                _judge(v, bands, f, None, f"needs {f.ratio[0]} and {f.ratio[1]} (nonzero)")
            else:
                _judge(v, bands, f, a / b)
    fidelity = (f"; {_runs(len(v.unfaithful))} NOT faithful, not counted (run again, or --include-unfaithful)"
                if v.unfaithful else "")
    fidelity += f"; {_runs(len(v.included))} NOT faithful, counted (--include-unfaithful)" if v.included else ""
    v.add("", f"RESULT: {'PASS' if v.ok else 'FAIL'}: {v.passed} passed, {v.failed} failed{fidelity}")
    return v
