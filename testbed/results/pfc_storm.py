"""The ``congestion`` block's storm figures: PFC watchdog detection and restore, and the rest of the fabric.

Inputs (run directory): ``pfc_storms.csv`` (testbed.emulation.pfc_storm: when each storming NIC sent
its first XOFF and its XON), ``pfc_events.csv`` (the controller loop: ``storm`` / ``restore`` rows,
port = the switch port the watchdog watched), ``congestion_loop.json`` (the watchdog's drops:
controllers.loop_result.PfcResult) and, for a pattern run, ``flow_rates.csv`` (testbed.workloads.pattern.results:
each flow's bytes per rate bin).
Per storm:

- ``detect_ms``: from the first XOFF to the watchdog's first ``storm`` row on the storm's port;
- ``restore_after_end_ms``: from the XON (storm end) to the first ``restore`` row on that port after it;
- rest of the fabric (flows neither from nor to the storming host): their summed goodput (bit/s) in
  ``before`` (first flow start .. storm start), ``spreading`` (storm start .. detection: the pause
  spreads hop by hop), ``during`` (detection .. storm end: the watchdog drops, the rest runs) and
  ``after`` (restore .. the first end of one of those flows, at most 1 s); each window is cut at the
  first end of one of those flows (so every one is running) and counts whole rate bins inside it;
  None when no bin fits.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from testbed.results.rundir import RunDir

AFTER_WINDOW_NS = 1_000_000_000


def _rest_goodput(rates: pd.DataFrame, fct: pd.DataFrame, host: str, edges: dict) -> dict:
    """{window: summed goodput bit/s of the flows not touching ``host``} (module doc)."""
    rest = fct[(fct["src"] != host) & (fct["dst"] != host)]
    out = dict.fromkeys(edges)
    if rest.empty or rates.empty:
        return out
    r = rates[rates["flow"].isin(rest["flow"])]
    bins = sorted(r["bin_start_ns"].unique())
    bin_ns = int(bins[1] - bins[0]) if len(bins) > 1 else 0
    cut = int(rest["end_ns"].min())
    for name, (a, b) in edges.items():
        if a is None or b is None or not bin_ns:
            continue
        b = min(b, cut)
        inside = r[(r["bin_start_ns"] >= a) & (r["bin_start_ns"] + bin_ns <= b)]
        n = inside["bin_start_ns"].nunique()
        if n:
            out[name] = round(float(inside["rx_bytes"].sum()) * 8 / (n * bin_ns / 1e9), 1)
    return out


def _first(events: pd.DataFrame, kind: str, after_ns: int | None) -> int | None:
    """Time of the first ``kind`` row at or after ``after_ns`` (None: none, or no ``after_ns``)."""
    if after_ns is None:
        return None
    t = events.loc[(events["event"] == kind) & (events["time_ns"] >= after_ns), "time_ns"]
    return int(t.min()) if len(t) else None


def storm_rows(run_dir: Path) -> list[dict]:
    """One dict per storm of pfc_storms.csv with its detection, restore and rest-of-fabric figures."""
    run = RunDir(run_dir)
    storms = run["pfc_storms"]
    ev = run.get("pfc_events", pd.DataFrame(columns=["time_ns", "port", "event"]))
    fct, rates = run.table("fct"), run.table("flow_rates")
    rows = []
    for s in storms.itertuples():
        start = int(s.start_ns) if pd.notna(s.start_ns) else None
        end = int(s.end_ns) if pd.notna(s.end_ns) else None
        mine = ev[ev["port"].astype(str) == str(s.switch_port)]
        detect = _first(mine, "storm", start)
        restored = _first(mine, "restore", end)
        row = {"fault": int(s.fault), "host": s.host, "switch_port": s.switch_port, "start_ns": start,
               "end_ns": end, "xoff_frames": int(s.xoff_frames), "detect_ns": detect, "restore_ns": restored,
               "detect_ms": round((detect - start) / 1e6, 2) if detect is not None else None,
               "restore_after_end_ms": round((restored - end) / 1e6, 2) if restored is not None and end else None}
        if fct is not None and rates is not None and len(fct) and start is not None:
            edges = {"before": (int(fct["start_ns"].min()), start), "spreading": (start, detect),
                     "during": (detect, end),
                     "after": (restored, restored + AFTER_WINDOW_NS if restored is not None else None)}
            row["rest_goodput_bps"] = _rest_goodput(rates, fct, str(s.host), edges)
        rows.append(row)
    return rows


def storm_block(run_dir: Path, faults: dict | None) -> dict:
    """Figures for summary.json's ``congestion`` block ({} without pfc_storms.csv): ``pfc_storms`` (the
    rows of :func:`storm_rows`) and, of the first storm, the scalars ``storm_detect_ms``,
    ``storm_restore_after_end_ms``, ``rest_goodput_<window>_bps``; ``restores``, ``watchdog_drops_pkts``,
    ``watchdog_drops_bytes`` and ``rx_pfc_frames`` from the loop. Sets ``detect_ms`` and ``detected_by``
    (``pfc_watchdog``) on the storm's row of ``faults["list"]``."""
    from testbed.results.congestion import pfc_result

    if "pfc_storms" not in RunDir(run_dir):
        return {}
    rows = storm_rows(run_dir)
    pfc = pfc_result(run_dir)
    out: dict = {"restores": 0, "watchdog_drops_pkts": 0, "watchdog_drops_bytes": 0, "rx_pfc_frames": 0}
    if pfc is not None:
        out = {"restores": pfc.restores, "watchdog_drops_pkts": pfc.watchdog_drops_pkts,
               "watchdog_drops_bytes": pfc.watchdog_drops_bytes, "rx_pfc_frames": pfc.rx_pfc_frames}
    out["pfc_storms"] = rows
    if rows:
        first = rows[0]
        out["storm_detect_ms"] = first["detect_ms"]
        out["storm_restore_after_end_ms"] = first["restore_after_end_ms"]
        for name, bps in (first.get("rest_goodput_bps") or {}).items():
            out[f"rest_goodput_{name}_bps"] = bps
    for r in rows:
        for f in (faults or {}).get("list", []):
            if f.get("fault") == r["fault"] and r["detect_ms"] is not None:
                f["detect_ms"], f["detected_by"] = r["detect_ms"], "pfc_watchdog"
    return out
