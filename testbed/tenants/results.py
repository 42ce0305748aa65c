"""A run's tenants: probe on the live fabric, read the drop counters, write summary.json's ``tenants`` block.

Steps (testbed.pipeline.runner): :func:`start` once the fabric and agents are up, before the traffic's drop
counters are first read (runs the isolation probes, testbed.tenants.probes); :func:`read_counters`
after the traffic (the isolation drop flows' counters, testbed.tenants.drop_counters);
:func:`add_results` with the verdict (summary.json ``tenants``, the ``isolation`` check,
``tenant_drops.csv``); :func:`lines` for the terminal.

summary.json ``tenants``::

    {"isolation": true, "tenants": {"alpha": ["h1", "h2"], "beta": ["h3"]}, "shared_hosts": ["h4"],
     "allowed_pairs": 8, "forbidden_pairs": 4,
     "drop_flows": {"planned": 4, "installed": 4},
     "drops": [{"src_tenant": "alpha", "dst_tenant": "beta", "dropped_pkts": 20, "dropped_bytes": 1240}, ...],
     "probes": [{"id": "h1-h3", "kind": "cross", "src": "h1", "dst": "h3", "src_tenant": "alpha",
                 "dst_tenant": "beta", "expected": "blocked", "sent_pkts": 20, "delivered_pkts": 0,
                 "arp_replied": false, "passed": true}, ...],
     "proven": true}

``proven``: every probe as expected and every planned drop flow installed (None without isolation).
The ``isolation`` check of the fidelity verdict fails otherwise, with the reason: the run is then
NOT faithful (exit code 3).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from testbed.measure.fidelity_checks import FAILED, PASSED
from testbed.spec.tenants import TenantMap, tenant_map
from testbed.tenants.drop_counters import per_tenant_pair, read_drop_flows
from testbed.tenants.probes import plan_probes, run_probes

#: Open vSwitch folds each thread's coverage counters into the totals ``ovs-appctl coverage/show`` prints
#: about once a second (lib/coverage.c): wait that long after the probes, so their drops and controller
#: upcalls are counted before the run's drop counters are first read, not charged to the traffic
COVERAGE_SETTLE_S = 1.5
#: the table of drop flows (testbed.results.schema): tenant_drops.csv
DROPS_TABLE = "tenant_drops"


@dataclass
class TenantRecord:
    """The run's tenant map, its probe rows and (after the traffic) its drop-flow rows."""

    tmap: TenantMap
    probes: list = field(default_factory=list)
    drop_rows: Optional[list] = None


def start(spec, fab, tmap: Optional[TenantMap] = None) -> Optional[TenantRecord]:
    """Probe isolation on the live fabric; None when the scenario has no tenants. ``tmap``: the run's map
    (default: the one the fabric's controller enforces, ``fab.tenants``, else
    testbed.spec.tenants.tenant_map(spec))."""
    if not spec.tenants:
        return None
    tmap = tmap or getattr(fab, "tenants", None) or tenant_map(spec)
    record = TenantRecord(tmap, run_probes(fab, tmap, plan_probes(tmap)))
    if record.probes:
        time.sleep(COVERAGE_SETTLE_S)
    return record


def read_counters(record: Optional[TenantRecord], fab) -> None:
    """Read the isolation drop flows' counters into ``record`` (nothing without isolation)."""
    if record is not None and record.tmap.isolation:
        record.drop_rows = read_drop_flows(fab.layout, record.tmap)


def block(record: TenantRecord) -> dict:
    """summary.json's ``tenants`` block (module docstring)."""
    t = record.tmap
    n_pairs = len(t.hosts) * (len(t.hosts) - 1)
    allowed = len(t.allowed_pairs())
    rows = record.drop_rows or []
    out = {"isolation": t.isolation, "tenants": {k: list(v) for k, v in t.tenants.items()},
           "shared_hosts": list(t.shared_hosts), "allowed_pairs": allowed, "forbidden_pairs": n_pairs - allowed,
           "drop_flows": {"planned": len(rows), "installed": sum(r["installed"] for r in rows)},
           "drops": per_tenant_pair(rows, list(t.tenants)) if t.isolation else [],
           "probes": list(record.probes), "proven": None}
    if t.isolation:
        out["proven"] = all(p["passed"] for p in record.probes) and all(r["installed"] for r in rows) \
            and bool(record.probes)
    return out


def failures(b: dict) -> list[str]:
    """One sentence per isolation failure in a ``tenants`` block."""
    out = []
    for p in b["probes"]:
        if p["passed"]:
            continue
        if p["expected"] == "blocked":
            out.append(f"isolation broken: probe {p['src']} ({p['src_tenant']}) -> {p['dst']} ({p['dst_tenant']}) "
                       f"delivered {p['delivered_pkts']} of {p['sent_pkts']} packets"
                       f"{', ARP answered' if p['arp_replied'] else ''}; a cross-tenant probe must deliver 0")
        else:
            out.append(f"allowed traffic blocked: probe {p['src']} ({p['src_tenant']}) -> {p['dst']} "
                       f"({p['dst_tenant']}) delivered {p['delivered_pkts']} of {p['sent_pkts']} packets"
                       f"{'' if p['arp_replied'] else ', no ARP answer'}; it must deliver every packet")
    missing = b["drop_flows"]["planned"] - b["drop_flows"]["installed"]
    if missing:
        out.append(f"isolation: {missing} of {b['drop_flows']['planned']} planned drop flows are not on the switches")
    if b["isolation"] and not b["probes"]:
        out.append("isolation: no probe ran (each tenant needs a host)")
    return out


def add_results(record: Optional[TenantRecord], summary: dict, verdict, run_dir: Path) -> None:
    """Add the ``tenants`` block to ``summary``, the ``isolation`` check to ``verdict``
    (testbed.measure.verdict.FidelityVerdict; isolation on only) and ``tenant_drops.csv`` (one row per drop
    flow) to ``run_dir``."""
    if record is None:
        return
    b = block(record)
    summary["tenants"] = b
    if record.drop_rows:
        import pandas as pd
        from testbed.results.rundir import RunDir
        RunDir(run_dir).write_table(DROPS_TABLE, pd.DataFrame(record.drop_rows))
    if b["isolation"]:
        bad = failures(b)
        verdict.add("isolation", FAILED if bad else PASSED, "\n".join(bad))


def lines(summary: dict) -> list[str]:
    """The printed lines of summary.json's ``tenants`` block ([] without one)."""
    b = summary.get("tenants")
    if not b:
        return []
    names = ", ".join(f"{k} {len(v)} host{'s' if len(v) != 1 else ''}" for k, v in b["tenants"].items())
    shared = f"; shared {', '.join(b['shared_hosts'])}" if b["shared_hosts"] else ""
    if not b["isolation"]:
        return [f"# tenants: {names}{shared}; isolation off"]
    ok = sum(p["passed"] for p in b["probes"])
    out = [f"# tenants: {names}{shared}; isolation on: {b['allowed_pairs']} allowed host pairs, "
           f"{b['forbidden_pairs']} dropped at the ingress leaf ({b['drop_flows']['installed']} drop flows)",
           f"# tenants: probes {ok} of {len(b['probes'])} as expected ("
           + ", ".join(f"{p['src']}->{p['dst']} {p['kind']} {p['delivered_pkts']}/{p['sent_pkts']}"
                       for p in b["probes"]) + ")"]
    drops = [d for d in b["drops"] if d["dropped_pkts"]]
    out.append("# tenants: dropped by isolation: " + (", ".join(
        f"{d['src_tenant']}->{d['dst_tenant']} {d['dropped_pkts']} pkts {d['dropped_bytes']} B" for d in drops)
        or "nothing"))
    return out
