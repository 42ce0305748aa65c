"""Which hosts each job runs on: explicit lists, or N ranks placed packed, spread or random.

Pure: a topology.model.Layout and the jobs in, host names out. A "leaf" is the switch a host's first
interface attaches to (topology.model.Layout.attachment), in the layout's host order, so the same
policies work on spine-leaf, fat-tree edge switches and rail leaves.

- ``packed``: fill leaf by leaf (a job of 4 on 2 hosts per leaf takes two whole leaves): fewest leaves,
  the least traffic through the spines.
- ``spread``: round robin over the leaves (rank 0 on the first leaf with a free host, rank 1 on the next
  leaf, ...): most leaves, every ring hop through a spine.
- ``random``: a seeded draw (``random.Random(seed + job index)``) among the free hosts.

Jobs are placed in list order; hosts an earlier job holds are skipped. Ranks are in placement order
(rank 0 of the job on its first host).
"""
from __future__ import annotations

import random
from typing import Sequence


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


def place_jobs(layout, jobs: Sequence, seed: int) -> dict[str, tuple[str, ...]]:
    """Job name -> its host names in rank order.

    ``jobs``: testbed.spec.jobs.JobSpec in scenario order; ``seed``: the run's seed (random placement).
    Raises ValueError naming ``jobs[i].hosts`` (an unknown host, one another job holds) or ``jobs[i].ranks``
    (more ranks than free hosts).
    """
    leaves = leaves_of(layout)
    names = [h.name for h in layout.hosts]
    free = set(names)
    owner: dict[str, str] = {}
    out: dict[str, tuple[str, ...]] = {}
    for i, job in enumerate(jobs):
        if job.hosts is not None:
            unknown = [h for h in job.hosts if h not in names]
            if unknown:
                raise ValueError(f"jobs.{i}.hosts: no host {unknown[0]!r} on this fabric; allowed: "
                                 f"{', '.join(names)}")
            taken = [h for h in job.hosts if h not in free]
            if taken:
                raise ValueError(f"jobs.{i}.hosts: {taken[0]} belongs to job {owner[taken[0]]!r}; jobs never share "
                                 f"hosts (free: {', '.join(h for h in names if h in free) or 'none'})")
            hosts = list(job.hosts)
        else:
            n = int(job.ranks)
            if n > len(free):
                raise ValueError(f"jobs.{i}.ranks: {n} ranks, but only {len(free)} of the fabric's {len(names)} "
                                 f"hosts are free after the jobs before it; allowed: 2..{len(free)}")
            policy = job.placement or "packed"
            if policy == "packed":
                hosts = _packed(leaves, free, n)
            elif policy == "spread":
                hosts = _spread(leaves, free, n)
            else:
                hosts = random.Random(seed + i).sample([h for h in names if h in free], n)
        for h in hosts:
            free.discard(h)
            owner[h] = job.name
        out[job.name] = tuple(hosts)
    return out
