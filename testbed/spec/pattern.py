"""The ``workload.pattern`` section: traffic patterns for load-balancing and congestion studies.

A pattern is a set of flows (one RoCEv2 message each, from one host to another) that start together,
or at their own ``start_s``; ``trials`` repeats it, each trial with its own entropy seed (the run's
seed + the trial number: new UDP source ports per QP, new spray and flowlet draws), so results are
distributions. Kinds (traffic.patterns.PATTERNS builds the flows; hosts are named as in ``faults``,
``h1`` .. ``hN`` without the run id, or by rank, 0-based):

- ``permutation``: every host sends ``size_bytes`` to a distinct host on another leaf (a random
  derangement across leaves, seeded by the scenario's ``seed``, the same in every trial);
- ``alltoall``: every host sends ``size_bytes`` to every other host, all flows at once;
- ``kflows``: ``k`` long flows of ``size_bytes`` from the first k hosts of the first leaf to the
  first k hosts of the last leaf (default k: the hosts both leaves have; with hosts_per_leaf = spines
  k flows on k paths);
- ``incast``: ``senders`` hosts (a count: the hosts after the receiver on other leaves first, or a
  list) each send ``size_bytes`` to ``receiver`` (default ``h1``) at once;
- ``flows``: an explicit list of ``{src, dst, size_bytes, start_s, qps, name}``; ``name`` (optional,
  e.g. ``victim``) marks a flow a lab asks about: the report draws the named flows in colour, with their
  names in the legend, and the others thin and grey (testbed.report.rates).

``qps`` (default 1, at most traffic.collectives.channels.MAX_CHANNELS): queue pairs per flow. A flow's
bytes are split over that many QPs between the same two hosts, shares differing by at most one byte
(traffic.collectives.channels.channel_sizes, as NCCL splits a buffer over its channels); each QP has
its own UDP source port, so ECMP can hash the QPs of one flow onto different paths. Set on the pattern
it applies to every flow; a flow of kind ``flows`` may set its own. A flow's FCT runs until the last
byte of its last QP is acknowledged (testbed.workloads.pattern.results). ``size_bytes`` must be at least
``qps`` (every QP carries a byte).

Example::

    workload:
      pattern: {kind: incast, senders: 4, receiver: h1, size_bytes: 1MiB, trials: 3}
      # or: pattern: {kind: flows, flows: [{src: h1, dst: h3, size_bytes: 1MiB, qps: 4}]}
"""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field, model_validator

from testbed.spec.units import Count, SizeBytes, SpecModel
from traffic.collectives.channels import MAX_CHANNELS

#: host reference: a host name without the run id (``h3``) or a rank (0-based)
HostRef = Union[Count, str]
PATTERN_KINDS = ("permutation", "alltoall", "kflows", "incast", "flows")
#: the keys each kind takes beside kind, trials and rate_bin_ms
KIND_KEYS = {"permutation": ("size_bytes",), "alltoall": ("size_bytes",), "kflows": ("size_bytes", "k"),
             "incast": ("size_bytes", "senders", "receiver"), "flows": ("flows",)}
#: the longest start offset of a flow: a pattern is a short experiment
MAX_START_S = 600.0


class FlowSpec(SpecModel):
    """One flow of an explicit pattern: ``size_bytes`` from ``src`` to ``dst``, ``start_s`` seconds after
    the trial starts."""

    src: HostRef
    dst: HostRef
    size_bytes: SizeBytes
    start_s: float = Field(0.0, ge=0.0, le=MAX_START_S)
    #: queue pairs carrying the flow (None: the pattern's ``qps``)
    qps: Optional[Count] = Field(None, ge=1, le=MAX_CHANNELS)
    #: what the flow is in the experiment (``victim``, ``long``): highlighted and named in the report's plots
    name: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,32}$")


class PatternSpec(SpecModel):
    """``workload.pattern``: see the module docstring. ``rate_bin_ms``: width of the bins of
    flow_rates.csv (each receiver samples its flows' delivered bytes this often). ``qps``: queue pairs per
    flow (module docstring)."""

    kind: Literal["permutation", "alltoall", "kflows", "incast", "flows"]
    size_bytes: Optional[SizeBytes] = None
    k: Optional[Count] = Field(None, ge=1, le=64)
    senders: Optional[Union[Count, list[HostRef]]] = None
    receiver: Optional[HostRef] = None
    flows: Optional[list[FlowSpec]] = None
    trials: Count = Field(1, ge=1, le=1000)
    rate_bin_ms: float = Field(10.0, ge=1.0, le=1000.0)
    #: queue pairs per flow, each with its own UDP source port (a flow of kind ``flows`` may set its own)
    qps: Count = Field(1, ge=1, le=MAX_CHANNELS)

    @property
    def max_qps(self) -> int:
        """The most queue pairs any flow of the pattern uses (the agents' channels)."""
        return max([self.qps] + [f.qps for f in self.flows or () if f.qps is not None])

    @model_validator(mode="after")
    def _kind_keys(self) -> "PatternSpec":
        own = KIND_KEYS[self.kind]
        stray = [k for k in ("size_bytes", "k", "senders", "receiver", "flows")
                 if k not in own and getattr(self, k) is not None]
        if stray:
            raise ValueError(f"workload.pattern.{stray[0]} does not apply to kind {self.kind!r}: its keys are "
                             f"{', '.join(own)} (with trials, rate_bin_ms, qps)")
        if self.kind == "flows":
            if not self.flows:
                raise ValueError("workload.pattern.flows: kind 'flows' needs a non-empty list of "
                                 "{src, dst, size_bytes, start_s}")
        elif self.size_bytes is None:
            raise ValueError(f"workload.pattern.size_bytes is required for kind {self.kind!r}")
        for i, f in enumerate(self.flows or ()):
            q = f.qps if f.qps is not None else self.qps
            if f.size_bytes < q:
                raise ValueError(f"workload.pattern.flows.{i}.size_bytes = {f.size_bytes} is smaller than its qps "
                                 f"({q}): every queue pair carries at least one byte; allowed size_bytes >= qps")
        if self.size_bytes is not None and self.size_bytes < self.qps:
            raise ValueError(f"workload.pattern.size_bytes = {self.size_bytes} is smaller than workload.pattern.qps "
                             f"({self.qps}): every queue pair carries at least one byte; allowed size_bytes >= qps")
        if isinstance(self.senders, int) and self.senders < 1:
            raise ValueError(f"workload.pattern.senders = {self.senders}: allowed a count >= 1 or a list of hosts")
        return self
