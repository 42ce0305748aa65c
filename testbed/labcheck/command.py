"""``testbed lab check LAB RESULTS_DIR``: a student's runs against the lab's expected bands.

Exit codes (testbed.process.exitcodes): 0 every check passed; 1 a figure outside its band, a run of an
edited scenario, an incomplete run, a missing run, or no run of the lab at all; 7 a run NOT faithful or
not judged (its figures are not trustworthy; ``--include-unfaithful`` counts it, flagged); 2 bad input
(no such lab or directory).
"""
from __future__ import annotations

EPILOG = """examples:
  testbed lab check 02_incast_dcqcn results/        every run of lab 2 under results/
  testbed lab check 2 results/20261202T101500Z-lab2-incast-dcqcn-tb12ab
                                                    one run: its figures only (the
                                                    lab's other runs are skipped)

exit codes:
  0        every check passed
  1        a check failed: a figure outside its band, a scenario that differs
           from the lab's file, an incomplete run, a missing run, or no run
           of this lab in RESULTS_DIR
  7        a run was NOT faithful or not judged (testbed run's exit 3 or 6):
           its figures are not trustworthy; run it again, or give
           --include-unfaithful to count it (flagged WARN)
  2        bad input: no such lab, bands file or directory"""


def add_parser(sub, parents) -> None:
    """``lab`` with its sub-command ``check`` on the ``testbed`` parser's subparsers."""
    import argparse

    lab = sub.add_parser("lab", parents=parents, help="teaching labs: check a student's results against a lab's "
                         "expected figures", description="Teaching labs (labs/).")
    lab_sub = lab.add_subparsers(dest="lab_command", metavar="{check}", required=True,
                                 parser_class=type(lab))
    check = lab_sub.add_parser("check", parents=parents, epilog=EPILOG,
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               help="check a results directory against a lab's expected bands",
                               description="Check a student's run directory, or a folder of run directories, "
                               "against a lab's expected figures (labs/LAB/expected.yaml): per figure the value, "
                               "the band and PASS/FAIL; whether each run is the lab's scenario as given and "
                               "complete; whether every scenario of the lab was run.")
    check.add_argument("lab", metavar="LAB", help="lab folder name (02_incast_dcqcn), number (2) or path")
    check.add_argument("results", metavar="RESULTS_DIR", help="a run directory or a folder of run directories")
    check.add_argument("--include-unfaithful", action="store_true",
                       help="count runs whose fidelity verdict is NOT faithful or not judged (flagged WARN); "
                       "without it such a run fails the check (exit 7)")


def run(args) -> int:
    """Print the checker's lines; the exit code (module docstring). LabCheckError for bad input."""
    from pathlib import Path

    from testbed.labcheck.check import check
    from testbed.process.exitcodes import EXIT_LAB_CHECK_FAILED, EXIT_LAB_UNFAITHFUL

    verdict = check(args.lab, Path(args.results), include_unfaithful=args.include_unfaithful)
    print(verdict.text())
    if verdict.unfaithful:
        return EXIT_LAB_UNFAITHFUL
    return 0 if verdict.ok else EXIT_LAB_CHECK_FAILED
