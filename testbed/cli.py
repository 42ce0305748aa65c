"""Command line: ``testbed run|nccl|report|compare|regress|lab|clean|doctor|vm``.

Exit codes: 0 success; 2 usage or setup error (one line ``testbed: error: ...``
on stderr); 130 on Ctrl-C. ``run``: see :data:`RUN_EXIT_CODES`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from testbed.spec.rest_text import plain as plain_help

PROG = "testbed"
RUN_EXIT_CODES = """exit codes:
  0        completed and faithful (every judged fidelity check passed)
  3        completed but NOT faithful (summary.json lists the failed checks)
  6        completed but NOT JUDGED: no link or host rate could be measured
  2        bad input (scenario or arguments), or a scenario above twice this
           machine's faithful capacity (see --over-capacity); nothing was built
  4        failed run: an error, a refused run (e.g. Open vSwitch's send buffer
           smaller than the emulated buffers), or posted/acknowledged/delivered
           bytes that differ
  128+N    interrupted by signal N (130 SIGINT, 143 SIGTERM); what the run
           created is removed"""


class CliError(Exception):
    """An error reported as ``testbed: error: MESSAGE`` with exit code 2."""


class _Parser(argparse.ArgumentParser):
    """The parser of ``testbed`` and of every subcommand: one-line errors, help without reST markup
    (stripped from descriptions and argument helps before argparse wraps them, and from the page)."""

    def __init__(self, *args, **kwargs):
        for key in ("description", "epilog"):
            if kwargs.get(key):
                kwargs[key] = plain_help(kwargs[key])
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        if isinstance(kwargs.get("help"), str):
            kwargs["help"] = plain_help(kwargs["help"])
        return super().add_argument(*args, **kwargs)

    def error(self, message: str):  # one line, no usage dump
        raise CliError(f"{message} (see '{self.prog} --help')")

    def parse_args(self, args=None, namespace=None):
        """argparse's, but an unknown argument is reported by the subcommand it was given to (``see 'testbed
        nccl --help'``), not by the top-level parser argparse hands the leftovers to."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(ns).error(f"unrecognized arguments: {' '.join(extras)}")
        return ns

    def _chosen(self, ns) -> "_Parser":
        """The innermost (sub)command parser ``ns`` was parsed by: this one, or its chosen subcommand's."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(ns, action.dest, None) or "")
                if isinstance(chosen, _Parser):
                    return chosen._chosen(ns)
        return self

    def format_help(self) -> str:  # every help page, the top level's and each subcommand's
        return plain_help(super().format_help())

    def format_usage(self) -> str:
        return plain_help(super().format_usage())


TOP_LEVEL_EPILOG = """example (as root, in the project directory, after scripts/install):
  .venv/bin/testbed run scenarios/quickstart.yaml
      the default scenario: a ring all-reduce over 8 hosts of a 2-spine, 4-leaf fabric; prints the
      estimated duration, then the busbw table and the fidelity verdict; results in
      results/<UTC time>-quickstart-<run id>/

Start with README.md (install, the quickstart, what a run prints); every command and exit code:
docs/cli.md; one command's options: testbed COMMAND --help."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Packet-level testbed for AI training cluster networks.",
        epilog=TOP_LEVEL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback on errors")
    # --debug also after the subcommand: SUPPRESS keeps the top-level value when it is not given there
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="{run,nccl,report,compare,regress,lab,clean,doctor,vm}",
                                parser_class=_Parser)

    run = sub.add_parser("run", help="run a scenario (root)", parents=[common], epilog=RUN_EXIT_CODES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file")
    run.add_argument("--results", metavar="DIR", default=None,
                     help="results root directory (default: ./results); checked before anything is built")
    run.add_argument("--quiet", action="store_true", help="print only the summary")
    run.add_argument("--max-duration", metavar="SECONDS", type=_duration, default=None,
                     help="refuse runs estimated to take longer (seconds, or 90s/30m/3h; "
                     "default 2h); the estimate is printed before anything is built")
    from testbed.measure.capacity_check import OVER_CAPACITY_HELP
    run.add_argument("--over-capacity", action="store_true", help=OVER_CAPACITY_HELP)
    run.add_argument("--servers", metavar="A,B,...", default=None,
                     help="split the fabric over these servers (ssh host names; docs/cluster.md); overrides the "
                     "scenario's cluster.servers")
    run.add_argument("--placement", choices=("pod", "leaf"), default=None,
                     help="how nodes go to servers with --servers or cluster.servers (default: the scenario's, "
                     "else pod)")
    solo = run.add_mutually_exclusive_group()
    solo.add_argument("--solo", action="store_true",
                      help="a jobs scenario: run each job alone first (into RESULTS/solo), then all together; "
                      "report each job's slowdown and the interference matrix (docs/jobs.md)")
    solo.add_argument("--solo-from", metavar="DIR", default=None,
                      help="as --solo, but reuse the solo (and pair) runs an earlier --solo stored under DIR (its "
                      "--results root: DIR/solo, DIR/pairs), each checked to be the same job on the same fabric "
                      "exactly; refused naming the job and what differs otherwise")
    from testbed.pipeline import interactive
    interactive.add_run_flag(run)

    clean = sub.add_parser(
        "clean", help="remove leftovers of dead runs (root)", parents=[common],
        description="Remove processes, OVS bridges, interfaces, named netns and state "
        "files of runs that are no longer live. Without RUN_ID: every run found.",
    )
    clean.add_argument("run_ids", nargs="*", metavar="RUN_ID",
                       help="run id such as tb3fa1 (default: all dead runs)")
    clean.add_argument("--force", action="store_true",
                       help="also clean runs whose lock is held (kills a running run)")
    clean.add_argument("--servers", metavar="A,B,...", default=None,
                       help="a run over several servers: also clean the named runs on each of these servers, by ssh "
                       "(testbed.cluster.clean; RUN_ID needed)")

    from testbed.workloads.sweep import nccl
    nccl.add_parser(sub, [common])
    from testbed.report import command as report_command
    report_command.add_parser(sub, [common])
    from testbed.regress import command as regress_command
    from testbed.results import compare
    compare.add_parser(sub, [common])
    regress_command.add_parser(sub, [common])  # compare / regress: docs/scripting.md
    from testbed.labcheck import command as lab_command
    lab_command.add_parser(sub, [common])

    doctor = sub.add_parser("doctor", help="probe what this machine supports (root)", parents=[common])
    doctor.add_argument("--json", action="store_true", help="print the probe as JSON")
    doctor.add_argument("--calibrate", action="store_true",
                        help="measure this machine's faithful capacity at path MTU 1024 and 4096 with short real "
                        "runs of the quickstart fabric (about 3 min, on a quiet machine) and cache it")
    vm = sub.add_parser("vm", parents=[common],
                        help="run a command in a VM guest on Debian's kernel: OVS kernel datapath, sch_red, "
                        "sch_netem (scripts/vm; root; docs/vm.md)",
                        usage=f"{PROG} vm [--accel kvm|tcg] [--results DIR] -- COMMAND [ARG...]")
    vm.add_argument("--accel", choices=("kvm", "tcg"), help="force KVM or software emulation (default: probed)")
    vm.add_argument("--results", metavar="DIR", help="writable results folder shared with the guest")
    vm.add_argument("vm_command", nargs=argparse.REMAINDER, metavar="COMMAND",
                    help="the command to run in the guest, after --")
    return parser


def _duration(text: str) -> float:
    from testbed.spec.estimate import parse_duration_s

    try:
        return parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _require_root(command: str) -> None:
    if os.geteuid() != 0:
        raise CliError(
            f"'{PROG} {command}' needs root (it manages network namespaces, veths, "
            f"OVS bridges and processes); run it with sudo"
        )


def _cmd_run(args) -> int:
    _require_root("run")
    from testbed.workloads import load_scenario

    def build():
        from testbed.spec.cluster import parse_servers, with_cluster
        from testbed.spec.scenario import ScenarioError

        try:
            servers = parse_servers(args.servers) if args.servers is not None else None
        except ValueError as e:
            raise ScenarioError(str(e)) from None
        return with_cluster(load_scenario(args.scenario), servers, args.placement)

    return _run(args, build)


def _cmd_nccl(args) -> int:
    _require_root("nccl")
    from testbed.workloads.sweep import nccl

    try:
        nccl.prepare(args)
    except argparse.ArgumentTypeError as exc:
        raise CliError(str(exc)) from None
    return _run(args, lambda: nccl.build_spec(args))


def _run(args, build_spec) -> int:
    """``testbed run``/``nccl``: the spec (``build_spec()``), then testbed.api.run_spec with the options;
    its exit code (``testbed run --help``). Bad input: one line ``testbed: error: ...``, exit code 2."""
    from testbed.api import BAD_INPUT_ERRORS, run_spec
    from testbed.process.exitcodes import EXIT_BAD_INPUT

    try:
        spec = build_spec()
        return run_spec(spec, args.results or "results", scenario_path=Path(args.scenario) if args.scenario else None,
                        quiet=args.quiet, max_duration_s=args.max_duration, debug=args.debug,
                        cli=getattr(args, "cli", False), over_capacity=args.over_capacity,
                        solo=getattr(args, "solo", False), solo_from=getattr(args, "solo_from", None)).exit_code
    except BAD_INPUT_ERRORS as e:
        what = f"no such file: {e.filename}" if isinstance(e, FileNotFoundError) and e.filename else e
        print(f"{PROG}: error: {what}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _cmd_clean(args) -> int:
    _require_root("clean")
    from testbed.host.cleanup import clean
    from topology.naming import check_run_id

    for rid in args.run_ids:
        try:
            check_run_id(rid)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    servers = None
    if args.servers is not None:
        from testbed.spec.cluster import parse_servers

        try:
            servers = parse_servers(args.servers)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        if not args.run_ids:
            raise CliError("--servers needs the run ids to clean there (cleaning every run of every server is not "
                           "offered)")
    report = clean(args.run_ids or None, include_live=args.force)
    for line in report.lines():
        print(line)
    for warning in report.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    if servers:
        from testbed.cluster.clean import clean_servers

        failed = 0
        for srv, res in clean_servers(servers, args.run_ids).items():
            for line in (res.stdout + res.stderr).splitlines():
                print(f"{srv}: {line}")
            if res.returncode != 0:
                print(f"{PROG}: warning: cleaning on {srv} exited {res.returncode}", file=sys.stderr)
                failed += 1
        return 1 if failed else 0
    return 0


def _cmd_report(args) -> int:
    from testbed.report import command

    return command.run(args)


def _cmd_compare(args) -> int:
    from testbed.results import compare

    return compare.run(args)


def _cmd_regress(args) -> int:
    from testbed.regress import command

    return command.run(args)


def _cmd_lab(args) -> int:
    from testbed.labcheck import command
    from testbed.labcheck.check import LabCheckError

    try:
        return command.run(args)
    except (LabCheckError, FileNotFoundError, ValueError) as exc:
        raise CliError(str(exc)) from None


def _cmd_doctor(args) -> int:
    from testbed.measure import capacity
    from testbed.pipeline import calibrate
    from testbed.host.capabilities import format_report, probe

    if args.calibrate:
        _require_root("doctor --calibrate")
    caps = probe()
    cal = capacity.load_cached(caps.datapath if caps.datapath != "none" else None)
    if args.calibrate:
        if caps.datapath == "none":
            raise CliError("cannot calibrate: no Open vSwitch datapath works here (see 'testbed doctor')")
        cal = calibrate.calibrate(caps.datapath, quiet=args.json)
        path = capacity.save(cal)
        if not args.json:
            print(f"calibration cached in {path}", file=sys.stderr)
    if args.json:
        print(json.dumps({**caps.as_dict(), "faithful_capacity": cal}, indent=2))
    else:
        print(format_report(caps))
        print(f"faithful capacity . {capacity.format_capacity(cal)}")
        if os.geteuid() != 0:
            print(f"{PROG}: root is needed to probe Open vSwitch, qdiscs, nftables and ethtool: "
                  f"run 'sudo {PROG} doctor'", file=sys.stderr)
    return 0


def _cmd_vm(args) -> int:
    """Hand over to scripts/vm (exec: its exit code is the guest command's, 125 when the guest did not boot)."""
    command = args.vm_command[1:] if args.vm_command[:1] == ["--"] else args.vm_command
    if not command:
        raise CliError(f"'{PROG} vm' needs a command after --, e.g. {PROG} vm -- {PROG} doctor")
    script = Path(__file__).resolve().parents[1] / "scripts" / "vm"
    if not script.is_file():
        raise CliError(f"{script} not found: '{PROG} vm' needs the repository checkout (pip install -e)")
    _require_root("vm")
    opts = [*(["--accel", args.accel] if args.accel else []), *(["--results", args.results] if args.results else [])]
    sys.stdout.flush()
    os.execv("/bin/bash", ["bash", str(script), *opts, "--", *command])


_COMMANDS = {"run": _cmd_run, "nccl": _cmd_nccl, "perf": _cmd_nccl, "clean": _cmd_clean, "doctor": _cmd_doctor, "vm": _cmd_vm,
             "report": _cmd_report, "compare": _cmd_compare, "regress": _cmd_regress, "lab": _cmd_lab}


class _ReaderGoneTolerant:
    """A text stream whose reader may go away (``testbed run | head``) without touching the run.

    The first BrokenPipeError points the stream's file descriptor at /dev/null (the recipe of
    Python's signal docs, "Note on SIGPIPE"), so later writes and the flush at exit succeed:
    the run goes on, writes its results and keeps its exit code; only the console lines are lost.
    """

    def __init__(self, stream):
        self._stream = stream

    def _silence(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._silence()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._silence()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``testbed`` console script; returns the exit code."""
    if argv is None:  # the real command line: its output may be piped into a reader that quits early
        sys.stdout, sys.stderr = _ReaderGoneTolerant(sys.stdout), _ReaderGoneTolerant(sys.stderr)
    parser = build_parser()
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return _COMMANDS[args.command](args)
    except CliError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line for users; --debug for the traceback
        if debug:
            traceback.print_exc()
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"{PROG}: error: {type(exc).__name__}: {msg}".rstrip(": "), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
