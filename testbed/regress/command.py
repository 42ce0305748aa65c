"""``testbed regress SUITE.yaml``: run a suite of scenarios and judge each against its stored baseline.

Each entry of the suite (:mod:`testbed.regress.suite`) is merged with its
overrides, written as ``scenario.yaml`` into the session directory and run
by ``testbed run`` in a child process (the same runner, checks and exit
codes); its figures are then compared with the baseline's
(:mod:`testbed.results.compare`) on the entry's figures and bands. A
scenario fails when a figure REGRESSED beyond its band, a checked figure
is missing from the run, or the run is NOT faithful; it errs when the run
failed. ``--update-baseline`` writes the baselines from the runs instead
(only from faithful runs; entries that borrow another entry's baseline are
skipped). Everything is checked before the first run: the suite, every
merged scenario, every baseline and that each checked figure exists in it.

An entry with ``solo: true`` (a jobs scenario) runs with ``--solo-from
<baselines>/<baseline>.solo``: each job's slowdown against its solo run
kept there, which must match the job exactly (testbed.workloads.jobs.solo_store;
checked before the first run too). ``--update-baseline`` runs it with
``--solo`` and keeps its solo runs there (trimmed to the files read).

Session directory ``<results>/<UTC>-regress-<suite>/``: one folder per entry
(``scenario.yaml``, ``run.log``, the run directory) and ``junit.xml``.

Exit codes: 0 every scenario passed; 5 a figure regressed; 3 no figure
regressed but a run was NOT faithful; 4 a run failed; 2 bad input (suite,
scenario, baseline, option); 128+N interrupted by signal N.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from testbed.process.exitcodes import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED_BASE, EXIT_NOT_FAITHFUL,
                                       EXIT_NOT_JUDGED, EXIT_REGRESSED)
from testbed.host.runlock import held_flock
from testbed.regress import baseline as baselines
from testbed.regress.junit import Case, write as write_junit
from testbed.regress.suite import Entry, Suite, SuiteError, load_suite, parse_set, scenario_data, write_scenario
from testbed.results.compare import compare_figures, format_comparison
from testbed.results.figures import figures, matches, select
from testbed.results.rundir import MANIFEST_FILE, SUMMARY_FILE, RunDir
from testbed.spec.scenario import parse_scenario


def add_parser(sub, parents) -> None:
    """Add ``regress`` to the subcommands ``sub``."""
    p = sub.add_parser("regress", parents=parents, help="run a regression suite against stored baselines (root)",
                       description=" ".join(__doc__.split("\n\n")[1].split()),
                       epilog="exit codes: 0 passed; 5 a figure regressed; 3 a run NOT faithful (nothing "
                       "regressed); 4 a run failed; 2 bad input; 128+N interrupted by signal N")
    p.add_argument("suite", metavar="SUITE.yaml", help="suite file (e.g. regress/default.yaml)")
    p.add_argument("--update-baseline", action="store_true",
                   help="write each entry's baseline from a faithful run instead of comparing")
    p.add_argument("--only", metavar="NAME[,NAME]", default=None, help="run only these entries")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=None,
                   help="scenario override for every entry, e.g. fabric.datapath=kernel (repeatable)")
    p.add_argument("--results", metavar="DIR", default="results/regress",
                   help="where the session directory is made (default results/regress)")
    p.add_argument("--junit", metavar="FILE", default=None,
                   help="JUnit XML path (default junit.xml in the session directory)")
    p.add_argument("--lock", metavar="FILE", default=None,
                   help="hold an flock on FILE during each run (machines where fabric runs take turns)")


def _select(suite: Suite, only: str | None) -> list[Entry]:
    if not only:
        return list(suite.scenarios)
    wanted = [n.strip() for n in only.split(",") if n.strip()]
    names = [e.name for e in suite.scenarios]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise SuiteError(f"--only: no entry {', '.join(unknown)} in the suite; entries: {', '.join(names)}")
    return [e for e in suite.scenarios if e.name in wanted]


def prepare(suite: Suite, entries: list[Entry], update: bool) -> tuple[dict, dict]:
    """Check everything before the first run: each entry's merged scenario and (unless ``update``) its
    baseline, and that each checked figure pattern matches a baseline figure.

    Returns (entry name -> scenario data, entry name -> baseline). Raises SuiteError, ValueError."""
    from testbed.workloads.jobs import solo_store

    data, base = {}, {}
    for e in entries:
        data[e.name] = scenario_data(suite, e)
        if e.solo and not parse_scenario(data[e.name]).jobs:
            raise SuiteError(f"scenarios.{e.name}.solo: slowdowns against solo runs need a jobs scenario; "
                             f"{suite.scenario_path(e).name} has one workload")
        if update:
            continue
        if e.solo:
            if not suite.solo_path(e).is_dir():
                raise SuiteError(f"scenarios.{e.name}.solo: no solo baseline {str(suite.solo_path(e))!r}; make it "
                                 f"with --update-baseline")
            try:
                solo_store.find(parse_scenario(data[e.name]), suite.solo_path(e))
            except solo_store.SoloBaselineError as err:
                raise SuiteError(f"scenarios.{e.name}.solo: {err}") from None
        path = suite.baseline_path(e)
        if not path.is_file():
            raise SuiteError(f"scenarios.{e.name}: no baseline {str(path)!r}; make it with --update-baseline")
        base[e.name] = baselines.load(path)
        for pat in e.figures or ():
            if not any(matches(n, pat) for n in base[e.name]["figures"]):
                raise SuiteError(f"scenarios.{e.name}.figures: {pat!r} matches no figure of {path} "
                                 f"(it has {', '.join(sorted(base[e.name]['figures']))})")
    return data, base


def run_entry(scenario: Path, out_dir: Path, lock: str | None, flags: tuple = ()) -> tuple[int, Path | None, float]:
    """``testbed run SCENARIO --results OUT_DIR --quiet [FLAGS]`` in a child process, output in ``run.log``.

    Returns (exit code, the run directory or None when none was made, seconds the run took: the wait
    for ``lock`` left out)."""
    cmd = [sys.executable, "-m", "testbed.cli", "run", str(scenario), "--results", str(out_dir), "--quiet", *flags]
    with held_flock(lock), open(out_dir / "run.log", "w") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:  # Ctrl-C: the run tears its fabric down and keeps its results (exit 130)
            proc.send_signal(signal.SIGINT)  # also when only we were signalled
            rc = proc.wait()
        took_s = time.monotonic() - t0
    if rc < 0:  # killed by a signal before it could map it
        rc = EXIT_INTERRUPTED_BASE - rc
    runs = sorted(p for p in out_dir.iterdir() if (p / MANIFEST_FILE).is_file())
    return rc, (runs[-1] if runs else None), took_s


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def judge_entry(e: Entry, base: dict, summary: dict, now_machine: dict) -> Case:
    """The testcase of a finished run: its figures against ``base`` on the entry's figures and bands."""
    case = Case(e.name)
    notes = []
    mismatch = baselines.machine_mismatch(base, now_machine)
    if mismatch:
        notes.append(f"warning: {mismatch}")
    got = figures(summary)
    checked = [n for n in select(base["figures"], e.figures) if n != "faithful"]  # the verdict: its own check
    c = compare_figures({n: base["figures"][n] for n in checked}, got, e.band_overrides(), checked)
    case.failures += [f"{r.name}: measured {r.b:.6g}, baseline {r.a:.6g}, band {r.band.text()} "
                      f"({r.better} is better): REGRESSED" for r in c.regressed]
    case.failures += [f"{n}: missing from the run (baseline {base['figures'][n]:.6g})" for n in c.only_a]
    if not summary.get("faithful"):
        case.failures.append("run NOT faithful: " + ("; ".join(summary.get("violations") or []) or "see summary.json"))
    case.details = "\n".join(notes + [format_comparison(c, f"baseline {base.get('name')} ({base.get('made_utc')}, "
                                                           f"run {base.get('run_id')})", summary.get("run_dir", ""))])
    return case


def _entry_case(suite: Suite, e: Entry, data: dict, base: dict | None, session: Path, args) -> tuple[Case, int]:
    """Run one entry and judge it (or write its baseline); returns its case and the run's exit code."""
    out = session / e.name
    out.mkdir(parents=True, exist_ok=True)
    scenario = write_scenario(data, out / "scenario.yaml")
    flags = () if not e.solo else ("--solo",) if args.update_baseline else ("--solo-from", str(suite.solo_path(e)))
    rc, run_dir, took_s = run_entry(scenario, out, args.lock, flags)
    summary_file = run_dir / SUMMARY_FILE if run_dir else None
    if rc >= EXIT_INTERRUPTED_BASE:
        return Case(e.name, took_s, error=f"interrupted (exit {rc})"), rc
    if summary_file is None or not summary_file.is_file() or rc not in (0, EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED):
        return Case(e.name, took_s, error=f"run failed (exit {rc}); {out / 'run.log'}:\n"
                    f"{_tail(out / 'run.log')}"), rc
    summary = RunDir(run_dir).summary
    if args.update_baseline:
        case = Case(e.name, took_s)
        solo_problem = _solo_problem(e, data, out)
        if solo_problem:  # --solo exits NOT faithful for it too (testbed.workloads.jobs.solo.exit_code_of)
            case.failures.append(f"run NOT faithful (a solo run), baseline not written: {solo_problem}")
        elif rc in (EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED):
            case.failures.append("run NOT faithful, baseline not written: " + "; ".join(
                summary.get("violations") or summary.get("not_judged") or []))
        else:
            where = suite.baseline_path(e)
            made = baselines.make(e.name, os.path.relpath(suite.scenario_path(e), where.parent),
                                  {"suite": suite.overrides, "entry": e.overrides}, summary, run_dir)
            path = baselines.save(made, where)
            case.details = f"baseline written: {path} ({len(figures(summary))} figures) from {run_dir}"
            if e.solo:
                from testbed.workloads.jobs.solo_store import save as save_solo

                case.details += f"\nsolo baseline written: {save_solo(out, suite.solo_path(e))} from {out}"
        return case, rc
    case = judge_entry(e, base, summary, baselines.machine(run_dir))
    case.time_s = took_s
    case.details = f"run: {run_dir}\n{case.details}"
    return case, rc


def _solo_problem(e: Entry, data: dict, out: Path) -> str | None:
    """Why the solo runs of an updating ``solo`` entry's run (``out``) cannot be its solo baseline (a solo
    run NOT faithful, testbed.workloads.jobs.solo_store.find), None when they can."""
    from testbed.workloads.jobs import solo_store

    if not e.solo:
        return None
    try:
        solo_store.find(parse_scenario(data), out)
    except solo_store.SoloBaselineError as err:
        return str(err)
    return None


def exit_code(cases: list[Case], codes: list[int]) -> int:
    """4 a run failed; else 5 a figure regressed or went missing; else 3 a run NOT faithful; else 0."""
    if any(c.error for c in cases):
        return EXIT_FAILED
    if any(f for c in cases for f in c.failures if not f.startswith("run NOT faithful")):
        return EXIT_REGRESSED
    return EXIT_NOT_FAITHFUL if any(c.failures for c in cases) or {EXIT_NOT_FAITHFUL, EXIT_NOT_JUDGED} & set(codes) \
        else 0


def run(args) -> int:
    """Entry of ``testbed regress``."""
    try:
        suite = load_suite(Path(args.suite), parse_set(args.set))
        entries = _select(suite, args.only)
        if args.update_baseline:
            skipped = [e.name for e in entries if e.baseline_name != e.name]
            entries = [e for e in entries if e.baseline_name == e.name]
            if skipped:
                print(f"testbed regress: --update-baseline skips {', '.join(skipped)} (they borrow another "
                      f"entry's baseline)", file=sys.stderr)
        data, base = prepare(suite, entries, args.update_baseline)
    except FileNotFoundError as e:
        print(f"testbed: error: no such file: {e.filename or e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValueError as e:  # SuiteError, a bad baseline or band
        print(f"testbed: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if os.geteuid() != 0:
        print("testbed: error: 'testbed regress' runs scenarios, which needs root; run it with sudo", file=sys.stderr)
        return EXIT_BAD_INPUT
    session = Path(args.results).absolute() / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-regress-{suite.title}"
    session.mkdir(parents=True, exist_ok=True)
    junit_path = Path(args.junit).absolute() if args.junit else session / "junit.xml"
    cases, codes = [], []
    for i, e in enumerate(entries, 1):
        print(f"[{i}/{len(entries)}] {e.name}: {suite.scenario_path(e).name}"
              f"{' (overridden)' if suite.overrides or e.overrides else ''} ...", flush=True)
        case, rc = _entry_case(suite, e, data[e.name], base.get(e.name), session, args)
        cases.append(case)
        codes.append(rc)
        verdict = "ERROR" if case.error else ("FAILED" if case.failures else "passed")
        print(f"[{i}/{len(entries)}] {e.name}: {verdict} in {case.time_s:.0f} s")
        for line in ([case.error] if case.error else []) + case.failures:
            print(f"    {line}")
        if case.details:
            print("    " + case.details.replace("\n", "\n    "))
        if rc >= EXIT_INTERRUPTED_BASE:
            break
    write_junit(junit_path, suite.title, cases)
    failed = [c.name for c in cases if not c.passed]
    print(f"regress {suite.title}: {len(cases) - len(failed)} of {len(cases)} passed"
          f"{' (failed: ' + ', '.join(failed) + ')' if failed else ''}; JUnit XML {junit_path}")
    interrupted = [rc for rc in codes if rc >= EXIT_INTERRUPTED_BASE]
    return interrupted[0] if interrupted else exit_code(cases, codes)
