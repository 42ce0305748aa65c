"""``testbed nccl`` (alias ``perf``): one collective over a scenario's fabric, as nccl-tests runs it.

The options are nccl-tests' (src/common.cu) where they mean the same:
``-b`` min size, ``-e`` max size, ``-f`` size factor (``-f 1``: steps of
``-i`` bytes), ``-n`` timed iterations, ``-w`` warm-up iterations, ``-g``
ranks (here: hosts 0..g-1 of the fabric, one rank per host; nccl-tests' GPUs
per thread), ``-d`` data type (the ``type`` column and the element size of
``count``), ``-o`` reduction op (the ``redop`` column: the bytes are the same
for every op), ``-r`` root (0: a broadcast roots at the first rank), ``-I``
per-iteration times, ``-K`` iterations left out of their statistics, ``-J``
nccl-tests' JSON file, ``--check`` (0 only: no data check, ``#wrong`` N/A).
Then ours: ``-c/--collective`` (nccl-tests has a binary per collective; its
``-c`` is ``--check``) and ``-a/--algorithm`` (a registered pair,
traffic.collectives; default ``ring`` where the collective has one, else its
first; nccl-tests' ``-a`` is its averaging mode, here always the mean over
ranks). Sizes take bytes or nccl-tests' suffixes (``4K``, ``4m``, ``1G``:
powers of 1024) or ``64KiB``-style.

Defaults are nccl-tests' except the size range and iterations: -b 32K
-e 1M -n 5 here, against 32M, 32M and 20 (a 32 MiB all-reduce takes about 47 s
on 8 ranks of a 10 Mbit/s emulated link, 41 such ops over half an hour; the
estimate is printed before the run), -f 2 (nccl-tests' -f 1 -i 1M would run
only -b here), and --check 0 (nccl-tests 1). Each step's bytes are nccl-tests'
(testbed.results.nccl_table.nccl_size: all-gather, reduce-scatter and
all-to-all run each rank's share rounded down to 16 bytes, n shares).

The fabric, transport, fidelity and controller come from the scenario file
(default ``scenarios/quickstart.yaml``); its ``workload`` is replaced by the
sweep of those sizes (every size runs exactly ``-n`` timed iterations out of
place, then ``-n`` in place: ``workload.in_place``; ``max_bytes_per_size``
off) and ``output.table`` set to ``nccl`` with the options in ``output.nccl``;
the result is validated like any scenario and run by the same runner
(testbed.api.run_spec, as ``testbed run``) with the same exit codes, results
directory and fidelity verdict. The table and JSON: testbed.results.nccl_table,
in the layout of nccl-tests 2.19.6 (its first line says so: ``# nccl-tests
version 2.19.6 ... (testbed emulation: no NCCL library)``), the preamble
reporting -b/-e/-f/-i as given (``output.nccl.min_bytes`` ...). A ``-J`` path
is relative to the current directory; its directory must exist and be
writable, checked before anything is built (exit code 2).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from testbed.spec.controller import NCCL_OPS, NCCL_TYPE_BYTES
from testbed.spec.scenario import ScenarioError, ScenarioSpec, parse_scenario
from testbed.workloads import load_scenario
from testbed.spec.units import parse_size
from traffic import collectives

DEFAULT_SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "quickstart.yaml"
#: option -> the scenario key it sets (named in errors)
OPTION_KEYS = {"-b/-e/-f/-i": "workload.sizes.values", "-n": "workload.iterations",
               "-w": "workload.warmup_iterations", "-g": "workload.ranks", "-c": "workload.collective",
               "-a": "workload.algorithm", "--channels": "workload.channels", "-d": "output.nccl.datatype",
               "-o": "output.nccl.op", "-I": "output.nccl.per_iter", "-K": "output.nccl.per_iter_skip",
               "-J": "output.nccl.json_path"}


def add_parser(sub, parents) -> None:
    """Add ``nccl`` (alias ``perf``) to the subcommands ``sub``."""
    p = sub.add_parser("nccl", aliases=["perf"], parents=parents, help="run one collective as nccl-tests does (root)",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("scenario", metavar="SCENARIO.yaml", nargs="?", default=None,
                   help="scenario giving the fabric (default scenarios/quickstart.yaml of this install)")
    p.add_argument("-b", "--minbytes", default="32K", help="smallest size (default 32K; nccl-tests 32M)")
    p.add_argument("-e", "--maxbytes", default="1M", help="largest size (default 1M; nccl-tests 32M)")
    p.add_argument("-f", "--stepfactor", type=int, default=2,
                   help="size multiplication factor; 1: steps of -i bytes (default 2; nccl-tests 1)")
    p.add_argument("-i", "--stepbytes", default="1M", help="size increment with -f 1 (default 1M, as nccl-tests)")
    p.add_argument("-n", "--iters", type=int, default=5,
                   help="timed iterations per size and half (default 5; nccl-tests 20)")
    p.add_argument("-w", "--warmup_iters", type=int, default=1, help="warm-up iterations per size (default 1)")
    p.add_argument("-g", "--ranks", type=int, default=None, help="ranks: hosts 0..g-1 (default every host)")
    p.add_argument("-d", "--datatype", default="float", choices=list(NCCL_TYPE_BYTES),
                   help="data type: the type column and count's element size (default float)")
    p.add_argument("-o", "--op", default="sum", choices=list(NCCL_OPS),
                   help="reduction op printed as redop (the same bytes for every op; default sum)")
    p.add_argument("-r", "--root", type=int, default=0, help="root of broadcast: 0, the first rank (default 0)")
    p.add_argument("-I", "--per_iter_timing", type=int, default=0, choices=(0, 1),
                   help="1: per-iteration columns and JSON times (default 0)")
    p.add_argument("-K", "--per_iter_skip", type=int, default=0,
                   help="leading iterations left out of the -I statistics (default 0)")
    p.add_argument("-J", "--output_file", metavar="FILE", default=None,
                   help="write nccl-tests' JSON to FILE (FILE.0, FILE.1, ... if it exists); its directory must exist "
                   "and be writable (checked before the run)")
    p.add_argument("--check", type=int, default=0,
                   help="data check iterations: 0 only (bytes, not values, are moved; #wrong prints N/A)")
    p.add_argument("-c", "--collective", default="allreduce",
                   help=f"collective: {', '.join(collectives.collectives())} (default allreduce)")
    p.add_argument("-a", "--algorithm", default=None,
                   help="algorithm (default ring where registered); registered: " + ", ".join(collectives.names()))
    p.add_argument("--channels", type=int, default=None,
                   help="channels (NCCL_MIN_NCHANNELS; default the scenario's workload.channels)")
    p.add_argument("--results", metavar="DIR", default=None, help="results root directory (default ./results)")
    p.add_argument("--quiet", action="store_true", help="print only the table and the verdict")
    p.add_argument("--max-duration", metavar="SECONDS", default=None,
                   help="refuse runs estimated to take longer (seconds, or 90s/30m/3h; default 2h)")
    from testbed.measure.capacity_check import OVER_CAPACITY_HELP
    p.add_argument("--over-capacity", action="store_true", help=OVER_CAPACITY_HELP)


def _bytes(option: str, value: str) -> int:
    """A size option's bytes (nccl-tests' parsesize: a number with K, M or G in either case, powers of 1024;
    or the testbed's 64KiB-style). Raises ScenarioError naming the option."""
    v = str(value).strip()
    if v[-1:] in ("k", "m", "g"):
        v = v[:-1] + v[-1].upper()
    try:
        return int(parse_size(v))
    except (ValueError, TypeError) as e:
        raise ScenarioError(f"{option} {value}: {e}") from None


def nccl_sizes(collective: str, n: int, element_bytes: int, min_bytes: int, max_bytes: int, factor: int,
               step_bytes: int) -> list[int]:
    """The bytes nccl-tests runs for -b/-e/-f/-i (src/common.cu TimeTest: ``size*stepfactor`` when the factor
    is above 1, else ``size+stepbytes``), each made a whole collective as nccl-tests does
    (testbed.results.nccl_table.nccl_size), repeats dropped. Raises ScenarioError for -b above -e, a
    step that does not grow, or a size too small for one aligned share per rank."""
    from testbed.results.nccl_table import PER_RANK_COUNT, nccl_size  # pandas: not at the CLI's start

    if min_bytes > max_bytes:
        raise ScenarioError(f"invalid sizes for 'minbytes' and 'maxbytes': {min_bytes} > {max_bytes} (-b, -e)")
    if factor < 1 or (factor == 1 and step_bytes < 1):
        raise ScenarioError(f"-f {factor} -i {step_bytes}: the size must grow (-f 2 or more, or -f 1 with -i > 0)")
    out, s = [], min_bytes
    while s <= max_bytes:
        b = nccl_size(collective, s, n, element_bytes)
        if b == 0:
            share = 16 if collective in PER_RANK_COUNT else element_bytes
            need = share * (n if collective in PER_RANK_COUNT else 1)
            raise ScenarioError(f"-b {min_bytes}: {collective} on {n} ranks moves 0 bytes below {need} B "
                                f"({share} B per rank, nccl-tests' alignment); give -b {need} or more")
        if b not in out:
            out.append(b)
        s = s * factor if factor > 1 else s + step_bytes
    return out


def default_algorithm(collective: str) -> str:
    """``ring`` when ``collective`` has it, else its first registered algorithm (``ring`` if it has none)."""
    names = collectives.names(collective)
    return "ring" if "ring" in names or not names else names[0]


def build_spec(args) -> ScenarioSpec:
    """The scenario of ``args.scenario`` (default quickstart) with its workload replaced by the options.

    Raises ScenarioError naming the option and the scenario key at fault, FileNotFoundError.
    """
    path = Path(args.scenario or DEFAULT_SCENARIO)
    base = load_scenario(path)
    data = base.model_dump()
    if str(args.collective).strip().isdigit():
        raise ScenarioError(f"-c {args.collective}: -c is the collective here (nccl-tests has a binary per collective: "
                            f"{', '.join(collectives.collectives())}); nccl-tests' -c (data check) is --check")
    if getattr(args, "check", 0):
        raise ScenarioError(f"--check {args.check}: the emulated transport moves payload bytes, not values: there "
                            "is no result to compare element by element (every byte's exactly-once delivery is "
                            "checked: the transport line); #wrong prints N/A, as nccl-tests with -c 0; use --check 0")
    if getattr(args, "root", 0):
        raise ScenarioError(f"-r {args.root}: a broadcast here roots at the first rank (-r 0); other roots are not "
                            "offered")
    n = args.ranks if args.ranks is not None else base.fabric.n_hosts
    datatype = getattr(args, "datatype", "float")
    given = {"min_bytes": _bytes("-b", args.minbytes), "max_bytes": _bytes("-e", args.maxbytes),
             "step_factor": args.stepfactor, "step_bytes": _bytes("-i", getattr(args, "stepbytes", "1M"))}
    sizes = nccl_sizes(args.collective, max(n, 1), NCCL_TYPE_BYTES[datatype], given["min_bytes"], given["max_bytes"],
                       given["step_factor"], given["step_bytes"])
    skip = getattr(args, "per_iter_skip", 0)
    if not 0 <= skip < max(args.iters, 1):
        raise ScenarioError(f"-K {skip}: per-iteration skip must be between 0 and {args.iters - 1} (-n {args.iters})")
    data["workload"] = {
        "collective": args.collective, "algorithm": args.algorithm or default_algorithm(args.collective),
        "sizes": {"values": sizes}, "in_place": True,
        "iterations": args.iters, "warmup_iterations": args.warmup_iters, "max_bytes_per_size": None,
        "channels": base.workload.channels if getattr(args, "channels", None) is None else args.channels,
        **({"ranks": args.ranks} if args.ranks is not None else {})}
    json_path = getattr(args, "output_file", None)
    data["output"] = {**data["output"], "table": "nccl", "nccl": {
        "datatype": datatype, "op": getattr(args, "op", "sum"), "per_iter": bool(getattr(args, "per_iter_timing", 0)),
        "per_iter_skip": skip, "json_path": str(Path(json_path).resolve()) if json_path else None,
        **given, "argv": list(getattr(args, "argv", None) or sys.argv)}}
    data["name"] = f"nccl-{args.collective}-{data['workload']['algorithm']}"
    try:
        return parse_scenario(data, f"{path} with the options")
    except ScenarioError as e:
        keys = ", ".join(f"{o} = {k}" for o, k in OPTION_KEYS.items())
        raise ScenarioError(f"{e}\n  (options: {keys})") from None


def prepare(args) -> None:
    """``testbed nccl``'s options made ready for :func:`build_spec` and the run: ``--max-duration`` in
    seconds, the scenario defaulting to quickstart. Raises argparse.ArgumentTypeError naming the option."""
    if args.max_duration is not None:
        from testbed.spec.estimate import parse_duration_s
        try:
            args.max_duration = parse_duration_s(args.max_duration)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"--max-duration: {e}") from None
    args.scenario = str(args.scenario or DEFAULT_SCENARIO)
