"""One lab figure read from a run directory: a summary.json path or a figure derived from its tables.

A figure's ``read`` is one of:

- a summary.json path: keys joined by dots; a list element by position (``victim[0]``) or by a field's
  value (``sizes[size_bytes=1024]``, ``jobs.jobs[name=a]``), e.g. ``congestion.jain_index``,
  ``sizes[size_bytes=65536].p50_us``;
- ``victim_dip.<field>``: the first victim flow's row of
  :func:`testbed.results.congestion_flows.victim_dip` over fct.csv and flow_rates.csv (any run with a
  burst, with or without the congestion loop), ``<field>`` one of its keys (``dip_depth``,
  ``dip_duration_s``, ``baseline_bps``, ``burst_s``, ...);
- ``switch_tx_bytes.<role>``: bytes the switches of one topology.json role (``spine``, ``leaf``,
  ``rail``) sent on all their ports: ports.csv's cumulative ``tx_bytes``, last sample less first,
  summed over their ports.

:func:`read_figure` returns a float, or raises :class:`FigureMissing` naming what is absent.
"""
from __future__ import annotations

import re
from pathlib import Path

from testbed.results.rundir import RunDir

_STEP = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)?(?:\[(?P<sel>[^\]]+)\])?$")


class FigureMissing(LookupError):
    """The run does not hold the figure (a key, list element or table is absent, or its value is null)."""


def summary_value(summary: dict, path: str):
    """The value at ``path`` (module docstring) in ``summary``; FigureMissing naming the first absent step."""
    node, done = summary, []
    for step in path.split("."):
        m = _STEP.match(step)
        if not m:
            raise ValueError(f"bad figure path {path!r}: step {step!r} is not key, key[i] or key[field=value]")
        if m["key"]:
            if not isinstance(node, dict) or node.get(m["key"]) is None:
                raise FigureMissing(f"summary.json has no {'.'.join(done + [m['key']])}")
            node = node[m["key"]]
        if m["sel"] is not None:
            node = _select(node, m["sel"], ".".join(done + [step]))
        done.append(step)
    return node


def _select(items, sel: str, where: str):
    if not isinstance(items, list):
        raise FigureMissing(f"summary.json's {where} is not a list")
    if sel.isdigit():
        if int(sel) >= len(items):
            raise FigureMissing(f"summary.json's {where}: only {len(items)} element(s)")
        return items[int(sel)]
    field, _, want = sel.partition("=")
    for item in items:
        if isinstance(item, dict) and str(item.get(field)) == want:
            return item
    raise FigureMissing(f"summary.json has no {where}")


def switch_tx_bytes(run: RunDir, role: str) -> int:
    """Bytes the switches of ``role`` (topology.json) sent on all their ports during the run (ports.csv)."""
    names = {s["name"] for s in run.topology["switches"] if s["role"] == role}
    ports = run.table("ports")
    if ports is None:
        raise FigureMissing("the run has no ports.csv")
    ports = ports[ports["port"].str.split("-").str[0].isin(names)]
    per_port = ports.groupby("port")["tx_bytes"]
    return int((per_port.max() - per_port.min()).sum())


def _victim(run: RunDir, field: str) -> float:
    from testbed.results.congestion_flows import victim_dip

    fct, rates = run.table("fct"), run.table("flow_rates")
    if fct is None or rates is None:
        raise FigureMissing("the run has no fct.csv or flow_rates.csv (not a flows pattern run)")
    rows = victim_dip(fct, rates)
    if not rows:
        raise FigureMissing("the run has no victim flow (no burst, or every flow shares the burst's receiver)")
    if field not in rows[0]:
        raise ValueError(f"victim_dip has no field {field!r}; allowed: {', '.join(rows[0])}")
    return rows[0][field]


def read_figure(run_dir: Path, read: str) -> float:
    """The figure ``read`` (module docstring) of the run in ``run_dir``, as a float.

    Raises FigureMissing when the run does not hold it, ValueError for a malformed ``read``."""
    run = RunDir.open(run_dir)
    kind, _, rest = read.partition(".")
    if kind == "victim_dip":
        value = _victim(run, rest)
    elif kind == "switch_tx_bytes":
        value = switch_tx_bytes(run, rest)
    else:
        value = summary_value(run.summary, read)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FigureMissing(f"{read} is {value!r}, not a number")
    return float(value)
