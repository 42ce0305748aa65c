"""``testbed --help`` and every subcommand's help: they run, and show no reST markup (their texts come
from docstrings written for Sphinx; testbed.cli strips the markup where help is built). The doctor's
calibration time is stated the same way in its help, its report line and the docs."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.cli import build_parser
from testbed.measure import capacity
from testbed.spec.rest_text import MARKUP_RE, markdown, plain

REPO = Path(__file__).resolve().parents[1]


def _subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return parser, action.choices


@pytest.mark.parametrize("name", [None, *sorted(_subparsers()[1])])
def test_help_has_no_rest_markup(name):
    parser, subs = _subparsers()
    text = (parser if name is None else subs[name]).format_help()
    assert MARKUP_RE.findall(text) == [], text


@pytest.mark.parametrize("argv", [[], *[[n] for n in sorted(_subparsers()[1])]])
def test_help_runs(argv):
    r = subprocess.run([sys.executable, "-m", "testbed.cli", *argv, "--help"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: testbed") and r.stderr == ""
    assert MARKUP_RE.findall(r.stdout) == []


def test_plain_and_markdown_strip_roles_and_literals():
    doc = "Suite (:mod:`testbed.regress.suite`), :data:`~a.B`, :ref:`the title <target>`; ``-b`` min, `x`."
    assert plain(doc) == "Suite (testbed.regress.suite), a.B, the title; -b min, x."
    assert markdown(doc) == "Suite (`testbed.regress.suite`), `a.B`, `the title`; `-b` min, `x`."
    assert plain("it's 2 ``*`` 3, not `code`s") == "it's 2 * 3, not `code`s"  # a backquote inside a word stays


def _calibration_times(text: str) -> list[str]:
    """'about N min...' stated in the paragraphs of ``text`` that speak of calibrating."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        if "calibrat" in para.lower():
            out += [re.sub(r"\s+", " ", m) for m in re.findall(r"about\s+\S+\s+min\w*|\b\d+(?:-\d+)?\s+min\b|\b\d+ s\b(?= to calibrate)", para)]
    return out


def test_calibration_time_is_stated_one_way():
    """testbed.pipeline.calibrate: about 5 steps per path MTU (coarse bracket, 2 bisections, a confirmation),
    each a short quickstart-fabric run of about 15-20 s with set-up and teardown: about 3 minutes."""
    doctor = _subparsers()[1]["doctor"].format_help()
    texts = {"doctor --help": doctor, "doctor report": capacity.format_capacity(None)}
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        texts[str(page.relative_to(REPO))] = page.read_text()
    stated = {name: _calibration_times(t) for name, t in texts.items()}
    assert stated["doctor --help"] and stated["doctor report"], stated
    forms = {re.sub(r"min\w*", "min", s) for v in stated.values() for s in v}
    assert forms == {"about 3 min"}, stated


def test_top_level_help_has_an_example_and_points_at_the_readme():
    """Issue 31 item 9: ``testbed --help`` had no example and did not say where to start reading."""
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "--help"], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    example = re.search(r"^\s+(\S*testbed run (scenarios/\S+\.yaml))(\s|$)", r.stdout, re.M)
    assert example, r.stdout
    assert (REPO / example.group(2)).is_file(), example.group(2)  # the example names a scenario that exists
    assert "README.md" in r.stdout and (REPO / "README.md").is_file(), r.stdout
