"""JUnit XML of a regression suite: one ``<testcase>`` per scenario (the format Jenkins, GitLab and
GitHub test reporters read; schema of the Ant JUnit task: testsuites > testsuite > testcase with
``failure``, ``error``, ``skipped``, ``system-out``)."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


@dataclass
class Case:
    """One scenario's outcome. ``failures``: one line per failed figure or check (empty: passed);
    ``error``: the run could not be made or judged; ``details``: the comparison table and notes."""

    name: str
    time_s: float = 0.0
    failures: list = field(default_factory=list)
    error: Optional[str] = None
    details: str = ""
    skipped: Optional[str] = None

    @property
    def passed(self) -> bool:
        return not self.failures and self.error is None


def write(path: Path, suite: str, cases: list[Case]) -> Path:
    """Write the JUnit XML of ``cases`` to ``path`` (folders made); return ``path``."""
    root = ET.Element("testsuites", name=f"testbed regress {suite}")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)),
                       failures=str(sum(1 for c in cases if c.failures and c.error is None)),
                       errors=str(sum(1 for c in cases if c.error is not None)),
                       skipped=str(sum(1 for c in cases if c.skipped)),
                       time=f"{sum(c.time_s for c in cases):.3f}")
    for c in cases:
        tc = ET.SubElement(ts, "testcase", classname=f"regress.{suite}", name=c.name, time=f"{c.time_s:.3f}")
        if c.error is not None:
            ET.SubElement(tc, "error", message=c.error).text = "\n".join([c.error, *c.failures])
        elif c.failures:
            ET.SubElement(tc, "failure", message="; ".join(c.failures)).text = "\n".join(c.failures)
        elif c.skipped:
            ET.SubElement(tc, "skipped", message=c.skipped)
        if c.details:
            ET.SubElement(tc, "system-out").text = c.details
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path
