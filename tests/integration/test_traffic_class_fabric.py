"""Per-job traffic classes on a real fabric (issue 18 items 1 and 5): scenarios/traffic_classes.yaml as it is.

Job a (tenant red, lossless) on h1, h3 and job b (tenant blue, lossy by its tenant's default) on h2, h4 run
2-rank ring all-reduces at once; both rings cross l1's uplink to the one spine (2 x 20 Mbit/s into 10 Mbit/s),
whose htb_classes queues, ECN marker and PFC act per class. A tcpdump on that uplink (output.pcap l1-s1) shows
every data packet of job b with DSCP 0 and never CE, job a's with DSCP 26 (some CE-marked), ACKs and CNPs with
DSCP 48; the uplink's per-class counters (class_queues.csv) hold each job's bytes in its own class, equal to
what its sender's QPs put on the wire (qps.csv); tenants.csv splits each tenant's bytes by class. One run,
about 15 s with set-up on the 2-core machine (5 s of traffic)."""
from pathlib import Path

import pytest
import yaml

from conftest import REPO, assert_losses_accounted, run_scenario_file
from testbed.results.rundir import RunDir
from testbed.spec.scenario import parse_scenario
from traffic.roce import read_roce_pcap

pytestmark = pytest.mark.integration

SCENARIO = REPO / "scenarios" / "traffic_classes.yaml"
OPCODE_ACK, OPCODE_CNP = 0x11, 0x81
DSCP_CONTROL, DSCP_LOSSLESS, DSCP_LOSSY = 48, 26, 0
CE = 3
#: a class's bytes on the uplink against its sender's QP bytes: the same frames, plus any stray frame of the
#: class (ARP, a probe) during the traffic; measured equal to the byte in the first runs
BYTES_BAND = 0.01


def test_lossy_job_rides_the_lossy_class_lossless_job_the_lossless_class(tmp_path):
    text = SCENARIO.read_text()
    _, s = run_scenario_file(tmp_path, text, timeout=500, expect_rc=None, name="traffic_classes")
    t = s["transport"]
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] > 0 and t["order_errors"] == 0
    assert_losses_accounted(s)
    run = RunDir.open(s["run_dir"])
    layout = parse_scenario(yaml.safe_load(text)).fabric.layout_preview()
    ip = {h.name: h.ip for h in layout.hosts}
    rank = {h.name: h.rank for h in layout.hosts}

    jobs = {e["name"]: e for e in s["jobs"]["jobs"]}
    assert (jobs["a"]["traffic_class"], jobs["b"]["traffic_class"]) == ("lossless", "lossy")
    assert dict(zip(run.table("jobs")["job"], run.table("jobs")["traffic_class"])) == {"a": "lossless", "b": "lossy"}

    # the capture on l1's uplink: DSCP and ECN of every RoCE packet, by sender
    (pcap,) = Path(s["run_dir"], "pcap").glob("*.pcap")
    pk = read_roce_pcap(pcap)
    data = pk[~pk["opcode"].isin([OPCODE_ACK, OPCODE_CNP])]
    control = pk[pk["opcode"].isin([OPCODE_ACK, OPCODE_CNP])]
    lossy = data[data["ip_src"].isin([ip["h2"], ip["h4"]])]
    lossless = data[data["ip_src"].isin([ip["h1"], ip["h3"]])]
    print("pcap", pcap.name, "packets by sender, DSCP, ECN, opcode:")
    print(pk.groupby(["ip_src", "dscp", "ecn", "opcode"]).agg(pkts=("frame_bytes", "size"),
                                                             bytes=("frame_bytes", "sum")).to_string())
    assert len(lossy) > 500 and len(lossless) > 500
    assert set(lossy["dscp"]) == {DSCP_LOSSY} and set(lossless["dscp"]) == {DSCP_LOSSLESS}
    assert (lossy["ecn"] == CE).sum() == 0, "a lossy packet was ECN-marked"
    assert (lossless["ecn"] == CE).sum() > 0, "no lossless packet was marked on the congested path"
    assert set(control["dscp"]) == {DSCP_CONTROL}, "an ACK or CNP left the control class"

    # the uplink's class counters hold each job's bytes in its class; h1 and h2 send all their data through it
    cq = run.table("class_queues")
    up = cq[cq["port"] == s["run_id"] + pcap.stem].set_index("class")
    print("class_queues on", pcap.stem, up.to_dict("index"))
    qps = run.qps
    req = qps[qps["role"] == "requester"]
    sent = {h: req[req["rank"] == rank[h]] for h in ("h1", "h2")}
    print({h: (sorted(set(r[r["tx_wire_bytes"] > 0]["dscp"])), int(r["tx_wire_bytes"].sum())) for h, r in sent.items()})
    assert set(sent["h2"][sent["h2"]["tx_wire_bytes"] > 0]["dscp"]) == {DSCP_LOSSY}
    assert set(sent["h1"][sent["h1"]["tx_wire_bytes"] > 0]["dscp"]) == {DSCP_LOSSLESS}
    for cls, h in (("lossy", "h2"), ("lossless", "h1")):
        want = int(sent[h]["tx_wire_bytes"].sum())
        assert want <= up.loc[cls, "tx_bytes"] <= want * (1 + BYTES_BAND), (cls, up.loc[cls].to_dict(), want)
        assert up.loc[cls, "tx_pkts"] >= int(sent[h]["tx_pkts"].sum())
    assert up.loc["lossless", "drops_pkts"] == 0
    assert s["traffic_classes"]["classes"]["lossy"]["tx_bytes"] >= up.loc["lossy", "tx_bytes"]

    # never paused, never marked: the lossy QPs' own records
    lossy_req = req[req["dscp"] == DSCP_LOSSY]
    assert lossy_req["pfc_paused_ns"].sum() == 0
    resp = qps[qps["role"] == "responder"]
    blue = resp[resp["rank"].isin([rank["h2"], rank["h4"]])]
    red = resp[resp["rank"].isin([rank["h1"], rank["h3"]])]
    assert blue["ce_pkts"].sum() == 0 and red["ce_pkts"].sum() > 0
    c = s["congestion"]
    print("congestion", {k: c.get(k) for k in ("ce_marked_pkts", "ect_pkts", "pause_frames", "paused_time_s",
                                               "lossless_drops_pkts")},
          "lossless QPs paused", int(req[req["dscp"] == DSCP_LOSSLESS]["pfc_paused_ns"].sum()), "ns")
    print("traffic_classes", s["traffic_classes"]["classes"])

    # tenants.csv: each tenant's bytes by class, from its jobs' QPs
    ten = run.table("tenants").set_index("tenant")
    print(ten[["lossless_tx_wire_bytes", "lossy_tx_wire_bytes"]].to_dict("index"))
    red_bytes = int(req[req["rank"].isin([rank["h1"], rank["h3"]])]["tx_wire_bytes"].sum())
    blue_bytes = int(req[req["rank"].isin([rank["h2"], rank["h4"]])]["tx_wire_bytes"].sum())
    assert (ten.loc["red", "lossless_tx_wire_bytes"], ten.loc["red", "lossy_tx_wire_bytes"]) == (red_bytes, 0)
    assert (ten.loc["blue", "lossless_tx_wire_bytes"], ten.loc["blue", "lossy_tx_wire_bytes"]) == (0, blue_bytes)
    print("JCT", {n: e["jct_s"] for n, e in jobs.items()}, "busbw/link", {n: e["busbw_ratio"] for n, e in jobs.items()})
