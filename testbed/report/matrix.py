"""A matrix of numbers as an HTML table whose cells are coloured by value and whose text stays readable.

Each cell's background is a matplotlib colour map's colour for its value; its text is black or white,
whichever contrasts more with that background by WCAG 2's contrast ratio (relative luminance). This is
matplotlib's annotated heatmap rule (its ``annotate_heatmap`` example picks the text colour by the cell's
value against a threshold) made exact: with the better of black and white the ratio is at least 4.58:1
on any background, above the 4.5:1 WCAG AA asks of body text. The numbers are text, not pixels, so
they can be read, copied and checked in a browser (tests/integration/test_report_browser.py).
"""
from __future__ import annotations

import html
from typing import Sequence

import matplotlib
import numpy as np
from matplotlib.colors import Normalize, to_hex

_BLACK, _WHITE = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)


def relative_luminance(rgb: Sequence[float]) -> float:
    """WCAG 2 relative luminance (0 black .. 1 white) of an sRGB colour with channels in 0..1."""
    c = np.asarray(rgb[:3], dtype=float)
    lin = np.where(c <= 0.03928, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(lin @ [0.2126, 0.7152, 0.0722])


def contrast_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """WCAG 2 contrast ratio (1 .. 21) of two sRGB colours with channels in 0..1."""
    hi, lo = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def text_colour(background: Sequence[float]) -> tuple[float, float, float]:
    """Black or white (RGB, 0..1): the one with the higher contrast ratio against ``background``."""
    return max((_BLACK, _WHITE), key=lambda fg: contrast_ratio(fg, background))


def matrix_html(rows: Sequence[str], cols: Sequence[str], values: np.ndarray, *, cmap: str, vmin: float,
                vmax: float, corner: str = "", fmt: str = "{:.2f}") -> str:
    """``values`` (len(rows) x len(cols), NaN for none) as ``<table class="matrix">``.

    Row and column headers are ``rows`` and ``cols`` (``corner`` in the top-left cell); each cell's
    inline style holds its background (``cmap`` over ``vmin``..``vmax``, clipped) and text colour
    (:func:`text_colour`) as ``#rrggbb``; a NaN cell is empty on the page's background. Raises ValueError
    when ``values``' shape does not match ``rows`` x ``cols``.
    """
    values = np.asarray(values, dtype=float)
    if values.shape != (len(rows), len(cols)):
        raise ValueError(f"values of shape {values.shape} for {len(rows)} rows x {len(cols)} columns")
    colours = matplotlib.colormaps[cmap]
    norm = Normalize(vmin=vmin, vmax=vmax, clip=True)
    head = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in cols)
    out = [f'<table class="matrix"><tr><th>{html.escape(corner)}</th>{head}</tr>']
    for name, row in zip(rows, values):
        cells = []
        for v in row:
            if np.isnan(v):
                cells.append('<td class="none"></td>')
                continue
            bg = colours(norm(v))[:3]
            cells.append(f'<td style="background-color:{to_hex(bg)};color:{to_hex(text_colour(bg))}">'
                         f"{html.escape(fmt.format(v))}</td>")
        out.append(f'<tr><th scope="row">{html.escape(name)}</th>{"".join(cells)}</tr>')
    out.append("</table>")
    return "".join(out)
