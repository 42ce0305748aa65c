"""Per-job and per-tenant results of a ``jobs`` run: jobs.csv, tenants.csv, summary.json's ``jobs`` block.

- jobs.csv: one row per job, op group, collective and message size over the job's timed ops (a sweep job:
  one row per size, its group is the job's name; a SimAI job: one row per group scope (TP, DP, EP,
  DP_EP, PP), collective and size): busbw as nccl-tests reports it (mean time over the ops; busbw =
  size x 8 / time x the algorithm's factor; busbw_ratio = busbw / (host link rate x payload
  efficiency)), the job's completion time ``jct_s`` and its fair share (testbed.workloads.jobs.links); with
  ``--solo`` (testbed.workloads.jobs.solo) the same job's figures alone on the fabric and its slowdowns. A pattern
  job (testbed.workloads.pattern.job) has one row (group: its name, collective: its pattern's kind): its passes,
  the bytes of one pass, its mean pass time and its flows' FCT and slowdown percentiles; no busbw.
- JCT: a sweep job's last op's end less its first op's start (warm-ups included); a SimAI job's sum of
  its iteration times (testbed.workloads.replay.run: first compute to last collective, compute waits included),
  ``iteration_s`` their mean; its entry holds the replay's ``replay`` block (per-group communication
  and busy time, streams, stages, steps: the figures a single SimAI run gives under summary.json
  ``replay``); a pattern job's first pass's start to its last pass's last ACK.
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

#: the printed name of the fair-share model (testbed.workloads.jobs.links)
FAIR_SHARE_MODEL = ("progressive filling over the links each job's flows cross, flows split evenly over equal "
                    "paths (spraying); r_j / host link rate = the busbw ratio a ring job gets")


def job_ops(rank_rows: list, op_meta: dict[int, dict], n_ranks: int) -> pd.DataFrame:
    """ops.csv's rows (testbed.results.tables.ops_table) with the ``job`` of each op (op_meta[op_id]['job'])."""
    ops = tables.ops_table(rank_rows, op_meta, n_ranks)  # with its job column when any op has a job
    if "job" not in ops:
        ops["job"] = [op_meta[int(k)].get("job", "") for k in ops["op_id"]] if len(ops) else pd.Series(dtype=str)
    return ops


def _f(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def replay_iterations_s(replay: dict) -> list[float]:
    """Every iteration time of a ``replay`` block (testbed.workloads.replay.run.run_replay; both modes with compare), s."""
    if replay["overlap"] == "compare":
        return list(replay["off"]["iterations_s"]) + list(replay["on"]["iterations_s"])
    return list(replay["iterations_s"])


def job_entries(ops: pd.DataFrame, jobs, goodput_bps: float, fair: dict[str, float], fair_solo: dict[str, float],
                host_link_bps: float, loads: dict, shared: dict, *, replays: dict | None = None,
                patterns: dict | None = None) -> list[dict]:
    """summary.json's ``jobs.jobs``: per placed job (testbed.workloads.jobs.plan.PlacedJob) its ops, span, JCT, busbw
    ratio (mean over its timed ops of busbw_bps / ``goodput_bps``), fair busbw ratios (``fair``/``fair_solo``:
    job -> r_j bit/s, testbed.workloads.jobs.links.fair_rates, over ``host_link_bps``) and links; a SimAI job's
    ``replay`` block (``replays``: job -> testbed.workloads.replay.run.run_replay's block), ``iteration_s`` and its
    JCT from it (module docstring). ``patterns``: a pattern job's name -> its figures
    (testbed.workloads.pattern.job.figures): its passes count as its ops, its JCT runs from its first pass's start to
    its last ACK, its ``pattern`` block holds its FCT figures; no busbw, no fair busbw ratio (None). The
    other jobs' ``pattern`` is None."""
    from testbed.workloads.jobs.links import link_name

    out = []
    for j in jobs:
        links = {"links": [link_name(k) for k in sorted(loads.get(j.name, {}))],
                 "shares_links_with": sorted({o for users in shared.values() if j.name in users
                                              for o in users if o != j.name})}
        if j.name in (patterns or {}):
            f = patterns[j.name]
            out.append({**j.as_dict(), "ops_done": f["passes"], "timed_ops": f["passes"], "t_start_ns": f["t_start_ns"],
                        "t_end_ns": f["t_end_ns"], "jct_s": f["jct_s"], "busbw_bps": None, "busbw_ratio": None,
                        "fair_busbw_ratio": None, "solo_fair_busbw_ratio": None, **links, "pattern": f["pattern"]})
            continue
        replay = (replays or {}).get(j.name)
        mine = ops[ops["job"] == j.name] if len(ops) else ops
        timed = mine[~mine["warmup"].astype(bool)] if len(mine) else mine
        t0 = int(mine["t_start_ns"].min()) if len(mine) else None
        t1 = int(mine["t_end_ns"].max()) if len(mine) else None
        out.append({**j.as_dict(), "ops_done": int(len(mine)), "timed_ops": int(len(timed)),
                    "t_start_ns": t0, "t_end_ns": t1, "jct_s": (t1 - t0) / 1e9 if len(mine) else None,
                    "busbw_bps": _f(timed["busbw_bps"].mean()) if len(timed) else None,
                    "busbw_ratio": _f(timed["busbw_bps"].mean() / goodput_bps) if len(timed) else None,
                    "fair_busbw_ratio": min(1.0, fair[j.name] / host_link_bps),
                    "solo_fair_busbw_ratio": min(1.0, fair_solo[j.name] / host_link_bps), **links, "pattern": None})
        if replay is not None:
            its = replay_iterations_s(replay)
            out[-1].update(jct_s=sum(its), iteration_s=sum(its) / len(its), iterations=len(its), replay=replay)
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
    """jobs.csv (module docstring): one row per job, group, collective and size over the job's timed ops; one
    row per pattern job (its passes: ``size_bytes`` the bytes of one pass, ``time_us`` the mean pass time, its
    FCT figures)."""
    rows = []
    for e in entries:
        p = e.get("pattern")
        if p is not None:
            rows.append({"job": e["name"], "tenant": e["tenant"], "hosts": " ".join(e["hosts"]),
                         "n_ranks": len(e["hosts"]), "placement": e["placement"], "traffic_class": e["traffic_class"],
                         "start_s": e["start_s"], "workload": "pattern", "group": e["name"], "collective": p["kind"],
                         "size_bytes": p["bytes_per_pass"], "ops": e["timed_ops"], "time_us": p["pass_time_us_mean"],
                         "busbw_bps": None, "busbw_ratio": None, "jct_s": e["jct_s"], "iteration_s": None,
                         "fair_busbw_ratio": None, **{k: p[k] for k in PATTERN_FIGURES}})
            continue
        mine = ops[(ops["job"] == e["name"]) & ~ops["warmup"].astype(bool)] if len(ops) else ops
        for (group, coll, size), g in (mine.groupby(["group", "collective", "size_bytes"], sort=False)
                                       if len(mine) else ()):
            factor = float(g["busbw_factor"].iloc[0])
            t_us = float(g["time_us"].mean())
            busbw = size * 8 / (t_us / 1e6) * factor
            rows.append({"job": e["name"], "tenant": e["tenant"], "hosts": " ".join(e["hosts"]),
                         "n_ranks": len(e["hosts"]), "placement": e["placement"], "traffic_class": e["traffic_class"],
                         "start_s": e["start_s"], "workload": e.get("workload", "sizes"), "group": group,
                         "collective": coll, "size_bytes": int(size), "ops": int(len(g)), "time_us": t_us,
                         "busbw_bps": busbw, "busbw_ratio": busbw / goodput_bps, "jct_s": e["jct_s"],
                         "iteration_s": e.get("iteration_s"), "fair_busbw_ratio": e["fair_busbw_ratio"]})
    return pd.DataFrame(rows, columns=JOBS_COLUMNS)


#: a pattern job's FCT figures in jobs.csv (testbed.workloads.pattern.results.fct_figures; NaN for the other jobs)
PATTERN_FIGURES = ("fct_p50_us", "fct_p99_us", "slowdown_p50", "slowdown_p99")
JOBS_COLUMNS = ["job", "tenant", "hosts", "n_ranks", "placement", "traffic_class", "start_s", "workload", "group",
                "collective", "size_bytes", "ops", "time_us", "busbw_bps", "busbw_ratio", "jct_s", "iteration_s",
                "fair_busbw_ratio", *PATTERN_FIGURES]
#: the columns that name one jobs.csv row (the solo figures join on them, testbed.workloads.jobs.solo)
JOBS_ROW_KEY = ["job", "group", "collective", "size_bytes"]
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


def _unfaithful_baselines(block: dict) -> set[tuple[str, ...]]:
    """The jobs of each solo (one job) or pair run in ``block["solo_baseline"]["runs"]`` that cannot be a
    baseline (its ``problem``: testbed.workloads.jobs.solo_store.unusable)."""
    return {tuple(r["jobs"]) for r in (block.get("solo_baseline") or {}).get("runs") or () if r.get("problem")}


def format_jobs(block: dict) -> str:
    """The printed jobs table (busbw/link: busbw ratio; fair: the fair-share busbw ratio; with solo runs the
    solo busbw ratio and JCT slowdown) and the interference matrix when there is one. A slowdown or matrix
    cell resting on a solo or pair run that is not faithful (:func:`_unfaithful_baselines`) is marked ``*``,
    with a line saying so."""
    solo = any(e.get("solo_busbw_ratio") is not None for e in block["jobs"])
    bad = _unfaithful_baselines(block)
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
                     f"{n(e.get('jct_slowdown'), '.2f'):>8}" + ("*" if (e["name"],) in bad else ""))
        lines.append(line)
        p = e.get("pattern")
        if p is not None:
            lines.append(f"{'':<10} pattern {p['kind']}: {p['flows_per_pass']} flows x {e['timed_ops']} pass(es), FCT "
                         f"p50 {n(p['fct_p50_us'], '.0f')} us p99 {n(p['fct_p99_us'], '.0f')} us, slowdown p50 "
                         f"{n(p['slowdown_p50'], '.2f')} p99 {n(p['slowdown_p99'], '.2f')}, completion ideal/measured "
                         f"{n(p['completion_ratio_mean'], '.3f')}"
                         + (f"; FCT p99 alone {n(e['solo_fct_p99_us'], '.0f')} us" if e.get("solo_fct_p99_us") else ""))
    m = block.get("interference")
    if m:
        names = m["jobs"]
        pairs = bool(m.get("pair_run_dirs"))

        def marked(a: str, b: str) -> bool:  # M[a][b] rests on a's solo run and (N > 2) the pair's run
            return a != b and ((a,) in bad or (pairs and (tuple(sorted((a, b), key=names.index)) in bad)))
        w = 9 if bad else 10  # room for the mark after each cell
        lines.append(f"interference matrix (JCT slowdown of the row's job run with the column's job; {m['method']}):")
        lines.append((" " * 10 + "".join(f"{c:>{w}}" + " " * (10 - w) for c in names)).rstrip())
        for r, row in zip(names, m["jct_slowdown"]):
            lines.append(f"{r:<10}" + "".join(f"{n(v, '.2f'):>{w}}" + ("*" if marked(r, c) else " " * (10 - w))
                                              for c, v in zip(names, row)).rstrip())
    if bad:
        lines.append("* rests on a solo or pair run that is NOT faithful (testbed: warning lines, summary.json "
                     "jobs.solo_baseline.warnings)")
    if block.get("shared_links"):
        shared = list(block["shared_links"])
        more = ", ..." if len(shared) > 6 else ""
        lines.append(f"links two or more jobs may cross: {len(shared)} ({', '.join(shared[:6])}{more})")
    else:
        lines.append("no link carries two jobs' traffic (placement keeps them apart)")
    return "\n".join(lines)
