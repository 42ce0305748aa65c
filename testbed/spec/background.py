"""The ``background`` section: TCP, UDP and storage-like flows that share the fabric with the workload.

A list of flows, each counted apart from the workload (background.csv, summary.json ``background``;
testbed.emulation.background runs them with iperf3 in the hosts' namespaces). Hosts are named as in
``faults`` and ``workload.pattern``: ``h1`` .. ``hN`` (no run id) or a rank, 0-based. Times count
from the start of the workload's traffic; a flow still running when the workload ends is stopped
there (``status: cut``), one not started by then is reported ``not_started``.

Kinds and their keys:

- ``tcp``: ``src``, ``dst``, ``duration_s`` (iperf3) or ``size_bytes`` (one of them; a sized flow runs
  traffic.sized_tcp, which times its completion), optional ``rate_bps`` (a cap per stream: the
  kernel's TCP pacing), ``parallel`` (connections of this host pair), ``start_s``;
- ``udp``: ``src``, ``dst``, ``duration_s``, ``rate_bps`` (required: iperf3 ``-u -b``, each stream
  sends at it), ``parallel``, ``start_s``;
- ``storage``: many-to-one bursts: every host of ``clients`` sends ``burst_bytes`` over TCP to
  ``server`` at once (sized TCP flows), ``count`` times, one burst every ``interval_s`` from ``start_s``.

Example::

    background:
      - {kind: tcp, src: h1, dst: h3, start_s: 0, duration_s: 30}
      - {kind: storage, clients: [h2, h4], server: h1, burst_bytes: 1MiB, interval_s: 2, count: 5}
"""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field

from testbed.spec.units import Count, RateBps, SizeBytes, SpecModel

#: host reference: a host name without the run id (``h3``) or a rank (0-based)
HostRef = Union[Count, str]
BACKGROUND_KINDS = ("tcp", "udp", "storage")
#: the keys each kind takes beside ``kind``, ``name`` and ``start_s``
KIND_KEYS = {"tcp": ("src", "dst", "duration_s", "size_bytes", "rate_bps", "parallel"),
             "udp": ("src", "dst", "duration_s", "size_bytes", "rate_bps", "parallel"),
             "storage": ("clients", "server", "burst_bytes", "interval_s", "count")}
#: the longest start offset or duration, s: background flows accompany a workload of minutes
MAX_TIME_S = 3600.0
#: iperf3 client runs (a flow, or one client's burst) a scenario may start: each has its own server
MAX_CLIENT_RUNS = 64
#: iperf3's own streams per client (-P) that a scenario may ask for
MAX_PARALLEL = 16


class BackgroundFlowSpec(SpecModel):
    """One background flow (docs/background.md): ``kind`` tcp (src, dst, duration_s or size_bytes, rate_bps,
    parallel), udp (src, dst, duration_s, rate_bps) or storage (clients, server, burst_bytes, interval_s,
    count); times from the workload's start. Field limits here; the keys each kind takes, the hosts and
    rates are checked against the fabric by :func:`check_background`."""

    kind: Literal["tcp", "udp", "storage"]
    #: the flow's name in background.csv (default ``<kind><index>``)
    name: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,32}$")
    src: Optional[HostRef] = None
    dst: Optional[HostRef] = None
    start_s: float = Field(0.0, ge=0.0, le=MAX_TIME_S, allow_inf_nan=False)
    duration_s: Optional[float] = Field(None, gt=0.0, le=MAX_TIME_S, allow_inf_nan=False)
    size_bytes: Optional[SizeBytes] = None
    rate_bps: Optional[RateBps] = None
    parallel: Count = Field(1, ge=1, le=MAX_PARALLEL)
    clients: Optional[list[HostRef]] = None
    server: Optional[HostRef] = None
    burst_bytes: Optional[SizeBytes] = None
    interval_s: Optional[float] = Field(None, gt=0.0, le=MAX_TIME_S, allow_inf_nan=False)
    count: Optional[Count] = Field(None, ge=1, le=MAX_CLIENT_RUNS)

    def flow_name(self, index: int) -> str:
        """``name``, or ``<kind><index>``."""
        return self.name or f"{self.kind}{index}"


def _resolve(ref, names: list[str], key: str) -> int:
    """The rank of host reference ``ref`` among ``names`` (short host names in rank order); ValueError
    naming ``key`` and what is allowed."""
    if isinstance(ref, int):
        if 0 <= ref < len(names):
            return ref
        raise ValueError(f"{key}: rank {ref} is outside this fabric; a rank is 0..{len(names) - 1} on this fabric")
    if ref in names:
        return names.index(ref)
    raise ValueError(f"{key}: {ref!r} is not a host of this fabric: allowed {names[0]} .. {names[-1]} "
                     f"or a rank 0..{len(names) - 1}")


def check_background(flows, host_names: list[str], host_link_bps: float) -> list[dict]:
    """Check the ``background`` list against the fabric; return each entry's resolved form.

    ``host_names``: short host names in rank order; ``host_link_bps``: the host link rate, bit/s.
    Returns one dict per entry: ``name``, ``kind``, ``pairs`` (list of (src_rank, dst_rank), one per
    client for storage), ``starts_s`` (start of each client run, s after the workload starts).
    Raises ValueError whose message starts with the bad key path (``background.0.dst: ...``) and says
    what is allowed: a key the kind does not take, a missing one, an unknown host, src == dst, neither
    or both of duration_s and size_bytes, a rate above the host link, too many client runs, a name
    used twice.
    """
    out, seen, runs = [], {}, 0
    for i, f in enumerate(flows):
        at = f"background.{i}"
        own = KIND_KEYS[f.kind]
        stray = [k for ks in KIND_KEYS.values() for k in ks
                 if k not in own and k in f.model_fields_set]
        if stray:
            raise ValueError(f"{at}.{stray[0]}: does not apply to kind {f.kind!r}; its keys are "
                             f"{', '.join(own)} (with kind, name, start_s)")
        name = f.flow_name(i)
        if name in seen:
            raise ValueError(f"{at}.name: {name!r} is already background.{seen[name]}'s name; names are unique")
        seen[name] = i
        if f.kind == "storage":
            for k in ("clients", "server", "burst_bytes", "interval_s", "count"):
                if getattr(f, k) is None:
                    raise ValueError(f"{at}.{k}: required for kind 'storage' (keys: {', '.join(own)})")
            if not f.clients:
                raise ValueError(f"{at}.clients: a non-empty list of hosts")
            server = _resolve(f.server, host_names, f"{at}.server")
            clients = [_resolve(c, host_names, f"{at}.clients.{k}") for k, c in enumerate(f.clients)]
            if len(set(clients)) != len(clients):
                raise ValueError(f"{at}.clients: a host is listed twice")
            if server in clients:
                raise ValueError(f"{at}.clients: the server {host_names[server]} cannot be its own client")
            pairs = [(c, server) for c in clients]
            starts = [f.start_s + b * f.interval_s for b in range(f.count)]
            runs += len(pairs) * len(starts)
        else:
            for k in ("src", "dst"):
                if getattr(f, k) is None:
                    raise ValueError(f"{at}.{k}: required for kind {f.kind!r} (keys: {', '.join(own)})")
            src = _resolve(f.src, host_names, f"{at}.src")
            dst = _resolve(f.dst, host_names, f"{at}.dst")
            if src == dst:
                raise ValueError(f"{at}.dst: the same host as src ({host_names[src]}); a flow needs two hosts")
            if (f.duration_s is None) == (f.size_bytes is None):
                raise ValueError(f"{at}.duration_s: give exactly one of duration_s (s) or size_bytes "
                                 f"(got {'both' if f.duration_s is not None else 'neither'})")
            if f.kind == "udp" and f.size_bytes is not None:
                raise ValueError(f"{at}.size_bytes: a udp flow runs for duration_s; sized flows with a "
                                 f"completion time are tcp (or storage bursts)")
            if f.kind == "udp" and f.rate_bps is None:
                raise ValueError(f"{at}.rate_bps: required for kind 'udp' (UDP does not pace itself), "
                                 f"bit/s up to fabric.host_link_bps = {host_link_bps:g}")
            pairs, starts = [(src, dst)], [f.start_s]
            runs += 1
        if f.rate_bps is not None and f.rate_bps * f.parallel > host_link_bps:
            raise ValueError(f"{at}.rate_bps: {f.rate_bps:g} x parallel {f.parallel} is above the host link "
                             f"(fabric.host_link_bps = {host_link_bps:g}); allowed up to "
                             f"{host_link_bps / f.parallel:g} bit/s per stream")
        out.append({"name": name, "kind": f.kind, "pairs": pairs, "starts_s": starts})
    if runs > MAX_CLIENT_RUNS:
        raise ValueError(f"background.{len(flows) - 1}.count: the background starts {runs} iperf3 client runs "
                         f"(flows plus clients x count of storage bursts); allowed at most {MAX_CLIENT_RUNS}")
    return out
