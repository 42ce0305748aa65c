"""The host check's ready time leaves out the time PFC paused the host's NIC (case C07: a 4:1 PFC incast's
senders were judged CPU-starved at 28 % of the link while paused 2.7 of their 3.1 busy seconds)."""
import pandas as pd
import pytest

from testbed.pipeline.judge import host_tx_frame


def _qps(pfc_paused_ns):
    """Two senders of the C07 run: rank 2 and 3, 256 packets, 1,063,424 wire bytes, busy 3.13 s each."""
    return pd.DataFrame({"rank": [2, 3], "peer": [0, 0], "role": ["requester"] * 2, "tx_pkts": [256, 256],
                         "tx_busy_ns": [3_129_126_000, 3_129_611_000], "tx_paced_ns": [0, 0],
                         "pfc_paused_ns": pfc_paused_ns, "tx_wire_bytes": [1_063_424, 1_063_424]})


HOSTS = ["h1", "h2", "h3", "h4"]


def test_the_nics_paused_time_is_taken_out_of_the_ready_time():
    frame = host_tx_frame(_qps([90_518_124, 7_652_572]), HOSTS, 10e6,
                          nic_paused_ns={2: 2_705_958_448, 3: 2_708_603_346})
    busy = dict(zip(frame["host"], frame["tx_busy_s"]))
    # 3.13 s busy - 2.71 s paused = 0.42 s is less than 1,063,424 bytes' 0.85 s at 10 Mbit/s: the floor
    assert busy["h3"] == pytest.approx(1_063_424 * 8 / 10e6) == busy["h4"]
    slower = host_tx_frame(_qps([0, 0]), HOSTS, 10e6, nic_paused_ns={2: 1_000_000_000})
    assert dict(zip(slower["host"], slower["tx_busy_s"]))["h3"] == pytest.approx(2.129126, abs=1e-6)


def test_a_qps_own_pause_counts_when_it_is_longer_and_without_pfc_nothing_changes():
    frame = host_tx_frame(_qps([900_000_000, 0]), HOSTS, 10e6, nic_paused_ns={2: 100_000_000})
    busy = dict(zip(frame["host"], frame["tx_busy_s"]))
    assert busy["h3"] == pytest.approx(2.229126, abs=1e-6)
    assert busy["h4"] == pytest.approx(3.129611, abs=1e-6)
    plain = host_tx_frame(_qps([0, 0]).drop(columns="pfc_paused_ns"), HOSTS, 10e6)
    assert list(plain["tx_busy_s"]) == pytest.approx([3.129126, 3.129611])
