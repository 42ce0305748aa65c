"""The ``controller``, ``load_balance`` and ``output`` sections."""
from __future__ import annotations

import dataclasses
from typing import Literal, Optional

from pydantic import ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

from controllers import lb
from testbed.spec import plugins
from testbed.spec.pcap import PcapSpec
from testbed.spec.units import SizeBytes, SpecModel


class ControllerSpec(SpecModel):
    """The OpenFlow controller process (docs/controller.md).

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
    The other keys are the chosen policy's own (its ``Settings``, controllers.lb.settings_class; a key
    of another policy is refused): ``adaptive`` (controllers/lb/adaptive.py) starts as ``ecmp`` and moves
    hash buckets from hot uplinks to cool ones during the run; its keys ``poll_period_ms`` (20..5000,
    default 100: port and bucket counters polled), ``hot_threshold`` (utilization of a port's rate, > 0
    and <= 1, default 0.8: a group is rebalanced when a port reaches it), ``min_dwell_ms`` (a group's
    freeze after a change, at least 2 polls, at most 60000, default 500: the hysteresis that keeps it
    from flapping).

    ``hash_basis`` and ``selection_method`` set how every select group hashes, whatever the policy
    (controllers.lb.Hashing; docs/parallel_links.md): ``hash_basis`` ``per_tier`` (default: one basis
    per tier of the Clos), ``per_switch`` (every switch its own seed, its datapath id, as real switches
    are seeded per box to avoid hash polarization) or ``same`` (one basis everywhere: shows
    polarization); ``selection_method`` ``hash`` (default: OVS hashes the policy's fields,
    highest-random-weight bucket) or ``dp_hash`` (the datapath's 5-tuple hash picks ``hash mod n`` of
    equal buckets, as a switch ASIC indexes its ECMP members; only with ``ecmp`` and ``weighted``, and
    not with ``transport.entropy: spray``, whose path tracing cannot follow the recirculation).
    """

    #: the policy's keys are kept as extra keys (checked in :meth:`_policy_keys`, dumped back as written)
    model_config = ConfigDict(extra="allow")

    policy: str = lb.DEFAULT_POLICY
    weights: dict[str, StrictInt] = {}
    hash_basis: Literal["per_tier", "per_switch", "same"] = lb.DEFAULT_HASH_BASIS
    selection_method: Literal["hash", "dp_hash"] = lb.DEFAULT_SELECTION_METHOD

    @field_validator("policy")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in lb.POLICIES:
            raise ValueError(f"unknown policy {v!r}; allowed: {', '.join(lb.names())}")
        return v

    @model_validator(mode="before")
    @classmethod
    def _policy_keys(cls, data):
        """Check the keys besides ``policy`` and ``weights`` against the chosen policy's settings
        (testbed.spec.plugins.checked): a key no policy has is unknown, one of another policy refused."""
        if not isinstance(data, dict):
            return data
        owners = {}  # key -> the policies that have it
        for name in lb.names():
            for k in plugins.keys(lb.settings_class(name)):
                owners.setdefault(k, []).append(name)
        out, given = {}, {}
        for k, v in data.items():
            if k in cls.model_fields:
                out[k] = v
            elif k not in owners:
                raise ValueError(f"load_balance.{k}: unknown key; allowed keys here: "
                                 f"{', '.join(sorted([*cls.model_fields, *owners]))}")
            elif v is not None:
                given[k] = v
        policy = out.get("policy", lb.DEFAULT_POLICY)
        if policy not in lb.POLICIES:
            return out  # the policy's own validator names it
        own = lb.settings_class(policy)
        foreign = [k for k in given if k not in plugins.keys(own)]
        if foreign:
            allowed = sorted({p for k in foreign for p in owners[k]})
            raise ValueError(f"{', '.join(foreign)}: only for policy {' or '.join(allowed)}, not {policy!r}")
        return {**out, **plugins.checked(own, given, "load_balance")}

    @model_validator(mode="after")
    def _dp_hash_policy(self) -> "LoadBalanceSpec":
        lb.check_hashing(self.policy, self.hashing)
        return self

    @property
    def hashing(self) -> lb.Hashing:
        """How every select group hashes (controllers.lb.Hashing)."""
        return lb.Hashing(self.hash_basis, self.selection_method)

    @property
    def settings(self):
        """The policy's settings: its ``Settings`` (controllers.lb.settings_class) with the scenario's keys."""
        return lb.settings_class(self.policy)(**(self.model_extra or {}))

    @property
    def adaptive(self) -> dict | None:
        """The adaptive policy's settings (defaults filled in) as a dict; None for another policy."""
        if self.policy not in lb.ADAPTIVE_POLICIES:
            return None
        return dataclasses.asdict(self.settings)


#: nccl-tests' data types (src/common.cu test_typenames) -> bytes per element (src/common.h wordSize)
NCCL_TYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2, "float": 4,
                   "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}
#: nccl-tests' reduction ops (src/common.cu test_opnames)
NCCL_OPS = ("sum", "prod", "max", "min", "avg", "mulsum")


class NcclOutputSpec(SpecModel):
    """How nccl-tests' table and JSON are written (``output.table: nccl``; testbed.results.nccl_table).

    ``datatype`` (nccl-tests ``-d``): the ``type`` column and the element size of ``count``; ``op``
    (``-o``): the ``redop`` column of the reducing collectives (the bytes moved are the same for every
    op); ``per_iter`` (``-I 1``): per-iteration columns and times; ``per_iter_skip`` (``-K``): leading
    iterations left out of the per-iteration statistics; ``json_path`` (``-J``): nccl-tests' JSON file
    (written once the run's tables are; relative: to the current directory; its directory must exist and be
    writable, checked before anything is built); ``min_bytes``, ``max_bytes``, ``step_factor``,
    ``step_bytes`` (``-b``, ``-e``, ``-f``, ``-i`` as given; ``testbed nccl`` sets them): what the
    ``# nThread`` line and the JSON's ``config`` report, as nccl-tests prints its options (src/util.cu
    writeDeviceReport: the factor when above 1, else the step bytes); unset: the smallest and largest
    size run and their step; ``argv``: the command line recorded as the JSON's ``args``."""

    #: nccl-tests -d: the type column and count's element size
    datatype: Literal[tuple(NCCL_TYPE_BYTES)] = "float"  # type: ignore[valid-type]
    #: nccl-tests -o: the redop column of all-reduce, reduce-scatter and send/recv
    op: Literal[NCCL_OPS] = "sum"  # type: ignore[valid-type]
    #: nccl-tests -I 1: per-iteration columns in the table, per-iteration times in the JSON
    per_iter: bool = False
    #: nccl-tests -K: leading iterations left out of the per-iteration statistics
    per_iter_skip: int = Field(0, ge=0, le=10_000)
    #: nccl-tests -J: nccl-tests' JSON file (FILE.0, FILE.1, ... when it exists; relative: to the current
    #: directory); null: none
    json_path: Optional[str] = None
    #: nccl-tests -b as given: the printed minBytes; null: the smallest size run
    min_bytes: Optional[SizeBytes] = None
    #: nccl-tests -e as given: the printed maxBytes; null: the largest size run
    max_bytes: Optional[SizeBytes] = None
    #: nccl-tests -f as given: printed as step: F(factor) when above 1; null: with step_bytes null, the sizes' own step
    step_factor: Optional[int] = Field(None, ge=1)
    #: nccl-tests -i as given: printed as step: B(bytes) when step_factor is 1 or null; null: 1 MiB (nccl-tests)
    #: if step_factor is set
    step_bytes: Optional[SizeBytes] = None
    #: the command line, written as the JSON's args
    argv: tuple[str, ...] = ()


class OutputSpec(SpecModel):
    """``sample_period_ms``: switch queue sampling period; ``table``: the printed size table, ``testbed``
    (ours) or ``nccl`` (nccl-tests' columns, testbed.results.nccl_table; what ``testbed nccl`` prints);
    ``nccl``: that table's type, op, per-iteration columns and JSON file (:class:`NcclOutputSpec`);
    ``pcap``: ports to capture with tcpdump (testbed.spec.pcap.PcapSpec; off when absent)."""

    sample_period_ms: float = Field(10.0, ge=1.0, le=1000.0)
    table: Literal["testbed", "nccl"] = "testbed"
    nccl: NcclOutputSpec = NcclOutputSpec()
    pcap: Optional[PcapSpec] = None
