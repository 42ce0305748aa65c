"""Background flows' results: background.csv, summary.json's ``background`` block and printed lines.

A sized run (tcp with size_bytes, storage bursts) reports traffic.sized_tcp's JSON: bytes the sink
read, FCT = the sender's end - start (connection set-up to the sink's close after the last byte),
goodput = bytes x 8 / FCT, retransmits (TCP_INFO). A duration run is read from iperf3's JSON (``-J``)
of its client and server (testbed.emulation.background):

- bytes: what the receiver got. A run that ended by itself carries the server's count in the
  client's JSON (``end.sum_received.bytes``); an interrupted one (a duration flow at its end, or
  any flow when the workload ended) has it only in the server's JSON (same key, TCP; UDP servers
  report ``end.sum``);
- seconds: the sender's test time (``end.sum_sent.seconds``, UDP ``end.sum.seconds``), without the
  connection set-up; goodput_bps = bytes x 8 / seconds;
- retransmits: TCP ``end.sum_sent.retransmits``; lost_pkts: UDP ``end.sum.lost_packets`` of the
  receiver.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pandas as pd

COLUMNS = ("name", "kind", "burst", "src", "dst", "streams", "status", "start_ns", "end_ns", "size_bytes", "bytes",
           "seconds", "goodput_bps", "fct_s", "retransmits", "lost_pkts")

#: columns of integers that may be empty (a run not started, a duration flow's size)
INT_COLUMNS = ("start_ns", "end_ns", "size_bytes", "bytes", "retransmits", "lost_pkts")


def read_iperf_json(path: Path) -> Optional[dict]:
    """The JSON document iperf3 wrote to ``path`` (its stdout), None when absent, empty or not JSON (a
    process killed before it wrote)."""
    try:
        text = Path(path).read_text(errors="replace").strip()
    except OSError:
        return None
    if not text:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        start = text.find("{")  # iperf3 may print a line before its JSON
        try:
            doc = json.loads(text[start:]) if start >= 0 else None
        except json.JSONDecodeError:
            return None
    return doc if isinstance(doc, dict) else None


def _end(doc: Optional[dict]) -> dict:
    return (doc or {}).get("end") or {}


def received_bytes(client: Optional[dict], server: Optional[dict], udp: bool) -> Optional[int]:
    """Payload bytes the receiver got (module docstring); None when neither end reported them."""
    order = ((server, "sum"), (server, "sum_received"), (client, "sum_received")) if udp else \
        ((client, "sum_received"), (server, "sum_received"))
    for doc, key in order:
        s = _end(doc).get(key)
        if s and s.get("bytes"):
            return int(s["bytes"])
    for doc in (client, server):  # a run that moved nothing still reports 0
        if doc is not None and _end(doc):
            return 0
    return None


def udp_lost(client: Optional[dict], server: Optional[dict]) -> Optional[int]:
    """UDP datagrams the receiver counted lost (the server's ``end.sum.lost_packets``, else the client's
    copy of it), None when neither has it."""
    for doc in (server, client):
        s = _end(doc).get("sum") or {}
        if "lost_packets" in s:
            return int(s["lost_packets"])
    return None


def sender_seconds(client: Optional[dict], udp: bool) -> Optional[float]:
    """The sender's test time, s (module docstring)."""
    s = _end(client).get("sum" if udp else "sum_sent") or {}
    v = s.get("seconds")
    return float(v) if v else None


def sized_row(run, client: Optional[dict], server: Optional[dict]) -> dict:
    """The measured columns of a sized run from traffic.sized_tcp's JSON: bytes the sink read (the sender's
    size when the sink wrote nothing), FCT and goodput over the sender's start..end, retransmits."""
    status = run.status
    if status == "done" and (client is None or client.get("error")):
        status = "failed"
    got = (server or {}).get("bytes")
    if got is None and status == "done":
        got = client["bytes"]
    start, end = (client or {}).get("start_ns", run.t_start_ns), (client or {}).get("end_ns", run.t_end_ns)
    fct = (end - start) / 1e9 if status == "done" else None
    return {"status": status, "start_ns": start, "end_ns": end, "bytes": got, "seconds": fct,
            "goodput_bps": got * 8 / fct if got is not None and fct else None, "fct_s": fct,
            "retransmits": (client or {}).get("retransmits"), "lost_pkts": None}


def flow_row(run, host_names: list[str], folder: Path) -> dict:
    """background.csv's row of a testbed.emulation.background.ClientRun whose JSON lies in ``folder``."""
    head = {"name": run.name, "kind": run.kind, "burst": run.burst, "src": host_names[run.src],
            "dst": host_names[run.dst], "streams": run.parallel, "size_bytes": run.size_bytes}
    if run.sized:
        row = sized_row(run, read_iperf_json(folder / f"{run.tag}.client.json"),
                        read_iperf_json(folder / f"{run.tag}.server.json"))
        return {c: {**head, **row}[c] for c in COLUMNS}
    udp = run.kind == "udp"
    client = read_iperf_json(folder / f"{run.tag}.client.json")
    server = read_iperf_json(folder / f"{run.tag}.server.json")
    got = received_bytes(client, server, udp)
    seconds = sender_seconds(client, udp)
    if seconds is None and run.t_start_ns is not None and run.t_end_ns is not None:
        seconds = (run.t_end_ns - run.t_start_ns) / 1e9
    status = run.status
    if status == "done" and client is None:
        status = "failed"
    retrans = _end(client).get("sum_sent", {}).get("retransmits") if not udp else None
    lost = udp_lost(client, server) if udp else None
    row = {"status": status, "start_ns": run.t_start_ns, "end_ns": run.t_end_ns, "bytes": got,
           "seconds": seconds, "goodput_bps": got * 8 / seconds if got is not None and seconds else None,
           "fct_s": None, "retransmits": retrans, "lost_pkts": lost}
    return {c: {**head, **row}[c] for c in COLUMNS}


#: IPv4 + TCP with timestamps, IPv4 + UDP header bytes: a full TCP segment carries MTU - 52 payload bytes
TCP_HEADERS_BYTES, UDP_HEADERS_BYTES = 52, 28
#: Ethernet header bytes (a frame on a veth is the IP packet + 14)
ETHERNET_BYTES = 14


def host_tx_wire_bytes(rows: list[dict], mtu_bytes: int) -> dict[str, int]:
    """Sending host (short name) -> frame bytes its background flows put on its NIC: full frames of
    ``mtu_bytes`` + 14 for the payload the receiver got plus one per retransmitted segment or lost
    datagram (an estimate: the ACKs and the last, shorter frame are left out)."""
    out: dict[str, int] = {}
    for r in rows:
        if not r["bytes"]:
            continue
        per_frame = mtu_bytes - (UDP_HEADERS_BYTES if r["kind"] == "udp" else TCP_HEADERS_BYTES)
        frames = -(-int(r["bytes"]) // per_frame) + int(r["retransmits"] or 0) + int(r["lost_pkts"] or 0)
        out[r["src"]] = out.get(r["src"], 0) + frames * (mtu_bytes + ETHERNET_BYTES)
    return out


def frame(rows: list[dict]) -> pd.DataFrame:
    """background.csv from :func:`flow_row` rows, in :data:`COLUMNS` order; counts and Unix ns as nullable
    integers (written exactly; empty where a run has none)."""
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    for c in INT_COLUMNS:
        out[c] = pd.array([None if pd.isna(v) else int(v) for v in out[c]], dtype="Int64")
    return out


def background_block(rows: list[dict], tcp_lost_segments: int) -> dict:
    """summary.json's ``background``: every flow's row, the totals and the packets the background lost
    in the fabric (``lost_pkts`` = TCP segments sent - received over the hosts + UDP datagrams lost),
    which the loss identity takes out of the switch queue drops (testbed.measure.accounting)."""
    udp_lost_pkts = sum(int(r["lost_pkts"] or 0) for r in rows if r["kind"] == "udp")
    return {"flows": rows, "bytes": int(sum(r["bytes"] or 0 for r in rows)),
            "retransmits": int(sum(r["retransmits"] or 0 for r in rows)),
            "tcp_lost_segments": int(tcp_lost_segments), "udp_lost_pkts": udp_lost_pkts,
            "lost_pkts": int(tcp_lost_segments) + udp_lost_pkts,
            "accounting": "background packets are not RoCE: the transport's sent/received never count them; "
                          "lost_pkts (TCP segments sent - received over the hosts, plus UDP datagrams the "
                          "receivers counted lost) is taken out of the switch queue drops"}


def background_lines(block: dict) -> list[str]:
    """The printed lines: one per flow (rate, bytes, FCT, retransmits or losses, status)."""
    lines = [f"background: {len(block['flows'])} flow(s), {block['bytes'] / 1e6:.2f} MB, "
             f"{block['lost_pkts']} packets lost (in switch queues or its senders' own NICs; "
             "counted apart from the workload)"]
    for r in block["flows"]:
        rate = f"{r['goodput_bps'] / 1e6:.2f} Mbit/s" if r["goodput_bps"] is not None else "-"
        what = f"{r['name']}" + (f"#{r['burst']}" if r["kind"] == "storage" else "")
        extra = []
        if r["fct_s"] is not None:
            extra.append(f"FCT {r['fct_s']:.3f} s")
        if r["retransmits"] is not None:
            extra.append(f"{r['retransmits']} retransmits")
        if r["lost_pkts"] is not None:
            extra.append(f"{r['lost_pkts']} lost")
        mb = f"{r['bytes'] / 1e6:.2f} MB" if r["bytes"] is not None else "? MB"
        lines.append(f"  {what:<12} {r['kind']:<7} {r['src']}->{r['dst']} x{r['streams']}  {rate:>14}  {mb}"
                     f"  {', '.join(extra)}  [{r['status']}]")
    return lines


def write_background(run_dir: Path, traffic) -> dict:
    """Write background.csv for ``traffic`` (a stopped testbed.emulation.background.BackgroundTraffic);
    return summary.json's ``background`` block."""
    from testbed.results.rundir import RunDir
    rows = traffic.rows()
    RunDir(run_dir).write_table("background", frame(rows))
    return background_block(rows, traffic.tcp_lost_segments)
