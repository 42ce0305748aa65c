"""report.html: every plot of testbed.report and the tables on one self-contained page.

The page has no external reference: the plots are base64 PNGs in ``<img>``
tags (data: URLs), the style sheet is inline, there is no script.
"""
from __future__ import annotations

import html
import time

from testbed.report.figure import Plot
from testbed.report.tables import manifest_html, sizes_html, verdict_html
from testbed.results.rundir import RunDir

_CSS = """
body{font-family:sans-serif;margin:1.5em auto;max-width:1100px;color:#222}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.6em}
figure{margin:1em 0} figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85em;color:#555} .missing{color:#8a6d3b;font-style:italic}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0} th,td{border:1px solid #ddd;padding:2px 6px;
text-align:left;vertical-align:top} pre{margin:0;font-size:.95em;white-space:pre-wrap}
.ok{color:#1a7f37} .bad{color:#b42318;font-weight:bold} .warn{color:#8a6d3b}
table.matrix td{text-align:center;vertical-align:middle;min-width:3.5em;padding:6px 8px;font-size:1.1em}
table.matrix th{text-align:center;vertical-align:middle}
.verdict{font-size:1.1em} .meta{color:#555;font-size:.9em} nav a{margin-right:.8em;font-size:.9em}
"""


def plot_html(p: Plot) -> str:
    """One plot's figure (an ``<img>`` with a data: URL; ``data-axes``: its axes limits and data extents as
    JSON, testbed.report.extent), its HTML table, or its 'not recorded' line."""
    title = html.escape(p.title)
    if p.html is not None:
        return (f'<section id="plot-{p.key}"><h2>{title}</h2><figure>{p.html}'
                f'<figcaption>{html.escape(p.caption)}</figcaption></figure></section>')
    if p.png_b64 is None:
        return f'<section id="plot-{p.key}"><h2>{title}</h2><p class="missing">{html.escape(p.missing)}</p></section>'
    return (f'<section id="plot-{p.key}"><h2>{title}</h2><figure><img class="plot" alt="{title}" '
            f'data-axes="{html.escape(p.axes_json or "[]")}" src="data:image/png;base64,{p.png_b64}"><figcaption>{html.escape(p.caption)}</figcaption>'
            f'</figure></section>')


def page_html(run: RunDir, plots: list[Plot], build_s: float) -> str:
    """The whole page for ``run`` with ``plots`` in order."""
    s, m = run.summary, run.manifest
    name = s.get("scenario") or (m.get("scenario") or {}).get("name") or run.path.name
    status = (f'<p class="bad">INCOMPLETE: {html.escape(run.incomplete)}</p>' if run.incomplete else "")
    nav = "".join(f'<a href="#plot-{p.key}">{html.escape(p.title)}</a>' for p in plots)
    meta = (f"run {html.escape(run.run_id)} &middot; {html.escape(str(run.path))} &middot; started "
            f"{html.escape(str(m.get('started_utc', '?')))} UTC &middot; scale factor "
            f"{html.escape(str(s.get('scale_factor', m.get('scale_factor', '?'))))} &middot; report made in "
            f"{build_s:.2f} s on {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC")
    sizes = sizes_html(run)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(name)}: testbed run {html.escape(run.run_id)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Testbed run: {html.escape(name)}</h1>", f'<p class="meta">{meta}</p>', status,
        f"<nav>{nav}<a href='#verdict'>Fidelity verdict</a><a href='#manifest'>Manifest</a></nav>",
        '<section id="verdict"><h2>Fidelity verdict</h2>', verdict_html(run), "</section>",
        *((f'<section id="sizes"><h2>Results per size</h2>{sizes}</section>',) if sizes else ()),
        *(plot_html(p) for p in plots),
        '<section id="manifest"><h2>Manifest</h2>', manifest_html(run), "</section>",
        "</body></html>",
    ]
    return "\n".join(parts)
