"""Which queue samples fall while PFC held the port paused (the link-rate check must not judge them).

A port paused by the controller's congestion loop (controllers/congestion/loop.py, ``pfc_events.csv``: a
``pause`` row with ``upstream_port`` = the gated egress port, then a ``resume`` row; or ``rx_pause`` /
``rx_resume`` rows, a port held for its host's PFC frames, ``port`` = the held egress) is backlogged and
sends nothing, by design: lossless backpressure, not an emulation fault. :func:`mark_paused` adds a
``paused`` column to the queue samples: True for a sample of a gated port taken while it was paused, or
within one sample period of a pause edge (the interval around the edge is partly paused).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from testbed.results.rundir import RunDir


def paused_windows(run_dir: Path) -> dict[str, list[tuple[int, int]]]:
    """gated port -> [(pause_ns, resume_ns)] from the run's pfc_events.csv ({} without one); a pause never
    resumed lasts to the end of time."""
    ev = RunDir(run_dir).table("pfc_events")
    if ev is None:
        return {}
    rx = ev["event"].isin(("rx_pause", "rx_resume"))  # a host's PFC frames held the port's own egress
    ev = ev.assign(upstream_port=ev["upstream_port"].where(~rx, ev["port"]),
                   event=ev["event"].replace({"rx_pause": "pause", "rx_resume": "resume"}))
    ev = ev[ev["event"].isin(("pause", "resume")) & (ev["upstream_port"] != "")].sort_values("time_ns")
    out: dict[str, list[tuple[int, int]]] = {}
    open_at: dict[str, int] = {}
    for t, port, kind in zip(ev["time_ns"], ev["upstream_port"].astype(str), ev["event"]):
        if kind == "pause":
            open_at.setdefault(port, int(t))
        elif port in open_at:
            out.setdefault(port, []).append((open_at.pop(port), int(t)))
    for port, t in open_at.items():
        out.setdefault(port, []).append((t, np.iinfo(np.int64).max))
    return out


def mark_paused(ports: pd.DataFrame | None, run_dir: Path) -> pd.DataFrame | None:
    """``ports`` (queue samples: time_ns, port, ...) with a boolean ``paused`` column (module docstring);
    ``ports`` itself when the run has no pauses."""
    windows = paused_windows(run_dir)
    if ports is None or len(ports) == 0 or not windows:
        return ports
    out = ports.copy()
    paused = np.zeros(len(out), dtype=bool)
    t = out["time_ns"].to_numpy(dtype=np.int64)
    times = np.unique(t)
    period = int(np.median(np.diff(times))) if len(times) > 1 else 0
    names = out["port"].astype(str).to_numpy()
    for port, spans in windows.items():
        rows = names == port
        for a, b in spans:
            paused |= rows & (t >= a - period) & (t <= (b + period if b < np.iinfo(np.int64).max - period else b))
    out["paused"] = paused
    return out
