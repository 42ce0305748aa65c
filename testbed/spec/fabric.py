"""The ``fabric`` section: topology kind and size, link rates, MTU, buffers."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from testbed.emulation.queues import BACKENDS as QUEUE_BACKENDS, DEFAULT_BACKEND as DEFAULT_QUEUE_BACKEND
from topology import BUILDERS
from testbed.spec.units import (
    RateBps, SizeBytes, Count, MAX_BUFFER_BYTES, MIN_LINK_MTU_BYTES, MAX_LINK_MTU_BYTES,
    MAX_LINK_DELAY_US, _Spec)


class FabricSpec(_Spec):
    """Spine-leaf (2-tier Clos) fabric; ``kind`` picks the topology builder (topology.BUILDERS).

    Every leaf connects to every spine with one link of ``fabric_link_bps``;
    each leaf has ``hosts_per_leaf`` hosts on links of ``host_link_bps``.
    ``buffer_bytes`` is the egress buffer of every switch port (tail drop).
    ``ports_per_switch`` is the radix: a leaf needs hosts_per_leaf + spines
    ports, a spine needs leaves ports.

    ``mtu_bytes`` is the IP MTU of every link (veths and OVS ``mtu_request``);
    it must hold a full RoCEv2 packet: ``transport.payload_bytes + 44``
    (IPv4 20, UDP 8, BTH 12, ICRC 4), e.g. 1500 for payloads up to 1024,
    4200 or 9000 for the 4096-byte RoCE path MTU. ``link_delay_us`` is the
    one-way propagation delay added on every link (netem; refused where the
    kernel has no ``sch_netem``, before anything is built). ``queue_backend``
    picks how every egress queue is built (testbed.emulation.queues.BACKENDS;
    ``htb_bfifo``: HTB rate limit and a bfifo tail-drop buffer).
    """

    kind: str = "spine_leaf"  # topology builder, a key of topology.BUILDERS
    spines: Count = Field(2, ge=1, le=16)
    leaves: Count = Field(2, ge=1, le=32)
    hosts_per_leaf: Count = Field(2, ge=1, le=32)
    host_link_bps: RateBps = 10e6
    fabric_link_bps: RateBps = 10e6
    buffer_bytes: SizeBytes = 100_000
    ports_per_switch: Count = Field(32, ge=2, le=254)
    datapath: Literal["auto", "user", "kernel"] = "auto"
    mtu_bytes: Count = Field(1500, ge=MIN_LINK_MTU_BYTES, le=MAX_LINK_MTU_BYTES)
    link_delay_us: Count = Field(0, ge=0, le=MAX_LINK_DELAY_US)
    queue_backend: str = DEFAULT_QUEUE_BACKEND  # a key of testbed.emulation.queues.BACKENDS

    @model_validator(mode="after")
    def _fits(self) -> "FabricSpec":
        if self.kind not in BUILDERS:
            raise ValueError(f"fabric.kind = {self.kind!r} is not one of {sorted(BUILDERS)}")
        if self.queue_backend not in QUEUE_BACKENDS:
            raise ValueError(f"fabric.queue_backend = {self.queue_backend!r} is not one of {sorted(QUEUE_BACKENDS)}")
        frame = self.mtu_bytes + 14
        if self.buffer_bytes < frame:
            raise ValueError(f"fabric.buffer_bytes = {self.buffer_bytes} cannot hold one full frame of "
                             f"fabric.mtu_bytes = {self.mtu_bytes} (+14 Ethernet header): allowed >= {frame}")
        if self.buffer_bytes > MAX_BUFFER_BYTES:
            raise ValueError(f"fabric.buffer_bytes = {self.buffer_bytes} is above {MAX_BUFFER_BYTES}, the most a "
                             f"bfifo queue can hold (its limit is a 32-bit byte count)")
        leaf_ports = self.hosts_per_leaf + self.spines
        if leaf_ports > self.ports_per_switch:
            raise ValueError(
                f"fabric.hosts_per_leaf + fabric.spines = {leaf_ports} ports per leaf, "
                f"more than fabric.ports_per_switch = {self.ports_per_switch}")
        if self.leaves > self.ports_per_switch:
            raise ValueError(
                f"fabric.leaves = {self.leaves} ports per spine, more than "
                f"fabric.ports_per_switch = {self.ports_per_switch}")
        if self.leaves > 250 or self.hosts_per_leaf > 250:
            raise ValueError("addressing 10.0.<leaf>.<host> allows at most 250 leaves and 250 hosts per leaf")
        return self

    @property
    def n_hosts(self) -> int:
        return self.leaves * self.hosts_per_leaf
