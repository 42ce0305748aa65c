"""manifest.json: what a run was (scenario, versions, capabilities, backends, derived settings).

Written once, right after the run directory is made and before the fabric is
built, so even a run that fails at once says what it was.
"""
from __future__ import annotations

import platform
import subprocess
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from testbed.measure.link_model import link_model
from testbed.workloads.plan import plan_algorithms
from testbed.results.rundir import RunDir
from testbed.pipeline.context import RunContext
from testbed.spec.rto import manifest_rto
from testbed.spec.transport import congestion_control_manifest
from testbed.workloads import workload_for

#: packages whose versions the manifest records
VERSIONED_PACKAGES = ("aifabric-testbed", "os-ken", "scapy", "pandas", "pyroute2", "pydantic", "mininet")


def _git_commit() -> str | None:
    try:
        res = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.strip() or None


def versions() -> dict:
    """Python, kernel, git commit of this checkout and :data:`VERSIONED_PACKAGES` (None when absent)."""
    out = {"python": platform.python_version(), "kernel": platform.release(), "git_commit": _git_commit()}
    for pkg in VERSIONED_PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def ecn_marker_backend(spec, caps) -> str:
    """The ECN marker this run uses: ``red (sch_red ...)`` (``congestion.ecn.marker`` resolved to red) or
    ``nftables (libnftables)``/``nftables (nft -f)`` when ``congestion.ecn`` is on, else ``off (the machine offers <caps.ecn_marker>)``."""
    if spec.congestion.ecn is None:
        return f"off (the machine offers {caps.ecn_marker})"
    if spec.congestion.ecn.marker == "red":
        return "red (sch_red leaf of the lossless class)"
    from dataplane.nft import nft_backend
    return nft_backend()


def pfc_backend(spec) -> str:
    """How this run pauses the lossless class (dataplane/pfc_gate.py), or ``off``."""
    if not spec.congestion.pfc_on:
        return "off"
    return ("controller loop: tbf class gate over netlink + kick frame (switches); host NIC class gate + PFC "
            "frames (hosts)")


def build(ctx: RunContext, caps) -> dict:
    """manifest.json's content for a probed ``ctx`` and ``caps`` (testbed.host.capabilities.Capabilities).

    Raises ScenarioError (via testbed.measure.link_model.link_model) when the
    scenario asks for a link delay this kernel cannot add.
    """
    spec = ctx.spec
    workload = workload_for(spec)
    return {
        "run_id": ctx.run_id, "started_utc": ctx.started_utc,
        "scenario_path": str(Path(ctx.scenario_path).resolve()) if ctx.scenario_path else None,
        "scenario": spec.model_dump(mode="json"), "versions": versions(),
        "capabilities": caps.as_dict(), "backends": {"datapath": ctx.datapath, "ecn_marker": ecn_marker_backend(spec, caps),
                                                     "delay": caps.delay, "queues": spec.fabric.queue_backend,
                                                     "pfc": pfc_backend(spec)},
        "scale_factor": spec.scale_factor, "reference_link_bps": spec.reference_link_bps,
        "seed": spec.seed, "transport": asdict(ctx.transport), "payload_efficiency": ctx.efficiency,
        "rto": manifest_rto(spec),
        "congestion_control": congestion_control_manifest(spec),  # DCQCN: dilation, every value and its source
        "estimated_duration_s": round(workload.estimate_s(ctx.ops_plan), 1),
        # why the estimate may be short: the scenario can drop packets (None: it holds)
        "estimate_loss_note": workload.loss_note(ctx.ops_plan),
        "fidelity_checks_switched_off": spec.fidelity.switched_off(),
        "rank_groups": {op.group: [list(g) for g in op.groups] for op in ctx.ops_plan},  # scope -> concurrent groups
        "collectives": plan_algorithms(list(ctx.ops_plan)),  # collective, algorithm, busbw factor, size convention
        "link_model": link_model(spec, caps.delay),  # refuses a delay this kernel cannot add
        "ovs_send_buffer": ctx.send_buffer,
        "controller": ctx.controller,
        "cluster": cluster_block(ctx),
    }


def cluster_block(ctx: RunContext) -> dict | None:
    """The manifest's ``cluster`` block: the placement (policy, nodes per server, crossing links;
    topology.placement.Placement.summary) of the run's layout, None for a run on this machine only."""
    c = ctx.spec.cluster
    if c is None:
        return None
    from topology.placement import place
    return place(ctx.layout, c.servers, c.placement).summary(ctx.layout)


def write(ctx: RunContext, caps) -> dict:
    """Build the manifest (:func:`build`) and write it to ``ctx.run_dir/manifest.json``; return it."""
    manifest = build(ctx, caps)
    RunDir(ctx.run_dir).write_manifest(manifest)
    return manifest
