"""How a SimAI job's ranks map onto the fabric's hosts, and which mappings fit when they do not.

A job is its world size and parallel sizes (:class:`JobShape`: all_gpus, TP, EP, pp; DP = all_gpus /
(TP x pp), DP_EP = DP / EP), its groups SimAI's layout per pipeline stage
(traffic.workloads.parallel_groups). On a fabric of ``n_hosts`` hosts, rank r runs on host r // G,
G = all_gpus / n_hosts (traffic.workloads.placement): a group whose ranks all sit on one host runs in that
host's scale-up domain (a timed wait in the replay), a group with one rank per host runs on the fabric,
the concurrent groups spanning the same hosts folded into one host group carrying their bytes.

A job **fits** ``n_hosts`` hosts when, as testbed.workloads.simai.plan places it:

- G is a whole number >= 1 (all_gpus a multiple of the hosts);
- with pp > 1 every stage fills whole hosts (all_gpus / pp a multiple of G);
- the world size is a multiple of TP x pp and DP a multiple of EP (SimAI's layout);
- every group of every scope the file uses, and every stage-to-stage (PP) pair, lies inside one host or
  has one rank per host, and the host groups of a scope are equal or disjoint;
- (for a proposed mapping) at least one of those scopes crosses the fabric, else the replay has nothing
  to put on it.

Stages are host-aligned when they fit, so stage 0 and the first stage boundary stand for all of them.
A job that does not fit is refused before anything is built; :func:`fitting` proposes the nearest host
counts (divisors of all_gpus) on which it fits and the largest world size (``workload.simai.all_gpus``)
that fits the fabric's hosts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Tuple

from traffic.workloads.parallel_groups import SCOPES, stage_groups
from traffic.workloads.placement import PlacementError, gpus_per_host, place

#: at most this many candidate host counts or world sizes are tried each way (each is one placement)
MAX_TRIES = 64


def counted(count: int, word: str, plural: str = "") -> str:
    """``count`` and ``word``, singular for 1 (``1 GPU``, ``2 GPUs``); ``plural`` when adding s does not make
    it (``file entries``)."""
    return f"{count} {word if count == 1 else (plural or word + 's')}"


@dataclass(frozen=True)
class JobShape:
    """World size and parallel sizes of a SimAI job (the header's ``all_gpus``, ``model_parallel_NPU_group``,
    ``ep``, ``pp``)."""

    all_gpus: int
    tp: int
    ep: int
    pp: int

    @property
    def dp(self) -> int:
        return self.all_gpus // (self.tp * self.pp)

    @property
    def stage_ranks(self) -> int:
        return self.all_gpus // self.pp


def _placements(shape: JobShape, per_host: int, scopes: Iterable[str]) -> dict:
    """scope -> GroupPlacement of stage 0 (and ``PP`` -> the first stage boundary's pairs when pp > 1);
    ValueError or PlacementError naming what does not place."""
    a, t, e, p = shape.all_gpus, shape.tp, shape.ep, shape.pp
    out = {sc: place(stage_groups(sc, 0, a, t, e, p), per_host) for sc in scopes}
    if p > 1:
        out["PP"] = place(tuple((g[0], g[1]) for g in stage_groups("PP", 0, a, t, e, p)), per_host)
    return out


def misfit(shape: JobShape, n_hosts: int, scopes: Iterable[str], need_fabric: bool = False) -> Optional[str]:
    """Why ``shape`` does not fit ``n_hosts`` hosts with the file's group ``scopes`` (module docstring), None
    when it fits; ``need_fabric``: also require a scope on the fabric."""
    try:
        per_host = gpus_per_host(shape.all_gpus, n_hosts)
    except PlacementError as e:
        return str(e)
    if shape.pp > 1 and shape.stage_ranks % per_host:
        return (f"pp {shape.pp} stages of {counted(shape.stage_ranks, 'GPU')} do not fill whole hosts of "
                f"{per_host} GPUs")
    try:
        placed = _placements(shape, per_host, scopes)
    except (ValueError, PlacementError) as e:
        return str(e)
    if need_fabric and not any(pl.where == "fabric" for pl in placed.values()):
        return "every group inside one host: nothing crosses the fabric"
    return None


def _plausible(shape: JobShape, per_host: int, scopes: Tuple[str, ...]) -> bool:
    """A quick necessary condition for ``shape`` to fit hosts of ``per_host`` ranks, from the layout's formulas
    (traffic.workloads.parallel_groups): the world size and stages as :func:`misfit` checks them, and every
    scope's groups, ranks stride apart in blocks of stride x count consecutive ranks, either inside one host
    (per_host a multiple of the block) or one rank per host (stride >= per_host). :func:`misfit` decides."""
    a, t, e, p, g = shape.all_gpus, shape.tp, shape.ep, shape.pp, per_host
    if a % (t * p) or (a // (t * p)) % e or a % g or (p > 1 and (a // p) % g):
        return False
    d = a // (t * p)
    layout = {"TP": (1, t), "DP": (t, d), "EP": (t, e), "DP_EP": (t * e, d // e)}
    return all(c == 1 or g % (stride * c) == 0 or stride >= g
               for stride, c in (layout[sc] for sc in scopes if sc in layout))


def fitting(shape: JobShape, n_hosts: int, scopes: Iterable[str]) -> dict:
    """Mappings that fit (module docstring): ``hosts_below`` / ``hosts_above``: the nearest host counts below
    / above ``n_hosts`` (divisors of all_gpus) on which the job fits with something on the fabric;
    ``all_gpus``: the largest world size up to the file's that fits ``n_hosts`` hosts. Each None when none
    does (candidates are screened by :func:`_plausible`, then at most :data:`MAX_TRIES` each placed)."""
    scopes = tuple(scopes)
    a = shape.all_gpus
    divisors = [d for d in range(1, math.isqrt(a) + 1) if a % d == 0]
    divisors = sorted(set(divisors + [a // d for d in divisors]))

    def first(candidates, ok):
        return next((c for c in list(candidates)[:MAX_TRIES] if ok(c)), None)

    def on(h):
        return misfit(shape, h, scopes, need_fabric=True) is None

    below = first((d for d in reversed(divisors) if d < n_hosts and _plausible(shape, a // d, scopes)), on)
    above = first((d for d in divisors if d > n_hosts and _plausible(shape, a // d, scopes)), on)
    sized = (JobShape(g * n_hosts, shape.tp, shape.ep, shape.pp) for g in range(a // n_hosts, 0, -1))
    world = first((j for j in sized if j.all_gpus != a and _plausible(j, j.all_gpus // n_hosts, scopes)),
                  lambda j: misfit(j, n_hosts, scopes, need_fabric=True) is None)
    return {"hosts_below": below, "hosts_above": above, "all_gpus": world.all_gpus if world else None}


def fit_hint(shape: JobShape, n_hosts: int, scopes: Iterable[str]) -> str:
    """The mappings of :func:`fitting` as one sentence for a refusal."""
    f = fitting(shape, n_hosts, scopes)
    a = shape.all_gpus
    hosts = [f"{counted(h, 'host')} ({counted(a // h, 'GPU')} each)" for h in (f["hosts_below"], f["hosts_above"])
             if h]
    parts = []
    if hosts:
        parts.append(f"{a} GPUs fit a fabric of " + " or ".join(hosts))
    if f["all_gpus"]:
        w = f["all_gpus"]
        parts.append(f"on {'this host' if n_hosts == 1 else f'these {n_hosts} hosts'}, workload.simai.all_gpus: "
                     f"{w} fits ({counted(w // n_hosts, 'GPU')} per host, DP {w // (shape.tp * shape.pp)})")
    elif hosts:
        parts.append(f"no workload.simai.all_gpus fits {'this host' if n_hosts == 1 else f'these {n_hosts} hosts'}"
                     f" (a multiple of TP x pp x EP = "
                     f"{shape.tp * shape.pp * shape.ep} GPUs; with several GPUs per host, stages of whole hosts)")
    return ("mappings that fit: " + "; ".join(parts)) if parts else (
        f"no fabric of up to {counted(a, 'host')} and no world size fits this file's TP {shape.tp}, EP {shape.ep}, "
        f"pp {shape.pp}")


def mapping(shape: JobShape, n_hosts: int, scopes: Iterable[str], entries: Optional[dict] = None) -> dict:
    """How the job's ranks map onto ``n_hosts`` hosts: summary.json's ``replay.mapping``.

    Returns all_gpus, hosts, ranks_per_host, tp, dp, pp, ep, dp_ep and per scope (the file's ``scopes``,
    then ``PP`` when pp > 1) ``where`` (``scale_up``: every group inside one host, run as timed waits;
    ``fabric``; ``none``: groups of one rank, no data moves), ``groups`` (in the whole job), ``ranks_per_group``, ``entries`` (the file's entries of
    that scope that run, from ``entries``), and on the fabric ``host_groups`` (concurrent host groups
    per stage, per stage boundary for PP), ``hosts_per_host_group`` and ``groups_per_host_group`` (rank
    groups folded into each: their bytes add up). Raises ValueError or PlacementError when the job does not
    fit (:func:`misfit`).
    """
    per_host = gpus_per_host(shape.all_gpus, n_hosts)
    placed = _placements(shape, per_host, tuple(scopes))
    out = {"all_gpus": shape.all_gpus, "hosts": n_hosts, "ranks_per_host": per_host, "tp": shape.tp,
           "dp": shape.dp, "pp": shape.pp, "ep": shape.ep, "dp_ep": shape.dp // shape.ep, "scopes": {}}
    for scope, pl in placed.items():
        size = shape.pp if scope == "PP" else pl.group_size
        block = {"where": pl.where if size > 1 else "none", "groups": shape.stage_ranks if scope == "PP" else shape.all_gpus // size,
                 "ranks_per_group": size}
        if entries is not None and scope in entries:
            block["entries"] = entries[scope]
        if pl.where == "fabric":
            block.update(host_groups=len(pl.host_groups), hosts_per_host_group=len(pl.host_groups[0]),
                         groups_per_host_group=pl.multiplicity)
        out["scopes"][scope] = block
    return out


def mapping_text(m: dict) -> str:
    """One line for the run's notes: :func:`mapping`'s block in words."""
    g = m["ranks_per_host"]
    ep = f"; EP {m['ep']}, DP_EP {m['dp_ep']}" if m["ep"] > 1 else ""
    n = counted
    head = (f"simai: {n(m['all_gpus'], 'rank')} (TP {m['tp']} x DP {m['dp']} x PP {m['pp']}{ep}) on "
            f"{n(m['hosts'], 'host')}, "
            + (f"{g} ranks per host (a server of {g} GPUs sharing one NIC)" if g > 1 else "one rank per host"))

    def one(scope: str, b: dict) -> str:
        text = f"{scope} {n(b['groups'], 'group')} of {n(b['ranks_per_group'], 'rank')}" + (
            f" ({n(b['entries'], 'file entry', 'file entries')})" if "entries" in b else "")
        if b["where"] != "fabric":
            return text
        each = n(b["groups_per_host_group"], "group")
        if scope == "PP":
            return (f"{text}, one rank per stage: {n(m['pp'] - 1, 'stage boundary', 'stage boundaries')} of "
                    f"{n(b['host_groups'], 'host pair')}, {each} each")
        per = f"{m['pp']} stages x " if m["pp"] > 1 else ""
        return (f"{text}, one rank per host: {per}{n(b['host_groups'], 'host group')} of "
                f"{n(b['hosts_per_host_group'], 'host')}, {each} each")

    parts = [head]
    for where, words, sep in (("scale_up", "scale-up waits (every group inside one host): ", ", "),
                              ("fabric", "on the fabric: ", "; "),
                              ("none", "no data moves (groups of one rank): ", ", ")):
        these = [one(s, b) for s, b in m["scopes"].items() if b["where"] == where]
        if these:
            parts.append(words + sep.join(these))
    return "; ".join(parts)


def scopes_of(groups: Iterable[str]) -> Tuple[str, ...]:
    """The distinct scopes of ``groups`` in :data:`SCOPES` order."""
    seen = set(groups)
    return tuple(s for s in SCOPES if s in seen)
