"""The ``fidelity`` section: thresholds of the fidelity verdict (``off`` switches a check off)."""
from __future__ import annotations

from typing import Optional

from pydantic import BeforeValidator, Field
from typing_extensions import Annotated

from testbed.spec.units import Count, SpecModel, off_refusing_zero, off_to_none


class FidelityThresholdsSpec(SpecModel):
    """When a run counts as faithful (Handigol et al., CoNEXT 2012).

    A check is switched off only explicitly, with ``off`` (or null): a threshold
    of 0 that would disable ``min_cpu_idle_pct`` or ``min_link_rate_ratio``
    silently is refused. ``max_unexplained_drops_pkts: 0`` is the strictest
    limit (``off`` = no limit). ``max_capacity_ratio`` is judged before the run,
    not by the verdict (testbed.measure.capacity_check).
    """

    min_cpu_idle_pct: Annotated[Optional[Annotated[float, Field(gt=0, le=100)]],
                                BeforeValidator(off_refusing_zero)] = 5.0
    max_unexplained_drops_pkts: Annotated[Optional[Annotated[Count, Field(ge=0)]], BeforeValidator(off_to_none)] = 0
    #: retransmitted packets whose original had arrived, beyond what lost packets explain
    #: (testbed.measure.transport_totals.spurious_retx_pkts); 0 = none allowed (the default), ``off`` = no limit
    max_spurious_retx_pkts: Annotated[Optional[Annotated[Count, Field(ge=0)]], BeforeValidator(off_to_none)] = 0
    min_link_rate_ratio: Annotated[Optional[Annotated[float, Field(gt=0, le=1)]],
                                   BeforeValidator(off_refusing_zero)] = 0.9
    #: refuse a run, before anything is built, whose offered packet-hops/s exceed this multiple of the
    #: machine's faithful capacity (testbed.measure.capacity_check); ``off`` = never refuse
    max_capacity_ratio: Annotated[Optional[Annotated[float, Field(ge=1, le=1000, allow_inf_nan=False)]],
                                  BeforeValidator(off_refusing_zero)] = 2.0

    def switched_off(self) -> list[str]:
        """Names of the checks the scenario switched off (``off``/null)."""
        return [k for k in type(self).model_fields if getattr(self, k) is None]
