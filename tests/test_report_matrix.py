"""The report's interference matrix: numbers readable on every cell (issue 31, item 8).

Before: black numbers drawn by matplotlib on the 'Reds' colour map, so 1.99 of a 1.0-2.0 scale sat black
on dark red (contrast about 1.7:1). Now the matrix is an HTML table whose every cell carries its colour
and a text colour chosen by the cell's luminance; WCAG 2's contrast ratio of the two is at least 4.5 for
AA body text. tests/integration/test_report_browser.py checks the same in chromium's computed styles.
"""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from testbed.report.jobs import interference_plot
from testbed.results.rundir import RunDir


def _luminance(rgb):
    """WCAG 2 relative luminance of an sRGB colour given as 0-255 channels."""
    c = np.asarray(rgb, dtype=float) / 255
    lin = np.where(c <= 0.03928, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(lin @ [0.2126, 0.7152, 0.0722])


def _contrast(a, b):
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _hex(text):
    return [int(text[i:i + 2], 16) for i in (1, 3, 5)]


@pytest.fixture
def run(tmp_path) -> RunDir:
    d = tmp_path / "run"
    d.mkdir()
    values = [[1.0, 1.99, 1.5], [1.25, 1.0, 2.0], [None, 1.75, 1.0]]
    (d / "manifest.json").write_text(json.dumps({"run_id": "r1", "started_utc": "20261201T000000Z"}))
    (d / "summary.json").write_text(json.dumps({"jobs": {"jobs": [], "interference": {
        "jobs": ["a", "b", "c"], "jct_slowdown": values, "method": "pair runs"}}}))
    return RunDir.open(d)


def test_every_matrix_cell_reads_at_wcag_aa_contrast(run):
    plot = interference_plot(run)
    cells = re.findall(r'<td style="background-color:(#[0-9a-f]{6});color:(#[0-9a-f]{6})">([^<]*)</td>',
                       plot.html or "")
    assert [t for _, _, t in cells] == ["1.00", "1.99", "1.50", "1.25", "1.00", "2.00", "1.75", "1.00"], cells
    assert plot.html.count('<td class="none"></td>') == 1  # the pair never run: an empty cell
    ratios = {t: round(_contrast(_hex(bg), _hex(fg)), 2) for bg, fg, t in cells if t}
    print("contrast per cell:", ratios)
    assert min(ratios.values()) >= 4.5, ratios
    # the scale runs from white (no slowdown) to dark red: 2.00 is the darkest cell, written in white
    bg = {t: _luminance(_hex(b)) for b, _, t in cells if t}
    assert bg["1.00"] > 0.9 and bg["2.00"] < 0.1 and bg["1.99"] < 0.1
    fg = {t: f for _, f, t in cells if t}
    assert fg["1.00"] == "#000000" and fg["2.00"] == "#ffffff" and fg["1.99"] == "#ffffff"
    # row and column headers name the jobs
    assert re.findall(r'<th scope="row">([^<]*)</th>', plot.html) == ["a", "b", "c"]


def test_the_matrix_is_on_the_page(run):
    from testbed.report import write_report

    page = write_report(run.path)[0].read_text()
    section = re.search(r'<section id="plot-jobs_interference">(.*?)</section>', page, re.S).group(1)
    assert '<table class="matrix"' in section and "1.99" in section
    assert "from 1.00 (white) to 2.00 (dark red)" in section  # the colour scale, as the colour bar said
