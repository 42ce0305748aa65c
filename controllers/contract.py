"""What crosses the testbed <-> controller-process boundary, defined once for both sides.

The testbed (testbed.emulation.controller_proc, congestion_conf) builds these frozen records and
writes them into the run directory; the controller app (controllers.app, failover_app,
adaptive_app, congestion.loop) reads them, and writes the records the testbed reads back.
Decoding is strict (:mod:`traffic.codec`, as :mod:`traffic.protocol` is for the agents): every
field present, no other, each of its type; :class:`ContractError` names the file and field path.
Runs on Python 3.9 too (the Ryu controller's Python): no ``X | Y`` annotations here.

Files in the run directory (names: the ``*_FILE`` constants below):

- ``topology.json``: the run's layout (topology.model), built once by the testbed;
- ``controller.conf``: the framework's ini (``[DEFAULT]`` listen address, port, log file) and
  ``[testbed] settings_file``; the run id also goes on the command line (``--testbed-run-id``);
- ``controller.settings.json``: :class:`ControllerSettings`, written by the testbed before start;
- ``controller.ready``: :class:`ControllerReady`, written atomically by the app once every switch
  confirmed its flows and groups (rewritten at once on an OpenFlow error);
- ``controller.events.jsonl``: one :data:`EVENTS` record per line (``{"event": TAG, ...}``);
- ``controller.stats.jsonl``: one :class:`StatsPoll` per line (the gray detector's input);
- ``congestion_loop.conf.json``: :class:`LoopSettings`, written once the queues exist; the loop
  answers with ``congestion_loop.started``, stops on ``congestion_loop.stop`` and says
  ``congestion_loop.stopped`` once its result files (``congestion_loop.json``,
  ``lossless_queues.csv``, ``ecn_marking.csv``, ``pfc_events.csv``) are final; the first is a
  :class:`controllers.loop_result.LoopResult`, the last has its ``PFC_EVENT_COLUMNS``.

What the testbed makes of the controller's process (deaths, restarts, OpenFlow errors) is
:class:`controllers.supervisor_report.ControllerReport`.

Times are Unix-epoch ns (traffic.clock.unix_ns), sizes bytes, rates bit/s.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Union

from traffic.codec import DecodeError, from_dict, from_tagged_line, to_dict

# -- file names (in the run directory) -----------------------------------------------------------
#: the run's layout (topology.model.save), written by the testbed, read by the app
TOPOLOGY_FILE = "topology.json"
CONF_FILE = "controller.conf"
SETTINGS_FILE = "controller.settings.json"
LOG_FILE = "controller.log"
READY_FILE = "controller.ready"
EVENTS_FILE = "controller.events.jsonl"
STATS_FILE = "controller.stats.jsonl"
LOOP_SETTINGS_FILE = "congestion_loop.conf.json"
LOOP_STARTED_FILE = "congestion_loop.started"
#: the testbed's request to stop the loop now, and the loop's answer (its tables are final)
LOOP_STOP_REQUEST_FILE, LOOP_STOPPED_FILE = "congestion_loop.stop", "congestion_loop.stopped"
#: the loop's results: summary figures, every sample, marking changes, PFC events
LOOP_RESULT_FILE = "congestion_loop.json"
LOSSLESS_QUEUES_FILE = "lossless_queues.csv"
ECN_MARKING_FILE = "ecn_marking.csv"
PFC_EVENTS_FILE = "pfc_events.csv"


class ContractError(ValueError):
    """A file or line that is not a valid record; the text names the file or field at fault."""


# -- controller settings -------------------------------------------------------------------------

@dataclass(frozen=True)
class AdaptiveSettings:
    """The adaptive policy's reaction (controllers.lb.adaptive): port utilization in (0, 1] that
    triggers a rebalance, and a group's freeze after a change, ms."""

    hot_threshold: float
    min_dwell_ms: int


@dataclass(frozen=True)
class LoadBalanceSettings:
    """The select groups' policy (a controllers.lb name), its weights (next-hop switch name
    without the run id -> weight; empty for the unweighted policies), the adaptive policy's
    settings (None for another policy), and how every group hashes (controllers.lb.Hashing:
    ``hash_basis`` one of controllers.lb.HASH_BASES, ``selection_method`` hash or dp_hash; the
    defaults only spare constructors in code, the settings file always names them)."""

    policy: str
    weights: dict[str, int]
    adaptive: Optional[AdaptiveSettings]
    hash_basis: str = "per_tier"
    selection_method: str = "hash"


@dataclass(frozen=True)
class FailoverSettings:
    """The gray-failure detector (controllers.failover.GrayDetector): run it on the polled counters
    (``gray_detect``), loss fraction above which a link is gray, its longest window (ms), and the
    frames a switch must lose before a link is gray."""

    gray_detect: bool
    gray_loss_threshold: float
    gray_window_ms: int
    gray_min_lost_pkts: int


@dataclass(frozen=True)
class TenantSettings:
    """Tenant isolation the app enforces (controllers.tenants): ``host_tenant``: host name without the
    run id -> tenant name; ``shared_hosts``: hosts every tenant may reach. Hosts in neither reach only
    the shared hosts."""

    host_tenant: dict[str, str]
    shared_hosts: list[str]


@dataclass(frozen=True)
class ControllerSettings:
    """Everything the app needs besides the framework's own options (paths absolute).

    ``topology_file``: the run's layout (topology.model.save); ``stats_period_ms``: port and group
    statistics poll period (0: no polling); ``loop_settings_file``: where the congestion loop's
    :class:`LoopSettings` will appear (None: no ECN, no PFC, no loop); ``tenants``: the isolation to
    enforce (None: every host reaches every host). The file always has every field (``tenants`` too);
    its default here only spares callers in code."""

    run_id: str
    topology_file: str
    ready_file: str
    events_file: str
    stats_file: str
    stats_period_ms: int
    load_balance: LoadBalanceSettings
    failover: FailoverSettings
    loop_settings_file: Optional[str]
    tenants: Optional[TenantSettings] = None


# -- congestion loop settings --------------------------------------------------------------------

@dataclass(frozen=True)
class EcnSettings:
    """RED marking of the lossless class: Kmin, Kmax (bytes), Pmax, the probability step and the
    DSCP marked; ``marker``: ``nftables`` (the loop marks) or ``red`` (sch_red leaves mark; the loop
    only reads their counts at the end)."""

    kmin_bytes: int
    kmax_bytes: int
    pmax: float
    step: float
    dscp: int
    marker: str = "nftables"


@dataclass(frozen=True)
class WatchdogSettings:
    """The PFC watchdog (controllers.congestion.watchdog): mitigate (``enabled``), detection and
    restoration times, ms."""

    enabled: bool
    detect_ms: float
    restore_ms: float


@dataclass(frozen=True)
class PfcSettings:
    """PFC thresholds on the bytes charged to an ingress, and the watchdog (None: none)."""

    xoff_bytes: int
    xon_bytes: int
    watchdog: Optional[WatchdogSettings]


@dataclass(frozen=True)
class LoopSettings:
    """The congestion loop's settings for the running fabric (controllers.congestion.loop).

    ``results_dir``: the run directory; ``period_s``: sampling period; ``sampled_parent``: the tc
    parent handle of the lossless class's leaf; ``lossless_buffer_bytes``: its buffer on a switch
    port, ``host_queue_bytes`` on a host NIC; ``host_pids``: host name without the run id -> the
    pid holding its network namespace; ``clock_wander``: the fraction switch-port shapers wander
    up to (their leaves are installed at (1 + f) x nominal). ``ecn``/``pfc``: None when off."""

    run_id: str
    results_dir: str
    period_s: float
    sampled_parent: int
    mtu_bytes: int
    lossless_buffer_bytes: int
    host_queue_bytes: int
    host_pids: dict[str, int]
    ecn: Optional[EcnSettings]
    pfc: Optional[PfcSettings]
    clock_wander: float


# -- ready file ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class OpenFlowError:
    """One OFPT_ERROR a switch sent: the request it answered (``request``: what the app sent with
    ``xid``, None when unknown), OpenFlow type and code with their names, the first bytes echoed."""

    dpid: int
    switch: Optional[str]
    xid: int
    request: Optional[str]
    type: int
    code: int
    type_name: str
    code_name: str
    data_hex: str


@dataclass(frozen=True)
class ControllerReady:
    """The ready file: the switches whose install finished, their planned flows and groups, every
    OpenFlow error so far (non-empty: failure) and what the last sync of each changed, summed
    (controllers.resync counts: flows_unchanged, flows_added, ...)."""

    dpids: list[int]
    flows: int
    groups: int
    errors: list[OpenFlowError]
    resync: dict[str, int]


# -- events (controller.events.jsonl) ------------------------------------------------------------

@dataclass(frozen=True)
class LinkChange:
    """A link (``link``: its two node names without the run id) seen going down or up on ``switch``
    port ``port``, by ``cause`` ``port_status`` or ``gray`` (the counters detector: then its
    ``lost_pkts``, ``tx_pkts``, ``loss`` fraction and ``window_ms``, else None); ``seq``: the reroute
    it started."""

    link: list[str]
    cause: str
    switch: str
    port: int
    seq: int
    lost_pkts: Optional[int]
    tx_pkts: Optional[int]
    loss: Optional[float]
    window_ms: Optional[float]
    time_ns: int


@dataclass(frozen=True)
class LinkDown(LinkChange):
    """A link went down (or the gray detector condemned it)."""


@dataclass(frozen=True)
class LinkUp(LinkChange):
    """A link came back up."""


@dataclass(frozen=True)
class GraySuspected:
    """The gray detector found a lossy link it cannot take out (the last path of some host)."""

    link: list[str]
    cause: str
    switch: str
    port: int
    lost_pkts: int
    tx_pkts: int
    loss: float
    window_ms: float
    time_ns: int


@dataclass(frozen=True)
class Unroutable:
    """Reroute ``seq`` found no routes (``error``: why); the routes stay as they were."""

    seq: int
    error: str
    time_ns: int


@dataclass(frozen=True)
class Rerouted:
    """Reroute ``seq`` is in: every connected switch (``switches``) answered the barrier after its new
    flows and groups; ``dead_links``: the links out of the routes (node names without the run id)."""

    seq: int
    switches: int
    dead_links: list[list[str]]
    time_ns: int


@dataclass(frozen=True)
class BucketMove:
    """One select-group bucket re-pinned from port ``from_port`` (toward ``from_node``) to
    ``to_port`` (toward ``to_node``; node names without the run id), carrying ``rate_bps``."""

    bucket: int
    from_port: int
    to_port: int
    from_node: Optional[str]
    to_node: Optional[str]
    rate_bps: int


@dataclass(frozen=True)
class AdaptiveMoved:
    """The adaptive policy changed group ``group`` of ``switch`` and the barrier confirmed it.

    ``loads_bps``: port number (text) -> its load when decided; ``seen_ns``: the first poll that saw
    the imbalance, ``decided_ns``, ``sent_ns``, ``barrier_ns``: the change's times;
    ``reaction_ms`` = barrier - seen; ``hot_since_ns``: the first poll of the port-level imbalance
    (None: as seen) and ``since_hot_ms`` = barrier - hot_since (its upper bound)."""

    switch: str
    group: int
    moves: list[BucketMove]
    loads_bps: dict[str, int]
    seen_ns: int
    decided_ns: int
    sent_ns: int
    barrier_ns: int
    reaction_ms: float
    hot_since_ns: Optional[int]
    since_hot_ms: float
    time_ns: int


#: event tag on the line -> record class
EVENTS: dict[str, type] = {
    "link_down": LinkDown, "link_up": LinkUp, "gray_suspected": GraySuspected, "unroutable": Unroutable,
    "rerouted": Rerouted, "adaptive_moved": AdaptiveMoved,
}
_EVENT_TAGS = {cls: tag for tag, cls in EVENTS.items()}
Event = Union[LinkDown, LinkUp, GraySuspected, Unroutable, Rerouted, AdaptiveMoved]


# -- statistics polls (controller.stats.jsonl) ---------------------------------------------------

@dataclass(frozen=True)
class StatsPoll:
    """One port-stats poll of switch ``dpid`` as the gray detector saw it: ``ports`` rows
    [port, rx_packets, tx_packets]; ``forwarded``: ``groups`` | ``flows`` -> port (text) -> packets
    the switch sent there (controllers.failover.GrayDetector.forwarded_counts)."""

    dpid: int
    time_ns: int
    ports: list[list[int]]
    forwarded: dict[str, dict[str, int]]


# -- codec ---------------------------------------------------------------------------------------

def decode(cls, obj: Any, where: str):
    """A ``cls`` record from the JSON value ``obj``; ContractError naming ``where`` and the field."""
    try:
        return from_dict(cls, obj, where)
    except DecodeError as e:
        raise ContractError(str(e)) from None


def encode(record) -> dict:
    """The JSON object of a record (nested records as objects)."""
    return to_dict(record)


def dumps(record) -> str:
    """The JSON document of a record (indented, keys sorted, with a final newline): what a writer puts
    in a file; write it atomically where a reader may look before it is complete."""
    return json.dumps(encode(record), indent=1, sort_keys=True) + "\n"


def read_json(path: Union[str, Path], cls):
    """The ``cls`` record in the JSON file ``path``. Raises FileNotFoundError, or ContractError naming
    the file (and the field) when it is not valid JSON or not a ``cls``."""
    text = Path(path).read_text()
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ContractError(f"{path}: not JSON ({e})") from None
    return decode(cls, obj, f"{path}: {cls.__name__}")


def event_line(event) -> str:
    """One line of the events file (with the newline) for a record of :data:`EVENTS`.

    Raises ContractError for an object that is not one."""
    tag = _EVENT_TAGS.get(type(event))
    if tag is None:
        raise ContractError(f"{type(event).__name__} is not a controller event; allowed: "
                            f"{', '.join(c.__name__ for c in EVENTS.values())}")
    return json.dumps({"event": tag, **encode(event)}, sort_keys=True) + "\n"


def parse_event(line: str):
    """The record of one events-file line. Raises ContractError naming the unknown event, or the event
    and field path of an unknown, missing or mistyped field."""
    try:
        return from_tagged_line(line, "event", EVENTS, "an event", "controller event")
    except DecodeError as e:
        raise ContractError(str(e)) from None


def read_events(run_dir: Union[str, Path]) -> List[Event]:
    """The controller's events in the run directory, in file order ([] without a file). A torn last
    line (the controller killed while writing) is skipped; any other bad line raises ContractError
    naming the file and line."""
    path = Path(run_dir) / EVENTS_FILE
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        try:
            out.append(parse_event(line))
        except ContractError as e:
            if i == len(lines) and not line.rstrip().endswith("}"):
                continue
            raise ContractError(f"{path}:{i}: {e}") from None
    return out


def stats_line(poll: StatsPoll) -> str:
    """One line of the statistics file (with the newline)."""
    return json.dumps(encode(poll), separators=(",", ":")) + "\n"


def parse_stats(line: str) -> StatsPoll:
    """The :class:`StatsPoll` of one statistics-file line; ContractError when it is not one."""
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise ContractError(f"not a JSON line ({e}): {line[:120]!r}") from None
    return decode(StatsPoll, obj, "stats")


__all__ = [
    "AdaptiveMoved", "AdaptiveSettings", "BucketMove", "CONF_FILE", "ContractError", "ControllerReady",
    "ControllerSettings", "ECN_MARKING_FILE", "EVENTS", "EVENTS_FILE", "EcnSettings", "Event", "FailoverSettings",
    "GraySuspected", "LOG_FILE", "LOOP_RESULT_FILE", "LOOP_SETTINGS_FILE", "LOOP_STARTED_FILE",
    "LOOP_STOPPED_FILE", "LOOP_STOP_REQUEST_FILE", "LOSSLESS_QUEUES_FILE", "LinkChange", "LinkDown", "LinkUp",
    "LoadBalanceSettings", "LoopSettings", "OpenFlowError", "PFC_EVENTS_FILE", "PfcSettings", "READY_FILE",
    "Rerouted", "SETTINGS_FILE", "STATS_FILE", "StatsPoll", "TOPOLOGY_FILE", "TenantSettings", "Unroutable", "WatchdogSettings", "decode", "encode",
    "dumps", "event_line", "parse_event", "parse_stats", "read_events", "read_json",
]
