"""The ``controller``, ``load_balance`` and ``output`` sections."""
from __future__ import annotations

from typing import ClassVar, Literal, Optional

from pydantic import Field, StrictBool, StrictFloat, StrictInt, field_validator, model_validator

from controllers import lb
from testbed.spec.pcap import PcapSpec
from testbed.spec.units import SpecModel


class ControllerSpec(SpecModel):
    """The OpenFlow controller process (README "Controller").

    ``restart``: when the controller dies during a run, start it again (same
    port, same configuration file); it reconnects to every switch and resyncs
    their flows and groups without wiping them. Off: the run continues on the
    installed flows (the bridges are fail-secure). Either way the death is
    reported in summary.json and the printed verdict.

    ``framework``: ``os_ken`` (default; Ryu's maintained fork, in the
    testbed's own Python) or ``ryu`` (Ryu 4.34 under ``ryu-manager`` from
    ``.venv-ryu``, Python 3.9, which scripts/install creates where a Python
    3.9 exists). The same app runs under either.
    """

    restart: StrictBool = True
    framework: Literal["os_ken", "ryu"] = "os_ken"


class LoadBalanceSpec(SpecModel):
    """How the controller's select groups spread flows over equal-cost next hops.

    ``policy``: a name from the controller's registry (controllers/lb/):
    ``ecmp`` (default) hashes the 5-tuple including UDP ports over equal buckets;
    ``weighted`` gives each next hop a share of flows in proportion to its weight.
    ``weights``: next-hop switch name (as in the run's names without the run id,
    e.g. ``s1``) -> whole number 1..65535, 1 for a switch not named; only with
    ``weighted`` (checked against the fabric's switches by the scenario).
    ``adaptive`` (controllers/lb/adaptive.py) starts as ``ecmp`` and moves hash buckets from hot uplinks
    to cool ones during the run; only with it: ``poll_period_ms`` (20..5000, default 100: port and
    bucket counters polled), ``hot_threshold`` (utilization of a port's rate, > 0 and <= 1, default
    0.8: a group is rebalanced when a port reaches it), ``min_dwell_ms`` (a group's freeze after a
    change, at least 2 polls, at most 60000, default 500: the hysteresis that keeps it from flapping).
    """

    policy: str = lb.DEFAULT_POLICY
    weights: dict[str, StrictInt] = {}
    poll_period_ms: StrictInt | None = Field(None, ge=20, le=5000)
    hot_threshold: StrictFloat | StrictInt | None = Field(None, gt=0.0, le=1.0)
    min_dwell_ms: StrictInt | None = Field(None, ge=0, le=60_000)

    #: defaults of the adaptive policy's settings
    ADAPTIVE_DEFAULTS: ClassVar[dict] = {"poll_period_ms": 100, "hot_threshold": 0.8, "min_dwell_ms": 500}

    @field_validator("policy")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in lb.POLICIES:
            raise ValueError(f"unknown policy {v!r}; allowed: {', '.join(lb.names())}")
        return v

    @model_validator(mode="after")
    def _adaptive_keys(self) -> "LoadBalanceSpec":
        given = [k for k in self.ADAPTIVE_DEFAULTS if getattr(self, k) is not None]
        if given and self.policy not in lb.ADAPTIVE_POLICIES:
            raise ValueError(f"{', '.join(given)}: only for policy {' or '.join(lb.ADAPTIVE_POLICIES)}, "
                             f"not {self.policy!r}")
        a = self.adaptive
        if a and a["min_dwell_ms"] < 2 * a["poll_period_ms"]:
            raise ValueError(f"min_dwell_ms = {a['min_dwell_ms']} must hold at least two polls of "
                             f"poll_period_ms = {a['poll_period_ms']} (the rates after a change need them)")
        return self

    @property
    def adaptive(self) -> dict | None:
        """The adaptive policy's settings with defaults filled in; None for another policy."""
        if self.policy not in lb.ADAPTIVE_POLICIES:
            return None
        return {k: (getattr(self, k) if getattr(self, k) is not None else d) for k, d in self.ADAPTIVE_DEFAULTS.items()}


class OutputSpec(SpecModel):
    """``sample_period_ms``: switch queue sampling period; ``table``: the printed size table, ``testbed``
    (ours) or ``nccl`` (nccl-tests' columns, testbed.results.nccl_table; what ``testbed nccl`` prints);
    ``pcap``: ports to capture with tcpdump (testbed.spec.pcap.PcapSpec; off when absent)."""

    sample_period_ms: float = Field(10.0, ge=1.0, le=1000.0)
    table: Literal["testbed", "nccl"] = "testbed"
    pcap: Optional[PcapSpec] = None
