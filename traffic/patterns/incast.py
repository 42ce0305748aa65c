"""``incast``: N senders each send ``size_bytes`` to one receiver at once (N:1).

``senders``: a count N (the hosts on other switches than the receiver's first, in rank order, then
the receiver's neighbours) or a list of hosts; ``receiver``: default the first host."""
from __future__ import annotations

from traffic.patterns import Flow, PatternError, resolve


def build(p, hosts, seed: int) -> list[Flow]:
    rx = resolve(p.receiver if p.receiver is not None else 0, hosts, "workload.pattern.receiver")
    if p.senders is None or isinstance(p.senders, int):
        n = p.senders or len(hosts) - 1
        others = [h for h in hosts if h.rank != rx]
        ordered = [h.rank for h in others if h.switch != hosts[rx].switch] + \
                  [h.rank for h in others if h.switch == hosts[rx].switch]
        if n > len(ordered):
            raise PatternError(f"workload.pattern.senders = {n}: the fabric has only {len(ordered)} hosts "
                               f"besides the receiver {hosts[rx].name}")
        senders = ordered[:n]
    else:
        senders = [resolve(s, hosts, f"workload.pattern.senders.{i}") for i, s in enumerate(p.senders)]
        if rx in senders:
            raise PatternError(f"workload.pattern.senders: the receiver {hosts[rx].name} cannot send to itself")
        if len(set(senders)) != len(senders):
            raise PatternError("workload.pattern.senders: a host is listed twice")
    return [Flow(i, s, rx, int(p.size_bytes)) for i, s in enumerate(senders)]
