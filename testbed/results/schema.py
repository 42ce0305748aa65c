"""The tables of a run directory: every table's columns, types and units, in one place.

This is the single source of truth for the columns of the CSV/Parquet tables a
run writes: :func:`testbed.results.load.load` checks every table it reads
against it, ``docs/tables.md`` is generated from it (``python -m
testbed.results.schema > docs/tables.md``; a unit test keeps the two equal)
and an integration test checks the tables of real runs against it.

A column's ``dtype`` is one of ``int``, ``float``, ``str``, ``bool``;
``optional`` columns are present only in some runs (named in ``when``). A name
holding ``<N>`` stands for a family of columns, N = 0, 1, ... (one per CPU
core). Every ``*_ns`` time column is Unix-epoch nanoseconds
(traffic.clock.unix_ns), so tables join on time.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One column: ``name`` (may hold ``<N>``), ``dtype`` (int, float, str, bool), ``description`` with its unit,
    ``optional``: absent from some runs (``when`` says which)."""

    name: str
    dtype: str
    description: str
    optional: bool = False
    when: str = ""

    def matches(self, name: str) -> bool:
        """Whether the real column ``name`` is this column (or one of its ``<N>`` family)."""
        if "<N>" not in self.name:
            return name == self.name
        return re.fullmatch(re.escape(self.name).replace("<N>", r"\d+"), name) is not None


@dataclass(frozen=True)
class Table:
    """One table of the run directory: ``name`` (file stem: ``name.csv``, ``name.parquet``), ``description``,
    ``written`` (which runs write it), ``columns`` (in file order)."""

    name: str
    description: str
    written: str
    columns: tuple[Column, ...]

    def column(self, name: str) -> Column | None:
        """The documented column ``name`` is (None when undocumented)."""
        return next((c for c in self.columns if c.matches(name)), None)

    def required(self) -> list[str]:
        """Names of the columns every such table has."""
        return [c.name for c in self.columns if not c.optional and "<N>" not in c.name]

    def problems(self, names) -> list[str]:
        """What is wrong with a table whose columns are ``names``: missing and undocumented columns."""
        names = list(names)
        out = [f"missing column {c!r}" for c in self.required() if c not in names]
        out += [f"undocumented column {n!r}" for n in names if self.column(n) is None]
        return out


def _c(name, dtype, description, optional=False, when=""):
    return Column(name, dtype, description, optional, when)


_TRIAL = _c("trial", "int", "pattern trial (0, 1, ...)", True, "pattern runs (workload.pattern)")
_RANK = _c("rank", "int", "rank (host index) of the agent that recorded the row")
_PEER = _c("peer", "int", "rank at the other end of the queue pair")
_QUEUE = (_c("time_ns", "int", "sample time, Unix ns"),
          _c("port", "str", "switch port: interface name with the run id, e.g. tb800al1-eth3"))
_QUEUE_COUNTERS = (_c("tx_bytes", "int", "bytes sent by the queue since it was installed (counter)"),
                   _c("tx_pkts", "int", "packets sent by the queue (counter)"),
                   _c("drops_pkts", "int", "packets the queue dropped (counter)"),
                   _c("backlog_bytes", "int", "queue backlog at the sample, bytes"),
                   _c("backlog_pkts", "int", "queue backlog at the sample, packets"))

_OP_COLUMNS = (
    _c("op_id", "int", "operation index in the plan (0, 1, ...)"),
    _c("size_bytes", "int", "message size of the collective, bytes"),
    _c("iteration", "int", "iteration of this size (warm-ups first)"),
    _c("warmup", "bool", "a warm-up operation (left out of sizes)"),
    _c("layer", "str", "SimAI layer name (empty for a size sweep)"),
    _c("collective", "str", "collective (allreduce, allgather, ...)"),
    _c("algorithm", "str", "algorithm (ring, tree, ...)"),
    _c("group", "str", "group scope (all, tp, dp, ep, ...)"),
    _c("group_size", "int", "ranks in each group"),
    _c("n_groups", "int", "concurrent groups"),
    _c("t_start_ns", "int", "first rank's start, Unix ns"),
    _c("t_end_ns", "int", "last rank's end, Unix ns"),
    _c("time_us", "float", "span: t_end_ns - t_start_ns, us"),
    _c("time_rank_avg_us", "float", "mean over ranks of each rank's own time, us (nccl-tests' time)"),
    _c("algbw_bps", "float", "size_bytes x 8 / time, bit/s"),
    _c("busbw_factor", "float", "the algorithm's bus bandwidth factor for group_size ranks (nccl-tests)"),
    _c("busbw_bps", "float", "algbw_bps x busbw_factor, bit/s"),
    _c("busbw_rank_avg_bps", "float", "bus bandwidth from time_rank_avg_us, bit/s"))

TABLES: dict[str, Table] = {t.name: t for t in (
    Table("sizes", "nccl-tests-style table: one row per collective, algorithm, size and group size over the "
          "timed operations (the printed table)", "every run (empty for pattern runs)", (
              _c("size_bytes", "int", "message size, bytes"),
              _c("group_size", "int", "ranks in each group"),
              _c("time_us", "float", "mean span over the operations, us"),
              _c("algbw_bps", "float", "size_bytes x 8 / time_us, bit/s"),
              _c("busbw_bps", "float", "algbw_bps x busbw_factor, bit/s"),
              _c("busbw_ratio", "float", "busbw_bps / (host link rate x payload efficiency); 1.0 = line rate"),
              _c("time_rank_avg_us", "float", "mean per-rank time, us (nccl-tests' time)"),
              _c("busbw_rank_avg_bps", "float", "bus bandwidth from time_rank_avg_us, bit/s"),
              _c("count", "int", "timed operations (the percentiles' samples)"),
              _c("p50_us", "float", "median operation time, us (nearest rank)"),
              _c("p99_us", "float", "99th percentile operation time, us; NaN below 100 samples"),
              _c("p999_us", "float", "99.9th percentile operation time, us; NaN below 1000 samples"),
              _c("collective", "str", "collective"),
              _c("algorithm", "str", "algorithm"),
              _c("busbw_factor", "float", "bus bandwidth factor for group_size ranks"))),
    Table("ops", "one row per collective operation (warm-ups included)", "every run (empty for pattern runs)",
          _OP_COLUMNS),
    Table("rank_ops", "one row per rank and operation", "collective runs (an empty file for pattern runs)", (
        _c("op_id", "int", "operation index"), _RANK,
        _c("group_index", "float", "index of the rank's group in the op; NaN for an idle rank"),
        _c("group_size", "int", "ranks in that group (0: idle)"),
        _c("t_start_ns", "int", "the rank's start, Unix ns"),
        _c("t_end_ns", "int", "the rank's end, Unix ns"),
        _c("sent_bytes", "int", "payload bytes the rank posted"),
        _c("rx_msgs", "int", "messages the rank received"),
        _c("t_rx_done_ns", "int", "when the rank's last expected chunk arrived, Unix ns"))),
    Table("qps", "one row per queue pair end: requesters (send side) then responders (receive side)",
          "every run with traffic agents", (
              _TRIAL, _RANK, _PEER,
              _c("role", "str", "requester or responder"),
              _c("qpn", "int", "queue pair number"),
              _c("udp_sport", "float", "UDP source port of the requester (RoCEv2 entropy); NaN for responders"),
              _c("first_psn", "int", "first packet sequence number"),
              _c("channel", "int", "channel (ring) the QP carries"),
              _c("tx_pkts", "float", "data packets sent, retransmissions included (requester)"),
              _c("tx_wire_bytes", "float", "bytes sent on the wire (requester)"),
              _c("retx_pkts", "float", "packets retransmitted (requester)"),
              _c("naks_rx", "float", "NAKs received (requester)"),
              _c("acks_rx", "float", "ACKs received (requester)"),
              _c("timeouts", "float", "retransmission timeouts (requester)"),
              _c("tx_busy_ns", "float", "time with a packet ready and the window open, ns (requester)"),
              _c("tx_work_ns", "float", "time with posted data not yet acknowledged, ns (requester)"),
              _c("tx_paced_ns", "float", "time a ready packet was held back by congestion-control pacing, ns"),
              _c("nic_full_waits", "float", "waits for the host NIC's queue (requester)"),
              _c("posted_bytes", "float", "payload bytes posted (requester)"),
              _c("acked_bytes", "float", "payload bytes acknowledged (requester)"),
              _c("cnps_rx", "float", "CNPs received (requester, the reaction point)"),
              _c("pfc_paused_ns", "float", "time a ready packet was held back by a PFC pause, ns (requester)"),
              _c("rx_pkts", "float", "data packets received (responder)"),
              _c("delivered_bytes", "float", "payload bytes delivered in order (responder)"),
              _c("dup_pkts", "float", "duplicate packets received (responder)"),
              _c("out_of_order_pkts", "float", "packets received out of order (responder)"),
              _c("naks_tx", "float", "NAKs sent (responder)"),
              _c("acks_tx", "float", "ACKs sent (responder)"),
              _c("order_errors", "float", "messages completed out of order (responder; must be 0)"),
              _c("messages", "float", "messages completed (responder)"),
              _c("max_reorder_pkts", "float", "farthest a packet arrived ahead of the expected PSN, packets"),
              _c("ce_pkts", "float", "data packets that arrived ECN CE-marked (responder)"),
              _c("cnps_tx", "float", "CNPs sent (responder, the notification point)"))),
    Table("msgs", "one row per message a requester posted", "every run with traffic agents", (
        _TRIAL, _RANK, _PEER,
        _c("msg_seq", "int", "message sequence number on the QP"),
        _c("size_bytes", "int", "message size, bytes"),
        _c("t_post_ns", "int", "when the message was posted, Unix ns"),
        _c("t_acked_ns", "int", "when its last byte was acknowledged, Unix ns (0: never)"),
        _c("fct_us", "float", "flow completion time t_acked_ns - t_post_ns, us; NaN if never acknowledged"))),
    Table("ports", "switch egress queue samples (every output.sample_period_ms)", "every run", (
        *_QUEUE, *_QUEUE_COUNTERS)),
    Table("cpu", "CPU idle per second of the run", "every run", (
        _c("time_ns", "int", "end of the one-second sample, Unix ns"),
        _c("idle_pct", "float", "whole machine idle, % (0-100)"),
        _c("min_cpu_idle_pct", "float", "idle of the least idle core, %"),
        _c("cpu<N>_idle_pct", "float", "core N's idle, %"))),
    Table("departures", "every frame the capture saw leave a sampled switch port, in capture windows",
          "every run with a departure capture", (
              _c("port", "str", "switch port"),
              _c("window", "int", "capture window index"),
              _c("time_ns", "int", "departure time, Unix ns"),
              _c("frame_bytes", "int", "frame length, bytes"))),
    Table("qp_rates", "every rate change of a requester QP's congestion control (DCQCN)",
          "runs with a rate-changing congestion control", (
              _TRIAL, _RANK, _PEER,
              _c("time_ns", "int", "time of the change, Unix ns"),
              _c("event", "str", "what changed it: start, cnp, timer, bytes"),
              _c("rate_bps", "float", "current rate after it, bit/s"),
              _c("target_rate_bps", "float", "target rate after it, bit/s"),
              _c("alpha", "float", "DCQCN alpha after it (0-1)"))),
    Table("pfc_rx", "one row per PFC frame a host NIC received", "runs with PFC frames to hosts", (
        _RANK, _c("time_ns", "int", "arrival, Unix ns"),
        _c("class_enable_vector", "int", "802.1Qbb class-enable vector (bit per priority)"),
        _c("lossless_quanta", "int", "pause time of the lossless priority, quanta of 512 bit times"))),
    Table("fct", "one row per pattern flow and trial", "pattern runs", (
        _c("trial", "int", "trial"), _c("flow", "int", "flow index"),
        _c("src", "int", "sending rank"), _c("dst", "int", "receiving rank"),
        _c("size_bytes", "int", "flow size, bytes"),
        _c("start_ns", "int", "post of the flow's message, Unix ns"),
        _c("end_ns", "int", "ACK of its last byte, Unix ns"),
        _c("fct_us", "float", "flow completion time end_ns - start_ns, us"),
        _c("ideal_fct_us", "float", "FCT under the ideal max-min rates, us"),
        _c("slowdown", "float", "fct_us / ideal_fct_us"))),
    Table("flow_rates", "each pattern flow's received payload per time bin", "pattern runs", (
        _c("trial", "int", "trial"), _c("flow", "int", "flow index"),
        _c("src", "int", "sending rank"), _c("dst", "int", "receiving rank"),
        _c("bin_start_ns", "int", "start of the bin, Unix ns"),
        _c("rx_bytes", "int", "payload bytes received in the bin"),
        _c("goodput_bps", "float", "rx_bytes x 8 / bin length, bit/s"))),
    Table("uplinks", "bytes each inter-switch port sent during a trial and its share of its switch's uplinks",
          "pattern runs", (
              _c("trial", "int", "trial"), _c("switch", "str", "switch"),
              _c("port", "str", "switch port"), _c("peer", "str", "switch at the other end"),
              _c("tx_bytes", "int", "bytes sent during the trial"),
              _c("share", "float", "tx_bytes / all the switch's uplinks' bytes (0-1)"))),
    Table("lossless_queues", "the congestion loop's samples of every switch port's lossless class",
          "runs with congestion.ecn or congestion.pfc", (
              *_QUEUE, _c("class", "str", "traffic class (lossless)"), *_QUEUE_COUNTERS)),
    Table("ecn_marking", "every change of a port's ECN marking probability", "runs with congestion.ecn", (
        _c("time_ns", "int", "time of the change, Unix ns"), _c("port", "str", "switch port"),
        _c("probability", "float", "CE marking probability of ECT packets from then on (0-1)"))),
    Table("pfc_events", "PFC pauses, resumes and watchdog storms/restores", "runs with congestion.pfc", (
        _c("time_ns", "int", "the sample that decided it, Unix ns"),
        _c("port", "str", "ingress switch port charged"),
        _c("class", "int", "priority (3: lossless)"),
        _c("event", "str", "pause, resume, storm or restore"),
        _c("charged_bytes", "int", "bytes charged to the ingress at the decision (-1: not applicable)"),
        _c("upstream", "str", "device paused (switch or host)"),
        _c("upstream_port", "str", "its port toward the ingress"),
        _c("actuation_us", "float", "time to pause/resume the upstream queue, us"),
        _c("pfc_frame", "bool", "a PFC frame was also sent to a host NIC"))),
    Table("pfc_ports", "per ingress port and class: pauses sent and paused time", "runs with congestion.pfc", (
        _c("port", "str", "ingress switch port"), _c("class", "int", "priority"),
        _c("upstream", "str", "device paused"), _c("upstream_port", "str", "its port"),
        _c("pauses_sent", "int", "pauses sent"),
        _c("paused_time_s", "float", "time paused, s"))),
    Table("faults", "every fault of the scenario and what happened to it", "runs with faults", (
        _c("fault", "int", "fault index in the scenario"),
        _c("action", "str", "what the fault does: down, up, gray, ..."),
        _c("target", "str", "link or node named in the scenario"),
        _c("loss", "float", "loss probability of a gray fault (0-1)"),
        _c("at_s", "float", "planned time after the traffic started, s"),
        _c("planned_ns", "int", "planned time, Unix ns"),
        _c("applied_ns", "float", "when the first interface or rule changed, Unix ns"),
        _c("apply_us", "float", "time to apply it, us"),
        _c("gray_drops_pkts", "int", "packets a gray rule dropped"),
        _c("detect_ms", "float", "applied_ns to the controller's detection, ms"),
        _c("reroute_ms", "float", "applied_ns to the reroute installed, ms"),
        _c("detected_by", "str", "port_status or gray"),
        _c("measured_loss", "float", "loss the gray detector measured (0-1)"))),
)}


def table(name: str) -> Table:
    """The documented table ``name`` (stem, e.g. ``sizes``). Raises KeyError naming the documented tables."""
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"no table {name!r}; documented tables: {', '.join(TABLES)}") from None


def markdown() -> str:
    """docs/tables.md: one section per table, its columns with type, unit and description."""
    lines = ["# Tables of a run directory", "",
             "Generated from `testbed/results/schema.py` (`python -m testbed.results.schema > docs/tables.md`); "
             "do not edit by hand. Every table is written as `NAME.csv` and `NAME.parquet`; "
             "`testbed.results.load(run_dir)` reads them (Parquet first) and checks the columns below. "
             "Every `*_ns` time is Unix-epoch nanoseconds. `<N>` stands for 0, 1, ... (one column each).", ""]
    for t in TABLES.values():
        lines += [f"## {t.name}", "", f"{t.description}. Written by: {t.written}.", "",
                  "| column | type | description |", "|---|---|---|"]
        for c in t.columns:
            extra = f" (only in {c.when})" if c.optional else ""
            lines.append(f"| `{c.name}` | {c.dtype} | {c.description}{extra} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
