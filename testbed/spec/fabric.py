"""The ``fabric`` section: topology kind and size, link rates, MTU, buffers."""
from __future__ import annotations

import math
from typing import Literal, Optional

from pydantic import BeforeValidator, ConfigDict, Field, model_serializer, model_validator
from typing_extensions import Annotated

from dataplane.queues import BACKENDS as QUEUE_BACKENDS, DEFAULT_BACKEND as DEFAULT_QUEUE_BACKEND
from topology import KIND_PARAMS, KINDS, build as build_layout, dci, scale_up, spine_leaf
from topology.port_count import MAX_PORTS_PER_SWITCH
from topology.routing import max_path_delay_us, max_switch_hops
from testbed.spec import plugins
from testbed.spec.units import (
    RateBps, SizeBytes, Count, MAX_BUFFER_BYTES, MIN_LINK_MTU_BYTES, MAX_LINK_MTU_BYTES,
    MAX_LINK_DELAY_US, SpecModel, off_to_none)

#: default ``fabric.clock_wander`` (testbed.emulation.clock_wander)
DEFAULT_CLOCK_WANDER = 0.005


class ScaleUpSpec(SpecModel):
    """``fabric.scale_up``: the GPUs of each server (``gpus_per_server`` consecutive ranks) joined by
    one switch at ``rate_multiple`` x ``host_link_bps`` (topology.scale_up)."""

    gpus_per_server: Count = Field(..., ge=2, le=32)
    rate_multiple: float = Field(4.0, ge=1, le=16, allow_inf_nan=False)


class FabricSpec(SpecModel):
    """The fabric: ``kind`` picks the topology builder (topology.KINDS), which reads its own keys.

    - ``spine_leaf`` (spines, leaves, hosts_per_leaf, links_per_spine): every leaf connects to
      every spine with ``links_per_spine`` (default 1) parallel links of ``fabric_link_bps``
      (default 10 Mbit/s), each its own equal-cost next hop (docs/parallel_links.md);
      each leaf has ``hosts_per_leaf`` hosts.
    - ``fat_tree`` (k): Al-Fares et al. 2008, k pods of k/2 edge and k/2
      aggregation switches, (k/2)^2 cores, k^3/4 hosts (topology/fat_tree.py).
    - ``rail_optimized`` (servers, gpus_per_server, spines): GPU i of every
      server on rail leaf i, every rail leaf linked to every spine
      (topology/rail_optimized.py).
    - ``dual_plane`` (spines, leaves, hosts_per_leaf, planes): ``planes`` independent
      spine-leaf planes, every host with one NIC in each (topology/dual_plane.py).
    - ``dci`` (sites, spines, leaves, hosts_per_leaf, dci_links, dci_link_bps, dci_delay_us):
      ``sites`` spine-leaf sites of the same size, each with a border switch; every two sites'
      border switches joined by ``dci_links`` long-haul links at ``dci_link_bps`` (default
      ``fabric_link_bps``) with their own one-way delay ``dci_delay_us`` (topology/dci.py).

    ``scale_up`` (any kind): one fast switch per server (topology/scale_up.py).

    A key of another kind is refused, naming the kind's keys. Hosts link at
    ``host_link_bps``; switch-to-switch links at ``fabric_link_bps``, or give
    ``oversubscription`` instead (not both): the ratio of host bandwidth to
    uplink bandwidth at a host-facing switch, so ``fabric_link_bps =
    host_link_bps x host ports / (uplinks x oversubscription)`` (1 = non-blocking,
    3 = 3:1). With neither, fat_tree and rail_optimized are non-blocking.
    ``buffer_bytes`` is the egress buffer of every switch port (tail drop).
    ``ports_per_switch`` is the radix every switch must fit in.

    ``mtu_bytes`` is the IP MTU of every link (veths and OVS ``mtu_request``);
    it must hold a full RoCEv2 packet: ``transport.payload_bytes + 44``
    (IPv4 20, UDP 8, BTH 12, ICRC 4), e.g. 1500 for payloads up to 1024,
    4200 or 9000 for the 4096-byte RoCE path MTU. ``link_delay_us`` is the
    one-way propagation delay added on every link that has none of its own (the
    ``dci`` kind's long-haul links have ``dci_delay_us``); any delay above 0 is
    refused where the kernel has no ``sch_netem`` (netem), before anything is built. ``queue_backend``
    picks how every egress queue is built (dataplane.queues.BACKENDS;
    ``htb_bfifo``: HTB rate limit and a bfifo tail-drop buffer). ``clock_wander`` is the relative
    width of the band every shaper's rate wanders in (host NICs below their nominal rate, switch
    ports above it; testbed.emulation.clock_wander), so that no two transmitters keep a fixed
    phase and tail drop treats symmetric senders alike; ``off`` runs every shaper at its exact rate.
    """

    kind: str = "spine_leaf"  # topology builder, a key of topology.KINDS
    spines: Count = Field(2, ge=1, le=16)
    # leaves and hosts per leaf: as many as the switches' ports hold (each kind's check names ports_per_switch)
    leaves: Count = Field(2, ge=1, le=MAX_PORTS_PER_SWITCH)
    hosts_per_leaf: Count = Field(2, ge=1, le=MAX_PORTS_PER_SWITCH)
    links_per_spine: Count = Field(1, ge=1, le=spine_leaf.MAX_LINKS_PER_SPINE)
    k: Count = 4
    servers: Count = Field(2, ge=1, le=32)
    gpus_per_server: Count = Field(4, ge=1, le=32)
    planes: Count = Field(2, ge=2, le=4)
    sites: Count = Field(2, ge=2, le=dci.MAX_SITES)  # dci: sites, each spines/leaves/hosts_per_leaf
    dci_links: Count = Field(1, ge=1, le=dci.MAX_DCI_LINKS)  # dci: parallel long-haul links per pair of sites
    dci_link_bps: Optional[RateBps] = None  # dci: the long-haul links' rate; absent: fabric_link_bps
    dci_delay_us: Count = Field(0, ge=0, le=MAX_LINK_DELAY_US)  # dci: the long-haul links' own one-way delay
    scale_up: Optional[ScaleUpSpec] = None
    host_link_bps: RateBps = 10e6
    fabric_link_bps: RateBps = 10e6
    oversubscription: Optional[float] = Field(None, gt=0, le=64, allow_inf_nan=False)
    buffer_bytes: SizeBytes = 100_000
    ports_per_switch: Count = Field(32, ge=2, le=MAX_PORTS_PER_SWITCH)
    datapath: Literal["auto", "user", "kernel"] = "auto"
    mtu_bytes: Count = Field(1500, ge=MIN_LINK_MTU_BYTES, le=MAX_LINK_MTU_BYTES)
    link_delay_us: Count = Field(0, ge=0, le=MAX_LINK_DELAY_US)
    queue_backend: str = DEFAULT_QUEUE_BACKEND  # a key of dataplane.queues.BACKENDS
    #: relative width of every shaper's rate wander (testbed.emulation.clock_wander); ``off``: exact rates
    clock_wander: Annotated[Optional[Annotated[float, Field(gt=0, le=0.02, allow_inf_nan=False)]],
                            BeforeValidator(off_to_none)] = DEFAULT_CLOCK_WANDER

    #: the queue backend's block is kept as an extra key named after it (dumped back as written)
    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _backend_block(cls, data):
        """Check every key that is no field: the block of the chosen queue backend (``fabric.<name>``, its
        Settings' keys, testbed.spec.plugins.named_blocks); anything else is refused naming the key path."""
        blocks = {n: b.Settings for n, b in QUEUE_BACKENDS.items() if plugins.keys(b.Settings)}
        return plugins.named_blocks(data, "fabric", cls.model_fields, blocks, "queue_backend", DEFAULT_QUEUE_BACKEND)

    @property
    def queue_settings(self):
        """The queue backend's settings: its ``Settings`` with the scenario's ``fabric.<name>`` keys."""
        return QUEUE_BACKENDS[self.queue_backend].Settings(**(self.model_extra or {}).get(self.queue_backend, {}))

    @model_validator(mode="after")
    def _fits(self) -> "FabricSpec":
        if self.kind not in KINDS:
            raise ValueError(f"fabric.kind = {self.kind!r} is not one of {sorted(KINDS)}")
        builder = KINDS[self.kind]
        for key in sorted(self.model_fields_set & set(KIND_PARAMS)):
            if self.kind not in KIND_PARAMS[key]:
                raise ValueError(f"fabric.{key} does not apply to fabric.kind = {self.kind!r} (its keys: "
                                 f"{', '.join(builder.PARAMS)}; {key} belongs to {', '.join(KIND_PARAMS[key])})")
        builder.check(self)
        self._derive_fabric_rate(builder)
        if self.kind == dci.KIND and self.dci_link_bps is None:  # a derived value of this frozen section
            object.__setattr__(self, "dci_link_bps", self.fabric_link_bps)
        if self.scale_up is not None:
            scale_up.check(self, len(builder.from_spec(self, "").hosts))
        if self.queue_backend not in QUEUE_BACKENDS:
            raise ValueError(f"fabric.queue_backend = {self.queue_backend!r} is not one of {sorted(QUEUE_BACKENDS)}")
        frame = self.mtu_bytes + 14
        if self.buffer_bytes < frame:
            raise ValueError(f"fabric.buffer_bytes = {self.buffer_bytes} cannot hold one full frame of "
                             f"fabric.mtu_bytes = {self.mtu_bytes} (+14 Ethernet header): allowed >= {frame}")
        if self.buffer_bytes > MAX_BUFFER_BYTES:
            raise ValueError(f"fabric.buffer_bytes = {self.buffer_bytes} is above {MAX_BUFFER_BYTES}, the most a "
                             f"bfifo queue can hold (its limit is a 32-bit byte count)")
        return self

    def _derive_fabric_rate(self, builder) -> None:
        """Set ``fabric_link_bps`` from ``oversubscription`` (or 1 for kinds other than
        spine_leaf when neither is given); ValueError when both are given or the rate is out of range."""
        ratio = self.oversubscription
        given = "fabric_link_bps" in self.model_fields_set
        if ratio is None and (self.kind == "spine_leaf" or given):
            return
        down, up = builder.edge_ports(self)
        rate = self.host_link_bps * down / (up * (1.0 if ratio is None else ratio))
        if ratio is not None and given and not math.isclose(rate, self.fabric_link_bps, rel_tol=1e-9):
            raise ValueError(f"fabric.oversubscription = {ratio:g} (fabric links of {rate:g} bit/s) and "
                             f"fabric.fabric_link_bps = {self.fabric_link_bps:g} both set the uplink rate and "
                             f"disagree: give one of them")
        if not 100e3 <= rate <= 100e9:
            raise ValueError(f"fabric.oversubscription = {1.0 if ratio is None else ratio:g} makes fabric links of "
                             f"{rate:g} bit/s "
                             f"(host_link_bps x {down} host ports / {up} uplinks / ratio): allowed 100k..100G")
        object.__setattr__(self, "fabric_link_bps", rate)  # a derived value of this frozen section

    @model_serializer(mode="wrap")
    def _own_keys(self, handler):
        """Dump only this kind's keys (a dump validates back to the same section)."""
        data = handler(self)
        return {key: value for key, value in data.items()
                if key not in KIND_PARAMS or self.kind in KIND_PARAMS[key]}

    def layout_preview(self):
        """The topology.model.Layout this section builds before any run exists: node names without a run
        id (the scenario's own names, e.g. ``l1``, ``s2``), counts and rates as a run will have them."""
        return build_layout(self.kind, self, "")

    @property
    def n_hosts(self) -> int:
        """Hosts of the fabric (one rank each)."""
        if self.kind == "spine_leaf":  # the common case without building a layout
            return self.leaves * self.hosts_per_leaf
        return len(self.layout_preview().hosts)

    @property
    def n_switch_ports(self) -> int:
        """Switch ports of the fabric, each with its own egress queue."""
        layout = self.layout_preview()
        names = {s.name for s in layout.switches}
        return sum((ln.a.node in names) + (ln.b.node in names) for ln in layout.links)

    @property
    def ranks_per_switch(self) -> int:
        """How many consecutive ranks from rank 0 share one host-facing switch (a ring
        group no larger stays on that switch): hosts_per_leaf, k/2, or 1 on rails."""
        layout = self.layout_preview()
        first = layout.attachment(layout.hosts[0].name).node
        return next((r for r, h in enumerate(layout.hosts) if layout.attachment(h.name).node != first),
                    len(layout.hosts))

    @property
    def delays_us(self) -> dict:
        """{fabric key: one-way delay, us} of every delay key this kind reads: ``link_delay_us`` (every
        link without its own) and the kind's own (``dci_delay_us``)."""
        keys = ("link_delay_us",) + tuple(k for k in KINDS[self.kind].PARAMS if k.endswith("_delay_us"))
        return {key: getattr(self, key) for key in keys}

    @property
    def slowest_link_bps(self) -> float:
        """The slowest link of the fabric, bit/s: min(host_link_bps, fabric_link_bps), and a dci
        fabric's dci_link_bps (its long-haul links)."""
        return min(r for r in (self.host_link_bps, self.fabric_link_bps, self.dci_link_bps) if r)

    @property
    def path_delay_us(self) -> int:
        """One-way propagation delay of the longest path, us: ``(max_switch_hops + 1) x link_delay_us``
        when no link has a delay of its own, else the most on any shortest host-to-host path
        (topology.routing.max_path_delay_us; a dci path between sites crosses one DCI link)."""
        if self.kind == "spine_leaf":
            return (self.max_switch_hops + 1) * self.link_delay_us
        return max_path_delay_us(self.layout_preview(), self.link_delay_us)

    @property
    def max_switch_hops(self) -> int:
        """Switches (egress queues) on the longest shortest host-to-host path: 3 for
        spine_leaf (as the first release assumed), else from the layout (fat_tree 5, rails 3)."""
        if self.kind == "spine_leaf":
            return 3
        return max_switch_hops(self.layout_preview())

    @property
    def oversubscription_ratio(self) -> float:
        """Host bandwidth / uplink bandwidth at a host-facing switch (1 = non-blocking)."""
        down, up = KINDS[self.kind].edge_ports(self)
        return self.host_link_bps * down / (self.fabric_link_bps * up)

    def describe(self) -> str:
        """The shape in a few words, e.g. ``fat_tree (k 4): 20 switches, oversubscription 1:1``."""
        params = ", ".join(f"{key} {getattr(self, key)}" for key in KINDS[self.kind].PARAMS)
        up = (f", scale-up {self.scale_up.gpus_per_server} GPUs per server at {self.scale_up.rate_multiple:g} x "
              "the host link") if self.scale_up is not None else ""
        return (f"{self.kind} ({params}): {len(self.layout_preview().switches)} switches, "
                f"oversubscription {self.oversubscription_ratio:g}:1{up}")
