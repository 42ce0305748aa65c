"""A SimAI/AICB file read for its replay (testbed.workloads.simai.plan): the file's ops and compute,
its world size (``workload.simai.all_gpus``, the file's ``all_gpus:``, or the fabric's hosts) and how many
GPUs each host is, the header keys assumed, and the pipeline's micro-batches. Errors are ScenarioError
naming the key (and the file's line) and what would fit."""
from __future__ import annotations

from typing import Optional, Tuple

from testbed.spec.scenario import ScenarioError, ScenarioSpec
from traffic.workloads.job_mapping import counted


def load_file(spec: ScenarioSpec):
    from traffic.workloads.simai import SimaiFormatError, collective_ops, iteration_compute_ns, load_simai
    s, key = spec.workload.simai, "workload.simai.path"
    try:
        wl = load_simai(s.path)
        ops = collective_ops(wl, collectives=None, size_scale=s.size_scale, time_unit=s.time_unit)
        total_ns = iteration_compute_ns(wl, s.time_unit)
    except (SimaiFormatError, ValueError) as e:       # malformed, or a policy collective_ops cannot order
        raise ScenarioError(f"{key}: {e}") from None
    except OSError as e:
        raise ScenarioError(f"{key}: cannot read {s.path}: {e.strerror or e}") from None
    return wl, ops, total_ns


def world_size(spec: ScenarioSpec, wl, n_hosts: Optional[int] = None) -> Tuple[int, str, dict]:
    """(all_gpus, where it came from, the header keys assumed -> value) of a SimAI replay on ``n_hosts`` hosts
    (default the fabric's): ``workload.simai.all_gpus``, else the file's, else the host count (module
    docstring). Raises ScenarioError naming ``workload.simai.all_gpus`` when the value taken is not a positive
    multiple of the file's model_parallel_NPU_group x pp."""
    from traffic.workloads.simai import TOLERATED_KEYS
    s, h = spec.workload.simai, wl.header
    n = spec.fabric.n_hosts if n_hosts is None else n_hosts
    if s.all_gpus is not None:
        all_gpus, source = s.all_gpus, "workload.simai.all_gpus"
    elif h.all_gpus is not None:
        all_gpus, source = h.all_gpus, "the file"
    else:
        all_gpus, source = n, "the fabric's hosts"
    mp = h.tp_size * h.pp_size
    if all_gpus % mp:
        raise ScenarioError(
            f"{world_size_key(s, all_gpus, source)} is not a multiple of the file's model_parallel_NPU_group x pp "
            f"= {h.tp_size} x {h.pp_size}: allowed a positive multiple of {mp}; on {counted(n, 'host')} e.g. "
            f"workload.simai.all_gpus: {mp * n} (each host a server of {mp} GPUs), or a fabric of a multiple of "
            f"{mp} hosts")
    assumed = {k: TOLERATED_KEYS[k] for k in h.absent if k != "all_gpus"}
    if "all_gpus" in h.absent and s.all_gpus is None:
        assumed["all_gpus"] = all_gpus
    return all_gpus, source, assumed


def world_size_key(s, all_gpus: int, source: str) -> str:
    """The start of a refusal of the world size ``all_gpus`` taken from ``source`` (:func:`world_size`): the
    scenario's ``workload.simai.all_gpus: N`` when it set the value (the file ``s.path`` named as context),
    else the file's header line ``workload.simai.path: FILE:1: all_gpus N`` (the fabric's host count when
    the file has no ``all_gpus:``: the key to set is then workload.simai.all_gpus)."""
    if source == "workload.simai.all_gpus":
        return f"workload.simai.all_gpus: {all_gpus} (replaying {s.path})"
    if source == "the file":
        return f"workload.simai.path: {s.path}:1: all_gpus: {all_gpus}"
    return f"workload.simai.all_gpus: {all_gpus} (the fabric's hosts; {s.path} has no all_gpus:)"


def reader_block(spec: ScenarioSpec, wl, all_gpus: int, source: str, assumed: dict) -> Tuple[dict, Optional[str]]:
    """summary.json's ``replay.reader`` (the world size and its source, the header keys the file leaves out,
    the values assumed, the BROADCAST entries SimAI skips) and the one warning line to print (None when
    nothing was assumed or overridden)."""
    from traffic.workloads.simai import SIMAI_SKIPS
    s, h = spec.workload.simai, wl.header
    skips = [f"line {r.line} {r.layer_name}:{ph}" for r in wl.rows for ph in ("fwd", "ig", "wg")
             if getattr(r, f"{ph}_collective").split("_")[0] in SIMAI_SKIPS]
    block = {"all_gpus": all_gpus, "all_gpus_from": source, "file_all_gpus": h.all_gpus,
             "absent_keys": list(h.absent), "assumed": assumed, "simai_skips": skips}
    parts = []
    if assumed:
        given = [f"all_gpus {all_gpus} ({source})"] if "all_gpus" in h.absent else []
        rest = [f"{k if k != 'model_parallel_NPU_group' else 'TP'} {v}" for k, v in assumed.items() if k != "all_gpus"]
        parts.append(f"{s.path} has no {', '.join(k + ':' for k in h.absent)}; assumed "
                     + ", ".join(given + ([", ".join(rest) + " (AICB's defaults; SimAI warns 'Input workload format "
                                           "mismatch' and runs on)"] if rest else [])))
    if s.all_gpus is not None and h.all_gpus is not None and s.all_gpus != h.all_gpus:
        parts.append(f"all_gpus {s.all_gpus} from workload.simai.all_gpus instead of the file's {h.all_gpus} (as "
                     "SimAI takes its topology's GPU count)")
    if not parts:
        return block, None
    text = "simai: " + "; ".join(parts) if assumed else f"simai: {s.path}: " + "; ".join(parts)
    block["warning"] = text
    return block, "warning: " + text


def all_gpus_of(spec: ScenarioSpec, wl, notes: list, n_hosts: Optional[int] = None,
              scopes: Tuple[str, ...] = ()) -> Tuple[int, int, dict]:
    """(all_gpus, GPUs per host, where all_gpus came from (:func:`world_size`), summary.json's
    ``replay.reader``) on ``n_hosts`` hosts (default the
    fabric's); ScenarioError when the job does not fit them, with the mappings that fit (:func:`_fit_hint`,
    ``scopes``: the file's group scopes)."""
    from traffic.workloads.placement import PlacementError, gpus_per_host
    s, f = spec.workload.simai, spec.fabric
    n = spec.fabric.n_hosts if n_hosts is None else n_hosts
    all_gpus, source, assumed = world_size(spec, wl, n)
    reader, warning = reader_block(spec, wl, all_gpus, source, assumed)
    if warning:
        notes.append(warning)
    try:
        per_host = gpus_per_host(all_gpus, n)
    except PlacementError:
        raise ScenarioError(
            f"{world_size_key(s, all_gpus, source)} but the fabric has {counted(n, 'host')} "
            f"({f.describe()}); the testbed runs one rank per host, or all_gpus / hosts ranks per host (a "
            f"server sharing one NIC); {fit_hint_of(all_gpus, wl.header, n, scopes)}") from None
    if per_host > 1:
        notes.append(f"{s.path}: {all_gpus} GPUs on {counted(n, 'host')}: each host is a server of {per_host} "
                     f"GPUs sharing one NIC; groups inside a server run in its scale-up domain (modelled at "
                     f"{s.scale_up_ratio:g} x host_link_bps)")
    return all_gpus, per_host, source, reader


def fit_hint_of(all_gpus: int, header, n_hosts: int, scopes: Tuple[str, ...]) -> str:
    """The mappings that fit the fabric's ``n_hosts`` hosts, for a refusal (traffic.workloads.job_mapping)."""
    from traffic.workloads.job_mapping import JobShape, fit_hint
    return fit_hint(JobShape(all_gpus, header.tp_size, header.ep_size, header.pp_size), n_hosts, scopes)


def micro_batches(spec: ScenarioSpec, wl, notes: list) -> Tuple[int, int]:
    """(pp stages, micro-batches); ScenarioError when the file's pipeline cannot run."""
    s, h = spec.workload.simai, wl.header
    p = h.pp_size
    m = s.micro_batches if s.micro_batches is not None else (h.ga if p > 1 else 1)
    if p > 1:
        if h.policy not in ("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD"):
            raise ScenarioError(f"workload.simai.path: {s.path}:1: pp {p} with policy {h.policy}: pipelines run "
                                "for HYBRID_TRANSFORMER[_FWD_IN_BCKWD] files only (forward and backward passes)")
        if h.pp_comm_bytes == 0:
            raise ScenarioError(f"workload.simai.path: {s.path}:1: pp {p} but pp_comm is 0 or missing: the "
                                "stage-to-stage transfer size is needed (AICB writes pp_comm: 2 x micro_batch x "
                                "seq_length x hidden_size; SimAI warns 'format mismatch' without it)")
        notes.append(f"{s.path}: pipeline of {p} stages, {counted(m, 'micro-batch', 'micro-batches')} per iteration ("
                     f"{'workload.simai.micro_batches' if s.micro_batches is not None else 'the header ga'}), "
                     f"schedule {s.pp_schedule}; stage-to-stage transfers of {h.pp_comm_bytes} B x size_scale")
    return p, m
