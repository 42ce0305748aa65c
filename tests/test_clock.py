"""The one clock of every results table (traffic.clock)."""
import time

from traffic import clock


def test_unix_ns_is_epoch_and_monotonic():
    a = clock.unix_ns()
    assert abs(a - time.time_ns()) < 5_000_000          # the Unix epoch scale, not CLOCK_MONOTONIC
    readings = [clock.unix_ns() for _ in range(1000)]
    assert readings == sorted(readings) and readings[0] >= a


def test_monotonic_readings_map_onto_the_same_scale():
    m, u = time.monotonic_ns(), clock.unix_ns()
    assert abs(clock.from_monotonic_ns(m) - u) < 1_000_000
    assert clock.from_monotonic_ns(m + 10**9) - clock.from_monotonic_ns(m) == 10**9
