"""Per-job traffic classes (issue 18 items 1 and 5): the spec (a job's class, its tenant's default), the DSCP of
each stream's data packets, and the per-class counters (class_queues.csv, summary traffic_classes, tenants.csv
bytes per class). No fabric: tests/integration/test_traffic_class_fabric.py runs it on one."""
import copy
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
import yaml

from testbed.workloads.jobs.plan import jobs_plan, stream_tos
from testbed.workloads.jobs.results import class_wire_bytes, tenant_entries, tenants_table
from testbed.measure.class_queues import class_counters, class_queue_table, class_totals, traffic_classes_block
from testbed.results.rundir import RunDir
from testbed.spec.congestion import CLASS_DSCP_TEXT
from testbed.spec.scenario import ScenarioError, parse_scenario
from testbed.workloads import load_scenario
from traffic import protocol
from traffic.transport.qp import DATA_TOS, LOSSY_TOS, RequesterQP, class_tos

REPO = Path(__file__).resolve().parents[1]
QUICK = yaml.safe_load((REPO / "scenarios" / "quickstart.yaml").read_text())
SWEEP = {"sizes": {"min_bytes": "256KiB", "max_bytes": "256KiB"}, "iterations": 1, "warmup_iterations": 0}


def scenario(*jobs, tenants=None, keep_workload=False, **top):
    d = copy.deepcopy(QUICK)
    if not keep_workload:
        d.pop("workload")
        d["jobs"] = [{"workload": SWEEP, **j} for j in jobs]
    if tenants is not None:
        d["tenants"] = tenants
    d.update(top)
    return d


RED_BLUE = {"red": {"hosts": ["h1"]}, "blue": {"hosts": ["h8"], "traffic_class": "lossy"}}


# -- the spec ------------------------------------------------------------------------------------

def test_a_jobs_class_is_its_own_else_its_tenants_else_lossless():
    spec = parse_scenario(scenario({"name": "a", "tenant": "red", "hosts": ["h1", "h2"]},
                                   {"name": "b", "tenant": "blue", "hosts": ["h7", "h8"]},
                                   {"name": "c", "tenant": "blue", "hosts": ["h5", "h6"], "traffic_class": "lossless"},
                                   {"name": "d", "tenant": "red", "hosts": ["h3", "h4"], "traffic_class": "lossy"},
                                   tenants=RED_BLUE))
    plan, jobs = jobs_plan(spec)
    assert [j.traffic_class for j in jobs] == ["lossless", "lossy", "lossless", "lossy"]
    assert "traffic class lossy (DSCP 0)" in plan.notes[1] and "traffic class lossless (DSCP 26)" in plan.notes[0]
    (bare,) = jobs_plan(parse_scenario(scenario({"name": "a", "ranks": 2})))[1]
    assert bare.traffic_class == "lossless"


def test_a_lossy_job_on_one_fifo_is_a_dscp_marking_and_the_plan_says_so():
    fifo = scenario({"name": "a", "ranks": 2, "traffic_class": "lossy"})
    notes = jobs_plan(parse_scenario(fifo))[0].notes
    assert any("only a DSCP marking" in n and "job(s) a" in n for n in notes)
    classes = copy.deepcopy(fifo)
    classes["fabric"]["queue_backend"] = "htb_classes"
    assert not any("DSCP marking" in n for n in jobs_plan(parse_scenario(classes))[0].notes)


@pytest.mark.parametrize("data, says", [
    (scenario({"name": "a", "ranks": 2, "traffic_class": "bulk"}), "jobs.0.traffic_class"),
    (scenario({"name": "a", "tenant": "red", "ranks": 2},
              tenants={"red": {"hosts": ["h1"], "traffic_class": "gold"}}), "tenants.red.traffic_class"),
    (scenario(tenants={"red": {"hosts": ["h1", "h2"], "traffic_class": "lossy"}}, keep_workload=True,
              isolation="off"), "tenants.red.traffic_class: a tenant's traffic class is the default of its jobs"),
])
def test_bad_traffic_classes_are_refused_naming_the_key(data, says):
    with pytest.raises(ScenarioError) as e:
        parse_scenario(data)
    assert says in str(e.value)
    assert "lossless" in str(e.value)  # what is allowed / what it would be


def test_the_shipped_traffic_class_scenario_loads_with_blue_lossy_by_its_tenant():
    spec = load_scenario(REPO / "scenarios" / "traffic_classes.yaml")
    assert spec.jobs[1].traffic_class is None and spec.tenants["blue"].traffic_class == "lossy"
    assert [j.traffic_class for j in jobs_plan(spec)[1]] == ["lossless", "lossy"]


# -- the DSCP of each stream ---------------------------------------------------------------------

def test_class_tos_and_each_streams_tos():
    assert (class_tos("lossless"), class_tos("lossy")) == (0x6A, 0x02)  # DSCP 26 / DSCP 0, both ECT(0)
    with pytest.raises(ValueError, match="allowed lossless | lossy"):
        class_tos("gold")
    spec = parse_scenario(scenario({"name": "a", "ranks": 2, "traffic_class": "lossy"}, {"name": "b", "ranks": 2}))
    jobs = jobs_plan(spec)[1]
    assert stream_tos(jobs, 2) == [LOSSY_TOS, DATA_TOS]
    assert stream_tos(jobs, 3) == [LOSSY_TOS, DATA_TOS, DATA_TOS]  # a stream no job holds: lossless


class _Paused:
    def paused_until_ns(self, now_ns):
        return now_ns + 10**12


def test_a_requester_qp_sends_with_its_tos_and_only_a_lossless_one_obeys_pfc():
    from traffic.transport import TransportParams
    params = TransportParams(payload_bytes=1024, window_pkts=4, ack_every_pkts=2, rto_us=50_000)
    pause = _Paused()
    qps = {tos: RequesterQP(0x10001, 0x20000, "127.82.0.1", "127.82.0.2", 0, params, pause=pause, tos=tos)
           for tos in (DATA_TOS, LOSSY_TOS)}
    try:
        for tos, qp in qps.items():
            assert qp.sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == tos
            assert qp.builder.tos == tos
        assert qps[DATA_TOS].pause is pause and qps[LOSSY_TOS].pause is None
    finally:
        for qp in qps.values():
            qp.stop()


def test_agents_give_each_stream_its_dscp_and_report_it_per_qp():
    """Real agents on loopback: 2 ranks, 2 streams (stream 1 lossy); an op on each stream; the QPs of stream 1
    send with TOS 0x02 and their stats rows say DSCP 0, stream 0's DSCP 26."""
    from traffic.agent import Agent
    from traffic.protocol import AgentConfig, RankAddress, RunOp
    from traffic.transport import TransportParams
    ranks = [RankAddress(r, f"127.83.0.{r + 1}", f"h{r + 1}") for r in range(2)]
    params = TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4, rto_us=50_000)
    cfgs = [AgentConfig(rank=r, ranks=ranks, peers=[1 - r], seed=1, transport=params, streams=2,
                        stream_tos=[DATA_TOS, LOSSY_TOS]) for r in range(2)]
    assert protocol.decode(protocol.encode(cfgs[0])) == cfgs[0]
    agents = [Agent(c) for c in cfgs]
    try:
        for stream, size in ((0, 10_000), (1, 30_000)):
            cmd = RunOp(op_id=stream, collective="allreduce", algorithm="ring", size_bytes=size, groups=[],
                        timeout_s=20.0, stream=stream)
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda a: a.run_op(cmd), agents))
        assert agents[0].send_qps[1][1].sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == LOSSY_TOS
        rows = pd.DataFrame([r for a in agents for r in a.stats().qp_rows()])
        req = rows[rows["role"] == "requester"]
        assert dict(zip(req["channel"], req["dscp"])) == {0: 26, 1: 0}
        by = req.groupby("dscp")["posted_bytes"].sum()
        assert (by[26], by[0]) == (2 * 10_000, 2 * 30_000)  # 2-rank ring all-reduce: each rank sends the size
        assert class_wire_bytes(rows, [0]) == {"lossless": int(req[(req["rank"] == 0) & (req["dscp"] == 26)][
            "tx_wire_bytes"].sum()), "lossy": int(req[(req["rank"] == 0) & (req["dscp"] == 0)]["tx_wire_bytes"].sum())}
    finally:
        for a in agents:
            a.close()


def test_an_agent_refuses_a_tos_list_that_does_not_match_its_streams():
    from traffic.agent import Agent
    from traffic.protocol import AgentConfig, RankAddress
    from traffic.transport import TransportParams
    ranks = [RankAddress(r, f"127.84.0.{r + 1}", f"h{r + 1}") for r in range(2)]
    params = TransportParams(payload_bytes=1024, window_pkts=16, ack_every_pkts=4, rto_us=50_000)
    with pytest.raises(ValueError, match="stream_tos lists 1 TOS bytes for 2 stream"):
        Agent(AgentConfig(rank=0, ranks=ranks, peers=[1], seed=1, transport=params, streams=2, stream_tos=[2]))


# -- the counters --------------------------------------------------------------------------------

BEFORE = {"p1": {"control": (100, 2, 0), "lossless": (1000, 1, 0), "lossy": (0, 0, 0)},
          "p0": {"control": (0, 0, 0), "lossless": (0, 0, 0), "lossy": (0, 0, 0)}}
AFTER = {"p1": {"control": (162, 3, 0), "lossless": (9442, 3, 1), "lossy": (8442, 2, 0)},
         "p0": {"control": (62, 1, 0), "lossless": (0, 0, 0), "lossy": (4221, 1, 3)}}


def test_class_queue_table_is_the_counters_delta_per_port_and_class_and_totals_sum_it():
    t = class_queue_table(BEFORE, AFTER, CLASS_DSCP_TEXT)
    assert list(t.columns) == ["port", "class", "dscp", "tx_bytes", "tx_pkts", "drops_pkts"]
    assert list(t["port"]) == ["p0"] * 3 + ["p1"] * 3
    row = t[(t["port"] == "p1") & (t["class"] == "lossless")].iloc[0]
    assert (row["dscp"], row["tx_bytes"], row["tx_pkts"], row["drops_pkts"]) == ("26", 8442, 2, 1)
    totals = class_totals(t)
    assert totals == {"control": {"dscp": "48", "tx_bytes": 124, "tx_pkts": 2, "drops_pkts": 0},
                      "lossless": {"dscp": "26", "tx_bytes": 8442, "tx_pkts": 2, "drops_pkts": 1},
                      "lossy": {"dscp": "other", "tx_bytes": 12663, "tx_pkts": 3, "drops_pkts": 3}}
    assert class_queue_table(None, AFTER, CLASS_DSCP_TEXT).empty
    with pytest.raises(ValueError, match="p0 class control went backwards"):
        class_queue_table(AFTER, BEFORE, CLASS_DSCP_TEXT)


def test_a_backend_without_classes_has_no_class_counters():
    from dataplane import queues
    assert class_counters(["p0"], queues.get("htb_bfifo"), ("control", "lossless", "lossy")) is None
    assert class_counters([], queues.get("htb_classes"), ("control", "lossless", "lossy")) is None


def test_traffic_classes_block_writes_class_queues_csv(tmp_path):
    block = traffic_classes_block(tmp_path, BEFORE, AFTER)
    assert block["classes"]["lossy"]["tx_bytes"] == 12663 and "lossless class" in block["counted"]
    assert len(RunDir(tmp_path).table("class_queues")) == 6
    assert traffic_classes_block(tmp_path, None, None) is None


def test_tenants_get_their_jobs_bytes_per_class():
    qps = pd.DataFrame([
        {"rank": 0, "role": "requester", "dscp": 26, "tx_wire_bytes": 500},
        {"rank": 0, "role": "requester", "dscp": 0, "tx_wire_bytes": 0},
        {"rank": 1, "role": "requester", "dscp": 0, "tx_wire_bytes": 700},
        {"rank": 1, "role": "responder", "dscp": None, "tx_wire_bytes": None},
        {"rank": 2, "role": "requester", "dscp": 0, "tx_wire_bytes": 40},
    ])
    assert class_wire_bytes(qps, [0]) == {"lossless": 500, "lossy": 0}
    assert class_wire_bytes(qps, [1, 2]) == {"lossless": 0, "lossy": 740}
    assert class_wire_bytes(pd.DataFrame(), [0]) == {}
    base = {"hosts": ["h1"], "timed_ops": 1, "busbw_ratio": 0.5, "jct_s": 1.0}
    entries = [{**base, "name": "a", "tenant": "red", "tx_wire_bytes_by_class": class_wire_bytes(qps, [0])},
               {**base, "name": "b", "tenant": "blue", "tx_wire_bytes_by_class": class_wire_bytes(qps, [1])},
               {**base, "name": "c", "tenant": "blue", "tx_wire_bytes_by_class": class_wire_bytes(qps, [2])}]
    t = tenants_table(tenant_entries(entries)).set_index("tenant")
    assert t.loc["red", ["lossless_tx_wire_bytes", "lossy_tx_wire_bytes"]].tolist() == [500, 0]
    assert t.loc["blue", ["lossless_tx_wire_bytes", "lossy_tx_wire_bytes"]].tolist() == [0, 740]
