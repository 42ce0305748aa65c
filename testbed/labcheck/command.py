"""``testbed lab check LAB RESULTS_DIR``: a student's runs against the lab's expected bands.

Exit codes: 0 every check passed; 1 a figure outside its band, a run of an edited scenario, an
incomplete run, a missing run, or no run of the lab at all; 2 bad input (no such lab or directory).
"""
from __future__ import annotations

EPILOG = """examples:
  testbed lab check 02_incast_dcqcn results/        every run of lab 2 under results/
  testbed lab check 3 results/20261202T101500Z-lab3-pfc-tb12ab

exit codes:
  0        every check passed
  1        a check failed: a figure outside its band, a scenario that differs
           from the lab's file, an incomplete run, a missing run, or no run
           of this lab in RESULTS_DIR
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


def run(args) -> int:
    """Print the checker's lines; the exit code (module docstring). LabCheckError for bad input."""
    from pathlib import Path

    from testbed.labcheck.check import check

    verdict = check(args.lab, Path(args.results))
    print(verdict.text())
    return 0 if verdict.ok else 1
