"""Exit codes of ``testbed run`` (docs/cli.md "Exit codes"; ``testbed run --help``): a regression
script can gate on the code alone."""
from __future__ import annotations

#: Exit codes of ``testbed run`` (docs/cli.md "Exit codes"; ``testbed run --help``).
EXIT_FAITHFUL = 0          # completed, every judged fidelity check passed
EXIT_BAD_INPUT = 2         # bad scenario or arguments; nothing was built
EXIT_NOT_FAITHFUL = 3      # completed, but a fidelity check failed: the figures are not trustworthy
EXIT_FAILED = 4            # the run failed or was refused: an error, or posted/acknowledged/delivered bytes differ
EXIT_REGRESSED = 5         # testbed compare / regress: a figure is worse than its reference beyond its band
EXIT_NOT_JUDGED = 6        # completed, no check failed, but no link or host rate could be judged: not faithful
EXIT_LAB_CHECK_FAILED = 1  # testbed lab check: a figure outside its band, an edited scenario, a missing run
EXIT_LAB_UNFAITHFUL = 7    # testbed lab check: a run was NOT faithful (or not judged), so its figures prove nothing
EXIT_INTERRUPTED_BASE = 128  # + signal number (130 SIGINT, 143 SIGTERM)


def exit_code(summary: dict) -> int:
    """Exit code of a run that wrote ``summary`` (summary.json content): EXIT_FAILED when it is
    incomplete or its bytes check failed, EXIT_NOT_JUDGED when its ``verdict`` is ``not_judged``, else
    EXIT_FAITHFUL or EXIT_NOT_FAITHFUL."""
    if summary.get("complete") is False or summary.get("checks", {}).get("bytes", {}).get("status") == "failed":
        return EXIT_FAILED
    if summary.get("verdict") == "not_judged":
        return EXIT_NOT_JUDGED
    return EXIT_FAITHFUL if summary["faithful"] else EXIT_NOT_FAITHFUL
