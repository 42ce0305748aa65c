"""The headline figures of a run, read from its summary.json, and the tolerance band of each.

A figure is a number with a name: a *family* (``busbw_ratio``) and, for
figures that exist once per size, per fit group or per job, a qualifier after ``@``
(``busbw_ratio@64KiB``, ``fit_b_ratio@allreduce-ring-n8``, ``jct_slowdown@a``). Each family has
a direction (``higher`` or ``lower`` is better) and a default band: the
largest difference from the reference that still counts as the same, the
larger of an absolute part (in the figure's unit) and a relative part (a
fraction of the reference's magnitude). The defaults (:data:`FAMILIES`) are
set from repeated runs of the default suite on this machine class (2 cores,
userspace OVS; docs/scripting.md "Comparing runs and regression"): wide enough for
run-to-run noise, narrow enough that a 10 % slower link is caught.

Figures are taken only where the summary has them: per-size figures from
``sizes`` (only sizes with a value), ``congestion`` and ``load_balance``
blocks when the run had them, ``fit`` when the sweep had three sizes or
more, each job's slowdowns from ``jobs.jobs`` when the run had solo figures (``testbed run --solo`` or
``--solo-from``; the 10 % bands are a guess from two runs, docs/jobs.md). ``faithful`` is 1 (faithful) or 0 (not).
"""
from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional


@dataclass(frozen=True)
class Band:
    """Allowed difference from the reference: max(``abs``, ``rel`` x |reference|)."""

    abs: float = 0.0  # in the figure's unit
    rel: float = 0.0  # fraction of |reference|

    def allowed(self, reference: float) -> float:
        """The largest |difference| from ``reference`` inside the band."""
        return max(self.abs, self.rel * abs(reference))

    def text(self) -> str:
        """``±3%``, ``±0.03`` or ``±max(10, 50%)``."""
        rel = f"{self.rel * 100:g}%"
        if self.rel and self.abs:
            return f"±max({self.abs:g}, {rel})"
        return f"±{rel}" if self.rel else f"±{self.abs:g}"


@dataclass(frozen=True)
class Family:
    """One kind of figure: where it is read, which way is better, its default band."""

    name: str
    better: str  # "higher" or "lower"
    band: Band
    doc: str


def _f(name: str, better: str, doc: str, abs: float = 0.0, rel: float = 0.0) -> Family:  # noqa: A002
    return Family(name, better, Band(abs=abs, rel=rel), doc)


#: every figure family, in print order: name -> Family (direction, default band, meaning)
FAMILIES: dict[str, Family] = {f.name: f for f in (
    _f("faithful", "higher", "fidelity verdict: 1 faithful, 0 not (any change is a regression or an improvement)"),
    _f("busbw_bps", "higher", "bus bandwidth per size (nccl-tests), bit/s", rel=0.03),
    _f("busbw_ratio", "higher", "busbw / (host link rate x payload efficiency) per size", abs=0.03),
    _f("algbw_bps", "higher", "algorithm bandwidth per size, bit/s", rel=0.03),
    _f("p50_us", "lower", "median operation time per size, us", rel=0.05),
    _f("p99_us", "lower", "99th percentile operation time per size (sizes with >= 100 samples), us", rel=0.10),
    _f("retx_pkts", "lower", "retransmitted packets", abs=20, rel=0.5),
    _f("timeouts", "lower", "retransmission timeouts", abs=2, rel=0.5),
    _f("switch_drops_pkts", "lower", "packets dropped by emulated switch queues", abs=20, rel=0.5),
    _f("unexplained_lost_pkts", "lower", "packets lost outside the emulated queues"),
    _f("jain_index", "higher", "congestion: Jain's fairness index of the flows' steady goodput", abs=0.05),
    _f("bottleneck_util", "higher", "congestion: bottleneck port utilization in the steady window", abs=0.05),
    _f("queue_p99_bytes", "lower", "congestion: bottleneck queue p99, bytes", abs=8400, rel=0.5),
    _f("lossless_queue_p99_bytes", "lower", "congestion: lossless class queue p99 over all ports, bytes",
       abs=8400, rel=0.5),
    _f("lossless_drops_pkts", "lower", "congestion: lossless class drops", abs=20, rel=0.5),
    _f("pause_frames", "lower", "congestion: PFC pause events", abs=10, rel=0.5),
    _f("paused_time_s", "lower", "congestion: PFC paused time summed over ports, s", abs=0.2, rel=0.5),
    _f("throughput_ratio_mean", "higher", "load balance: throughput / ideal, mean over trials", abs=0.05),
    _f("completion_ratio_mean", "higher", "load balance: ideal span / measured span, mean over trials", abs=0.05),
    _f("slowdown_p99", "lower", "load balance: FCT slowdown p99", rel=0.15),
    _f("fit_b_ratio", "lower", "latency-bandwidth fit: slope / (busbw factor / link goodput)", abs=0.03),
    _f("fit_r2", "higher", "latency-bandwidth fit: R^2", abs=0.01),
    _f("jct_slowdown", "lower", "jobs: a job's JCT together / its JCT alone (testbed run --solo)", rel=0.10),
    _f("busbw_slowdown", "lower", "jobs: a job's busbw alone / its busbw together (testbed run --solo)", rel=0.10),
)}

_TRANSPORT = ("retx_pkts", "timeouts", "switch_drops_pkts", "unexplained_lost_pkts")
_CONGESTION = ("jain_index", "bottleneck_util", "queue_p99_bytes", "lossless_queue_p99_bytes",
               "lossless_drops_pkts", "pause_frames", "paused_time_s")
_LOAD_BALANCE = ("throughput_ratio_mean", "completion_ratio_mean", "slowdown_p99")
_SIZE = ("busbw_bps", "busbw_ratio", "algbw_bps", "p50_us", "p99_us")
_JOBS = ("jct_slowdown", "busbw_slowdown")


def family_of(name: str) -> str:
    """``busbw_ratio@64KiB`` -> ``busbw_ratio``."""
    return name.split("@", 1)[0]


def size_label(size_bytes: int) -> str:
    """``65536`` -> ``64KiB``, ``1048576`` -> ``1MiB``, ``1000`` -> ``1000B`` (exact powers of 1024 only)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes >= scale and size_bytes % scale == 0:
            return f"{size_bytes // scale}{unit}"
    return f"{size_bytes}B"


def _number(v) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    return float(v)


def _put(out: dict, name: str, value) -> None:
    v = _number(value)
    if v is not None:
        out[name] = v


def figures(summary: Mapping) -> dict[str, float]:
    """The headline figures of a run: name -> value, from ``summary`` (summary.json's content).

    Figures absent from the summary (a block the run did not have, a percentile with too few
    samples) are left out. Raises ValueError when ``summary`` is not a complete run's summary.
    """
    if "faithful" not in summary or "sizes" not in summary:
        raise ValueError("not a run's summary.json: it has no 'faithful' or 'sizes' key")
    out: dict[str, float] = {}
    if summary["faithful"] is not None:
        out["faithful"] = 1.0 if summary["faithful"] else 0.0
    rows = summary.get("sizes") or []
    groups = {(r.get("collective"), r.get("algorithm"), r.get("group_size")) for r in rows}
    for r in rows:
        q = size_label(int(r["size_bytes"]))
        if len(groups) > 1:  # several collectives or groups share a size: name the group too
            q += f"/{r.get('collective')}-{r.get('algorithm')}-n{r.get('group_size')}"
        for fam in _SIZE:
            _put(out, f"{fam}@{q}", r.get(fam))
    for fam in _TRANSPORT:
        _put(out, fam, (summary.get("transport") or {}).get(fam))
    for fam in _CONGESTION:
        _put(out, fam, (summary.get("congestion") or {}).get(fam))
    for fam in _LOAD_BALANCE:
        _put(out, fam, (summary.get("load_balance") or {}).get(fam))
    for row in summary.get("fit") or []:
        q = f"{row['collective']}-{row['algorithm']}-n{row['group_size']}"
        _put(out, f"fit_b_ratio@{q}", row.get("b_ratio"))
        _put(out, f"fit_r2@{q}", row.get("r2"))
    for e in (summary.get("jobs") or {}).get("jobs") or []:  # with solo figures only
        for fam in _JOBS:
            _put(out, f"{fam}@{e['name']}", e.get(fam))
    return out


def order_key(name: str) -> tuple:
    """Sort key: family in :data:`FAMILIES` order, then per-size figures by size."""
    fam, _, q = name.partition("@")
    m = re.match(r"(\d+)(GiB|MiB|KiB|B)", q)
    scale = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10, "B": 1}
    size = int(m.group(1)) * scale[m.group(2)] if m else 0
    return (list(FAMILIES).index(fam) if fam in FAMILIES else len(FAMILIES), size, q)


def matches(name: str, pattern: str) -> bool:
    """Whether figure ``name`` is selected by ``pattern``: the name itself, its family, or a glob
    (``busbw_*@1MiB``)."""
    return pattern == name or pattern == family_of(name) or fnmatch.fnmatchcase(name, pattern)


def check_pattern(pattern: str) -> None:
    """Raise ValueError unless ``pattern`` names a family or is a glob/qualified name of one."""
    fam = family_of(pattern)
    if fam in FAMILIES or any(fnmatch.fnmatchcase(f, fam) for f in FAMILIES):
        return
    raise ValueError(f"unknown figure {pattern!r}: figures are {', '.join(FAMILIES)} "
                     f"(per size or fit group as NAME@QUALIFIER, e.g. busbw_ratio@1MiB; globs allowed)")


def parse_band(value) -> Band:
    """A band from a scenario-suite value or ``--band`` text.

    Accepted: a number (absolute, in the figure's unit), ``"3%"`` (relative), ``"10,50%"`` (both:
    the larger applies), or a mapping ``{abs: 10, rel: 0.5}``. Raises ValueError naming the value.
    """
    if isinstance(value, Mapping):
        extra = set(value) - {"abs", "rel"}
        if extra:
            raise ValueError(f"band {dict(value)!r}: unknown key(s) {sorted(extra)}; allowed: abs, rel")
        band = Band(abs=_band_number(value.get("abs", 0.0), value), rel=_band_number(value.get("rel", 0.0), value))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        band = Band(abs=_band_number(value, value))
    elif isinstance(value, str):
        abs_part, rel_part = 0.0, 0.0
        for part in (p.strip() for p in value.split(",")):
            if part.endswith("%"):
                rel_part = _band_number(part[:-1], value) / 100
            else:
                abs_part = _band_number(part, value)
        band = Band(abs=abs_part, rel=rel_part)
    else:
        raise ValueError(f"band {value!r}: give a number (absolute), 'N%' (relative), 'A,N%' or {{abs, rel}}")
    return band


def _band_number(text, whole) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"band {whole!r}: {text!r} is not a number; give a number (absolute), 'N%' "
                         f"(relative), 'A,N%' or {{abs, rel}}") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"band {whole!r}: {text!r} must be a finite number >= 0")
    return v


def band_for(name: str, overrides: Mapping[str, Band] | None = None) -> Band:
    """The band of figure ``name``: an override for the exact name, else the first glob override
    that matches, else one for its family, else the family's default (Band() if unknown)."""
    overrides = overrides or {}
    if name in overrides:
        return overrides[name]
    for pattern, band in overrides.items():
        if pattern != family_of(name) and fnmatch.fnmatchcase(name, pattern):
            return band
    if family_of(name) in overrides:
        return overrides[family_of(name)]
    fam = FAMILIES.get(family_of(name))
    return fam.band if fam else Band()


def select(names: Iterable[str], patterns: Iterable[str] | None) -> list[str]:
    """``names`` selected by any of ``patterns`` (all when ``patterns`` is None), in print order."""
    pats = None if patterns is None else list(patterns)
    return sorted((n for n in names if pats is None or any(matches(n, p) for p in pats)), key=order_key)
