"""Scenario files: YAML validated into frozen specs before anything touches the kernel.

A scenario is one YAML mapping with the sections ``fabric``, ``transport``,
``workload``, ``fidelity``, ``controller``, ``load_balance``, ``congestion``,
``output``, ``faults``, ``failover``, ``background`` and ``cluster`` (testbed.spec.cluster)
(all optional but ``workload``) plus ``name``
and ``seed``, and ``tenants``, ``shared_hosts``, ``isolation`` (testbed.spec.tenants); instead of
``workload``, a ``jobs`` list runs several jobs on the fabric at once (testbed.spec.jobs). Unknown keys,
wrong types and impossible values raise
:class:`ScenarioError`, whose message names every bad key path (for example
``fabric.spines``) and what is allowed.

Rates accept a number of bit/s (``10000000``) or a string with an SI suffix
(``"10M"``, ``"10Mbit"``, ``"1.5G"``); sizes accept bytes or ``"64KiB"``,
``"4MiB"``, ``"100KB"``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Union

from pydantic import BaseModel, Field, ValidationError, model_validator

from testbed.spec.cluster import ClusterSpec, check_cluster
from testbed.spec.background import BackgroundFlowSpec, check_background
from testbed.spec.congestion import CongestionSpec
from testbed.spec.controller import ControllerSpec, LoadBalanceSpec, OutputSpec
from testbed.spec.fabric import FabricSpec
from testbed.spec.faults import FailoverSpec, FaultSpec, check_faults, check_storms
from testbed.spec.fidelity import FidelityThresholdsSpec
from testbed.spec.jobs import JobSpec, check_jobs, check_tenant_classes, check_workload_or_jobs, resolved_jobs
from testbed.spec.tenants import Isolation, TenantSpec, check_tenants
from testbed.spec.transport import TransportSpec, check_congestion_control
from testbed.spec.units import (  # noqa: F401
    MAX_LINK_MTU_BYTES, MAX_SCENARIO_BYTES, ROCE_MTUS_BYTES, ROCEV2_IP_OVERHEAD_BYTES, Count, ReferenceBps, SpecModel)
from testbed.spec.workload import WorkloadSpec
from testbed.spec.yaml_loader import MAX_ERROR_CHARS, ScenarioError, clip as _clip, did_you_mean, load_yaml  # noqa: F401


class ScenarioSpec(SpecModel):
    """A whole scenario file."""

    name: str = Field("scenario", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    seed: Count = Field(1, ge=0)
    #: link rate the scaled-down host link stands for (records the time-dilation scale factor)
    reference_link_bps: ReferenceBps = 400e9
    fabric: FabricSpec = FabricSpec()
    transport: TransportSpec = TransportSpec()
    #: one job over the first hosts; None when ``jobs`` is given (exactly one of the two)
    workload: Optional[WorkloadSpec] = None
    #: several jobs sharing the fabric (testbed.spec.jobs)
    jobs: tuple[JobSpec, ...] = ()
    fidelity: FidelityThresholdsSpec = FidelityThresholdsSpec()
    controller: ControllerSpec = ControllerSpec()
    load_balance: LoadBalanceSpec = LoadBalanceSpec()
    output: OutputSpec = OutputSpec()
    congestion: CongestionSpec = CongestionSpec()
    faults: tuple[FaultSpec, ...] = ()
    failover: FailoverSpec = FailoverSpec()
    #: TCP/UDP/storage flows beside the workload (testbed.spec.background, testbed.emulation.background)
    background: tuple[BackgroundFlowSpec, ...] = ()
    #: tenant name -> its hosts (docs/tenants.md, testbed.spec.tenants)
    tenants: dict[str, TenantSpec] = {}
    #: hosts every tenant may reach (e.g. a storage server); in no tenant
    shared_hosts: tuple[str, ...] = ()
    #: the controller keeps tenants apart (drops, ARP) and the run probes it; default on with tenants
    isolation: Optional[Isolation] = None
    #: servers and placement policy of a run split over several servers (testbed.spec.cluster; None: this machine)
    cluster: Optional[ClusterSpec] = None

    @property
    def scale_factor(self) -> float:
        """reference_link_bps / host_link_bps: how much slower than the real fabric this one runs."""
        return self.reference_link_bps / self.fabric.host_link_bps

    @model_validator(mode="after")
    def _fits(self) -> "ScenarioSpec":
        check_workload_or_jobs(self)
        if self.reference_link_bps < self.fabric.host_link_bps:
            raise ValueError(f"reference_link_bps = {self.reference_link_bps:g} is below fabric.host_link_bps = "
                             f"{self.fabric.host_link_bps:g}: the scaled-down link cannot be faster than the real one")
        if self.fabric.n_hosts < 2:
            raise ValueError(f"a collective needs at least 2 hosts: the fabric ({self.fabric.describe()}) has {self.fabric.n_hosts}")
        _check_congestion(self)
        check_jobs(self)
        if self.workload is not None and self.workload.ranks is not None and self.workload.ranks > self.fabric.n_hosts:
            raise ValueError(f"workload.ranks {self.workload.ranks} is above the fabric's {self.fabric.n_hosts} "
                             f"hosts (fabric.leaves x fabric.hosts_per_leaf): allowed 2..{self.fabric.n_hosts}")
        rto = self.transport.rto_us
        if rto != "auto" and rto < min_rto_us(self):
            raise ValueError(
                f"transport.rto_us {rto} us is below {min_rto_us(self):.0f} us, the least time an ACK can take "
                f"(transport.ack_every_pkts = {self.transport.ack_every_pkts} full frames plus one ACK at "
                f"fabric.host_link_bps = {self.fabric.host_link_bps:g}): every packet would time out; "
                f"allowed: auto or >= {min_rto_us(self):.0f}")
        if self.load_balance.weights or self.faults or self.output.pcap:  # names checked against this fabric
            from controllers import lb

            layout = self.fabric.layout_preview()
            if self.load_balance.weights:
                lb.check_weights(layout, self.load_balance.policy, self.load_balance.weights)
            check_faults(layout, self.faults)
            check_storms(self.faults, self.congestion.pfc_on)
            if self.output.pcap:
                from testbed.spec.pcap import resolve_ports
                resolve_ports(layout, self.output.pcap.ports)
        need = self.transport.payload_bytes + ROCEV2_IP_OVERHEAD_BYTES
        if need > self.fabric.mtu_bytes:
            raise ValueError(
                f"transport.payload_bytes {self.transport.payload_bytes} does not fit fabric.mtu_bytes = "
                f"{self.fabric.mtu_bytes}: a RoCEv2 packet needs payload + {ROCEV2_IP_OVERHEAD_BYTES} "
                f"(IPv4, UDP, BTH, ICRC) = {need} bytes; raise fabric.mtu_bytes to >= {need} "
                f"(at most {MAX_LINK_MTU_BYTES}) or lower transport.payload_bytes to "
                f"<= {max(m for m in ROCE_MTUS_BYTES if m + ROCEV2_IP_OVERHEAD_BYTES <= self.fabric.mtu_bytes)}")
        check_congestion_control(self)
        if self.background:
            from testbed.spec.hosts import host_infos
            check_background(self.background, [h.name for h in host_infos(self.fabric.layout_preview())],
                             self.fabric.host_link_bps)
        check_tenant_classes(self)  # a tenant's traffic_class needs a jobs list
        check_tenants(self)
        if self.load_balance.selection_method == "dp_hash" and self.transport.entropy == "spray":
            raise ValueError("load_balance.selection_method: dp_hash cannot run with transport.entropy = spray: spray "
                             "traces each UDP port's path with ofproto/trace, which stops at dp_hash's recirculation; "
                             "allowed with dp_hash: per_flow, flowlet (or selection_method: hash with spray)")
        if self.workload is not None:  # the hosts it names on this fabric (a pattern's flows fitted, perftest runs)
            self.workload.check_on_fabric(self)
        check_cluster(self)
        return self


def _check_congestion(spec: "ScenarioSpec") -> None:
    """A ``congestion`` section needs a backend with the three classes; Kmin < Kmax, Kmin below the
    lossless buffer. ValueError naming the keys."""
    from dataplane import queues

    c, f = spec.congestion, spec.fabric
    backend = queues.BACKENDS[f.queue_backend]
    asked = c.ecn is not None or c.pfc is not None or c.buffers != type(c.buffers)()
    if asked and backend.max_classes < 3:
        raise ValueError(f"congestion.buffers/congestion.ecn/congestion.pfc need priority classes, which fabric.queue_backend = "
                         f"{f.queue_backend!r} does not build; allowed: "
                         f"{sorted(n for n, b in queues.BACKENDS.items() if b.max_classes >= 3 and b.marks_ecn)}")
    if (c.ecn is not None or c.pfc is not None) and spec.controller.framework != "os_ken":
        raise ValueError(f"congestion.ecn/congestion.pfc run in the controller's congestion loop, which needs the "
                         f"testbed's Python (os-ken); controller.framework {spec.controller.framework!r} (Ryu 4.34 "
                         f"on Python 3.9) cannot run it: allowed with congestion.ecn/pfc: os_ken")
    lossless = c.class_buffers_bytes(f.buffer_bytes)["lossless"]
    from testbed.spec.congestion import bdp_basis
    for section in (c.ecn, c.pfc):
        if section is not None and section.uses_bdp:
            section._bdp_bytes = bdp_basis(f)["bdp_bytes"]
    if c.pfc is not None:
        xon, xoff = c.pfc.thresholds_bytes(f.mtu_bytes + 14)
        if not xon < xoff <= lossless:
            raise ValueError(f"congestion.pfc: need Xon < Xoff <= the lossless class buffer; got Xon {xon}, Xoff "
                             f"{xoff}, buffer {lossless} bytes (congestion.buffers.lossless_bytes, default "
                             f"fabric.buffer_bytes)")
    if c.ecn is None:
        return
    kmin, kmax = c.ecn.thresholds_bytes(f.mtu_bytes + 14)
    if not kmin < kmax:
        raise ValueError(f"congestion.ecn: Kmin {kmin} bytes must be below Kmax {kmax} bytes")
    if kmin >= lossless:
        raise ValueError(f"congestion.ecn: Kmin {kmin} bytes is not below the lossless class buffer {lossless} "
                         f"bytes (congestion.buffers.lossless_bytes, default fabric.buffer_bytes): nothing "
                         f"would ever be marked")


def min_rto_us(spec: "ScenarioSpec") -> float:
    """Least useful go-back-N timeout, us: the time before the first ACK can possibly arrive.

    = (ack_every_pkts full data frames + one ACK frame) x 8 / host_link_bps: the
    requester serializes ``ack_every_pkts`` frames, the responder acknowledges the
    last and its ACK serializes back, with empty queues and no switch latency (a
    lower bound: store-and-forward hops and queueing only add). A timeout below
    this fires before any ACK can come back, so every packet is retransmitted.
    """
    from traffic import wire
    from traffic.transport import ACK_FRAME_BYTES, wire_bytes

    t = spec.transport
    data_frame = wire_bytes(wire.BTH_BYTES + t.payload_bytes + wire.ICRC_BYTES)
    return (t.ack_every_pkts * data_frame + ACK_FRAME_BYTES) * 8 / spec.fabric.host_link_bps * 1e6


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names allowed at ``loc`` (the parent of an extra key)."""
    m: Any = model
    mapping = False  # the previous field maps names to models (tenants: name -> TenantSpec): skip the name
    for part in loc:
        if isinstance(part, int) or mapping:
            mapping = False
            continue
        f = m.model_fields.get(part)
        if f is None:
            return []
        ann = f.annotation
        if getattr(ann, "__origin__", None) is dict:
            ann, mapping = ann.__args__[1], True
        cand = [a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not cand:
            return []
        m = cand[0]
    return sorted(m.model_fields)


_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PATH_MSG_RE = re.compile(r"^[a-z_]+\.[A-Za-z0-9_.-]+:? ")


def _error_lines(err: ValidationError) -> list[str]:
    """``PATH: what is wrong`` per bad key path of ``err`` (see :func:`format_validation_error`)."""
    by_path: dict[str, list[str]] = {}
    for e in err.errors():
        # pydantic adds union/validator branch names to loc; keep only real keys
        loc = tuple(p for p in e["loc"] if isinstance(p, int) or _KEY_RE.match(p))
        if e["type"] == "extra_forbidden" and e["loc"] and loc[-1:] != e["loc"][-1:]:
            loc += (e["loc"][-1],)  # the unknown key itself, however it is spelled (work-load, max-bytes)
        path = ".".join(str(p) for p in loc) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        # a check naming its own key path: anywhere at the top level; in a section as "SECTION.KEY: ..."
        # (a plugin's keys, testbed.spec.plugins)
        section = re.match(r"^([a-z_]+): ", msg)
        if _PATH_MSG_RE.match(msg) and (not loc or re.match(re.escape(path) + r"\.[A-Za-z0-9_.-]+: ", msg)):
            path, msg = msg.split(" ", 1)
            path = path.rstrip(":")
        elif not loc and section and section.group(1) in ScenarioSpec.model_fields:  # "jobs: ..." about a section
            path, msg = section.group(1), msg[section.end():]
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(ScenarioSpec, loc[:-1])
            msg = f"unknown key{did_you_mean(str(loc[-1]) if loc else '', allowed)}; allowed keys here: {', '.join(allowed)}"
        elif "input" in e and e["type"] != "missing" and not isinstance(e["input"], dict):
            msg = f"{msg} (got {_clip(repr(e['input']), 80)})"
        by_path.setdefault(path, [])
        if msg not in by_path[path]:
            by_path[path].append(msg)
    return [_clip(f"{path}: {' or '.join(msgs)}", 400) for path, msgs in by_path.items()]


def format_validation_error(err: ValidationError, source: str = "scenario",
                            more_lines: tuple[str, ...] = ()) -> str:
    """One message naming each bad key path, the bad value and what is allowed (``more_lines``: lines found
    by validating again without the unknown keys, :func:`parse_scenario`)."""
    lines = _error_lines(err)
    lines += [ln for ln in more_lines if ln not in lines]
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
        raise ScenarioError(format_validation_error(e, source, _errors_past_unknown_keys(data, e))) from None


_UNKNOWN_KEY_RE = re.compile(r"^(?:Value error, )?([A-Za-z0-9_.-]+): unknown key")


def _errors_past_unknown_keys(data: dict, err: ValidationError, rounds: int = 5) -> tuple[str, ...]:
    """The other errors of the sections whose check stopped at an unknown key (a plugin section's keys are
    checked before its fields, testbed.spec.plugins.named_blocks): validate a copy without those keys
    again, up to ``rounds`` times, and return the new lines. ``fabric: {foo: 1, spines: -1}`` then names
    both ``fabric.foo`` and ``fabric.spines``."""
    import copy

    data, lines = copy.deepcopy(data), []
    for _ in range(rounds):
        paths = [m.group(1) for e in err.errors() if (m := _UNKNOWN_KEY_RE.match(e["msg"]))]
        if not paths or not all(_drop_key(data, p) for p in paths):
            break
        try:
            ScenarioSpec.model_validate(data)
            break
        except ValidationError as e:
            err = e
            lines += [ln for ln in _error_lines(e) if ln not in lines]
    return tuple(lines)


def _drop_key(data: Any, dotted: str) -> bool:
    """Remove the key at ``dotted`` (``fabric.foo``, ``jobs.0.foo``) from nested mappings/lists; False when
    it is not there."""
    *parents, leaf = dotted.split(".")
    node = data
    for p in parents:
        if isinstance(node, list) and p.isdigit() and int(p) < len(node):
            node = node[int(p)]
        elif isinstance(node, dict) and p in node:
            node = node[p]
        else:
            return False
    if isinstance(node, dict) and leaf in node:
        del node[leaf]
        return True
    return False


def read_scenario(path: Union[str, Path]) -> ScenarioSpec:
    """Read a scenario YAML file and validate it against the schema (what needs a workload's plan is
    checked after: testbed.workloads.load_scenario, which a run reads its file with).

    Relative ``workload.simai.path`` (and ``jobs[].workload.simai.path``) and ``workload.chakra`` paths are
    resolved against the scenario file's folder; a SimAI path must name a regular file. Raises ScenarioError
    (bad content or YAML) or FileNotFoundError.
    """
    p = Path(path)
    if p.exists() and not p.is_file():
        raise ScenarioError(f"{p}: not a regular file")
    from traffic.workloads.files import UnreadableFile, read_bounded

    try:
        data = read_bounded(p, MAX_SCENARIO_BYTES)  # never blocks (/proc/kmsg), never reads a huge file whole
    except UnreadableFile as e:
        raise ScenarioError(str(e)) from None
    if len(data) > MAX_SCENARIO_BYTES:
        raise ScenarioError(f"{p}: more than {MAX_SCENARIO_BYTES} bytes; a scenario file may have at most "
                            f"{MAX_SCENARIO_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    data = load_yaml(text, str(p))
    spec = parse_scenario(data, str(p))
    if spec.workload is not None:
        spec = spec.model_copy(update={"workload": spec.workload.resolved(p, "workload")})
    return resolved_jobs(spec, p)
