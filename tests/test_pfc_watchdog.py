"""The PFC watchdog policy (controllers.congestion.watchdog) on a synthetic clock: storm after detect_ms
of unbroken pause demand, pauses not honoured while in storm, restore after restore_ms without demand,
no flapping; and its scenario block (testbed.spec.pfc_watchdog)."""
import pytest
from pydantic import ValidationError

from controllers.congestion.watchdog import PfcWatchdog
from testbed.spec.pfc_watchdog import WatchdogSpec

MS = 1_000_000
KEY = ("tb12abl1-eth3", "lossless")


def drive(wd, key, demand_of_ms, until_ms, tick_ms=1):
    """Tick ``key`` every ``tick_ms`` from 0 to ``until_ms`` with demand ``demand_of_ms(t_ms)``; the events."""
    return [e for t in range(0, until_ms + 1, tick_ms) if (e := wd.update(key, t * MS, demand_of_ms(t)))]


def test_congestion_pauses_shorter_than_detect_never_storm():
    wd = PfcWatchdog(detect_ms=100, restore_ms=100)
    # paused 80 ms of every 100 ms for 5 s: long, frequent pauses, but never 100 ms without a break
    assert drive(wd, KEY, lambda t: t % 100 < 80, 5000) == []
    assert wd.storms == 0 and wd.honour(KEY, True)


def test_one_storm_then_one_restore_and_pauses_dropped_in_between():
    wd = PfcWatchdog(detect_ms=100, restore_ms=200)
    # normal pauses (20 ms in every 50) until the receiver hangs from 1000 ms to 3000 ms, keeping its
    # port paused; then nothing: a queue with pauses every 50 ms would not be restored (gaps < restore_ms)
    def demand(t):
        return 1000 <= t < 3000 or (t < 1000 and t % 50 < 20)
    events = drive(wd, KEY, demand, 6000)
    assert [(e.kind, e.time_ns // MS) for e in events] == [("storm", 1100), ("restore", 3199)]  # last demand at 2999 ms
    assert (wd.storms, wd.restores) == (1, 1)
    assert wd.storm_time_ns(KEY, 6000 * MS) == 2099 * MS


def test_honour_follows_the_state_and_the_drop_action():
    wd = PfcWatchdog(detect_ms=10, restore_ms=10)
    drive(wd, KEY, lambda t: True, 20)
    assert wd.in_storm(KEY) and not wd.honour(KEY, True) and not wd.honour(KEY, False)
    report_only = PfcWatchdog(detect_ms=10, restore_ms=10, mitigate=False)
    drive(report_only, KEY, lambda t: True, 20)
    assert report_only.in_storm(KEY) and report_only.honour(KEY, True) and report_only.storms == 1
    assert wd.summary() == {"storms": 1, "restores": 0, "mitigate": True, "in_storm_now": [str(KEY)]}


def test_no_flapping_under_demand_that_comes_and_goes():
    wd = PfcWatchdog(detect_ms=100, restore_ms=100)
    drive(wd, KEY, lambda t: True, 150)  # storm at 100 ms
    # in storm, demand for 1 ms every 60 ms: shorter gaps than restore_ms, so it stays in storm
    events = [e for t in range(151, 2000) if (e := wd.update(KEY, t * MS, t % 60 == 0))]
    assert events == [] and wd.in_storm(KEY)
    # silence: restored once; then the same on/off demand never builds 100 ms without a break
    events = [e for t in range(2000, 4000) if (e := wd.update(KEY, t * MS, t >= 2200 and t % 60 < 50))]
    assert [(e.kind, e.time_ns // MS) for e in events] == [("restore", 2080)]  # last demand at 1980
    assert (wd.storms, wd.restores) == (1, 1)


def test_queues_are_independent_and_sparse_ticks_count_as_unbroken():
    wd = PfcWatchdog(detect_ms=100, restore_ms=100)
    other = ("tb12abl1-eth4", "lossless")
    ev = wd.update_all(0, {KEY: True, other: False}) + wd.update_all(150 * MS, {KEY: True, other: True})
    assert [(e.key, e.kind) for e in ev] == [(KEY, "storm")]
    assert wd.in_storm(KEY) and not wd.in_storm(other) and wd.honour(other, True)


def test_bad_settings_and_ticks_out_of_order_are_refused():
    with pytest.raises(ValueError, match=r"watchdog.detect_ms=0: must be a number of milliseconds > 0"):
        PfcWatchdog(detect_ms=0)
    with pytest.raises(ValueError, match=r"watchdog.restore_ms=True"):
        PfcWatchdog(restore_ms=True)
    wd = PfcWatchdog()
    wd.update(KEY, 10 * MS, True)
    with pytest.raises(ValueError, match="before the last one"):
        wd.update(KEY, 5 * MS, True)


def test_spec_block_defaults_bounds_and_unknown_keys():
    s = WatchdogSpec()
    assert (s.enabled, s.detect_ms, s.restore_ms) == (True, 200.0, 200.0)
    wd = PfcWatchdog.from_spec(WatchdogSpec(enabled=False, detect_ms=50, restore_ms=500))
    assert (wd.mitigate, wd.detect_ms, wd.restore_ms) == (False, 50, 500)
    for bad, where in (({"detect_ms": 0}, "detect_ms"), ({"restore_ms": 1e6}, "restore_ms"),
                       ({"enabled": "yes"}, "enabled"), ({"detect": 5}, "detect")):
        with pytest.raises(ValidationError, match=where):
            WatchdogSpec(**bad)
