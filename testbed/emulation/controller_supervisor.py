"""Controller supervision: notice the controller dying during a run, restart it, measure the reconnect.

A thread waits on the controller process. When it exits on its own (a crash,
an OOM kill, ``kill -9``), the supervisor records when (``time_ns`` on the run's one clock,
:func:`traffic.clock.unix_ns`, like every ``*_ns`` column of the results
tables; ``utc``, the same instant as text; ``after_start_s`` since the fabric
started) and how (``signal`` name or ``exit_code``). With
``restart`` on it starts a new controller on the same port with the same
topology file, and times it until every switch is reconnected and resynced
(the app's ready file lists every dpid after a barrier on each). The switches
are fail-secure and keep forwarding on their installed flows meanwhile, and
the restarted app resyncs them without wiping (controllers/resync.py), so a
death costs no packet on installed paths. Every switch retries the
connection once a second (``max_backoff`` set by testbed.emulation.fabric), which
bounds the reconnect.

Verdict policy (docs/controller.md): a death by itself does not make a run
unfaithful; packets it costs are judged by the loss checks like any other
loss. A run is not faithful when a switch answered any controller message
with an OpenFlow error, or when a restart did not bring every switch back
within :data:`RESTART_READY_TIMEOUT_S`.
"""
from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import threading
from dataclasses import replace
from datetime import datetime, timezone

from controllers import contract
from controllers.supervisor_report import ControllerReport, Death, Restarted, RestartFailed, decode_report
from testbed.emulation.controller_proc import ControllerError, ControllerProcess
from testbed.host.timeout_scale import startup_s
from traffic.clock import unix_ns

log = logging.getLogger(__name__)

#: A restart must reconnect every switch within this many seconds.
RECONNECT_TARGET_S = 5.0
#: Give up on one restart after this many seconds (then the run is not faithful).
RESTART_READY_TIMEOUT_S = 30.0
#: Restarts per run before the supervisor stops trying (a controller that keeps crashing).
MAX_RESTARTS = 5
#: Log line the app writes for every OFPT_ERROR (controllers/app.py).
OPENFLOW_ERROR_MARK = "OFPT_ERROR from"


#: How often the watcher looks at the stop flag while the controller runs (seconds).
WATCH_PERIOD_S = 0.2


class _Stopping(Exception):
    pass


def _wait_exit(proc: subprocess.Popen, timeout_s: float) -> int | None:
    """The return code once ``proc`` exited (reaped), or None after ``timeout_s``.

    Sleeps on a pidfd (Linux >= 5.3), so the exit is seen at once without polling."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd, or already reaped
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
    finally:
        os.close(fd)
    return proc.wait() if ready else None


def exit_status(returncode: int) -> dict:
    """``{"signal": "SIGKILL", "exit_code": None}`` for a negative Popen return code, else the code (a
    :class:`controllers.supervisor_report.Death`'s ``signal`` and ``exit_code``)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return {"signal": name, "exit_code": None}
    return {"signal": None, "exit_code": returncode}


class ControllerSupervisor:
    """Watches one run's :class:`ControllerProcess` (see module docstring).

    ``dpids``: every switch of the topology; ``t0_ns``: the fabric's start on
    the run's clock (:func:`traffic.clock.unix_ns`; ``after_start_s`` counts from it). Use ``start()``
    once the controller is ready, and ``stop()`` before stopping the
    controller; ``stop()`` returns :meth:`report`. The reports are summary.json's ``controller`` block: the
    JSON object of a :class:`controllers.supervisor_report.ControllerReport`.
    """

    def __init__(self, controller: ControllerProcess, restart: bool, dpids: list[int], t0_ns: int):
        self.controller = controller
        self.restart = restart
        self.dpids = sorted(dpids)
        self.t0_ns = t0_ns
        self.deaths: list[Death] = []
        self.openflow_errors: list[contract.OpenFlowError] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._final: dict | None = None

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> "ControllerSupervisor":
        self._thread = threading.Thread(target=self._watch, name="controller-supervisor", daemon=True)
        self._thread.start()
        return self

    def snapshot(self) -> dict:
        """The report as of now, still watching (the results written before the teardown judge it):
        the live app's OpenFlow errors collected first. After :meth:`stop`, the final report."""
        if self._final is not None:
            return self._final
        proc = self.controller.proc
        if proc is not None and proc.poll() is None:
            self._collect_errors()
        return self.report()

    def stop(self) -> dict:
        """Stop watching (the controller keeps running) and return the report. Safe to call twice."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=startup_s(RESTART_READY_TIMEOUT_S) + 25)
            self._thread = None
        if self._final is None:
            proc = self.controller.proc
            if proc is not None and proc.poll() is None:
                self._collect_errors()
            self._final = self.report()
        return self._final

    # -- the watcher thread ----------------------------------------------------
    def _watch(self) -> None:
        while not self._stopping.is_set():
            proc = self.controller.proc
            returncode = _wait_exit(proc, WATCH_PERIOD_S)
            if returncode is None:
                continue
            if self._stopping.is_set() or self.controller.stopped_on_purpose:
                return  # the testbed stopped it
            death = self._record_death(proc.pid, returncode)
            if not self.restart or len(self.deaths) > MAX_RESTARTS:
                if self.restart:
                    self._restarted(RestartFailed(failed=f"gave up after {MAX_RESTARTS} restarts", pid=proc.pid))
                log.warning("controller died (%s); %s", _how(death),
                            "restarting is off" if not self.restart else f"gave up after {MAX_RESTARTS} restarts")
                return
            try:
                restart = self._restarted(self._restart(death))
            except _Stopping:
                waited_s = (unix_ns() - death.time_ns) / 1e9
                self._restarted(RestartFailed(failed=f"the run ended {waited_s:.3f} s after the death, before every "
                                                     f"switch was back", pid=self.controller.proc.pid))
                return
            if isinstance(restart, RestartFailed):
                return

    def _restarted(self, restart: Restarted | RestartFailed) -> Restarted | RestartFailed:
        """Record ``restart`` as the last death's; return it."""
        self.deaths[-1] = replace(self.deaths[-1], restart=restart)
        return restart

    def _record_death(self, pid: int, returncode: int) -> Death:
        now_ns = unix_ns()
        death = Death(pid=pid, **exit_status(returncode), time_ns=now_ns,
                      utc=datetime.fromtimestamp(now_ns / 1e9, timezone.utc).isoformat(timespec="milliseconds"),
                      after_start_s=round((now_ns - self.t0_ns) / 1e9, 3), restart=None)
        self.deaths.append(death)
        self._collect_errors()  # the dead app's last ready file, before a restart replaces it
        log.warning("controller pid %d died at %.3f s (%s)", pid, death.after_start_s, _how(death))
        return death

    def _restart(self, death: Death) -> Restarted | RestartFailed:
        if self._stopping.is_set():
            raise _Stopping
        t_spawn = unix_ns()
        try:
            self.controller.start()
            ready = self.controller.wait_ready(startup_s(RESTART_READY_TIMEOUT_S), give_up=self._give_up)
        except ControllerError as e:
            if self._stopping.is_set():
                raise _Stopping from None
            self._collect_errors()
            log.error("controller restart failed: %s", e)
            return RestartFailed(failed=str(e)[:500], pid=self.controller.proc.pid)
        t_ready = unix_ns()
        info = Restarted(pid=self.controller.proc.pid, reconnect_s=round((t_ready - t_spawn) / 1e9, 3),
                         outage_s=round((t_ready - death.time_ns) / 1e9, 3), switches=len(ready.dpids),
                         resync=dict(ready.resync))
        log.warning("controller restarted (pid %d): %d switches reconnected and resynced in %.3f s",
                    info.pid, info.switches, info.reconnect_s)
        return info

    def _give_up(self) -> None:
        if self._stopping.is_set():
            raise ControllerError("the testbed is stopping")

    def _collect_errors(self) -> None:
        ready = self.controller.read_ready()
        for err in ready.errors if ready is not None else []:
            if err not in self.openflow_errors:
                self.openflow_errors.append(err)

    # -- results ---------------------------------------------------------------
    def openflow_error_log_lines(self) -> int:
        """Lines of the controller log (all incarnations) reporting an OFPT_ERROR."""
        try:
            text = self.controller.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return 0
        return sum(OPENFLOW_ERROR_MARK in line for line in text.splitlines())

    def report(self) -> dict:
        """The ``controller`` block of summary.json: the JSON object of a
        :class:`controllers.supervisor_report.ControllerReport` (its fields say what each key holds)."""
        events = list(self.deaths)
        report = ControllerReport(
            framework=self.controller.framework, conf=self.controller.conf, settings=self.controller.settings,
            restart=self.restart, deaths=len(events), restarts=sum(isinstance(d.restart, Restarted) for d in events),
            switches=len(self.dpids), reconnect_target_s=RECONNECT_TARGET_S, events=events,
            openflow_errors=max(len(self.openflow_errors), self.openflow_error_log_lines()),
            errors=self.openflow_errors[:10], log=str(self.controller.log_path), violations=[])
        return contract.encode(replace(report, violations=_violations(report, None)[0]))


def violations(block: dict, until_ns: int | None = None) -> tuple[list[str], list[str]]:
    """(violations, later) of summary.json's ``controller`` block ``block`` (a :meth:`ControllerSupervisor.report`;
    docs/controller.md).

    violations: any OpenFlow error (the count covers the whole report: an error carries no time, and
    may answer a message sent while measuring), and a failed or partial restart after a death at or
    before ``until_ns`` (Unix ns; None: every death). later: one sentence per death after
    ``until_ns`` (e.g. during the teardown, once every measurement was in: it cannot have changed a
    figure, so it is named, not judged). Raises controllers.contract.ContractError naming the field of a
    block that is not a ControllerReport.
    """
    return _violations(decode_report(block), until_ns)


def _violations(report: ControllerReport, until_ns: int | None) -> tuple[list[str], list[str]]:
    out, later = [], []
    if report.openflow_errors:
        out.append(f"controller: {report.openflow_errors} OpenFlow error message(s) from the switches "
                   f"(see {report.log})")
    for d in report.events:
        if until_ns is not None and d.time_ns > until_ns:
            later.append(f"controller: died ({_how(d)}) at {d.after_start_s:.3f} s, after every measurement "
                         f"was in (not judged: no figure was measured after it)")
            continue
        r = d.restart
        if isinstance(r, RestartFailed):
            out.append(f"controller: restart after the death at {d.after_start_s:.3f} s failed: {r.failed}")
        elif r is not None and r.switches != report.switches:
            out.append(f"controller: restart reconnected {r.switches} of {report.switches} switches")
    return out, later


def _how(death: Death) -> str:
    return death.signal or f"exit code {death.exit_code}"


def verdict_line(block: dict) -> str:
    """One line for the printed verdict, e.g. ``controller: died 1x (SIGKILL at 8.214 s, ...)``, of summary.json's
    ``controller`` block ``block``. Raises controllers.contract.ContractError naming the field of a block that
    is not a ControllerReport."""
    report = decode_report(block)
    errors = f"{report.openflow_errors} OpenFlow errors"
    if not report.deaths:
        return f"controller: ran throughout; {errors}"
    parts = []
    for d in report.events:
        text = f"died ({_how(d)}) at {d.after_start_s:.3f} s [{d.utc}]"
        r = d.restart
        if r is None:
            text += ", not restarted (controller.restart: false): switches kept forwarding on installed flows"
        elif isinstance(r, RestartFailed):
            text += f", restart FAILED: {r.failed}"
        else:
            slow = "" if r.reconnect_s <= report.reconnect_target_s else \
                f" (over the {report.reconnect_target_s:g} s target)"
            changed = sum(v for k, v in r.resync.items() if k not in ("flows_unchanged", "groups_modified"))
            text += (f", restarted: {r.switches}/{report.switches} switches reconnected and resynced in "
                     f"{r.reconnect_s:.3f} s{slow} ({r.resync.get('flows_unchanged', 0)} flows in place, "
                     f"{changed} flow/group entries added or removed)")
        parts.append(text)
    return "controller: " + "; ".join(parts) + f"; {errors}"
