"""Per-job and per-tenant results of a ``jobs`` run: jobs.csv, tenants.csv, summary.json's ``jobs`` block.

- jobs.csv: one row per job and message size over the job's timed ops: busbw as nccl-tests reports it
  (mean time over the ops; busbw = size x 8 / time x the algorithm's factor; busbw_ratio = busbw / (host
  link rate x payload efficiency)), the job's completion time ``jct_s`` (its last op's end less its
  first op's start, warm-ups included) and its fair share (testbed.jobs.links); with ``--solo``
  (testbed.jobs.solo) the same job's figures alone on the fabric and its slowdowns.
- tenants.csv: one row per tenant: its jobs, hosts, ops, mean busbw ratio over its jobs, longest JCT, and the
  bytes its jobs' requester QPs put on the wire per traffic class (qps.csv ``tx_wire_bytes`` by the QP's
  ``dscp``: 26 lossless, 0 lossy; :func:`class_wire_bytes`).
- summary.json ``jobs``: ``jobs`` (one entry per job), ``tenants``, ``shared_links`` (link -> the jobs
  whose paths may cross it) and ``fair_share_model``.
"""
from __future__ import annotations

import math

import pandas as pd

from testbed.results import tables
from traffic.transport.qp import CLASS_TOS

#: DSCP of a traffic class's data packets -> the class (traffic.transport.qp.CLASS_TOS)
CLASS_OF_DSCP = {tos >> 2: name for name, tos in CLASS_TOS.items()}

#: the printed name of the fair-share model (testbed.jobs.links)
FAIR_SHARE_MODEL = ("progressive filling over the links each job's flows cross, flows split evenly over equal "
                    "paths (spraying); r_j / host link rate = the busbw ratio a ring job gets")


def job_ops(rank_rows: list, op_meta: dict[int, dict], n_ranks: int) -> pd.DataFrame:
    """ops.csv's rows (testbed.results.tables.ops_table) with the ``job`` of each op (op_meta[op_id]['job'])."""
    ops = tables.ops_table(rank_rows, op_meta, n_ranks)
    ops["job"] = [op_meta[int(k)].get("job", "") for k in ops["op_id"]] if len(ops) else pd.Series(dtype=str)
    return ops


def _f(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def job_entries(ops: pd.DataFrame, jobs, goodput_bps: float, fair: dict[str, float], fair_solo: dict[str, float],
                host_link_bps: float, loads: dict, shared: dict) -> list[dict]:
    """summary.json's ``jobs.jobs``: per placed job (testbed.jobs.plan.PlacedJob) its ops, span, JCT, busbw
    ratio (mean over its timed ops of busbw_bps / ``goodput_bps``), fair busbw ratios (``fair``/``fair_solo``:
    job -> r_j bit/s, testbed.jobs.links.fair_rates, over ``host_link_bps``) and links."""
    from testbed.jobs.links import link_name

    out = []
    for j in jobs:
        mine = ops[ops["job"] == j.name] if len(ops) else ops
        timed = mine[~mine["warmup"].astype(bool)] if len(mine) else mine
        t0 = int(mine["t_start_ns"].min()) if len(mine) else None
        t1 = int(mine["t_end_ns"].max()) if len(mine) else None
        out.append({**j.as_dict(), "ops_done": int(len(mine)), "timed_ops": int(len(timed)),
                    "t_start_ns": t0, "t_end_ns": t1, "jct_s": (t1 - t0) / 1e9 if len(mine) else None,
                    "busbw_bps": _f(timed["busbw_bps"].mean()) if len(timed) else None,
                    "busbw_ratio": _f(timed["busbw_bps"].mean() / goodput_bps) if len(timed) else None,
                    "fair_busbw_ratio": min(1.0, fair[j.name] / host_link_bps),
                    "solo_fair_busbw_ratio": min(1.0, fair_solo[j.name] / host_link_bps),
                    "links": [link_name(k) for k in sorted(loads.get(j.name, {}))],
                    "shares_links_with": sorted({o for users in shared.values() if j.name in users
                                                 for o in users if o != j.name})})
    return out


def class_wire_bytes(qps: pd.DataFrame, ranks) -> dict[str, int]:
    """Traffic class -> bytes the requester QPs of ``ranks`` put on the wire (qps.csv ``tx_wire_bytes``,
    retransmissions and headers included), by each QP's ``dscp`` (:data:`CLASS_OF_DSCP`; another DSCP is
    named ``dscp<N>``). Every class of CLASS_TOS is present (0 when none). {} without QP records."""
    if qps is None or not len(qps) or "dscp" not in qps.columns:
        return {}
    req = qps[(qps["role"] == "requester") & qps["rank"].isin(list(ranks))]
    out = dict.fromkeys(CLASS_TOS, 0)
    for dscp, g in req.groupby("dscp"):
        name = CLASS_OF_DSCP.get(int(dscp), f"dscp{int(dscp)}")
        out[name] = out.get(name, 0) + int(g["tx_wire_bytes"].sum())
    return out


def jobs_table(ops: pd.DataFrame, entries: list[dict], goodput_bps: float) -> pd.DataFrame:
    """jobs.csv (module docstring): one row per job and size over the job's timed ops."""
    rows = []
    for e in entries:
        mine = ops[(ops["job"] == e["name"]) & ~ops["warmup"].astype(bool)] if len(ops) else ops
        for size, g in (mine.groupby("size_bytes") if len(mine) else ()):
            factor = float(g["busbw_factor"].iloc[0])
            t_us = float(g["time_us"].mean())
            busbw = size * 8 / (t_us / 1e6) * factor
            rows.append({"job": e["name"], "tenant": e["tenant"], "hosts": " ".join(e["hosts"]),
                         "n_ranks": len(e["hosts"]), "placement": e["placement"], "traffic_class": e["traffic_class"],
                         "start_s": e["start_s"], "size_bytes": int(size), "ops": int(len(g)), "time_us": t_us,
                         "busbw_bps": busbw, "busbw_ratio": busbw / goodput_bps, "jct_s": e["jct_s"],
                         "fair_busbw_ratio": e["fair_busbw_ratio"]})
    return pd.DataFrame(rows, columns=JOBS_COLUMNS)


JOBS_COLUMNS = ["job", "tenant", "hosts", "n_ranks", "placement", "traffic_class", "start_s", "size_bytes", "ops",
                "time_us", "busbw_bps", "busbw_ratio", "jct_s", "fair_busbw_ratio"]
TENANTS_COLUMNS = ["tenant", "n_jobs", "n_hosts", "ops", "busbw_ratio_mean", "jct_max_s"] + [
    f"{c}_tx_wire_bytes" for c in CLASS_TOS]


def tenant_entries(entries: list[dict]) -> list[dict]:
    """summary.json's ``jobs.tenants`` / tenants.csv rows: per tenant (first-seen order) its jobs, hosts, timed
    ops, mean busbw ratio over its jobs and longest JCT; with solo figures, its largest JCT slowdown; with the
    jobs' ``tx_wire_bytes_by_class`` (:func:`class_wire_bytes`), ``<class>_tx_wire_bytes`` summed over its jobs."""
    out: dict[str, dict] = {}
    for e in entries:
        t = out.setdefault(e["tenant"], {"tenant": e["tenant"], "jobs": [], "n_hosts": 0, "ops": 0,
                                         "_ratios": [], "_jcts": [], "_slow": [], "_bytes": {}})
        for c, b in (e.get("tx_wire_bytes_by_class") or {}).items():
            t["_bytes"][c] = t["_bytes"].get(c, 0) + b
        t["jobs"].append(e["name"])
        t["n_hosts"] += len(e["hosts"])
        t["ops"] += e["timed_ops"]
        if e["busbw_ratio"] is not None:
            t["_ratios"].append(e["busbw_ratio"])
        if e["jct_s"] is not None:
            t["_jcts"].append(e["jct_s"])
        if e.get("jct_slowdown") is not None:
            t["_slow"].append(e["jct_slowdown"])
    rows = []
    for t in out.values():
        row = {"tenant": t["tenant"], "jobs": t["jobs"], "n_jobs": len(t["jobs"]), "n_hosts": t["n_hosts"],
               "ops": t["ops"], "busbw_ratio_mean": sum(t["_ratios"]) / len(t["_ratios"]) if t["_ratios"] else None,
               "jct_max_s": max(t["_jcts"]) if t["_jcts"] else None}
        row.update({f"{c}_tx_wire_bytes": b for c, b in t["_bytes"].items()})
        if t["_slow"]:
            row["jct_slowdown_max"] = max(t["_slow"])
        rows.append(row)
    return rows


def tenants_table(tenants: list[dict]) -> pd.DataFrame:
    """tenants.csv from :func:`tenant_entries` (``jct_slowdown_max`` when solo runs were made)."""
    cols = TENANTS_COLUMNS + (["jct_slowdown_max"] if any("jct_slowdown_max" in t for t in tenants) else [])
    return pd.DataFrame([{c: t.get(c) for c in cols} for t in tenants], columns=cols)


def format_jobs(block: dict) -> str:
    """The printed jobs table (busbw/link: busbw ratio; fair: the fair-share busbw ratio; with solo runs the
    solo busbw ratio and JCT slowdown) and the interference matrix when there is one."""
    solo = any(e.get("solo_busbw_ratio") is not None for e in block["jobs"])
    head = (f"{'job':<10} {'tenant':<8} {'hosts':<24} {'placement':<9} {'ops':>4} {'busbw/link':>10} {'fair':>5} "
            f"{'JCT(s)':>7}" + (f" {'solo busbw/link':>15} {'solo JCT(s)':>11} {'slowdown':>8}" if solo else ""))
    lines = ["jobs:", head]

    def n(v, fmt):
        return format(v, fmt) if v is not None else "-"
    for e in block["jobs"]:
        line = (f"{e['name']:<10} {e['tenant']:<8} {','.join(e['hosts']):<24} {e['placement']:<9} {e['timed_ops']:>4} "
                f"{n(e['busbw_ratio'], '.3f'):>10} {n(e['fair_busbw_ratio'], '.2f'):>5} {n(e['jct_s'], '.2f'):>7}")
        if solo:
            line += (f" {n(e.get('solo_busbw_ratio'), '.3f'):>15} {n(e.get('solo_jct_s'), '.2f'):>11} "
                     f"{n(e.get('jct_slowdown'), '.2f'):>8}")
        lines.append(line)
    m = block.get("interference")
    if m:
        names = m["jobs"]
        lines.append(f"interference matrix (JCT slowdown of the row's job run with the column's job; {m['method']}):")
        lines.append(" " * 10 + "".join(f"{c:>10}" for c in names))
        for r, row in zip(names, m["jct_slowdown"]):
            lines.append(f"{r:<10}" + "".join(f"{n(v, '.2f'):>10}" for v in row))
    if block.get("shared_links"):
        shared = list(block["shared_links"])
        more = ", ..." if len(shared) > 6 else ""
        lines.append(f"links two or more jobs may cross: {len(shared)} ({', '.join(shared[:6])}{more})")
    else:
        lines.append("no link carries two jobs' traffic (placement keeps them apart)")
    return "\n".join(lines)
