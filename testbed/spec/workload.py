"""The ``workload`` section: a size sweep, a SimAI/AICB file replay or a traffic pattern."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import BeforeValidator, Field, model_validator
from typing_extensions import Annotated

from testbed.spec.open_loop import OpenLoopSpec
from testbed.spec.pattern import PatternSpec
from testbed.spec.perftest import PerftestRunSpec
from testbed.spec.units import Count, SizeBytes, SpecModel, off_refusing_zero, off_to_none, refuse_bool
from testbed.spec.yaml_loader import ScenarioError
from traffic import collectives


def _on_off(v):
    """YAML 1.1 reads a bare on/off as true/false: take both spellings."""
    return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v


class SizeSweep(SpecModel):
    """Message sizes min_bytes, min_bytes*factor, ... up to max_bytes (nccl-tests -b/-e/-f); or ``values``,
    the sizes in run order (``testbed nccl``: the bytes nccl-tests runs for its -b/-e/-f/-i)."""

    min_bytes: SizeBytes = 65536
    max_bytes: SizeBytes = 4 * 1024 * 1024
    factor: Count = Field(2, ge=2, le=1024)
    #: the sizes in run order, instead of min_bytes/max_bytes/factor
    values: Optional[tuple[SizeBytes, ...]] = Field(None, min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _order(self) -> "SizeSweep":
        if self.values is not None:
            stray = sorted({"min_bytes", "max_bytes", "factor"} & self.model_fields_set)
            if stray:
                raise ValueError(f"workload.sizes.{stray[0]} and workload.sizes.values exclude each other: give one")
            return self
        if self.max_bytes < self.min_bytes:
            raise ValueError(f"workload.sizes.max_bytes = {self.max_bytes} is below min_bytes = {self.min_bytes}")
        return self

    def sizes(self) -> list[int]:
        if self.values is not None:
            return list(self.values)
        out, s = [], self.min_bytes
        while s <= self.max_bytes:
            out.append(s)
            s *= self.factor
        return out


class SimaiSpec(SpecModel):
    """Replay of a SimAI/AICB workload file (testbed.workloads.simai.plan, testbed.workloads.replay.run).

    ``size_scale`` multiplies every message size (time dilation: scale sizes by
    the same factor as link rates); ``time_unit`` is the unit of the file's
    compute times, which the format does not state (SimAI's ns-3 backend reads
    them as nanoseconds, hence the default). Every entry runs its collective
    over its group scope (TP, DP, EP, DP_EP in SimAI's rank layout) by
    ``workload.algorithm`` where registered for it, else the collective's
    default; ``all_gpus`` must be a multiple of the fabric's hosts (a host is
    a server of all_gpus / hosts GPUs; groups inside it run in its scale-up
    domain, modelled at ``scale_up_ratio`` x host_link_bps). ``compute_scale``:
    emulated / real compute time, ``auto`` = dilation x size_scale (the
    stretch of every transfer), ``off`` = no compute waits (collectives back to
    back), or a number. ``overlap``: ``on`` runs weight-gradient collectives
    concurrently with the compute that follows; ``off`` waits for every
    collective; ``compare`` runs ``iterations`` of each, alternating off/on,
    on/off, ... (a slow drift of the machine's speed then weighs on both
    alike); with overlap each group scope runs on its own stream, off runs every
    collective alone (testbed.workloads.replay.program). A file with pp > 1 runs its
    stages as a pipeline of ``micro_batches`` by ``pp_schedule`` (``1f1b`` or
    ``gpipe``), stage-to-stage transfers of the header's ``pp_comm`` bytes. Size-0 entries and one-rank groups are skipped with a note.
    ``all_gpus``: the world size when the file gives none (else the fabric's hosts) or to override it. The
    file is read and checked when the scenario is loaded, before anything
    touches the kernel.
    """

    path: str
    size_scale: float = Field(1.0, gt=0, le=1.0)
    time_unit: Literal["ns", "us"] = "ns"
    iterations: Count = Field(1, ge=1, le=1000)
    compute_scale: Annotated[Union[Literal["auto"], None, float], BeforeValidator(off_to_none),
                             BeforeValidator(refuse_bool)] = "auto"
    overlap: Annotated[Literal["on", "off", "compare"], BeforeValidator(_on_off)] = "off"
    #: scale-up (NVLink-like) rate inside a server / host_link_bps: H100 SXM NVLink 450 GB/s per direction
    #: against a 400 Gbit/s NIC is 9
    scale_up_ratio: float = Field(9.0, gt=0, le=1000, allow_inf_nan=False)
    #: pipeline schedule when the file's pp > 1 (traffic.workloads.pipeline_schedule)
    pp_schedule: Literal["1f1b", "gpipe"] = "1f1b"
    #: micro-batches per iteration; None: the file's ``ga`` when pp > 1 (AICB writes ga = num_microbatches), else 1
    micro_batches: Optional[Count] = Field(None, ge=1, le=256)
    #: world size (GPUs) of the replay; None: the file's ``all_gpus:``, else the fabric's hosts (SimAI takes
    #: its topology's GPU count); a positive multiple of the file's model_parallel_NPU_group x pp (checked
    #: with the file, testbed.workloads.simai.reader.world_size); over the file's value it wins, with a warning
    all_gpus: Optional[Count] = Field(None, ge=1, le=2**31 - 1)

    @model_validator(mode="after")
    def _positive_scale(self) -> "SimaiSpec":
        c = self.compute_scale
        if c is not None and c != "auto" and not (c > 0 and math.isfinite(c)):
            raise ValueError(f"workload.simai.compute_scale = {c!r}: allowed auto, off or a number > 0")
        return self


class ChakraSpec(SpecModel):
    """Replay of MLCommons Chakra execution traces, one file per rank (testbed.workloads.chakra.plan, testbed.workloads.chakra.run;
    docs/chakra.md).

    ``path``: a directory holding one ``<prefix>.<rank>.et`` set, or the prefix; rank r runs on host r.
    ``comm_groups``: ASTRA-sim's comm group JSON (process group name -> member ranks); without it the
    members of a group are the ranks whose trace runs collectives on it (Chakra's pg_extractor).
    ``size_scale`` multiplies every comm_size (time dilation, as ``workload.simai.size_scale``);
    ``compute_scale``: emulated / traced compute time, ``auto`` = dilation x size_scale, ``off`` = no
    compute waits, or a number. ``streams``: ``on`` gives every process group its own stream (NCCL's
    communicator; send/recv pairs share one more), so operations the dependencies leave independent
    run concurrently; ``off`` runs one fabric operation at a time. ``comm_size_means``: ``astra-sim``
    (default): a collective's comm_size is the data one rank holds when it starts, as ASTRA-sim's Ring
    takes it (an all-gather runs with nccl-tests' S = ranks x comm_size); ``nccl-tests``: comm_size is
    nccl-tests' S (docs/collectives.md). The files are read and checked when the scenario is loaded.
    """

    #: directory of one ``<prefix>.<rank>.et`` set, or the prefix (relative to the scenario file)
    path: str
    #: ASTRA-sim comm group JSON {group: [ranks]}; absent: members inferred from the traces
    comm_groups: Optional[str] = None
    #: on: a stream per process group (independent ops concurrent); off: one fabric op at a time
    streams: Annotated[Literal["on", "off"], BeforeValidator(_on_off)] = "on"
    #: astra-sim: comm_size = each rank's data at the start (ASTRA-sim's Ring); nccl-tests: comm_size = nccl-tests' S
    comm_size_means: Literal["astra-sim", "nccl-tests"] = "astra-sim"
    #: x every comm_size (time dilation)
    size_scale: float = Field(1.0, gt=0, le=1.0)
    #: x every duration_micros: auto = dilation x size_scale, off = no compute waits
    compute_scale: Annotated[Union[Literal["auto"], None, float], BeforeValidator(off_to_none),
                             BeforeValidator(refuse_bool)] = "auto"

    @model_validator(mode="after")
    def _positive_scale(self) -> "ChakraSpec":
        c = self.compute_scale
        if c is not None and c != "auto" and not (c > 0 and math.isfinite(c)):
            raise ValueError(f"workload.chakra.compute_scale = {c!r}: allowed auto, off or a number > 0")
        return self


def _resolve_simai(workload, p: Path, key: str):
    """``workload`` (a WorkloadSpec with ``simai``) with its file's path resolved against the scenario file
    ``p``'s folder; ScenarioError naming ``key``.simai.path when there is no such file, or it is a directory
    (one file is expected: SimAI and AICB write one workload per file; the directory's ``.txt`` files are
    named as a hint) or not a regular file."""
    sp = Path(workload.simai.path)
    if not sp.is_absolute():
        sp = (p.parent / sp).resolve()
    if sp.is_dir():
        try:
            txt = sorted(f.name for f in sp.iterdir() if f.suffix == ".txt" and f.is_file())
        except OSError:                              # unreadable directory: no hint
            txt = None
        hint = ("" if txt is None else f"; it holds {len(txt)} .txt file{'s' if len(txt) != 1 else ''}: name one "
                f"as the path, e.g. {str(sp / txt[0])!r}" if txt else "; it holds no .txt file")
        raise ScenarioError(f"{p}: {key}.simai.path: {str(sp)!r} is a directory; a SimAI/AICB workload file is "
                            f"expected (one workload per file){hint}")
    if not sp.exists():
        raise ScenarioError(f"{p}: {key}.simai.path: no such file {str(sp)!r}")
    if not sp.is_file():
        raise ScenarioError(f"{p}: {key}.simai.path: {str(sp)!r} is not a regular file; a SimAI/AICB workload "
                            "file is expected")
    return workload.model_copy(update={"simai": workload.simai.model_copy(update={"path": str(sp)})})


def _resolve_chakra(workload, p: Path):
    """``workload`` with a relative ``chakra.path`` and ``chakra.comm_groups`` resolved against the folder of the
    scenario file ``p``."""
    c = workload.chakra
    update = {key: str((p.parent / getattr(c, key)).resolve()) for key in ("path", "comm_groups")
              if getattr(c, key) is not None and not Path(getattr(c, key)).is_absolute()}
    return workload.model_copy(update={"chakra": c.model_copy(update=update)})



class WorkloadSpec(SpecModel):
    """What the hosts run: a size sweep of one collective, or a SimAI replay.

    ``collective`` and ``algorithm``: a registered pair (traffic.collectives.ALGORITHMS;
    default ring all-reduce); ``ranks``: a size sweep over the first ``ranks`` hosts (at least 2, at
    most the fabric's hosts; default all), the others idle. A SimAI replay takes each entry's collective from the
    file (its type) and runs it by ``algorithm``; ``collective`` is then refused.
    """

    collective: str = collectives.DEFAULT_COLLECTIVE
    algorithm: str = collectives.DEFAULT_ALGORITHM
    #: a size sweep runs over hosts 0..ranks-1 (nccl-tests -g); None: every host
    ranks: Optional[Count] = Field(None, ge=2)
    sizes: Optional[SizeSweep] = None
    simai: Optional[SimaiSpec] = None
    #: flows for load-balancing and congestion studies (testbed.spec.pattern)
    pattern: Optional[PatternSpec] = None
    #: Chakra execution traces (testbed.spec.workload.ChakraSpec)
    chakra: Optional[ChakraSpec] = None
    #: perftest runs (ib_write_bw, ib_send_lat, ...) over Soft-RoCE devices, one after the other
    #: (testbed.spec.perftest; needs rdma_rxe: the scripts/vm guest)
    perftest: Optional[list[PerftestRunSpec]] = None
    #: open-loop flows: Poisson arrivals at a load, sizes from a flow-size CDF (testbed.spec.open_loop)
    open_loop: Optional[OpenLoopSpec] = None
    #: NCCL's channels: each collective split into this many concurrent copies, each on its share of
    #: the data and its own QPs (traffic.collectives.channels); on a dual-plane fabric channel c
    #: runs on plane c mod planes
    channels: Count = Field(1, ge=1, le=32)
    iterations: Count = Field(5, ge=1, le=10_000)
    warmup_iterations: Count = Field(1, ge=0, le=100)
    #: a size sweep runs each size's timed iterations twice: out-of-place, then the same number again as
    #: nccl-tests' in-place half (the same bytes on the wire; testbed.results.nccl_table); ``testbed nccl`` sets it
    in_place: bool = False
    #: cap on the bytes each size may move in total (iterations are cut to fit, at least one
    #: runs); ``off`` (or null) = no cap
    max_bytes_per_size: Annotated[Optional[SizeBytes], BeforeValidator(off_refusing_zero)] = 64 * 1024 * 1024

    @model_validator(mode="after")
    def _one_source(self) -> "WorkloadSpec":
        if [self.sizes, self.simai, self.pattern, self.chakra, self.perftest, self.open_loop].count(None) != 5:
            raise ValueError("workload needs exactly one of workload.sizes, workload.simai, workload.pattern, "
                             "workload.chakra, workload.perftest or workload.open_loop")
        if self.in_place and self.sizes is None:
            raise ValueError("workload.in_place applies to a size sweep (workload.sizes): leave it out")
        if self.perftest is not None:
            stray = sorted(k for k in ("collective", "algorithm", "ranks", "channels") if k in self.model_fields_set)
            if stray:
                raise ValueError(f"workload.{stray[0]} applies to collectives; perftest runs (workload.perftest) "
                                 "name their own test, hosts, size_bytes and iterations: leave it out")
            return self
        if self.open_loop is not None:
            stray = sorted(k for k in ("collective", "algorithm", "ranks", "channels") if k in self.model_fields_set)
            if stray:
                raise ValueError(f"workload.{stray[0]} applies to collectives; open-loop flows (workload.open_loop) "
                                 "run on every host, over workload.open_loop.lanes queue pairs per pair: leave it out")
            return self
        if self.pattern is not None:
            if "channels" in self.model_fields_set:
                raise ValueError(f"workload.channels = {self.channels} applies to collectives; a pattern splits each "
                                 "flow over queue pairs with workload.pattern.qps (or a flow's own qps)")
            stray = sorted(k for k in ("collective", "algorithm", "ranks") if k in self.model_fields_set)
            if stray:
                raise ValueError(f"workload.{stray[0]} applies to collectives (workload.sizes, workload.simai); "
                                 "a pattern (workload.pattern) runs flows: leave it out")
            return self
        if self.simai is not None or self.chakra is not None:
            what = "a SimAI replay" if self.simai is not None else "a Chakra replay"
            if self.ranks is not None:
                raise ValueError(f"workload.ranks = {self.ranks} applies to a size sweep (workload.sizes); {what} "
                                 "takes its groups from the file: leave it out")
            if "collective" in self.model_fields_set:
                raise ValueError(f"workload.collective = {self.collective!r} applies to a size sweep "
                                 f"(workload.sizes); {what} takes each entry's collective from the file: "
                                 "leave it out")
            if not any(a == self.algorithm for _, a in collectives.ALGORITHMS):
                raise ValueError(f"workload.algorithm = {self.algorithm!r} is not registered for any collective: "
                                 f"allowed {', '.join(sorted({a for _, a in collectives.ALGORITHMS}))}")
            return self
        if self.collective not in collectives.collectives():
            raise ValueError(f"workload.collective = {self.collective!r} has no registered algorithm: allowed "
                             f"{', '.join(collectives.collectives())}")
        if (self.collective, self.algorithm) not in collectives.ALGORITHMS:
            raise ValueError(f"workload.algorithm = {self.algorithm!r} is not registered for workload.collective "
                             f"{self.collective!r}: allowed {', '.join(collectives.names(self.collective))}")
        return self

    @property
    def qp_channels(self) -> int:
        """Queue pairs per peer and stream the agents start with for this section: ``channels``; a pattern's
        widest flow's ``qps`` (testbed.spec.pattern.PatternSpec.max_qps)."""
        if self.open_loop is not None:
            return self.open_loop.lanes
        return self.pattern.max_qps if self.pattern is not None else self.channels

    def resolved(self, scenario_path: Path, key: str) -> "WorkloadSpec":
        """This section with the files it names (``simai.path``; ``chakra.path`` and ``comm_groups``) resolved
        against the folder of the scenario file ``scenario_path``. Raises ScenarioError naming ``key``.simai.path
        when the SimAI file is missing, a directory or not a regular file."""
        if self.simai is not None:
            return _resolve_simai(self, scenario_path, key)
        if self.chakra is not None:
            return _resolve_chakra(self, scenario_path)
        if self.open_loop is not None and not self.open_loop.is_builtin() and not Path(self.open_loop.cdf).is_absolute():
            cdf = str((scenario_path.parent / self.open_loop.cdf).resolve())
            return self.model_copy(update={"open_loop": self.open_loop.model_copy(update={"cdf": cdf})})
        return self

    def files(self) -> dict[str, dict[str, str]]:
        """The files this section names, ``{section: {key: path}}`` (``simai.path``; ``chakra.path`` and
        ``comm_groups`` when set); {} for a section that names none."""
        if self.simai is not None:
            return {"simai": {"path": self.simai.path}}
        if self.chakra is not None:
            return {"chakra": {k: getattr(self.chakra, k) for k in ("path", "comm_groups")
                               if getattr(self.chakra, k) is not None}}
        if self.open_loop is not None and not self.open_loop.is_builtin():
            return {"open_loop": {"cdf": self.open_loop.cdf}}
        return {}

    def check_on_fabric(self, spec) -> None:
        """The hosts this section names exist on scenario ``spec``'s fabric (testbed.spec.hosts.host_infos): a
        pattern's flows fit it (traffic.patterns.build_flows), perftest runs name its hosts
        (testbed.spec.perftest.check_runs). ValueError naming the key."""
        from testbed.spec.hosts import host_infos

        if self.pattern is not None:
            from traffic.patterns import build_flows
            build_flows(self.pattern, host_infos(spec.fabric.layout_preview()), spec.seed)
        if self.perftest is not None:
            from testbed.spec.perftest import check_runs
            check_runs(self.perftest, [h.name for h in host_infos(spec.fabric.layout_preview())])
