"""The tables of a run directory: every table's columns, types and units, in one place.

This is the single source of truth for the columns of the CSV/Parquet tables a
run writes (``pfc_events``' come from controllers.loop_result.PFC_EVENT_COLUMNS, which the
controller's loop writes its rows by): :class:`testbed.results.rundir.RunDir` checks every table it reads
against it, ``docs/tables.md`` is generated from it (testbed.results.docs_tables; a unit test keeps the two
equal)
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

from controllers.loop_result import PFC_EVENT_COLUMNS
from testbed.results.slowdown import SLOWDOWN_TABLE


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


#: the runs an optional column (name marked ``?`` in the tables below) is in
OPTIONAL_WHEN = "pattern runs (workload.pattern)"


def _table(name: str, description: str, written: str, columns: str, when: str | dict = OPTIONAL_WHEN) -> Table:
    """A Table from ``columns``: one line per column, ``name dtype description`` (``name?``: optional, in the
    runs ``when`` names; a dict: column -> its runs)."""
    cols = []
    for line in filter(str.strip, columns.splitlines()):
        col, dtype, text = line.split(None, 2)
        optional, name_ = col.endswith("?"), col.rstrip("?")
        runs = when.get(name_, "") if isinstance(when, dict) else when
        cols.append(Column(name_, dtype, text, optional, runs if optional else ""))
    return Table(name, description, written, tuple(cols))


_QUEUE_SAMPLE = """
    time_ns       int   sample time, Unix ns
    port          str   switch port: interface name with the run id, e.g. tb800al1-eth3
"""
_QUEUE_COUNTERS = """
    tx_bytes      int   bytes sent by the queue since it was installed (counter)
    tx_pkts       int   packets sent by the queue (counter)
    drops_pkts    int   packets the queue dropped (counter)
    backlog_bytes int   queue backlog at the sample, bytes
    backlog_pkts  int   queue backlog at the sample, packets
"""

TABLES: dict[str, Table] = {t.name: t for t in (
    _table("sizes", "nccl-tests-style table: one row per collective, algorithm, size and group size over the timed "
           "operations (the printed table)",
           "every run (empty for pattern runs)", """
    size_bytes         int   message size, bytes
    group_size         int   ranks in each group
    time_us            float mean span over the operations, us
    algbw_bps          float size_bytes x 8 / time_us, bit/s
    busbw_bps          float algbw_bps x busbw_factor, bit/s
    busbw_ratio        float busbw_bps / (host link rate x payload efficiency); 1.0 = line rate
    time_rank_avg_us   float mean per-rank time, us (nccl-tests' time)
    busbw_rank_avg_bps float bus bandwidth from time_rank_avg_us, bit/s
    count              int   timed operations (the percentiles' samples)
    p50_us             float median operation time, us (nearest rank)
    p99_us             float 99th percentile operation time, us; NaN below 100 samples
    p999_us            float 99.9th percentile operation time, us; NaN below 1000 samples
    collective         str   collective
    algorithm          str   algorithm
    busbw_factor       float bus bandwidth factor for group_size ranks
"""),
    _table("ops", "one row per collective operation (warm-ups included)",
           "every run (empty for pattern runs)", """
    op_id              int   operation index in the plan (0, 1, ...)
    size_bytes         int   message size of the collective, bytes
    iteration          int   iteration of this size (warm-ups first)
    warmup             bool  a warm-up operation (left out of sizes)
    layer              str   SimAI layer name (empty for a size sweep)
    collective         str   collective (allreduce, allgather, ...)
    algorithm          str   algorithm (ring, tree, ...)
    group              str   group scope (all, TP, DP, EP, PP, ...; a sweep job's name in a jobs run)
    group_size         int   ranks in each group
    n_groups           int   concurrent groups
    t_start_ns         int   first rank's start, Unix ns
    t_end_ns           int   last rank's end, Unix ns
    time_us            float span: t_end_ns - t_start_ns, us
    time_rank_avg_us   float mean over ranks of each rank's own time, us (nccl-tests' time)
    algbw_bps          float size_bytes x 8 / time, bit/s
    busbw_factor       float the algorithm's bus bandwidth factor for group_size ranks (nccl-tests)
    busbw_bps          float algbw_bps x busbw_factor, bit/s
    busbw_rank_avg_bps float bus bandwidth from time_rank_avg_us, bit/s
    job?               str   the job the operation belongs to (testbed.workloads.jobs.plan)
    in_place?          bool  a timed op of nccl-tests' in-place half (testbed.results.nccl_table)
""", when={"job": "runs of a jobs list (jobs:)", "in_place": "size sweeps with workload.in_place (testbed nccl)"}),
    _table("rank_ops", "one row per operation and rank taking part in it (a host in none of the op's groups has "
           "no row)",
           "collective runs (an empty file for pattern runs)", """
    op_id        int   operation index
    rank         int   rank (host index) of the agent that recorded the row
    group_index  int   index of the rank's group in the op
    group_size   int   ranks in that group
    t_start_ns   int   the rank's start, Unix ns
    t_end_ns     int   the rank's end, Unix ns
    sent_bytes   int   payload bytes the rank posted
    rx_msgs      int   messages the rank received
    t_rx_done_ns int   when the rank's last expected chunk arrived, Unix ns
"""),
    _table("qps", "one row per queue pair end: requesters (send side) then responders (receive side)",
           "every run with traffic agents", """
    trial?            int   pattern trial (0, 1, ...)
    rank              int   rank (host index) of the agent that recorded the row
    peer              int   rank at the other end of the queue pair
    role              str   requester or responder
    qpn               int   queue pair number
    udp_sport         float UDP source port of the requester (RoCEv2 entropy); NaN for responders
    first_psn         int   first packet sequence number
    channel           int   channel (ring) the QP carries: QP slot stream x channels + channel (a jobs run: stream = the job's index)
    dscp              float DSCP of the requester's data packets: 26 lossless, 0 lossy (the job's traffic class); NaN for responders
    tx_pkts           float data packets sent, retransmissions included (requester)
    tx_wire_bytes     float bytes sent on the wire (requester)
    retx_pkts         float packets retransmitted (requester)
    retx_bytes        float payload bytes retransmitted (requester)
    naks_rx           float NAKs received (requester)
    acks_rx           float ACKs received (requester)
    timeouts          float retransmission timeouts (requester; with selective repeat RTO_low's included)
    tx_busy_ns        float time with a packet ready and the window open, ns (requester)
    tx_work_ns        float time with posted data not yet acknowledged, ns (requester)
    tx_paced_ns       float time a ready packet was held back by congestion-control pacing, ns
    nic_full_waits    float sends retried because the host NIC's queue was full (ENOBUFS): data (requester), ACK/NAK/CNP (responder)
    posted_bytes      float payload bytes posted (requester)
    acked_bytes       float payload bytes acknowledged (requester)
    cnps_rx           float CNPs received (requester, the reaction point)
    pfc_paused_ns     float time a ready packet was held back by a PFC pause, ns (requester)
    rx_pkts           float data packets received (responder)
    delivered_bytes   float payload bytes delivered in order (responder)
    dup_pkts          float duplicate packets received (responder)
    out_of_order_pkts float packets received out of order (responder)
    naks_tx           float NAKs sent (responder)
    acks_tx           float ACKs sent (responder)
    order_errors      float messages completed out of order (responder; must be 0)
    messages          float messages completed (responder)
    max_reorder_pkts  float farthest a packet arrived ahead of the expected PSN, packets
    ce_pkts           float data packets that arrived ECN CE-marked (responder)
    cnps_tx           float CNPs sent (responder, the notification point)
"""),
    _table("msgs", "one row per message a requester posted",
           "every run with traffic agents", """
    trial?     int   pattern trial (0, 1, ...)
    rank       int   rank (host index) of the agent that recorded the row
    peer       int   rank at the other end of the queue pair
    msg_seq    int   message sequence number on the QP
    size_bytes int   message size, bytes
    t_post_ns  int   when the message was posted, Unix ns
    t_acked_ns int   when its last byte was acknowledged, Unix ns (0: never)
    fct_us     float flow completion time t_acked_ns - t_post_ns, us; NaN if never acknowledged
"""),
    _table("ports", "switch egress queue samples (every output.sample_period_ms)",
           "every run", _QUEUE_SAMPLE + _QUEUE_COUNTERS),
    _table("cpu", "CPU idle per second of the run",
           "every run", """
    time_ns          int   end of the one-second sample, Unix ns
    idle_pct         float whole machine idle, % (0-100)
    min_cpu_idle_pct float idle of the least idle core, %
    cpu<N>_idle_pct  float core N's idle, %
    server?          str   the server the row is of (one row per server and second)
""", when="runs over several servers (cluster, testbed.cluster.telemetry)"),
    _table("departures", "every frame the capture saw leave a sampled switch port, in capture windows",
           "every run with a departure capture", """
    port        str   switch port
    window      int   capture window index
    time_ns     int   departure time, Unix ns
    frame_bytes int   frame length, bytes
"""),
    _table("qp_rates", "every change of a requester QP's congestion-control state (DCQCN's reaction point: "
           "RC, RT, alpha), at the change's own time; at most 65,536 per QP (the rest counted in summary.json "
           "fidelity.cnp_interval.unrecorded)",
           "runs with a rate-changing congestion control", """
    trial?          int   pattern trial (0, 1, ...)
    rank            int   rank (host index) of the agent that recorded the row
    peer            int   rank at the other end of the queue pair
    qpn             int   requester queue pair number
    channel         int   channel (ring) the QP carries
    time_ns         int   time of the change, Unix ns
    event           str   what changed it: start, cnp (the cut), alpha_timer (alpha decay, logged while alpha >= 0.001), timer (rate-increase timer T), bytes (byte counter B)
    stage           str   the increase a timer or bytes event applied: fast_recovery, additive, hyper; empty for other events
    rate_bps        float current rate RC after it, bit/s
    target_rate_bps float target rate RT after it, bit/s
    alpha           float DCQCN alpha after it (0-1)
"""),
    _table("cnp_events", "every CNP a notification point sent and a reaction point received (DCQCN), per QP; "
           "at most 65,536 per QP end (the rest counted in summary.json fidelity.cnp_interval.unrecorded)",
           "runs in which a CNP was sent", """
    trial?   int   pattern trial (0, 1, ...)
    rank     int   rank (host index) of the agent that recorded the row
    peer     int   rank at the other end of the queue pair
    qpn      int   queue pair number: the responder QP for np, the requester QP for rp
    channel  int   channel (ring) the QP carries
    role     str   np (the responder QP's notification point sent it) or rp (the requester QP's reaction point received it)
    time_ns  int   send time (np) or arrival time (rp), Unix ns
"""),
    _table("pfc_rx", "one row per PFC frame a host NIC received",
           "runs with PFC frames to hosts", """
    rank                int   rank (host index) of the agent that recorded the row
    time_ns             int   arrival, Unix ns
    class_enable_vector int   802.1Qbb class-enable vector (bit per priority)
    lossless_quanta     int   pause time of the lossless priority, quanta of 512 bit times
"""),
    _table("fct", "one row per pattern flow and trial (in a jobs run: per pattern job, flow and pass; in an "
           "open-loop run: per flow, trial 0)", "pattern runs, jobs runs with a pattern job, open-loop runs", """
    job?         str   the pattern job (first column)
    trial        int   trial (in a jobs run: the job's pass)
    flow         int   flow index
    src          str   sending host (short name, e.g. h5)
    dst          str   receiving host (short name)
    size_bytes   int   flow size, bytes
    start_ns     int   post of the flow's message (its first QP's), Unix ns
    end_ns       int   ACK of its last byte (of its last QP), Unix ns
    fct_us       float flow completion time end_ns - start_ns, us
    ideal_fct_us float FCT under the ideal max-min rates (open loop: alone on an idle path), us
    slowdown     float fct_us / ideal_fct_us
    lost_pkts    float data packets the flow's sender put on the wire that its receiver never got (all its QPs)
""", when="jobs runs with a pattern job (jobs[].workload.pattern)"),
    _table("flow_qps", "one row per queue pair of each pattern flow and trial (testbed.workloads.pattern.results.qp_table)",
           "pattern runs with a flow of qps > 1", """
    trial      int   trial
    flow       int   flow index (fct.csv)
    channel    int   the flow's queue pair index 0..qps-1 (qps.csv channel)
    src        str   sending host (short name, e.g. h5)
    dst        str   receiving host (short name)
    udp_sport  float the QP's (first) UDP source port, its ECMP entropy (qps.csv)
    size_bytes int   the QP's share of the flow, bytes
    start_ns   int   post of the QP's message, Unix ns
    end_ns     int   ACK of its last byte, Unix ns
    fct_us     float end_ns - start_ns, us
    lost_pkts  float data packets this QP put on the wire that the receiver never got
"""),
    _table("flow_rates", "each pattern flow's received payload per time bin",
           "pattern runs", """
    trial        int   trial
    flow         int   flow index
    src          str   sending host (short name, e.g. h5)
    dst          str   receiving host (short name)
    bin_start_ns int   start of the bin, Unix ns
    rx_bytes     float payload bytes received in the bin (interpolated between the receiver's samples)
    goodput_bps  float rx_bytes x 8 / bin length, bit/s
"""),
    _table("uplinks", "bytes each inter-switch port sent during a trial and its share of its switch's uplinks",
           "pattern runs", """
    trial    int   trial
    switch   str   switch
    port     str   switch port
    peer     str   switch at the other end
    tx_bytes int   bytes sent during the trial
    share    float tx_bytes / all the switch's uplinks' bytes (0-1)
"""),
    _table("parallel_links", "bytes each member of a bundle of parallel links sent during a trial and its share of "
           "the bundle (testbed.workloads.pattern.results.parallel_link_table)",
           "pattern runs on a fabric with fabric.links_per_spine > 1", """
    trial    int   trial
    switch   str   switch sending on the bundle
    peer     str   switch at the other end of every member
    port     str   switch port of this member
    tx_bytes int   bytes sent during the trial
    share    float tx_bytes / all the bundle's bytes (0-1; empty when the bundle sent nothing)
"""),
    _table("lossless_queues", "the congestion loop's samples of every switch port's lossless class",
           "runs with congestion.ecn or congestion.pfc",
           _QUEUE_SAMPLE + "class str traffic class (lossless)\n" + _QUEUE_COUNTERS),
    _table("class_queues", "per switch port and traffic class: what the class's egress queue sent and dropped "
           "during the traffic (testbed.measure.class_queues)",
           "runs with fabric.queue_backend htb_classes", """
    port       str   switch port: interface name with the run id
    class      str   traffic class: control, lossless or lossy
    dscp       str   the DSCPs the class takes: 48, 26, or other (lossy: everything else, a lossy job's DSCP 0 included)
    tx_bytes   int   bytes the class's queue sent during the traffic (frames without FCS)
    tx_pkts    int   packets it sent
    drops_pkts int   packets it tail-dropped (its buffer full)
"""),
    _table("ecn_marking", "every change of a port's ECN marking probability",
           "runs with congestion.ecn", """
    time_ns     int   time of the change, Unix ns
    port        str   switch port
    probability float CE marking probability of ECT packets from then on (0-1)
"""),
    _table("pfc_events", "PFC pauses, resumes and watchdog storms/restores",
           "runs with congestion.pfc", "\n".join(" ".join(column) for column in PFC_EVENT_COLUMNS)),
    _table("pfc_ports", "per ingress port and class: pauses sent and paused time",
           "runs with congestion.pfc", """
    port          str   ingress switch port
    class         int   priority
    upstream      str   device paused
    upstream_port str   its port
    pauses_sent   int   pauses sent
    paused_time_s float time paused, s
"""),
    _table("pfc_storms", "every PFC storm a host NIC sent (testbed.emulation.pfc_storm): its first XOFF and its XON",
           "runs with a pfc_storm fault", """
    fault       int   fault index in the scenario
    host        str   host whose NIC sent the pause frames
    switch_port str   switch port the frames arrive on
    start_ns    int   the first XOFF, Unix ns
    end_ns      int   the XON (storm end), Unix ns; empty when no XON was sent
    xoff_frames int   XOFF frames sent (the first pause and its refreshes)
    xon_frames  int   XON frames sent
"""),
    _table("background", "one row per background flow (one per client and burst of a storage pattern)",
           "runs with a background section", """
    name        str   flow name (background.<i>.name, default <kind><i>)
    kind        str   tcp, udp or storage
    burst       int   burst number of a storage pattern (0 for tcp and udp)
    src         str   sending host (short name, e.g. h1)
    dst         str   receiving host (short name)
    streams     int   iperf3 streams of the flow (parallel)
    status      str   done, cut (stopped when the workload ended), not_started, failed
    start_ns    float launch of the iperf3 client, Unix ns (empty when not started)
    end_ns      float exit of the iperf3 client, Unix ns (empty when not started)
    size_bytes  float asked size of a sized flow, bytes (empty for a duration flow)
    bytes       float payload bytes the receiver got
    seconds     float the sender's test time (iperf3 end.sum_sent.seconds), s
    goodput_bps float bytes x 8 / seconds, bit/s
    fct_s       float flow completion time of a sized flow that completed: end_ns - start_ns, s
    retransmits float TCP retransmitted segments (iperf3 sum_sent.retransmits; empty for udp)
    lost_pkts   float UDP datagrams the receiver counted lost (empty for tcp)
"""),
    _table("perftest", "one row per perftest run over Soft-RoCE (testbed.emulation.perftest; docs/vm.md)",
           "runs with workload.perftest", """
    name                  str   run name (workload.perftest.<i>.name, default <test><i>)
    test                  str   perftest program: ib_send_lat, ib_write_bw, ...
    src                   str   client host (short name, e.g. h1)
    dst                   str   server host (short name)
    size_bytes            float message size, bytes (perftest -s)
    iterations            float messages (perftest -n)
    status                str   done, or failed (error says why)
    start_ns              float client start, Unix ns (empty when the server never listened)
    end_ns                float client and server exit (or stop), Unix ns
    gid_index             float GID index used (RoCE v2, the host's IPv4 address; perftest -x)
    mtu_bytes             float path MTU the QP used (perftest's Mtu line), bytes
    t_min_us              float latency tests: least one-way latency (round trip / 2), us
    t_max_us              float latency tests: largest, us
    t_typical_us          float latency tests: perftest's t_typical (the median), us
    t_avg_us              float latency tests: mean, us
    t_stdev_us            float latency tests: standard deviation, us
    t_p99_us              float latency tests: 99th percentile, us
    t_p999_us             float latency tests: 99.9th percentile, us
    bw_peak_mib_s         float bandwidth tests: perftest's BW peak, MiB/s (its MB/sec: 2^20 bytes)
    bw_avg_mib_s          float bandwidth tests: perftest's BW average, MiB/s
    msg_rate_mpps         float bandwidth tests: message rate, million messages/s
    bw_avg_bps            float bandwidth tests: bw_avg_mib_s x 2^20 x 8, bit/s of message payload
    roce_pkts_min         float RoCE packets the messages need at the least (ceil(size / mtu) per message, both ways for a ping-pong, ACKs left out)
    switch_tx_pkts_to_dst float packets the switch port facing dst sent during the test (its kernel tx_packets counter)
    switch_tx_pkts_to_src float packets the switch port facing src sent during the test
    error                 str   why a run failed (perftest's exit code and last lines, or a timeout); empty when done
"""),
    _table("chakra_nodes", "one row per node of every rank's Chakra trace, as the replay ran it (testbed.workloads.chakra.run)",
           "Chakra replays (workload.chakra)", """
    rank        int   rank (host index) whose trace file holds the node
    node_id     int   the node's id in that file
    name        str   the node's name
    type        str   NodeType: COMP_NODE, COMM_COLL_NODE, COMM_SEND_NODE or COMM_RECV_NODE
    comm_type   str   ALL_REDUCE, ALL_TO_ALL, ... for a collective, SEND or RECV; empty for compute
    pg_name     str   process group of a collective; empty otherwise
    deps        str   the ids of the nodes it depends on (data_deps and ctrl_deps), space separated
    unit        int   index of what ran it in the replay order (a compute node, or the matched operation)
    op_id       int   the fabric operation (ops.csv) it was part of; -1 for compute and one-rank groups
    size_bytes  int   comm_size after workload.chakra.size_scale, bytes; 0 for compute
    duration_us float the trace's duration_micros (compute), us; 0 for communication
    t_start_ns  int   start on this rank, Unix ns (a compute wait's start; the agent's start of the op)
    t_end_ns    int   end on this rank, Unix ns
    algbw_bps   float the fabric operation's size_bytes x 8 / span (first rank's start to last rank's end), bit/s; NaN for compute
    busbw_bps   float algbw_bps x the algorithm's bus bandwidth factor (nccl-tests), bit/s; NaN for compute
"""),
    _table("tenant_drops", "every isolation drop flow the controller installed (controllers.tenants) and "
           "its OpenFlow counters at the end of the traffic", "runs with tenants and isolation on", """
    switch     str   ingress switch (name without the run id)
    in_port    int   the source host's port on it
    src        str   source host
    dst        str   destination host it may not reach
    src_tenant str   the source's tenant (shared or none for hosts in no tenant)
    dst_tenant str   the destination's tenant
    installed  bool  the flow was on the switch when read
    packets    int   packets the flow dropped
    bytes      int   bytes the flow dropped
"""),
    _table("faults", "every fault of the scenario and what happened to it",
           "runs with faults", """
    fault           int   fault index in the scenario
    action          str   what the fault does: down, up, gray, ...
    target          str   link or node named in the scenario
    loss            float loss probability of a gray fault (0-1)
    at_s            float planned time after the traffic started, s
    planned_ns      int   planned time, Unix ns
    applied_ns      float when the first interface or rule changed, Unix ns
    apply_us        float time to apply it, us
    gray_drops_pkts int   packets a gray rule dropped
    detect_ms       float applied_ns to the controller's detection, ms
    reroute_ms      float applied_ns to the reroute installed, ms
    detected_by     str   port_status or gray
    measured_loss   float loss the gray detector measured (0-1)
"""),
    _table("jobs", "one row per job, op group, collective and message size over the job's timed operations; "
           "one row per pattern job (testbed.workloads.jobs.results)",
           "runs of a jobs list (jobs:)", """
    job                 str   job name
    tenant              str   the job's tenant
    hosts               str   the job's hosts in rank order, space-separated
    n_ranks             int   ranks of the job
    placement           str   packed, spread, random or explicit (a hosts list)
    traffic_class       str   the job's traffic class: lossless (data DSCP 26) or lossy (DSCP 0); its own, else its tenant's
    start_s             float when the job started, s after the traffic began
    workload            str   sizes (a collective size sweep), simai (a SimAI/AICB whole-job replay) or pattern (a traffic pattern: one row, size_bytes its pass's bytes, ops its passes, time_us its mean pass time, no busbw)
    group               str   the ops' group: the job's name for a sweep or pattern job, the SimAI scope (TP, DP, EP, DP_EP, PP)
    collective          str   the ops' collective (traffic.collectives); a pattern job's pattern kind (permutation, alltoall, kflows, incast, flows)
    size_bytes          int   message size, bytes; a pattern job's bytes of one pass
    ops                 int   timed operations of this group, collective and size; a pattern job's passes
    time_us             float mean operation time, us; a pattern job's mean pass time (its start to its last ACK)
    busbw_bps           float size_bytes x 8 / time_us x busbw_factor, bit/s
    busbw_ratio         float busbw_bps / (host link rate x payload efficiency)
    jct_s               float job completion time, s: a sweep's last op's end less its first op's start; a SimAI job's sum of its iteration times; a pattern job's first pass's start to its last ACK
    iteration_s         float a SimAI job's mean iteration time (compute waits included), s; empty for a sweep or pattern job
    fair_busbw_ratio    float the job's fair share of the links it crosses as a busbw ratio (testbed.workloads.jobs.links); NaN for a pattern job
    fct_p50_us          float a pattern job's median flow completion time over its passes (fct.csv), us; NaN for a sweep or SimAI job
    fct_p99_us          float a pattern job's 99th percentile FCT (nearest rank), us
    slowdown_p50        float a pattern job's median FCT slowdown against its flows alone on an ideal fabric
    slowdown_p99        float a pattern job's 99th percentile slowdown
    solo_busbw_ratio?   float busbw_ratio of this row with the job alone on the fabric
    solo_jct_s?         float jct_s of the job alone on the fabric, s
    solo_fct_p99_us?    float fct_p99_us of the pattern job alone on the fabric, us
    busbw_slowdown?     float solo_busbw_ratio / busbw_ratio
    jct_slowdown?       float jct_s / solo_jct_s
    fct_p99_slowdown?   float fct_p99_us / solo_fct_p99_us
""", when="runs with --solo or --solo-from"),
    _table(*SLOWDOWN_TABLE),
    _table("tenants", "one row per tenant of a jobs list (testbed.workloads.jobs.results)", "runs of a jobs list (jobs:)", """
    tenant              str   tenant name
    n_jobs              int   the tenant's jobs
    n_hosts             int   hosts its jobs hold
    ops                 int   timed operations of its jobs
    busbw_ratio_mean    float mean of its jobs' busbw ratios (mean over each job's timed ops)
    jct_max_s           float its longest job completion time, s
    lossless_tx_wire_bytes float bytes its jobs' requester QPs sent on the wire with DSCP 26 (lossless class), retransmissions and headers included (qps.csv tx_wire_bytes by dscp)
    lossy_tx_wire_bytes    float the same with DSCP 0 (lossy class)
    jct_slowdown_max?   float its jobs' largest JCT slowdown against their solo runs
""", when="runs with --solo or --solo-from"),
)}


def table(name: str) -> Table:
    """The documented table ``name`` (stem, e.g. ``sizes``). Raises KeyError naming the documented tables."""
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"no table {name!r}; documented tables: {', '.join(TABLES)}") from None

