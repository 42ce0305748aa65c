"""``permutation``: every host sends ``size_bytes`` to a distinct host on another leaf, all at once.

The destinations are a random permutation with no host mapped to its own leaf, drawn by a generator
seeded with the scenario's seed (rejection sampling: shuffles until one fits, at most 10,000 tries;
with one leaf, or one leaf holding more than half the hosts, no such permutation exists)."""
from __future__ import annotations

import random

from traffic.patterns import Flow, PatternError

MAX_TRIES = 10_000


def derangement_across(switch_of: list[str], rng: random.Random) -> list[int]:
    """dst[i] for each i: a permutation with switch_of[dst[i]] != switch_of[i]. PatternError if none found."""
    n = len(switch_of)
    dst = list(range(n))
    for _ in range(MAX_TRIES):
        rng.shuffle(dst)
        if all(switch_of[d] != switch_of[i] for i, d in enumerate(dst)):
            return list(dst)
    raise PatternError("workload.pattern.kind 'permutation': no permutation sends every host to another leaf "
                       "(one leaf holds more than half the hosts?)")


def build(p, hosts, seed: int) -> list[Flow]:
    dst = derangement_across([h.switch for h in hosts], random.Random(f"permutation-{seed}"))
    return [Flow(i, h.rank, hosts[dst[i]].rank, int(p.size_bytes)) for i, h in enumerate(hosts)]
