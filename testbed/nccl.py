"""``testbed nccl`` (alias ``perf``): one collective over a scenario's fabric, as nccl-tests runs it.

The options are nccl-tests' (src/common.cu) where they mean the same:
``-b`` min size, ``-e`` max size, ``-f`` size factor, ``-n`` timed
iterations, ``-w`` warm-up iterations, ``-g`` ranks (here: hosts 0..g-1 of
the fabric, one rank per host; nccl-tests' GPUs per thread); then ours:
``-c/--collective`` and ``-a/--algorithm`` (a registered pair,
traffic.collectives; the algorithm defaults to ``ring`` where the collective
has one, else its first). Sizes take bytes or nccl-tests' suffixes (``4K``,
``4M``, ``1G``: powers of 1024) or ``64KiB``-style.

The fabric, transport, fidelity and controller come from the scenario file
(default ``scenarios/quickstart.yaml``); its ``workload`` is replaced by a
size sweep of the options (every size runs exactly ``-n`` timed
iterations: ``max_bytes_per_size`` off) and ``output.table`` set to ``nccl``,
and the result is validated like any scenario and run by the same runner
(testbed.api.run_spec, as ``testbed run``) with the same exit codes, results
directory and fidelity verdict.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from testbed.spec.scenario import ScenarioError, ScenarioSpec, load_scenario, parse_scenario
from traffic import collectives

DEFAULT_SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
#: option -> the workload key it sets (named in errors)
OPTION_KEYS = {"-b": "sizes.min_bytes", "-e": "sizes.max_bytes", "-f": "sizes.factor", "-n": "iterations",
               "-w": "warmup_iterations", "-g": "ranks", "-c": "collective", "-a": "algorithm",
               "--channels": "channels"}


def add_parser(sub, parents) -> None:
    """Add ``nccl`` (alias ``perf``) to the subcommands ``sub``."""
    p = sub.add_parser("nccl", aliases=["perf"], parents=parents, help="run one collective as nccl-tests does (root)",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("scenario", metavar="SCENARIO.yaml", nargs="?", default=None,
                   help="scenario giving the fabric (default scenarios/quickstart.yaml of this install)")
    p.add_argument("-b", "--minbytes", default="32K", help="smallest size (default 32K)")
    p.add_argument("-e", "--maxbytes", default="1M", help="largest size (default 1M)")
    p.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplication factor (default 2)")
    p.add_argument("-n", "--iters", type=int, default=5, help="timed iterations per size (default 5)")
    p.add_argument("-w", "--warmup_iters", type=int, default=1, help="warm-up iterations per size (default 1)")
    p.add_argument("-g", "--ranks", type=int, default=None, help="ranks: hosts 0..g-1 (default every host)")
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


def default_algorithm(collective: str) -> str:
    """``ring`` when ``collective`` has it, else its first registered algorithm (``ring`` if it has none)."""
    names = collectives.names(collective)
    return "ring" if "ring" in names or not names else names[0]


def build_spec(args) -> ScenarioSpec:
    """The scenario of ``args.scenario`` (default quickstart) with its workload replaced by the options.

    Raises ScenarioError naming the option and the workload key at fault, FileNotFoundError.
    """
    path = Path(args.scenario or DEFAULT_SCENARIO)
    base = load_scenario(path)
    data = base.model_dump()
    data["workload"] = {
        "collective": args.collective, "algorithm": args.algorithm or default_algorithm(args.collective),
        "sizes": {"min_bytes": args.minbytes, "max_bytes": args.maxbytes, "factor": args.stepfactor},
        "iterations": args.iters, "warmup_iterations": args.warmup_iters, "max_bytes_per_size": None,
        "channels": base.workload.channels if getattr(args, "channels", None) is None else args.channels,
        **({"ranks": args.ranks} if args.ranks is not None else {})}
    data["output"] = {**data["output"], "table": "nccl"}
    data["name"] = f"nccl-{args.collective}-{data['workload']['algorithm']}"
    try:
        return parse_scenario(data, f"{path} with the options")
    except ScenarioError as e:
        keys = ", ".join(f"{o} = workload.{k}" for o, k in OPTION_KEYS.items())
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
