"""summary.json's stable shape: the same top-level keys in every run, complete or cut short (issue 22: a script's
``summary["x"]["y"]`` chain must not crash because one run lacked a block or held a string where another held a
dict).

- :data:`SUMMARY_KEYS`: every run's keys, in this order; a block a run did not have is ``None`` (``faults``
  without failures, ``jobs`` without a jobs workload, ...); ``congestion`` is always a dict
  (testbed.results.congestion.stable_congestion).
- A run cut short has ``transport`` with every key of :data:`TRANSPORT_KEYS` (``None``: not measured),
  ``fidelity`` ``{}`` and ``checks`` ``{}`` (nothing judged), ``verdict`` ``"incomplete"``.
"""
from __future__ import annotations

#: summary.json ``verdict`` of a run cut short (beside testbed.measure.verdict's faithful, not_faithful,
#: not_judged): nothing was judged.
INCOMPLETE = "incomplete"

#: summary.json ``transport``'s keys (testbed.measure.transport_totals.transport_totals, then testbed.pipeline.judge).
TRANSPORT_KEYS = (
    "posted_bytes", "acked_bytes", "delivered_bytes", "order_errors", "dup_pkts", "retx_pkts", "retx_bytes",
    "resent_share", "spurious_retx_pkts", "timeouts", "naks", "ce_marked_rx_pkts", "cnps_tx", "cnps_rx",
    "sent_pkts", "received_pkts", "switch_drops_pkts", "unexplained_lost_pkts", "loss_recovery",
    "host_nic_retries", "lost_to_faults_pkts",
)

#: The keys of every summary.json, in order: the run, its state, the verdict, the measurement, then the
#: blocks only some runs fill (``None`` in the others).
SUMMARY_KEYS = (
    "run_id", "run_dir", "scenario", "n_ranks",
    "complete", "incomplete_reason", "interrupted", "teardown", "ops_done", "ops_planned",
    "faithful", "verdict", "violations", "not_judged", "checks", "fidelity",
    "controller", "host_link_bps", "payload_efficiency", "scale_factor", "transport", "percentile_method",
    "sizes", "congestion",
    "faults", "traffic_classes", "background", "pfc_hosts", "load_balance", "fit", "tenants", "jobs", "chakra",
    "replay", "perftest",
)


def stable_transport(block: dict | None) -> dict:
    """``transport`` with every key of :data:`TRANSPORT_KEYS` (None where ``block`` lacks it), then
    ``block``'s other keys."""
    block = block or {}
    return {**{k: block.get(k) for k in TRANSPORT_KEYS}, **{k: v for k, v in block.items() if k not in TRANSPORT_KEYS}}


def stable_summary(summary: dict) -> dict:
    """``summary`` with every key of :data:`SUMMARY_KEYS` in that order (None where it lacks one), then its
    other keys; ``transport`` in :func:`stable_transport`'s shape."""
    out = {k: summary.get(k) for k in SUMMARY_KEYS}
    out["transport"] = stable_transport(out["transport"])
    return {**out, **{k: v for k, v in summary.items() if k not in SUMMARY_KEYS}}
