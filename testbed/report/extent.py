"""What each drawn plot holds, read back from matplotlib after drawing: every Axes' limits and the data
extent of every artist on it (series and reference lines), so a test can check that each plot shows all
of its data (the report's browser test reads it from the ``data-axes`` attribute of each ``<img>``).

Extents come from the artists, not from what the plotting code meant to draw: a line's ``xydata``, a
collection's ``get_datalim``, a patch's path, an image's extent, each mapped to the Axes' data
coordinates through the artist's own transform. A reference line (``axhline``/``axvline``: one
coordinate in Axes fractions) thus spans exactly the axis it crosses and is checked on the other.
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib.axes import Axes
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.image import AxesImage


def _span(values: np.ndarray) -> list[float] | None:
    v = values[np.isfinite(values)]
    return [float(v.min()), float(v.max())] if v.size else None


def _to_data(ax: Axes, xy: np.ndarray, transform) -> np.ndarray:
    """Points ``xy`` (N x 2) in ``transform``'s input coordinates as the Axes' data coordinates."""
    if transform == ax.transData or not len(xy):
        return np.asarray(xy, dtype=float)
    with np.errstate(all="ignore"):
        return ax.transData.inverted().transform(transform.transform(xy))


def _artists(ax: Axes):
    """(label, kind, is a reference line, points in data coordinates) of every data artist of ``ax``."""
    for line in ax.lines:
        ref = line.get_transform() != ax.transData  # axhline/axvline: one coordinate in Axes fractions
        yield line.get_label(), "line", ref, _to_data(ax, np.asarray(line.get_xydata(), float), line.get_transform())
    for coll in ax.collections:
        box = coll.get_datalim(ax.transData).get_points()  # a null box (no data) holds infinities
        yield coll.get_label(), type(coll).__name__, False, box if np.all(np.isfinite(box)) else np.zeros((0, 2))
    bars = [(c.get_label(), list(c.patches)) for c in ax.containers if isinstance(c, BarContainer)]
    in_bars = {id(p) for _, ps in bars for p in ps}
    loose = [p for p in ax.patches if id(p) not in in_bars]
    for label, patches in bars + ([("patches", loose)] if loose else []):
        pts = [_to_data(ax, p.get_path().vertices, p.get_transform()) for p in patches]
        yield label, "bars", False, np.concatenate(pts) if pts else np.zeros((0, 2))
    for img in ax.images:
        if isinstance(img, AxesImage):
            x0, x1, y0, y1 = img.get_extent()
            yield img.get_label(), "image", False, np.array([[x0, y0], [x1, y1]], dtype=float)


def fit_y(*axes: Axes, bottom: float = 0.0, margin: float = 0.06) -> None:
    """Set the y limits of ``axes`` (one, or panels sharing y) from ``bottom`` to the top of every artist on
    them, reference lines included, plus ``margin`` of the span (a dashed line at the data's top stays
    visible above it)."""
    tops = [float(np.nanmax(pts[:, 1])) for ax in axes for *_, pts in _artists(ax)
            if len(pts) and np.isfinite(pts[:, 1]).any()]
    top = max(tops, default=bottom + 1.0)
    for ax in axes:
        ax.set_ylim(bottom, top + margin * max(top - bottom, 1e-12))


def axes_extents(fig: Figure) -> list[dict]:
    """One dict per Axes of ``fig`` that holds data (colorbars left out): ``title``, ``xlim``, ``ylim``
    (low, high as set: an inverted axis has low > high), ``xscale``, ``yscale`` and ``series``: one dict
    per artist with ``label``, ``kind`` (line, bars, image or the collection's class), ``ref`` (true for
    a reference line) and ``x``/``y``: [min, max] of its finite data coordinates, or None when it has none
    (a reference line's x of an ``axhline`` is the whole axis: the Axes' limits).

    Call after the figure is drawn (``savefig``), so the limits are the ones in the picture.
    """
    out = []
    for ax in fig.axes:
        if hasattr(ax, "_colorbar"):
            continue
        series = []
        for label, kind, ref, pts in _artists(ax):
            pts = np.asarray(pts, dtype=float).reshape(-1, 2)
            series.append({"label": str(label), "kind": kind, "ref": ref,
                           "x": _span(pts[:, 0]), "y": _span(pts[:, 1])})
        if series:
            out.append({"title": ax.get_title() or ax.get_title(loc="left") or ax.get_ylabel(),
                        "xlim": _round(ax.get_xlim()), "ylim": _round(ax.get_ylim()),
                        "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
                        "series": [{**s, "x": _round(s["x"]), "y": _round(s["y"])} for s in series]})
    return out


def _round(pair) -> list[float] | None:
    """Limits and extents at 9 significant digits (the JSON stays short; a check needs a tolerance anyway)."""
    return None if pair is None else [float(f"{v:.9g}") if math.isfinite(v) else v for v in pair]


def outside(axes: list[dict], rel_tol: float = 1e-6) -> list[str]:
    """Every series of ``axes`` (as :func:`axes_extents` gives) whose data leaves its Axes' limits, as
    ``'<title>: <label> y [lo, hi] outside ylim [lo, hi]'``; [] when every series is inside."""
    bad = []
    for ax in axes:
        for s in ax["series"]:
            for c in ("x", "y"):
                if s[c] is None:
                    continue
                lo, hi = sorted(ax[f"{c}lim"])
                tol = rel_tol * max(abs(lo), abs(hi), 1e-12)
                if s[c][0] < lo - tol or s[c][1] > hi + tol:
                    bad.append(f"{ax['title']}: {s['label']} {c} {s[c]} outside {c}lim {ax[f'{c}lim']}")
    return bad
