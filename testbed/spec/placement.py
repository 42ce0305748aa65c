"""Which hosts each job runs on: explicit lists, or N ranks placed packed, spread or random.

Pure: a topology.model.Layout and the jobs in, host names out. A "leaf" is the switch a host's first
interface attaches to (topology.model.Layout.attachment), in the layout's host order, so the same
policies work on spine-leaf, fat-tree edge switches and rail leaves.

- ``packed``: fill leaf by leaf (a job of 4 on 2 hosts per leaf takes two whole leaves): fewest leaves,
  the least traffic through the spines.
- ``spread``: round robin over the leaves (rank 0 on the first leaf with a free host, rank 1 on the next
  leaf, ...): most leaves, every ring hop through a spine.
- ``random``: a seeded draw (``random.Random(seed + job index)``) among the free hosts.

Jobs are placed in list order; hosts an earlier job holds are skipped, and so are hosts a ``tenants``
section gives to another tenant or names as ``shared_hosts`` (``reserved``): a job lands only on its own
tenant's hosts and unassigned ones. Ranks are in placement order (rank 0 of the job on its first host).
"""
from __future__ import annotations

import random
from typing import Mapping, Sequence


def leaves_of(layout) -> list[list[str]]:
    """Host names grouped by the switch each attaches to, in the layout's host order (first host first)."""
    groups: dict[str, list[str]] = {}
    for h in layout.hosts:
        groups.setdefault(layout.attachment(h.name).node, []).append(h.name)
    return list(groups.values())


def _packed(leaves: list[list[str]], free: set[str], n: int) -> list[str]:
    return [h for leaf in leaves for h in leaf if h in free][:n]


def _spread(leaves: list[list[str]], free: set[str], n: int) -> list[str]:
    queues = [[h for h in leaf if h in free] for leaf in leaves]
    out: list[str] = []
    while len(out) < n and any(queues):
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop(0))
    return out


def place_jobs(layout, jobs: Sequence, seed: int,
               reserved: Mapping[str, str] | None = None) -> dict[str, tuple[str, ...]]:
    """Job name -> its host names in rank order.

    ``jobs``: testbed.spec.jobs.JobSpec in scenario order; ``seed``: the run's seed (random placement);
    ``reserved``: host -> the tenant it is declared for (``shared`` for a shared host): a job of another
    tenant is never placed there. Raises ValueError naming ``jobs.N.hosts`` (an unknown host, one another
    job holds, one reserved for another tenant) or ``jobs.N.ranks`` (more ranks than hosts free for it).
    """
    leaves = leaves_of(layout)
    names = [h.name for h in layout.hosts]
    reserved = dict(reserved or {})
    unplaced = set(names)
    owner: dict[str, str] = {}
    out: dict[str, tuple[str, ...]] = {}
    for i, job in enumerate(jobs):
        free = {h for h in unplaced if reserved.get(h, job.tenant) == job.tenant}
        if job.hosts is not None:
            unknown = [h for h in job.hosts if h not in names]
            if unknown:
                raise ValueError(f"jobs.{i}.hosts: no host {unknown[0]!r} on this fabric; allowed: "
                                 f"{', '.join(names)}")
            taken = [h for h in job.hosts if h not in unplaced]
            if taken:
                raise ValueError(f"jobs.{i}.hosts: {taken[0]} belongs to job {owner[taken[0]]!r}; jobs never share "
                                 f"hosts (free: {', '.join(h for h in names if h in free) or 'none'})")
            theirs = [h for h in job.hosts if h not in free]
            if theirs:
                what = ("is a shared host" if reserved[theirs[0]] == "shared"
                        else f"belongs to tenant {reserved[theirs[0]]!r}")
                raise ValueError(f"jobs.{i}.hosts: {theirs[0]} {what}, not to this job's tenant {job.tenant!r} "
                                 f"(free for it: {', '.join(h for h in names if h in free) or 'none'})")
            hosts = list(job.hosts)
        else:
            n = int(job.ranks)
            if n > len(free):
                raise ValueError(f"jobs.{i}.ranks: {n} ranks, but only {len(free)} of the fabric's {len(names)} "
                                 f"hosts are free for tenant {job.tenant!r} after the jobs before it (other "
                                 f"tenants' and shared hosts excluded); allowed: 2..{len(free)}")
            policy = job.placement or "packed"
            if policy == "packed":
                hosts = _packed(leaves, free, n)
            elif policy == "spread":
                hosts = _spread(leaves, free, n)
            else:
                hosts = random.Random(seed + i).sample([h for h in names if h in free], n)
        for h in hosts:
            unplaced.discard(h)
            owner[h] = job.name
        out[job.name] = tuple(hosts)
    return out


def reserved_hosts(spec) -> dict[str, str]:
    """Host -> the tenant a ``tenants`` section declares it for, or ``shared`` for ``shared_hosts``
    (place_jobs' ``reserved``); empty without tenants."""
    out = {h: name for name, t in (spec.tenants or {}).items() for h in t.hosts}
    out.update({h: "shared" for h in (spec.shared_hosts or ())})
    return out
