"""The ``workload.open_loop`` section: open-loop flows with Poisson arrivals and sizes from a flow-size CDF.

Every host starts flows to a uniformly drawn other host at the times of a Poisson process whose rate puts
``load`` (0 < load < 1) on its host link: mean inter-arrival = mean flow size x 8 / (load x host_link_bps),
as HPCC's traffic generator draws them (alibaba-edu/High-Precision-Congestion-Control, traffic_gen/
traffic_gen.py). Sizes are drawn from ``cdf``: ``websearch`` (the DCTCP paper's web search workload, Alizadeh et
al., SIGCOMM 2010), ``fbhdp`` (Facebook's Hadoop cluster, Roy et al., SIGCOMM 2015), both as HPCC ships them,
or the path of any file in that format (lines ``size_bytes cdf_percent``, 0 to 100; relative to the scenario
file). ``size_scale`` multiplies every drawn size (default 0.01: WebSearch's 1.71 MB mean becomes 17 KB,
14 ms at 10 Mbit/s, its 30 MB largest flow 300 KB; sizes of at least 1 byte). The run lasts ``duration_s``
of arrivals or ``flows`` flows (exactly one); ``seed`` (default the scenario's) draws arrivals, sizes and
destinations, each from its own stream, so runs of one seed and ``flows`` at two loads carry the same sizes.
Each pair of hosts has ``lanes`` queue pairs; its k-th flow runs on lane k mod lanes, after the earlier
flows of that lane (a host's QPs to a peer; each lane its own UDP source port, so ECMP hashes lanes apart).
Results: FCT slowdown by size bucket (testbed.results.slowdown; ``buckets`` buckets of equal probability).

Example::

    workload:
      open_loop: {cdf: websearch, load: 0.3, duration_s: 10}
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from testbed.spec.units import Count, SpecModel

#: the flow-size CDFs shipped with the testbed (testbed/workloads/open_loop/cdfs/)
BUILTIN_CDFS = ("websearch", "fbhdp")


class OpenLoopSpec(SpecModel):
    """``workload.open_loop``: Poisson arrivals at ``load``, sizes from ``cdf`` x ``size_scale`` (docs/open-loop.md);
    ``cdf`` and ``load`` required, one of ``duration_s`` and ``flows``."""

    #: websearch, fbhdp, or the path of a CDF file (lines ``size_bytes cdf_percent``)
    cdf: str = Field(min_length=1)
    #: offered load of every host link, 0 < load < 1
    load: float = Field(gt=0, lt=1, allow_inf_nan=False)
    #: seconds of arrivals (the run's traffic then drains)
    duration_s: Optional[float] = Field(None, gt=0, le=600, allow_inf_nan=False)
    #: flows in all (the first to arrive over every host)
    flows: Optional[Count] = Field(None, ge=1, le=100_000)
    #: x every drawn size (time dilation: fit the distribution to the fabric's rate)
    size_scale: float = Field(0.01, gt=0, le=1, allow_inf_nan=False)
    #: draws arrivals, sizes and destinations; None: the scenario's seed
    seed: Optional[Count] = Field(None, ge=0, le=2**32 - 1)
    #: size buckets of the slowdown table, each of equal probability under the CDF
    buckets: Count = Field(10, ge=1, le=20)
    #: queue pairs per host pair the flows are spread over (round robin)
    lanes: Count = Field(4, ge=1, le=32)

    @model_validator(mode="after")
    def _one_length(self) -> "OpenLoopSpec":
        given = [k for k in ("duration_s", "flows") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("workload.open_loop needs exactly one of duration_s (seconds of arrivals) or flows "
                             f"(a count){'' if not given else f': got both'}")
        return self

    def is_builtin(self) -> bool:
        """Whether ``cdf`` names a shipped distribution (:data:`BUILTIN_CDFS`), not a file."""
        return self.cdf in BUILTIN_CDFS
