"""This machine's faithful capacity: the packet-hops/s it can emulate faithfully, per RoCE path MTU.

The capacity is in the unit of testbed.measure.packet_load (packet-hops/s: every frame counted once
per link it crosses), at each calibrated path MTU (``transport.payload_bytes``), measured by
``testbed doctor --calibrate`` (testbed.pipeline.calibrate) and cached in
``$TESTBED_CACHE_DIR/capacity.json`` (default ``/var/lib/testbed``) with the machine facts it holds
for (cores, kernel, datapath, CPU model). Without a valid calibration, :data:`DEFAULT_HOP_PPS`
stands in: figures measured on this project's machine class, see there.

Other path MTUs (:func:`hop_pps_at`): the cost per packet is taken as linear in the frame's bytes,
``1 / hop_pps = a + b x frame_bytes`` (a fixed per-packet cost plus a per-byte copy cost), through
the two calibrated points; between them that interpolates, below the smaller and above the larger
it takes whichever of the nearest calibrated figure and the line is more conservative (the lower
capacity), so an uncalibrated payload never gets more credit than a calibrated one.
"""
from __future__ import annotations

import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Mapping, Optional

from testbed.measure.link_model import data_frame_bytes

#: calibration record format (capacity.json ``version``); records of another version are not used
VERSION = 2
#: RoCE path MTUs (payload bytes) a calibration measures
CALIBRATED_PAYLOADS = (1024, 4096)
#: Conservative capacity without a calibration, packet-hops/s per path MTU. Derived from two
#: back-to-back ``testbed doctor --calibrate`` runs on this project's machine class (2 vCPUs,
#: Intel Xeon, kernel 6.18, userspace Open vSwitch, 2026-12-02): path MTU 1024 faithful up to 7.07 and
#: 8.41 Mbit/s per link (22,056 and 26,229 packet-hops/s), 4096 up to 23.8 Mbit/s twice (21,471); the
#: lower figure at each MTU, rounded down (docs/cli.md, ``testbed doctor``).
DEFAULT_HOP_PPS = {1024: 22_000.0, 4096: 21_000.0}
DEFAULT_SOURCE = "measured on 2 vCPUs with userspace Open vSwitch, 2026-12-02"


def cache_path() -> Path:
    return Path(os.environ.get("TESTBED_CACHE_DIR", "/var/lib/testbed")) / "capacity.json"


def machine_facts(datapath: str) -> dict:
    """What a calibration holds for: cores, kernel, datapath, CPU model."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": os.cpu_count(), "kernel": platform.release(), "datapath": datapath, "cpu_model": model}


def load_cached(datapath: Optional[str] = None) -> Optional[dict]:
    """The cached calibration if it is of this :data:`VERSION` and was made on this machine as it is now
    (same facts), else None. ``datapath`` None accepts the cached datapath."""
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION or not data.get("mtus"):
        return None
    facts = data.get("machine", {})
    now = machine_facts(datapath or facts.get("datapath", ""))
    if any(facts.get(k) != now[k] for k in ("cores", "kernel", "cpu_model", "datapath")):
        return None
    return data


def save(result: dict) -> Path:
    """Write ``result`` to :func:`cache_path` atomically; returns the path."""
    p = cache_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=p.parent, delete=False, suffix=".tmp") as f:
        json.dump(result, f, indent=1)
    os.replace(f.name, p)
    return p


def figures(cal: Optional[dict]) -> dict[int, float]:
    """payload bytes -> packet-hops/s of a calibration record, or :data:`DEFAULT_HOP_PPS` for None.
    A path MTU whose calibration found nothing faithful counts as 0."""
    if not cal:
        return dict(DEFAULT_HOP_PPS)
    return {int(p): float(m["hop_pps"]) for p, m in cal["mtus"].items()}


def hop_pps_at(points: Mapping[int, float], payload_bytes: int) -> float:
    """Capacity in packet-hops/s at ``payload_bytes`` from calibrated ``points`` (payload -> packet-hops/s),
    by the per-packet cost line of the module docstring. One point: its figure. Raises ValueError
    for no points."""
    if not points:
        raise ValueError("no calibrated path MTU to compare with")
    pts = sorted((data_frame_bytes(p), v) for p, v in points.items())
    frame = data_frame_bytes(payload_bytes)
    if len(pts) == 1 or any(v <= 0 for _, v in pts):
        return min(v for _, v in pts) if len(pts) > 1 else pts[0][1]
    (x0, v0), (x1, v1) = pts[0], pts[-1]
    cost = 1 / v0 + (1 / v1 - 1 / v0) * (frame - x0) / (x1 - x0)  # seconds per packet-hop on the line
    if x0 <= frame <= x1:
        return 1 / cost
    nearest = v0 if frame < x0 else v1
    return min(nearest, 1 / cost) if cost > 0 else nearest


def format_capacity(cal: Optional[dict]) -> str:
    """One line for the doctor's report."""
    if not cal:
        dflt = ", ".join(f"{v:,.0f} at path MTU {p}" for p, v in sorted(DEFAULT_HOP_PPS.items()))
        return ("not calibrated: run 'testbed doctor --calibrate' (root; short real runs of the quickstart fabric, "
                f"about 3 min); until then runs are checked against a conservative default of {dflt} "
                f"packet-hops/s ({DEFAULT_SOURCE})")
    parts = []
    for p, m in sorted(cal["mtus"].items(), key=lambda kv: int(kv[0])):
        parts.append(f"path MTU {p}: {'at least ' if m.get('lower_bound') else ''}{m['hop_pps']:,.0f} packet-hops/s "
                     f"(8 hosts x {m['per_host_bps'] / 1e6:.3g} Mbit/s on the quickstart fabric; "
                     f"next: {m['limited_by']})")
    return "; ".join(parts) + f"; measured {cal.get('measured_utc', '?')}"
