"""The ``controller``, ``load_balance`` and ``output`` sections."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, StrictInt, field_validator

from controllers import lb
from testbed.spec.units import _Spec


class ControllerSpec(_Spec):
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


class LoadBalanceSpec(_Spec):
    """How the controller's select groups spread flows over equal-cost next hops.

    ``policy``: a name from the controller's registry (controllers/lb/):
    ``ecmp`` (default) hashes the 5-tuple including UDP ports over equal buckets;
    ``weighted`` gives each next hop a share of flows in proportion to its weight.
    ``weights``: next-hop switch name (as in the run's names without the run id,
    e.g. ``s1``) -> whole number 1..65535, 1 for a switch not named; only with
    ``weighted`` (checked against the fabric's switches by the scenario).
    """

    policy: str = lb.DEFAULT_POLICY
    weights: dict[str, StrictInt] = {}

    @field_validator("policy")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in lb.POLICIES:
            raise ValueError(f"unknown policy {v!r}; allowed: {', '.join(lb.names())}")
        return v


class OutputSpec(_Spec):
    """``sample_period_ms``: switch queue sampling period; ``table``: the printed size table, ``testbed``
    (ours) or ``nccl`` (nccl-tests' columns, testbed.results.nccl_table; what ``testbed nccl`` prints)."""

    sample_period_ms: float = Field(10.0, ge=1.0, le=1000.0)
    table: Literal["testbed", "nccl"] = "testbed"
