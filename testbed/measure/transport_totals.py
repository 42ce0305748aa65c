"""Transport totals of a run: what the queue pairs sent, received, resent and lost (qps.csv summed), and
the spurious retransmissions among them.

summary.json's ``transport`` block starts from :func:`transport_totals`; the fidelity checks
(testbed.measure.fidelity_checks: transport_loss, spurious_retx, bytes) judge it.
"""
from __future__ import annotations

import pandas as pd


def spurious_retx_pkts(qps: pd.DataFrame, window_pkts: int) -> int:
    """Spurious retransmissions of a run: duplicates the loss of packets cannot explain.

    Definition: a data packet that reaches its responder with a PSN the
    responder had already accepted (``dup_pkts``) is a retransmission whose
    original had arrived. Go-back-N legitimately causes such duplicates after a
    loss on the same queue pair: a lost ACK, or a lost last packet recovered by
    timeout, makes the requester resend at most one window. So per queue pair
    (requester at rank r towards q, responder at rank q for r)::

        lost      = (requester tx_pkts - responder rx_pkts)          # data lost
                  + (responder acks_tx + naks_tx) - (requester acks_rx + naks_rx)  # ACKs/NAKs lost
        spurious  = max(0, responder dup_pkts - lost * window_pkts)

    With no loss anywhere every duplicate is spurious (a timer fired before an
    ACK that was on its way: e.g. a late ACK because the CPU was busy, or
    ``rto_us`` below the round trip). ``qps``: qps.csv rows (rank, peer, channel, role,
    tx_pkts, acks_rx, naks_rx, rx_pkts, dup_pkts, acks_tx, naks_tx).
    """
    if qps is None or len(qps) == 0:
        return 0
    q = qps.fillna(0)
    for key in ("trial", "channel"):  # pattern trials (testbed.workloads.pattern.workload) have fresh QPs per trial; channels
        if key not in q:              # (traffic.collectives.channels) their own QPs per peer
            q = q.assign(**{key: 0})
    keys = ["rank", "peer", "trial", "channel"]
    req = q[q["role"] == "requester"].set_index(keys)[["tx_pkts", "acks_rx", "naks_rx"]]
    resp = q[q["role"] == "responder"]
    # the responder at rank q for peer r answers the requester at rank r towards peer q (same trial, channel)
    resp = resp.set_index(pd.MultiIndex.from_arrays([resp["peer"], resp["rank"], resp["trial"], resp["channel"]],
                                                    names=keys))
    j = req.join(resp[["rx_pkts", "dup_pkts", "acks_tx", "naks_tx"]], how="inner").astype("int64")
    lost = ((j["tx_pkts"] - j["rx_pkts"]).clip(lower=0)
            + (j["acks_tx"] + j["naks_tx"] - j["acks_rx"] - j["naks_rx"]).clip(lower=0))
    return int((j["dup_pkts"] - lost * window_pkts).clip(lower=0).sum())


def transport_totals(qps: pd.DataFrame, rx_pkts: list[int], switch_drops: int, window_pkts: int) -> dict:
    """Transport totals of a run for :func:`evaluate` and summary.json.

    ``qps``: qps.csv rows; ``rx_pkts``: packets each host's endpoint received;
    ``switch_drops``: emulated queue tail drops during the traffic. Sent packets
    are data (requester tx_pkts) plus ACKs, NAKs and CNPs (responder acks_tx, naks_tx, cnps_tx).
    ``retx_bytes``: payload bytes retransmitted; ``resent_share``: retx_bytes / posted_bytes.
    ``ce_marked_rx_pkts``: data packets that arrived CE-marked; ``cnps_tx``/``cnps_rx``: CNPs
    the notification points sent and the requesters received.
    """
    req, resp = qps[qps["role"] == "requester"], qps[qps["role"] == "responder"]
    cnps_tx = int(resp["cnps_tx"].sum()) if "cnps_tx" in resp else 0
    posted = int(req["posted_bytes"].sum())
    retx_bytes = int(req["retx_bytes"].sum()) if "retx_bytes" in req else 0
    sent_pkts = int(req["tx_pkts"].sum() + resp["acks_tx"].sum() + resp["naks_tx"].sum()) + cnps_tx
    recv_pkts = int(sum(rx_pkts))
    return {
        "posted_bytes": posted, "acked_bytes": int(req["acked_bytes"].sum()),
        "delivered_bytes": int(resp["delivered_bytes"].sum()), "order_errors": int(resp["order_errors"].sum()),
        "dup_pkts": int(resp["dup_pkts"].sum()), "retx_pkts": int(req["retx_pkts"].sum()),
        # payload bytes resent, and their share of the posted bytes (the data moved is 1 + share times the posted)
        "retx_bytes": retx_bytes, "resent_share": round(retx_bytes / posted, 4) if posted else 0.0,
        "spurious_retx_pkts": spurious_retx_pkts(qps, window_pkts),
        "timeouts": int(req["timeouts"].sum()), "naks": int(req["naks_rx"].sum()),
        "ce_marked_rx_pkts": int(resp["ce_pkts"].sum()) if "ce_pkts" in resp else 0, "cnps_tx": cnps_tx,
        "cnps_rx": int(req["cnps_rx"].sum()) if "cnps_rx" in req else 0,
        "sent_pkts": sent_pkts, "received_pkts": recv_pkts, "switch_drops_pkts": switch_drops,
        "unexplained_lost_pkts": sent_pkts - recv_pkts - switch_drops,
    }
