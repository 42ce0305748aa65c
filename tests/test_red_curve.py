"""The RED-curve instrument (benchmarks/instruments/red_curve.py): binning by the sampled queue, the queue
holder's hysteresis, and the paced sender and stamping receiver over loopback."""
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.instruments import red_curve as rc
from dataplane.ecn_policy import RedCurve

ROOT = Path(__file__).resolve().parents[1]
CURVE = RedCurve(10_000, 50_000, 0.2)


def test_bin_edges_cover_below_between_and_above_with_a_guard_at_kmax():
    edges = rc.bin_edges(CURVE, 4, 1042, 100_000)
    assert edges[0] == (0.0, 10_000.0)
    assert edges[1][0] == 10_000 and edges[4][1] == 50_000 - 1042
    assert edges[-1] == (50_000 + 1042, 100_000)
    assert len(edges) == 6
    for bad in ({"bins": 0}, {"guard_bytes": 20_000}, {"top_bytes": 50_500}):
        args = {"bins": 4, "guard_bytes": 1042, "top_bytes": 100_000, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            rc.bin_edges(CURVE, **args)


def _sawtooth(seconds=200.0, period_s=0.005, slope_Bps=30_000, top=60_000):
    """Backlog samples of a triangle wave 0..top and per-packet send times at 120/s, CE drawn from RED."""
    t = np.arange(0, seconds, period_s)
    phase = (t * slope_Bps) % (2 * top)
    q = np.where(phase < top, phase, 2 * top - phase)
    rng = np.random.default_rng(1)
    send_s = np.sort(rng.uniform(0, seconds, int(seconds * 120)))
    q_at = np.interp(send_s, t, q)
    ce = rng.random(len(send_s)) < np.array([CURVE.probability(x) for x in q_at])
    return (t * 1e9).astype(np.int64), q, (send_s * 1e9).astype(np.int64), ce.astype(int)


def test_bin_marks_recovers_the_line_from_a_swept_queue():
    sample_ns, q, send_ns, ce = _sawtooth()
    rows = rc.bin_marks(send_ns, ce, sample_ns, q, CURVE, rc.bin_edges(CURVE, 4, 1042, 70_000))
    below, *inner, above = rows
    assert below["marked"] == 0 and below["packets"] > 1000
    assert above["measured_p"] == 1.0
    for r, want in zip(inner, (0.025, 0.074, 0.122, 0.171)):
        assert r["packets"] > 2000
        assert r["line_p"] == pytest.approx(want, abs=0.003)
        assert abs(r["measured_p"] - r["line_p"]) < 0.03, r


def test_bin_marks_sees_a_curve_off_the_line():
    """A marker at a flat 10 % between Kmin and Kmax is 7.5 points off at the first and last bins."""
    sample_ns, q, send_ns, _ = _sawtooth()
    q_at = np.interp(send_ns, sample_ns, q)
    ce = ((q_at >= 10_000) & (np.random.default_rng(2).random(len(q_at)) < 0.1)) | (q_at > 50_000)
    rows = rc.bin_marks(send_ns, ce.astype(int), sample_ns, q, CURVE, rc.bin_edges(CURVE, 4, 1042, 70_000))
    assert abs(rows[1]["measured_p"] - rows[1]["line_p"]) > 0.05
    assert abs(rows[4]["measured_p"] - rows[4]["line_p"]) > 0.05


def test_bin_marks_leaves_out_packets_before_t_from_and_outside_the_samples():
    rows = rc.bin_marks([0, 5, 15, 25], [1, 1, 1, 1], [10, 20], [60_000, 60_000], CURVE,
                        [(0, 10_000), (55_000, 70_000)], t_from_ns=12)
    assert [r["packets"] for r in rows] == [0, 1]
    with pytest.raises(ValueError, match="lengths differ"):
        rc.bin_marks([1, 2], [1], [0, 10], [0, 0], CURVE, [(0, 1)])
    with pytest.raises(ValueError, match="at least 2"):
        rc.bin_marks([1], [1], [0], [0], CURVE, [(0, 1)])


class _Pipe:
    def __init__(self):
        self.lines = []

    def write(self, b):
        self.lines.append(b.decode().strip())

    def flush(self):
        pass


def test_queue_holder_switches_at_high_and_low_only():
    h = rc.QueueHolder(column=1, low_bytes=4_000, high_bytes=58_000, fast_bps=650_000, slow_bps=350_000)
    pipe = _Pipe()
    h.attach([pipe])

    def sample(backlog):
        c = np.full((2, 5), 7, dtype=np.int64)
        c[1, 3] = backlog
        h.on_sample(0, c)
    for b in (0, 30_000, 58_000, 59_000, 30_000, 4_000, 3_000, 58_500):
        sample(b)
    assert pipe.lines == ["650000", "350000", "650000", "350000"]
    assert h.flips == 3
    h.detach()
    sample(0)
    assert h.flips == 3
    with pytest.raises(ValueError, match="low_bytes"):
        rc.QueueHolder(0, 10, 5, 2, 1)
    with pytest.raises(ValueError, match="fast_bps"):
        rc.QueueHolder(0, 1, 5, 1, 2)


def test_sender_paces_at_the_commanded_rate_and_receiver_stamps(tmp_path):
    """Over loopback: 500 kbit/s for 1 s then 1 Mbit/s for 1 s = 60 + 120 frames of 1042 B."""
    port = 47_990
    py = sys.executable
    rx = subprocess.Popen([py, "-m", "benchmarks.instruments.red_curve", "recv", str(port), "3"],
                          stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert rx.stdout.readline().strip() == "ready"
    tx = subprocess.Popen([py, "-m", "benchmarks.instruments.red_curve", "send", "127.0.0.1", str(port)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    tx.stdin.write("500000\n")
    tx.stdin.flush()
    time.sleep(1.0)
    tx.stdin.write("1000000\n")
    tx.stdin.flush()
    time.sleep(1.0)
    out, _ = tx.communicate(timeout=10)
    got = __import__("json").loads(rx.communicate(timeout=10)[0].strip().splitlines()[-1])
    sent = int(out.split()[-1])
    assert 160 <= sent <= 200, sent
    assert len(got["send_ns"]) == sent and sum(got["ce"]) == 0  # loopback marks nothing
    assert list(got["send_ns"]) == sorted(got["send_ns"])
