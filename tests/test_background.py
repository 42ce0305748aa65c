"""Background flows without a fabric: the ``background`` section's checks, the client runs and commands,
the results read from real iperf3 and traffic.sized_tcp records, and the loss identity with them."""
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.emulation.background import BASE_PORT, ClientRun, client_args, client_runs, sized_args
from testbed.measure.accounting import Elsewhere, loss_identity
from testbed.results.background import (background_block, flow_row, frame, host_tx_wire_bytes, received_bytes,
                                        read_iperf_json)
from testbed.spec.scenario import ScenarioError, parse_scenario
from traffic.sized_tcp import shares

DATA = Path(__file__).parent / "data" / "background"
REPO = Path(__file__).resolve().parents[1]
FABRIC = {"spines": 1, "leaves": 2, "hosts_per_leaf": 2, "host_link_bps": "10M", "fabric_link_bps": "10M"}


def scenario(*background):
    return parse_scenario({"fabric": FABRIC, "workload": {"sizes": {}}, "background": list(background)})


def refused(*background) -> str:
    with pytest.raises(ScenarioError) as e:
        scenario(*background)
    return str(e.value)


def test_valid_flows_parse():
    s = scenario({"kind": "tcp", "src": "h1", "dst": 2, "duration_s": 5},
                 {"kind": "udp", "src": "h2", "dst": "h4", "duration_s": 1.5, "rate_bps": "2M", "parallel": 2},
                 {"kind": "tcp", "name": "ckpt", "src": "h3", "dst": "h1", "size_bytes": "1MiB", "rate_bps": "5M"},
                 {"kind": "storage", "clients": ["h2", "h3"], "server": "h1", "burst_bytes": "256KiB",
                  "interval_s": 1, "count": 3, "start_s": 0.5})
    assert [f.kind for f in s.background] == ["tcp", "udp", "tcp", "storage"]
    assert s.background[1].rate_bps == 2e6 and s.background[2].size_bytes == 1 << 20


@pytest.mark.parametrize("flow, path, words", [
    ({"kind": "tcp", "src": "h1", "dst": "h9", "duration_s": 1}, "background.0.dst", "not a host of this fabric"),
    ({"kind": "tcp", "src": 7, "dst": "h2", "duration_s": 1}, "background.0.src", "rank 7 is outside"),
    ({"kind": "tcp", "src": "h1", "dst": "h1", "duration_s": 1}, "background.0.dst", "the same host as src"),
    ({"kind": "tcp", "src": "h1", "dst": "h2"}, "background.0.duration_s", "neither"),
    ({"kind": "tcp", "src": "h1", "dst": "h2", "duration_s": 1, "size_bytes": 10}, "background.0.duration_s",
     "both"),
    ({"kind": "tcp", "dst": "h2", "duration_s": 1}, "background.0.src", "required"),
    ({"kind": "udp", "src": "h1", "dst": "h2", "duration_s": 1}, "background.0.rate_bps", "required"),
    ({"kind": "udp", "src": "h1", "dst": "h2", "size_bytes": 1000, "rate_bps": "1M"}, "background.0.size_bytes",
     "duration_s"),
    ({"kind": "udp", "src": "h1", "dst": "h2", "duration_s": 1, "rate_bps": "20M"}, "background.0.rate_bps",
     "above the host link"),
    ({"kind": "tcp", "src": "h1", "dst": "h2", "duration_s": 1, "rate_bps": "6M", "parallel": 2},
     "background.0.rate_bps", "above the host link"),
    ({"kind": "tcp", "src": "h1", "dst": "h2", "duration_s": 1, "server": "h3"}, "background.0.server",
     "does not apply to kind 'tcp'"),
    ({"kind": "tcp", "src": "h1", "dst": "h2", "duration_s": 1, "speed": 3}, "background.0.speed", "unknown key"),
    ({"kind": "storage", "clients": ["h2"], "server": "h1", "burst_bytes": 1000, "interval_s": 1},
     "background.0.count", "required"),
    ({"kind": "storage", "clients": ["h1", "h2"], "server": "h1", "burst_bytes": 1000, "interval_s": 1,
      "count": 2}, "background.0.clients", "its own client"),
    ({"kind": "storage", "clients": ["h2", "h2"], "server": "h1", "burst_bytes": 1000, "interval_s": 1,
      "count": 2}, "background.0.clients", "listed twice"),
    ({"kind": "storage", "clients": ["h2", "h3", "h4"], "server": "h1", "burst_bytes": 1000, "interval_s": 1,
      "count": 30}, "background.0.count", "at most 64"),
    ({"kind": "ftp", "src": "h1", "dst": "h2"}, "background.0.kind", "tcp"),
    ({"kind": "tcp", "src": "h1", "dst": "h2", "duration_s": -1}, "background.0.duration_s", "greater than 0"),
])
def test_bad_flows_are_refused_naming_the_key(flow, path, words):
    msg = refused(flow)
    assert f"{path}:" in msg and words in msg, msg


def test_names_are_unique():
    f = {"kind": "tcp", "src": "h1", "dst": "h2", "duration_s": 1, "name": "x"}
    assert "background.1.name:" in refused(f, f)


def test_client_runs_expand_storage_bursts_and_order_by_start():
    s = scenario({"kind": "tcp", "src": "h1", "dst": "h3", "duration_s": 4, "start_s": 1.0},
                 {"kind": "storage", "clients": ["h2", "h3"], "server": "h1", "burst_bytes": 1000,
                  "interval_s": 0.5, "count": 3})
    runs = client_runs(s.background, ["h1", "h2", "h3", "h4"], 10e6)
    assert len(runs) == 1 + 2 * 3
    assert [r.start_s for r in runs] == [0.0, 0.0, 0.5, 0.5, 1.0, 1.0, 1.0]
    assert sorted(r.port for r in runs) == list(range(BASE_PORT, BASE_PORT + 7))
    storage = [r for r in runs if r.kind == "storage"]
    assert {(r.src, r.dst, r.size_bytes) for r in storage} == {(1, 0, 1000), (2, 0, 1000)}
    assert len({r.tag for r in runs}) == len(runs)  # one record file per run
    (tcp,) = [r for r in runs if r.kind == "tcp"]
    assert (tcp.src, tcp.dst, tcp.duration_s, tcp.sized) == (0, 2, 4.0, False)


def test_commands():
    udp = ClientRun("u", "udp", 0, 0, 1, 5300, 0.0, 2.5, None, 2e6, 2)
    a = client_args(udp, "10.0.0.2", 4200)
    assert a[:3] == ["iperf3", "-c", "10.0.0.2"] and "-J" in a
    assert a[a.index("-t") + 1] == "4" and a[a.index("-l") + 1] == "4172" and a[a.index("-b") + 1] == "2000000"
    assert a[a.index("-P") + 1] == "2" and "-u" in a
    tcp = ClientRun("t", "tcp", 0, 0, 1, 5301, 0.0, 3.0, None, 4e6, 1)
    a = client_args(tcp, "10.0.0.2", 4200)
    assert a[a.index("--fq-rate") + 1] == "4000000" and "-b" not in a and "-u" not in a and "-P" not in a
    sized = ClientRun("s", "tcp", 0, 0, 1, 5302, 0.0, None, 1000, None, 3)
    assert sized.sized
    send = sized_args("send", sized, "10.0.0.2", Path("/r/s.json"), "tb12ab")
    assert send[1:4] == ["-m", "traffic.sized_tcp", "send"] and send[send.index("--bytes") + 1] == "1000"
    assert send[send.index("--run-id") + 1] == "tb12ab"  # testbed clean finds a leftover by it
    assert "--bytes" not in sized_args("sink", sized, "10.0.0.2", Path("/r/s.json"), "tb12ab")


def _run(tag, kind="tcp", size=None, duration=30.0, status="done", parallel=1):
    r = ClientRun("f", kind, 0, 0, 2, 5201, 0.0, duration, size, None, parallel)
    r.t_start_ns, r.t_end_ns, r.status = 1_000_000_000, 25_000_000_000, status
    r.__class__ = type("Tagged", (ClientRun,), {"tag": property(lambda self: tag)})
    return r


def test_a_cut_tcp_flow_counts_what_the_receiver_got():
    """Interrupted when the workload ended: the client's own sum_received is empty, the server's has the count."""
    client, server = read_iperf_json(DATA / "tcp_cut.client.json"), read_iperf_json(DATA / "tcp_cut.server.json")
    assert client["end"]["sum_received"]["bytes"] == 0
    got = server["end"]["sum_received"]["bytes"]
    assert received_bytes(client, server, udp=False) == got
    row = flow_row(_run("tcp_cut", status="cut"), ["h1", "h2", "h3", "h4"], DATA)
    assert (row["src"], row["dst"], row["status"], row["bytes"]) == ("h1", "h3", "cut", got)
    assert row["seconds"] == client["end"]["sum_sent"]["seconds"]
    assert row["goodput_bps"] == pytest.approx(got * 8 / row["seconds"])
    assert row["retransmits"] == client["end"]["sum_sent"]["retransmits"] and row["fct_s"] is None


def test_udp_and_capped_tcp_records():
    row = flow_row(_run("udp_done", kind="udp", duration=3.5), ["h1", "h2", "h3", "h4"], DATA)
    server = read_iperf_json(DATA / "udp_done.server.json")
    got = server["end"]["sum_received"]["bytes"]
    assert row["bytes"] == got > 0 and row["lost_pkts"] == server["end"]["sum"]["lost_packets"]
    assert row["retransmits"] is None and row["goodput_bps"] == pytest.approx(2e6, rel=0.02)
    tcp = flow_row(_run("tcp_done", duration=2.0), ["h1", "h2", "h3", "h4"], DATA)
    assert tcp["goodput_bps"] < 3e6 * 1.01  # capped at 3 Mbit/s by the kernel's pacing


def test_sized_records_and_missing_ones(tmp_path):
    (tmp_path / "s.client.json").write_text(json.dumps({"bytes": 200000, "start_ns": 10**18,
                                                        "end_ns": 10**18 + 800_000_000, "retransmits": 3}))
    (tmp_path / "s.server.json").write_text(json.dumps({"bytes": 200000}))
    row = flow_row(_run("s", kind="storage", size=200000, duration=None), ["h1", "h2", "h3"], tmp_path)
    assert row["fct_s"] == pytest.approx(0.8) and row["goodput_bps"] == pytest.approx(2e6)
    assert (row["bytes"], row["retransmits"], row["status"]) == (200000, 3, "done")
    gone = flow_row(_run("absent", kind="storage", size=200000, duration=None, status="cut"), ["h1", "h2", "h3"],
                    tmp_path)
    assert gone["bytes"] is None and gone["fct_s"] is None and gone["status"] == "cut"
    failed = flow_row(_run("absent", kind="storage", size=200000, duration=None), ["h1", "h2", "h3"], tmp_path)
    assert failed["status"] == "failed"
    assert read_iperf_json(tmp_path / "nothing.json") is None
    table = frame([row, gone])
    assert str(table["start_ns"].dtype) == "Int64" and table["start_ns"][0] == 10**18


def test_block_totals_and_nic_bytes():
    rows = [{"kind": "tcp", "src": "h1", "bytes": 4148 * 10, "retransmits": 2, "lost_pkts": None},
            {"kind": "udp", "src": "h2", "bytes": 4172 * 5, "retransmits": None, "lost_pkts": 3},
            {"kind": "tcp", "src": "h3", "bytes": None, "retransmits": None, "lost_pkts": None}]
    block = background_block(rows, tcp_lost_segments=7)
    assert (block["lost_pkts"], block["udp_lost_pkts"], block["retransmits"]) == (10, 3, 2)
    assert host_tx_wire_bytes(rows, 4200) == {"h1": 12 * 4214, "h2": 8 * 4214}


def test_identity_leaves_background_drops_out_of_the_queue_term():
    """The switch queues dropped 12 packets, 5 of them background TCP segments: the RoCE identity holds on 7."""
    t = {"switch_drops_pkts": 7, "sent_pkts": 100, "received_pkts": 93}
    i = loss_identity(t, Elsewhere(), 0, background_pkts=5)
    assert (i.switch_queue_drops_pkts, i.unexplained_pkts, i.background_pkts) == (7, 0, 5)
    assert i.as_json()["background_pkts"] == 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sized_tcp_over_loopback(tmp_path):
    assert shares(10, 3) == [4, 3, 3] and sum(shares(1000001, 4)) == 1000001
    port = _free_port()
    sink = subprocess.Popen([sys.executable, "-m", "traffic.sized_tcp", "sink", "--bind", "127.0.0.1", "--port",
                             str(port), "--streams", "2", "--out", str(tmp_path / "sink.json")], cwd=REPO)
    for _ in range(100):  # until it listens
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        sink.kill()
        pytest.fail("the sink did not listen")
    # the probe connection above was the sink's first stream (0 bytes); the sender opens the rest
    send = subprocess.run([sys.executable, "-m", "traffic.sized_tcp", "send", "--to", "127.0.0.1", "--port",
                           str(port), "--streams", "1", "--bytes", "300001", "--out", str(tmp_path / "send.json")],
                          cwd=REPO, timeout=30)
    assert send.returncode == 0
    sink.wait(timeout=30)
    sent, got = json.loads((tmp_path / "send.json").read_text()), json.loads((tmp_path / "sink.json").read_text())
    assert sent["bytes"] == got["bytes"] == 300001
    assert sent["end_ns"] > sent["start_ns"] and sent["retransmits"] == 0
