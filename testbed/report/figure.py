"""One plot of the report: a matplotlib figure rendered to an embedded PNG, or the reason it is absent.

Figures are made with :class:`matplotlib.figure.Figure` and the Agg canvas
directly (no pyplot: no global state, no display needed) and embedded in the
page as base64 PNG (``data:image/png;base64,...``), so report.html opens
offline with no other file.
"""
from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from testbed.report.extent import axes_extents

#: resolution of the embedded PNGs (pixels per inch); figures are 10-11 inches wide
DPI = 90
#: the prefix of every plot's replacement line
NOT_RECORDED = "not recorded in this run: "


@dataclass(frozen=True)
class Plot:
    """One plot: ``png_b64`` (base64 PNG), ``html`` (a table drawn by the page itself, e.g.
    testbed.report.matrix) or ``missing`` (the line that replaces it), exactly one of them.

    ``key``: the HTML id (``plot-<key>``); ``caption``: what the figure shows and where it comes from;
    ``axes_json``: the drawn figure's axes limits and each artist's data extent (testbed.report.extent), JSON.
    """
    key: str
    title: str
    png_b64: str | None = None
    missing: str | None = None
    caption: str = ""
    axes_json: str | None = None
    html: str | None = None


def new_figure(width_in: float = 10.0, height_in: float = 4.0, left_in: float = 0.8, right_in: float = 0.25,
               top_in: float = 0.45, bottom_in: float = 0.55, **adjust) -> Figure:
    """A figure on an Agg canvas with fixed margins in inches (``adjust``: more of ``subplots_adjust``).

    Fixed margins instead of a layout engine: constrained layout drew every figure twice and took
    half of the report's time.
    """
    fig = Figure(figsize=(width_in, height_in))
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=left_in / width_in, right=1 - right_in / width_in, top=1 - top_in / height_in,
                        bottom=bottom_in / height_in, **adjust)
    return fig


def rendered(key: str, title: str, fig: Figure, caption: str = "") -> Plot:
    """``fig`` as a :class:`Plot` holding its PNG (base64) and, read back after drawing, its axes limits and
    data extents (testbed.report.extent.axes_extents)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return Plot(key, title, png_b64=base64.b64encode(buf.getvalue()).decode("ascii"), caption=caption,
                axes_json=json.dumps(axes_extents(fig), separators=(",", ":")))


def absent(key: str, title: str, why: str) -> Plot:
    """A :class:`Plot` replaced by ``not recorded in this run: <why>``."""
    return Plot(key, title, missing=NOT_RECORDED + why)


def time_bins(t_s: np.ndarray, max_bins: int = 400) -> np.ndarray:
    """Bin edges (s) covering ``t_s`` with at most ``max_bins`` bins, no finer than the samples' spacing."""
    lo, hi = float(np.min(t_s)), float(np.max(t_s))
    uniq = np.unique(t_s)
    step = float(np.median(np.diff(uniq))) if len(uniq) > 1 else 1.0
    n = int(max(1, min(max_bins, np.ceil((hi - lo) / step) if step > 0 else 1)))
    return np.linspace(lo, hi if hi > lo else lo + step, n + 1)
