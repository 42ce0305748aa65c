"""``flows``: an explicit list of flows, each ``{src, dst, size_bytes, start_s, qps}`` (e.g. a victim flow: two
long flows, then a burst into the receiver of one); a flow without ``qps`` takes the pattern's."""
from __future__ import annotations

from traffic.patterns import Flow, resolve


def build(p, hosts, seed: int) -> list[Flow]:
    return [Flow(i, resolve(f.src, hosts, f"workload.pattern.flows.{i}.src"),
                 resolve(f.dst, hosts, f"workload.pattern.flows.{i}.dst"), int(f.size_bytes), float(f.start_s),
                 int(f.qps if getattr(f, "qps", None) is not None else getattr(p, "qps", 1)))
            for i, f in enumerate(p.flows)]
