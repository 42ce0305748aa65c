"""Scenario files: YAML validated into frozen specs before anything touches the kernel.

A scenario is one YAML mapping with the sections ``fabric``, ``transport``,
``workload`` and ``fidelity`` (all optional but ``workload``) plus ``name``
and ``seed``. Unknown keys, wrong types and impossible values raise
:class:`ScenarioError`, whose message names every bad key path (for example
``fabric.spines``) and what is allowed.

Rates accept a number of bit/s (``10000000``) or a string with an SI suffix
(``"10M"``, ``"10Mbit"``, ``"1.5G"``); sizes accept bytes or ``"64KiB"``,
``"4MiB"``, ``"100KB"``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from typing_extensions import Annotated
from pydantic import BeforeValidator
from pydantic import StrictBool

from topology import BUILDERS
from testbed.spec.yaml_loader import MAX_ERROR_CHARS, ScenarioError, clip as _clip, load_yaml  # noqa: F401

#: RoCE path MTUs allowed by the InfiniBand spec (IBTA vol. 1, 9.7.7 "PMTU").
ROCE_MTUS_BYTES = (256, 512, 1024, 2048, 4096)

_RATE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtT]?)(?:bit|bps|b)?(?:/s)?\s*$")
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(|B|KB|KiB|MB|MiB|GB|GiB|K|M|G)\s*$")
_SI = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_SIZE_UNITS = {"": 1, "B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3,
               "K": 1024, "M": 1024**2, "G": 1024**3,
               "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def _rate(v: Any) -> Any:
    if isinstance(v, str):
        m = _RATE_RE.match(v)
        if not m:
            raise ValueError(f"{v!r} is not a rate: use bit/s as a number or a string like '10M' or '10Mbit'")
        return float(m.group(1)) * _SI[m.group(2).lower()]
    return v


def _size(v: Any) -> Any:
    if isinstance(v, str):
        m = _SIZE_RE.match(v)
        if not m:
            raise ValueError(f"{v!r} is not a size: use bytes as a number or a string like '64KiB', '4MiB'")
        return int(round(float(m.group(1)) * _SIZE_UNITS[m.group(2)]))
    return v


def _off(v: Any) -> Any:
    """``off`` (or YAML null) switches a limit off explicitly; 0 is refused (it would do so silently)."""
    if isinstance(v, str) and v.strip().lower() == "off":
        return None
    if not isinstance(v, bool) and isinstance(v, (int, float)) and v == 0:
        raise ValueError("0 is refused: it would silently mean 'no limit'; write off (or null) to switch "
                         "the limit off explicitly")
    return v


def _no_bool(v: Any) -> Any:
    if isinstance(v, bool):  # YAML true/false would otherwise count as 1/0
        raise ValueError(f"{v!r} is a boolean, not a number")
    return v


def _off_only(v: Any) -> Any:
    """``off`` (or YAML null) switches a limit off; every number keeps its meaning."""
    return None if isinstance(v, str) and v.strip().lower() == "off" else v


#: HTB shapes from 100 kbit/s (below, one 1500-byte frame takes over 0.1 s) to 100 Gbit/s
RateBps = Annotated[float, BeforeValidator(_rate), BeforeValidator(_no_bool),
                    Field(ge=100e3, le=100e9, allow_inf_nan=False)]
#: a real link rate a scaled-down link stands for (up to 10 Tbit/s)
ReferenceBps = Annotated[float, BeforeValidator(_rate), BeforeValidator(_no_bool),
                         Field(ge=100e3, le=10e12, allow_inf_nan=False)]
SizeBytes = Annotated[int, BeforeValidator(_size), BeforeValidator(_no_bool), Field(gt=0)]
Count = Annotated[int, BeforeValidator(_no_bool)]
#: largest scenario file read (a scenario is a few hundred bytes)
MAX_SCENARIO_BYTES = 1 << 20
#: smallest switch port buffer: one full Ethernet frame (1500 MTU + 14 header)
MIN_BUFFER_BYTES = 1514
#: largest switch port buffer: bfifo's limit is a __u32 byte count (struct tc_fifo_qopt)
MAX_BUFFER_BYTES = 2**32 - 1
#: link (IP) MTUs a fabric may use: Ethernet's 1500 up to the 9000 the userspace datapath carries
#: (DESIGN.md: veths at 9000 and OVS mtu_request=9000 carry 8900-byte pings)
MIN_LINK_MTU_BYTES, MAX_LINK_MTU_BYTES = 1500, 9000
#: IPv4 (20) + UDP (8) + BTH (12) + ICRC (4): what a RoCEv2 packet adds to its payload inside the IP MTU
ROCEV2_IP_OVERHEAD_BYTES = 20 + 8 + 12 + 4
#: per-link propagation delay: up to 1 s (netem's delay; larger delays need larger buffers than we allow)
MAX_LINK_DELAY_US = 1_000_000


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


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
    kernel has no ``sch_netem``, before anything is built).
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

    @model_validator(mode="after")
    def _fits(self) -> "FabricSpec":
        if self.kind not in BUILDERS:
            raise ValueError(f"fabric.kind = {self.kind!r} is not one of {sorted(BUILDERS)}")
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


class TransportSpec(_Spec):
    """RoCEv2-style reliable connection (RC) transport.

    ``payload_bytes`` is the RoCE path MTU (payload per packet); ``window_pkts``
    the most unacknowledged packets per QP; ``ack_every_pkts`` how often the
    responder acknowledges (AckReq is set on every such packet and on the last
    of each message); ``rto_us`` the go-back-N retransmission timeout, ``auto``
    derives it from the fabric's buffers and rates.
    """

    payload_bytes: Literal[256, 512, 1024, 2048, 4096] = 1024
    window_pkts: Count = Field(64, ge=1, le=4096)
    ack_every_pkts: Count = Field(8, ge=1, le=1024)
    rto_us: Union[Literal["auto"], Annotated[int, Field(ge=100, le=10_000_000)]] = "auto"

    @model_validator(mode="after")
    def _acks_within_window(self) -> "TransportSpec":
        if self.ack_every_pkts > self.window_pkts:
            raise ValueError(f"transport.ack_every_pkts = {self.ack_every_pkts} exceeds transport.window_pkts = "
                             f"{self.window_pkts}: a full window would never be acknowledged")
        return self


class SizeSweep(_Spec):
    """Message sizes min_bytes, min_bytes*factor, ... up to max_bytes (nccl-tests -b/-e/-f)."""

    min_bytes: SizeBytes = 65536
    max_bytes: SizeBytes = 4 * 1024 * 1024
    factor: Count = Field(2, ge=2, le=1024)

    @model_validator(mode="after")
    def _order(self) -> "SizeSweep":
        if self.max_bytes < self.min_bytes:
            raise ValueError(f"workload.sizes.max_bytes = {self.max_bytes} is below min_bytes = {self.min_bytes}")
        return self

    def sizes(self) -> list[int]:
        out, s = [], self.min_bytes
        while s <= self.max_bytes:
            out.append(s)
            s *= self.factor
        return out


class SimaiSpec(_Spec):
    """Replay of a SimAI/AICB workload file (its ALLREDUCE entries).

    ``size_scale`` multiplies every message size (time dilation: scale sizes by
    the same factor as link rates); ``time_unit`` is the unit of the file's
    compute times, which the format does not state (SimAI's ns-3 backend reads
    them as nanoseconds, hence the default). Each ALLREDUCE entry runs as
    concurrent ring all-reduces, one per group of its scope (TP, DP, EP, DP_EP
    in SimAI's rank layout, rank r on host r); the file's ``all_gpus`` must
    equal the fabric's host count. Other collectives, size-0 entries and
    one-rank groups are skipped with a note (testbed.plan); compute times are
    read exactly but not replayed as gaps. The file is read and checked when
    the scenario is loaded, before anything touches the kernel.
    """

    path: str
    size_scale: float = Field(1.0, gt=0, le=1.0)
    time_unit: Literal["ns", "us"] = "ns"
    iterations: Count = Field(1, ge=1, le=1000)


class WorkloadSpec(_Spec):
    """What the hosts run: a ring all-reduce size sweep or a SimAI replay."""

    collective: Literal["allreduce"] = "allreduce"
    algorithm: Literal["ring"] = "ring"
    sizes: Optional[SizeSweep] = None
    simai: Optional[SimaiSpec] = None
    iterations: Count = Field(5, ge=1, le=10_000)
    warmup_iterations: Count = Field(1, ge=0, le=100)
    #: cap on the bytes each size may move in total (iterations are cut to fit, at least one
    #: runs); ``off`` (or null) = no cap
    max_bytes_per_size: Annotated[Optional[SizeBytes], BeforeValidator(_off)] = 64 * 1024 * 1024

    @model_validator(mode="after")
    def _one_source(self) -> "WorkloadSpec":
        if (self.sizes is None) == (self.simai is None):
            raise ValueError("workload needs exactly one of workload.sizes or workload.simai")
        return self


class FidelityThresholdsSpec(_Spec):
    """When a run counts as faithful (Handigol et al., CoNEXT 2012).

    A check is switched off only explicitly, with ``off`` (or null): a threshold
    of 0 that would disable ``min_cpu_idle_pct`` or ``min_link_rate_ratio``
    silently is refused. ``max_unexplained_drops_pkts: 0`` is the strictest
    limit (``off`` = no limit).
    """

    min_cpu_idle_pct: Annotated[Optional[Annotated[float, Field(gt=0, le=100)]], BeforeValidator(_off)] = 5.0
    max_unexplained_drops_pkts: Annotated[Optional[Annotated[Count, Field(ge=0)]], BeforeValidator(_off_only)] = 0
    #: retransmitted packets whose original had arrived, beyond what lost packets explain
    #: (testbed.measure.verdict.spurious_retx_pkts); 0 = none allowed (the default), ``off`` = no limit
    max_spurious_retx_pkts: Annotated[Optional[Annotated[Count, Field(ge=0)]], BeforeValidator(_off_only)] = 0
    min_link_rate_ratio: Annotated[Optional[Annotated[float, Field(gt=0, le=1)]], BeforeValidator(_off)] = 0.9

    def switched_off(self) -> list[str]:
        """Names of the checks the scenario switched off (``off``/null)."""
        return [k for k in type(self).model_fields if getattr(self, k) is None]


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


class ScenarioSpec(_Spec):
    """A whole scenario file."""

    name: str = Field("scenario", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    seed: Count = Field(1, ge=0)
    #: link rate the scaled-down host link stands for (records the time-dilation scale factor)
    reference_link_bps: ReferenceBps = 400e9
    fabric: FabricSpec = FabricSpec()
    transport: TransportSpec = TransportSpec()
    workload: WorkloadSpec
    fidelity: FidelityThresholdsSpec = FidelityThresholdsSpec()
    controller: ControllerSpec = ControllerSpec()
    output: OutputSpec = OutputSpec()

    @property
    def scale_factor(self) -> float:
        """reference_link_bps / host_link_bps: how much slower than the real fabric this one runs."""
        return self.reference_link_bps / self.fabric.host_link_bps

    @model_validator(mode="after")
    def _fits(self) -> "ScenarioSpec":
        if self.reference_link_bps < self.fabric.host_link_bps:
            raise ValueError(f"reference_link_bps = {self.reference_link_bps:g} is below fabric.host_link_bps = "
                             f"{self.fabric.host_link_bps:g}: the scaled-down link cannot be faster than the real one")
        if self.fabric.n_hosts < 2:
            raise ValueError("a collective needs at least 2 hosts: fabric.leaves * fabric.hosts_per_leaf < 2")
        rto = self.transport.rto_us
        if rto != "auto" and rto < min_rto_us(self):
            raise ValueError(
                f"transport.rto_us {rto} us is below {min_rto_us(self):.0f} us, the least time an ACK can take "
                f"(transport.ack_every_pkts = {self.transport.ack_every_pkts} full frames plus one ACK at "
                f"fabric.host_link_bps = {self.fabric.host_link_bps:g}): every packet would time out; "
                f"allowed: auto or >= {min_rto_us(self):.0f}")
        need = self.transport.payload_bytes + ROCEV2_IP_OVERHEAD_BYTES
        if need > self.fabric.mtu_bytes:
            raise ValueError(
                f"transport.payload_bytes {self.transport.payload_bytes} does not fit fabric.mtu_bytes = "
                f"{self.fabric.mtu_bytes}: a RoCEv2 packet needs payload + {ROCEV2_IP_OVERHEAD_BYTES} "
                f"(IPv4, UDP, BTH, ICRC) = {need} bytes; raise fabric.mtu_bytes to >= {need} "
                f"(at most {MAX_LINK_MTU_BYTES}) or lower transport.payload_bytes to "
                f"<= {max(m for m in ROCE_MTUS_BYTES if m + ROCEV2_IP_OVERHEAD_BYTES <= self.fabric.mtu_bytes)}")
        return self


def min_rto_us(spec: "ScenarioSpec") -> float:
    """Least useful go-back-N timeout, us: the time before the first ACK can possibly arrive.

    = (ack_every_pkts full data frames + one ACK frame) x 8 / host_link_bps: the
    requester serializes ``ack_every_pkts`` frames, the responder acknowledges the
    last and its ACK serializes back, with empty queues and no switch latency (a
    lower bound: store-and-forward hops and queueing only add). A timeout below
    this fires before any ACK can come back, so every packet is retransmitted.
    """
    from traffic import wire
    from traffic.transport import wire_bytes

    t = spec.transport
    data_frame = wire_bytes(wire.BTH_BYTES + t.payload_bytes + wire.ICRC_BYTES)
    ack_frame = wire_bytes(wire.BTH_BYTES + wire.AETH_BYTES + wire.ICRC_BYTES)
    return (t.ack_every_pkts * data_frame + ack_frame) * 8 / spec.fabric.host_link_bps * 1e6


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names allowed at ``loc`` (the parent of an extra key)."""
    m: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        f = m.model_fields.get(part)
        if f is None:
            return []
        ann = f.annotation
        cand = [a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not cand:
            return []
        m = cand[0]
    return sorted(m.model_fields)


_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PATH_MSG_RE = re.compile(r"^[a-z_]+\.[a-z_.]+ ")


def format_validation_error(err: ValidationError, source: str = "scenario") -> str:
    """One message naming each bad key path, the bad value and what is allowed."""
    by_path: dict[str, list[str]] = {}
    for e in err.errors():
        # pydantic adds union/validator branch names to loc; keep only real keys
        loc = tuple(p for p in e["loc"] if isinstance(p, int) or _KEY_RE.match(p))
        path = ".".join(str(p) for p in loc) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if not loc and _PATH_MSG_RE.match(msg):  # a cross-section check names its own key path
            path, msg = msg.split(" ", 1)
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(ScenarioSpec, loc[:-1])
            msg = f"unknown key; allowed keys here: {', '.join(allowed)}"
        elif "input" in e and e["type"] != "missing" and not isinstance(e["input"], dict):
            msg = f"{msg} (got {_clip(repr(e['input']), 80)})"
        by_path.setdefault(path, [])
        if msg not in by_path[path]:
            by_path[path].append(msg)
    lines = [_clip(f"{path}: {' or '.join(msgs)}", 400) for path, msgs in by_path.items()]
    if len(lines) > 20:
        lines = lines[:20] + [f"... and {len(lines) - 20} more"]
    return _clip(f"{source}: invalid scenario:\n  " + "\n  ".join(lines))


def parse_scenario(data: Any, source: str = "scenario") -> ScenarioSpec:
    """Validate a mapping into a frozen ScenarioSpec; raise ScenarioError on any problem."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: the top level must be a mapping with keys "
                            f"{', '.join(sorted(ScenarioSpec.model_fields))}, got {type(data).__name__}")
    try:
        return ScenarioSpec.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(format_validation_error(e, source)) from None


def load_scenario(path: Union[str, Path]) -> ScenarioSpec:
    """Read and validate a scenario YAML file.

    Relative ``workload.simai.path`` values are resolved against the
    scenario file's folder. Raises ScenarioError (bad content or YAML) or
    FileNotFoundError.
    """
    p = Path(path)
    if p.exists() and not p.is_file():
        raise ScenarioError(f"{p}: not a regular file")
    if p.stat().st_size > MAX_SCENARIO_BYTES:
        raise ScenarioError(f"{p}: {p.stat().st_size} bytes; a scenario file may have at most {MAX_SCENARIO_BYTES}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    data = load_yaml(text, str(p))
    spec = parse_scenario(data, str(p))
    if spec.workload.simai is not None:
        sp = Path(spec.workload.simai.path)
        if not sp.is_absolute():
            sp = (p.parent / sp).resolve()
        if not sp.is_file():
            raise ScenarioError(f"{p}: workload.simai.path: no such file {str(sp)!r}")
        simai = spec.workload.simai.model_copy(update={"path": str(sp)})
        spec = spec.model_copy(update={"workload": spec.workload.model_copy(update={"simai": simai})})
        from testbed.plan import plan_workload  # reads the file: all_gpus, groups, sizes (ScenarioError)
        try:
            plan_workload(spec)
        except ScenarioError as e:
            raise ScenarioError(f"{p}: {e}") from None
    return spec
