"""The testbed's side of the controller's congestion loop (controllers/congestion/loop.py): its settings.

The loop runs in the controller process from the start of the fabric, but can
only sample queues that exist: the controller's settings name a file
(``loop_settings_file``, :func:`loop_settings_file`), into which the fabric
writes :class:`controllers.contract.LoopSettings` once every queue is installed
and the hosts' namespaces are known (:func:`write_and_wait`), then waits for the
loop's ``congestion_loop.started``. Once the measurement is over,
:func:`stop_loop` asks the loop to stop and waits until its tables are final
(``congestion_loop.stopped``), so the results are written before the fabric is
torn down. File names: controllers.contract.
"""
from __future__ import annotations

import time
from pathlib import Path

from testbed.emulation.topo import HOST_NIC_QUEUE_BYTES
from testbed.host.timeout_scale import startup_s

from controllers import contract
from controllers.congestion.loop import LOSSLESS_CLASS
from controllers.contract import (LOOP_SETTINGS_FILE, LOOP_STARTED_FILE, LOOP_STOP_REQUEST_FILE, LOOP_STOPPED_FILE,
                                  EcnSettings, LoopSettings, PfcSettings, WatchdogSettings)
#: the loop's sampling period, s (docs/architecture.md: about 10 % of a core for 24 ports)
PERIOD_S = 0.001
#: wait for the controller's loop to start on the development machines (s), x testbed.host.timeout_scale
START_TIMEOUT_S = 20.0


def wanted(spec) -> bool:
    """True when the scenario asks the controller for ECN marking or PFC."""
    return spec.congestion.ecn is not None or spec.congestion.pfc_on


def loop_settings_file(spec, run_dir: Path) -> Path | None:
    """Where the loop's settings will appear (controllers.contract.ControllerSettings.loop_settings_file):
    in ``run_dir`` when the scenario wants the loop, else None."""
    return (Path(run_dir) / LOOP_SETTINGS_FILE).resolve() if wanted(spec) else None


def loop_settings(fab) -> LoopSettings:
    """The loop's settings for the running fabric ``fab``."""
    from testbed.spec.congestion import DSCP_LOSSLESS

    spec, c = fab.spec, fab.spec.congestion
    frame = spec.fabric.mtu_bytes + 14
    ecn = None
    if c.ecn is not None:
        kmin, kmax = c.ecn.thresholds_bytes(frame)
        ecn = EcnSettings(kmin_bytes=kmin, kmax_bytes=kmax, pmax=float(c.ecn.pmax),
                          step=float(c.ecn_probability_step), dscp=DSCP_LOSSLESS,
                          marker="red" if c.ecn.marker == "red" else "nftables")
    pfc = None
    if c.pfc_on:
        xon, xoff = c.pfc.thresholds_bytes(frame)
        wd = c.pfc.watchdog  # congestion.pfc.watchdog (testbed/spec/pfc_watchdog.py)
        pfc = PfcSettings(xoff_bytes=xoff, xon_bytes=xon, watchdog=None if wd is None else WatchdogSettings(
            enabled=wd.enabled, detect_ms=float(wd.detect_ms), restore_ms=float(wd.restore_ms)))
    rid = fab.run_id
    return LoopSettings(
        run_id=rid, results_dir=str(fab.run_dir.resolve()), period_s=PERIOD_S,
        sampled_parent=fab.queues.class_parent(LOSSLESS_CLASS), mtu_bytes=spec.fabric.mtu_bytes,
        lossless_buffer_bytes=c.class_buffers_bytes(spec.fabric.buffer_bytes)["lossless"],
        host_queue_bytes=HOST_NIC_QUEUE_BYTES,
        host_pids={h.name[len(rid):]: fab.net.get(h.name).pid for h in fab.layout.hosts},
        ecn=ecn, pfc=pfc,
        # switch ports' shapers wander up to (1 + f) x nominal: their leaves are installed there
        clock_wander=float(spec.fabric.clock_wander or 0.0))


def headroom_warning(spec) -> str | None:
    """A start-up warning when Xoff plus the headroom of every ingress feeding one egress
    (controllers.congestion.pfc.worst_case_bytes: response = the loop period + 2 ms of actuation, each
    link's delay: its own, e.g. ``fabric.dci_delay_us``, else ``fabric.link_delay_us``) exceeds the lossless buffer; None when it fits or PFC is off."""
    from controllers.congestion.pfc import worst_case_bytes

    c, f = spec.congestion, spec.fabric
    if not c.pfc_on:
        return None
    xon, xoff = c.pfc.thresholds_bytes(f.mtu_bytes + 14)
    buffer = c.class_buffers_bytes(f.buffer_bytes)["lossless"]
    total, egress, n = worst_case_bytes(f.layout_preview(), xoff, PERIOD_S, f.mtu_bytes + 14,
                                        f.link_delay_us / 1e6)
    if total <= buffer:
        return None
    return (f"congestion.pfc: Xoff {xoff} bytes + the headroom of the {n} ingresses feeding {egress} = "
            f"{total} bytes exceeds the lossless buffer {buffer} bytes: the lossless class may drop; lower "
            f"xoff or raise congestion.buffers.lossless_bytes (headroom per IEEE 802.1Qbb Annex O: "
            f"controllers/congestion/pfc.py)")


def write_and_wait(fab, timeout_s: float | None = None) -> None:
    """Write the loop's file when the scenario wants it and wait until the controller's loop runs.

    Raises RuntimeError naming controller.log when it does not start within ``timeout_s`` (default
    :data:`START_TIMEOUT_S` x the machine's timeout scale, testbed.host.timeout_scale)."""
    if timeout_s is None:
        timeout_s = startup_s(START_TIMEOUT_S)
    if not wanted(fab.spec):
        return
    started = fab.run_dir / LOOP_STARTED_FILE
    started.unlink(missing_ok=True)
    tmp = fab.run_dir / (LOOP_SETTINGS_FILE + ".tmp")
    tmp.write_text(contract.dumps(loop_settings(fab)))
    tmp.rename(fab.run_dir / LOOP_SETTINGS_FILE)  # atomic: the loop never reads half a file
    deadline = time.monotonic() + timeout_s
    while not started.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the controller's congestion loop did not start within {timeout_s:.0f} s; see "
                               f"{fab.run_dir / 'controller.log'}")
        time.sleep(0.02)


#: longest wait for the loop to stop and write its tables (s; as the controller's SIGTERM allows)
STOP_TIMEOUT_S = 30.0


def stop_loop(fab, timeout_s: float | None = None) -> str | None:
    """Ask the running fabric's congestion loop to stop now and wait until it wrote its tables.

    Returns None when they are final (or the scenario has no loop, or it already stopped), else why
    not (the controller is gone, or no answer within ``timeout_s``): a warning for the caller, whose
    results then lack the loop's tables or get them when the controller stops. Never raises.
    """
    run_dir = Path(fab.run_dir)
    if not wanted(fab.spec) or not (run_dir / LOOP_STARTED_FILE).exists() or (run_dir / LOOP_STOPPED_FILE).exists():
        return None
    if timeout_s is None:
        timeout_s = startup_s(STOP_TIMEOUT_S)
    (run_dir / LOOP_STOP_REQUEST_FILE).write_text("")
    deadline = time.monotonic() + timeout_s
    while not (run_dir / LOOP_STOPPED_FILE).exists():
        proc = fab.controller.proc if fab.controller is not None else None
        if proc is None or proc.poll() is not None:
            return "the controller is not running: its congestion loop could not write its tables"
        if time.monotonic() > deadline:
            return (f"the congestion loop did not stop within {timeout_s:.0f} s (see "
                    f"{run_dir / 'controller.log'}): its tables come when the controller stops")
        time.sleep(0.02)
    return None
