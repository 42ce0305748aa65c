"""The ``controller`` and ``output`` sections."""
from __future__ import annotations

from pydantic import Field, StrictBool

from testbed.spec.units import _Spec


class ControllerSpec(_Spec):
    """The OpenFlow controller process (README "Controller").

    ``restart``: when the controller dies during a run, start it again (same
    port, same topology); it reconnects to every switch and resyncs their
    flows and groups without wiping them. Off: the run continues on the
    installed flows (the bridges are fail-secure). Either way the death is
    reported in summary.json and the printed verdict.
    """

    restart: StrictBool = True


class OutputSpec(_Spec):
    sample_period_ms: float = Field(10.0, ge=1.0, le=1000.0)
