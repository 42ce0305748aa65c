"""The report's HTML tables: the fidelity verdict (summary.json), the size table (sizes.csv) and the
manifest (manifest.json). Every value is HTML-escaped."""
from __future__ import annotations

import html
import json

from testbed.report.perf import human_size
from testbed.report.data import rows
from testbed.results.rundir import RunDir


def _cell(value) -> str:
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
        if len(text) > 100:
            text = json.dumps(value, indent=1, default=str)
        if len(text) > 400:
            first = html.escape(text.splitlines()[0] + " ...")
            return f"<details><summary><code>{first}</code></summary><pre>{html.escape(text)}</pre></details>"
        return f"<pre>{html.escape(text)}</pre>"
    return html.escape("" if value is None else str(value))


def _rows(pairs) -> str:
    return "".join(f"<tr><th>{html.escape(str(k))}</th><td>{_cell(v)}</td></tr>" for k, v in pairs)


def verdict_html(run: RunDir) -> str:
    """The fidelity verdict: faithful or not, each check's status and reason, violations, not judged."""
    s = run.summary
    if not s:
        return '<p class="missing">not recorded in this run: no summary.json (the run did not finish)</p>'
    faithful = s.get("faithful")
    word, cls = {True: ("faithful", "ok"), False: ("NOT faithful", "bad")}.get(faithful, ("not judged", "warn"))
    head = f'<p class="verdict {cls}">Verdict: <b>{word}</b>'
    if s.get("complete") is False:
        head += f" (the run is incomplete: {html.escape(str(s.get('incomplete_reason')))})"
    head += "</p>"
    checks = s.get("checks") or {}
    body = "".join(
        f'<tr><th>{html.escape(name)}</th><td class="{_status_cls(c.get("status"))}">'
        f'{html.escape(str(c.get("status")))}</td><td>{html.escape(c.get("reason") or "")}</td></tr>'
        for name, c in checks.items())
    table = f'<table class="checks"><tr><th>check</th><th>status</th><th>reason</th></tr>{body}</table>' if body else ""
    lists = ""
    for name in ("violations", "not_judged"):
        items = s.get(name) or []
        if items:
            lists += f"<p>{name.replace('_', ' ')}:</p><ul>" + "".join(
                f"<li>{html.escape(str(x))}</li>" for x in items) + "</ul>"
    figures = s.get("fidelity") if isinstance(s.get("fidelity"), dict) else None
    extra = f"<table class='kv'>{_rows(figures.items())}</table>" if figures else ""
    return head + table + lists + (f"<details><summary>fidelity figures</summary>{extra}</details>" if extra else "")


def _status_cls(status) -> str:
    return {"passed": "ok", "failed": "bad"}.get(status, "warn")


def sizes_html(run: RunDir) -> str:
    """sizes.csv as nccl-tests reads it (Mbit/s, us); empty string when the run has no sizes."""
    sizes = rows(run, "sizes")
    if sizes is None:
        return ""
    cols = [("size", lambda r: human_size(r["size_bytes"])), ("ranks", lambda r: r["group_size"]),
            ("collective", lambda r: f"{r['collective']} {r['algorithm']}"),
            ("time (us)", lambda r: f"{r['time_us']:.0f}"), ("algbw (Mbit/s)", lambda r: f"{r['algbw_bps'] / 1e6:.3f}"),
            ("busbw (Mbit/s)", lambda r: f"{r['busbw_bps'] / 1e6:.3f}"), ("busbw/link", lambda r: f"{r['busbw_ratio']:.3f}"),
            ("n", lambda r: r["count"]), ("p50 (us)", lambda r: _num(r.get("p50_us"))),
            ("p99 (us)", lambda r: _num(r.get("p99_us")))]
    head = "".join(f"<th>{html.escape(c)}</th>" for c, _ in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(f(r)))}</td>" for _, f in cols) + "</tr>"
                   for r in sizes.to_dict("records"))
    return f'<table class="sizes"><tr>{head}</tr>{body}</table>'


def _num(v) -> str:
    return "-" if v is None or v != v else f"{v:.0f}"


def manifest_html(run: RunDir) -> str:
    """Every top-level key of manifest.json with its value (nested values as JSON, long ones folded)."""
    m = run.manifest
    if not m:
        return '<p class="missing">not recorded in this run: manifest.json is empty or unreadable</p>'
    return f"<table class='kv'>{_rows(m.items())}</table>"
