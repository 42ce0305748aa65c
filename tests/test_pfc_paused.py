"""A port PFC held paused is backlogged and silent by design: the link-rate check leaves those samples out
(incast_both.yaml was judged NOT faithful for links at 57-59% of their rate, all of it pause time)."""
import pandas as pd

from testbed.measure.pfc_paused import mark_paused, paused_windows
from testbed.measure.fidelity_checks import link_ratio

MS = 1_000_000


def test_paused_samples_are_left_out_of_the_link_rate(tmp_path):
    pd.DataFrame({"time_ns": [10 * MS, 50 * MS], "port": ["s2-eth2", "s2-eth2"], "class": [3, 3],
                  "event": ["pause", "resume"], "charged_bytes": [-1, -1], "upstream": ["l2", "l2"],
                  "upstream_port": ["l2-eth4", "l2-eth4"], "actuation_us": [20.0, 20.0],
                  "pfc_frame": [False, False]}).to_csv(tmp_path / "pfc_events.csv", index=False)
    assert paused_windows(tmp_path) == {"l2-eth4": [(10 * MS, 50 * MS)]}
    t = list(range(0, 100 * MS, MS))
    # 10 Mbit/s = 1250 bytes per ms while sending, nothing while paused; backlogged throughout
    tx, sent = [], 0
    for x in t:
        tx.append(sent)
        sent += 0 if 10 * MS <= x < 50 * MS else 1250
    ports = pd.DataFrame({"time_ns": t, "port": "l2-eth4", "tx_bytes": tx, "backlog_bytes": 50_000})
    n0, s0, bits0, _ = link_ratio(ports)
    assert bits0 / s0 < 0.65e7  # judged with the pause: looks like a slow link
    marked = mark_paused(ports, tmp_path)
    n, s, bits, _ = link_ratio(marked)
    assert n < n0 and abs(bits / s / 1e7 - 1) < 0.01
    assert mark_paused(ports, tmp_path / "none") is ports  # no pfc_events.csv: unchanged


def test_paused_samples_are_not_backlogged_for_packet_timing():
    from testbed.measure.packet_timing import judged_gaps
    t = list(range(0, 100 * MS, 10 * MS))
    samples = pd.DataFrame({"time_ns": t, "backlog_pkts": 5, "paused": [20 * MS <= x <= 30 * MS for x in t]})
    # frames every 3.2 ms (4000 B at 10 Mbit/s) before and after an 8 ms pause, none during it
    dep = [x for x in range(0, 100 * MS, 3_200_000) if not 20 * MS <= x < 28 * MS]
    deps = pd.DataFrame({"window": 0, "time_ns": dep, "frame_bytes": 4000})
    g = judged_gaps(deps, samples, 10e6)
    assert len(g) > 0 and (g["error"].abs() < 0.01).all()  # the gap across the pause is not judged
    g_all = judged_gaps(deps, samples.drop(columns="paused"), 10e6)
    assert (g_all["error"].abs() > 1).any()
