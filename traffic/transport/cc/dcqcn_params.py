"""DCQCN's parameters: the published values, their sources, and how a run's time dilation scales them.

Names follow Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015
(section 3): the notification point's CNP interval N, the reaction point's g, alpha timer K,
rate-increase timer T, byte counter B, fast-recovery stages F, additive and hyper increase
steps R_AI and R_HAI. Where the paper gives no value the NVIDIA (Mellanox) ConnectX defaults
of the ``roce_rp``/``roce_np`` settings stand in (``rpg_hai_rate``, ``rpg_min_rate``).

Scaling (pure time dilation, docs/architecture.md "Time dilation"): a run whose host links of
``fabric.host_link_bps`` stand for ``reference_link_bps`` runs ``dilation = reference_link_bps /
fabric.host_link_bps`` times slower than the real fabric, so::

    time constant (N, K, T)       = published x dilation
    rate (R_AI, R_HAI, min rate)  = published / dilation
    bytes (B), unitless (g, F, alpha0) = published

(bytes = rate x time are unchanged, as buffer sizes and thresholds are). The published values
are the real NIC's, which runs them at any link speed; at the default dilation of 40,000
(10 Mbit/s for 400 Gbit/s) N = 50 us becomes 2 s. A scenario may set any value of
``transport.dcqcn`` directly (in the run's own, dilated units); :func:`manifest_block` records
every value, its published value, unit, source and whether it was scaled or set.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping, NamedTuple

from traffic.registry import setting

PAPER = "Zhu et al., SIGCOMM 2015, sec. 3"
NVIDIA = "NVIDIA ConnectX default (mlx5 roce_rp)"


class Published(NamedTuple):
    """One published DCQCN value: ``value`` in ``unit``; ``kind`` says how dilation scales it
    (``time``: x dilation, ``rate``: / dilation, ``none``: unchanged); ``symbol`` the paper's."""

    value: float
    unit: str
    kind: str
    symbol: str
    source: str


#: every DCQCN setting: name -> published value (the fields of :class:`DcqcnSettings`)
PUBLISHED: dict[str, Published] = {
    "cnp_interval_us": Published(50.0, "us", "time", "N", PAPER + " (NP: at most one CNP per N per QP)"),
    "g": Published(1 / 256, "1", "none", "g", PAPER + " (alpha gain)"),
    "initial_alpha": Published(1.0, "1", "none", "alpha0", PAPER + " (alpha starts at 1)"),
    "alpha_timer_us": Published(55.0, "us", "time", "K", PAPER + " (alpha decays after K without CNP)"),
    "rate_timer_us": Published(55.0, "us", "time", "T", PAPER + " (rate-increase timer)"),
    "byte_counter_bytes": Published(10 * 1000 * 1000, "bytes", "none", "B", PAPER + " (byte counter, 10 MB)"),
    "fast_recovery_stages": Published(5, "1", "none", "F", PAPER + " (fast-recovery steps)"),
    "rai_bps": Published(40e6, "bit/s", "rate", "R_AI", PAPER + " (additive increase, 40 Mbit/s)"),
    "rhai_bps": Published(50e6, "bit/s", "rate", "R_HAI", NVIDIA + " rpg_hai_rate = 50 Mbit/s (paper: no value)"),
    "min_rate_bps": Published(1e6, "bit/s", "rate", "R_min", NVIDIA + " rpg_min_rate = 1 Mbit/s (paper: no value)"),
    "clamp_target_rate": Published(True, "bool", "none", "clamp", PAPER + " (RT <- RC on every cut; NVIDIA's "
                                   "clamp_tgt_rate = 0 with clamp_tgt_rate_after_time_inc = 1: only after a timer increase)"),
}


#: a time constant's bound, us (up to 60 s: the dilated value of a published one can be seconds)
_MAX_TIME_US = 60e6
#: a rate's bound, bit/s (dilated rates can be far below the link's 100 kbit/s floor)
_MAX_RATE_BPS = 100e9


@dataclass(frozen=True)
class DcqcnSettings:
    """The DCQCN values one run uses, in its own (dilated) units; the keys of the scenario's
    ``transport.dcqcn`` block. Defaults: the published values at dilation 1 (see :data:`PUBLISHED` for
    the symbol and source of each); a run's unset keys take them scaled (:func:`settings_for`).

    Names after Zhu et al., SIGCOMM 2015: ``cnp_interval_us`` N, ``g``, ``initial_alpha``,
    ``alpha_timer_us`` K, ``rate_timer_us`` T, ``byte_counter_bytes`` B, ``fast_recovery_stages`` F,
    ``rai_bps`` R_AI, ``rhai_bps`` R_HAI, ``min_rate_bps`` (the lowest rate a cut may reach),
    ``clamp_target_rate`` (true: RT <- RC on every cut, as the paper; false: only after a timer
    increase, as NVIDIA ConnectX's default)."""

    cnp_interval_us: float = setting(50.0, gt=0, le=_MAX_TIME_US)
    g: float = setting(1 / 256, gt=0, le=1)
    initial_alpha: float = setting(1.0, gt=0, le=1)
    alpha_timer_us: float = setting(55.0, gt=0, le=_MAX_TIME_US)
    rate_timer_us: float = setting(55.0, gt=0, le=_MAX_TIME_US)
    byte_counter_bytes: int = setting(10 * 1000 * 1000, gt=0)
    fast_recovery_stages: int = setting(5, ge=1, le=1000)
    rai_bps: float = setting(40e6, gt=0, le=_MAX_RATE_BPS)
    rhai_bps: float = setting(50e6, gt=0, le=_MAX_RATE_BPS)
    min_rate_bps: float = setting(1e6, gt=0, le=_MAX_RATE_BPS)
    clamp_target_rate: bool = True


_INT_FIELDS = {"byte_counter_bytes", "fast_recovery_stages"}
_BOOL_FIELDS = {"clamp_target_rate"}


def scaled_value(name: str, dilation: float):
    """The published value of ``name`` scaled by ``dilation`` (see the module docstring).

    Raises KeyError naming an unknown setting, ValueError for dilation <= 0."""
    if dilation <= 0:
        raise ValueError(f"dilation={dilation}: must be > 0")
    p = PUBLISHED[name]
    v = p.value * dilation if p.kind == "time" else p.value / dilation if p.kind == "rate" else p.value
    if name in _BOOL_FIELDS:
        return bool(v)
    return int(round(v)) if name in _INT_FIELDS else float(v)


def settings_for(dilation: float, overrides: Mapping[str, float] | None = None) -> DcqcnSettings:
    """The run's settings: every published value scaled by ``dilation``, then ``overrides``
    (already in the run's units) put over them. Raises ValueError naming an unknown key."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(PUBLISHED))
    if unknown:
        raise ValueError(f"transport.dcqcn.{unknown[0]}: unknown DCQCN setting; allowed: {', '.join(PUBLISHED)}")
    values = {f.name: scaled_value(f.name, dilation) for f in fields(DcqcnSettings)}
    values.update(overrides)
    return DcqcnSettings(**values)


def manifest_block(dilation: float, overrides: Mapping[str, float] | None = None) -> dict:
    """manifest.json's ``congestion_control`` block for DCQCN: the dilation, the scaling
    formula and, per setting, the value used, the published value, unit, symbol, source and
    ``origin`` (``scaled`` or ``scenario``)."""
    overrides = dict(overrides or {})
    used = settings_for(dilation, overrides)
    params = {}
    for name, p in PUBLISHED.items():
        params[name] = {"value": getattr(used, name), "published": p.value, "unit": p.unit, "symbol": p.symbol,
                        "scaling": {"time": "x dilation", "rate": "/ dilation", "none": "unchanged"}[p.kind],
                        "source": p.source, "origin": "scenario" if name in overrides else "scaled"}
    return {"name": "dcqcn", "dilation": dilation, "dilation_formula": "reference_link_bps / fabric.host_link_bps",
            "scaling": "time constants x dilation, rates / dilation, bytes and unitless values unchanged",
            "parameters": params}
