"""The controller as a child process of the testbed: configure, start, wait ready, stop.

The testbed writes the controller's settings into the run directory
(controllers.contract): ``controller.settings.json``
(:class:`controllers.contract.ControllerSettings`, :func:`controller_settings`) and
``controller.conf``, the framework's ini (:func:`write_conf`: listen address and
port, log file, ``[testbed] settings_file``), and starts the app with
``--config-file`` under the framework the scenario names
(``controller.framework``): ``os_ken`` (default) runs ``python -m
controllers.run`` in the testbed's own Python; ``ryu`` runs Ryu 4.34's
``ryu-manager`` from ``.venv-ryu`` (Python 3.9, made by scripts/install). Either
way the controller listens on 127.0.0.1 (in a run over several servers: the address the servers reach,
``listen_host``), on a free port chosen per run,
logs into the run directory, and writes a ready file
(:class:`controllers.contract.ControllerReady`) once every switch of the
topology has connected and a barrier confirmed its flows and groups. The run
id stays on the command line (``--testbed-run-id``), where the testbed's
cleanup finds the process. ``start()`` may be called again after the process
died (testbed.emulation.controller_supervisor restarts it): same port, same
configuration file, logs appended.
"""
from __future__ import annotations

import configparser
import functools
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from controllers import contract
from controllers.contract import (AdaptiveSettings, ControllerReady, ControllerSettings, FailoverSettings,
                                  LoadBalanceSettings, TenantSettings)
from controllers.run import LISTEN_HOST
from testbed.host.timeout_scale import ENV as timeout_scale_env, startup_s, timeout_scale
from testbed.process.lifecycle import raise_if_interrupted

#: The repository (its controllers/ and topology/ packages are what ryu-manager imports).
REPO = Path(__file__).resolve().parents[2]
#: Ryu's Python 3.9 environment (scripts/install makes it where a Python 3.9 exists).
RYU_VENV = REPO / ".venv-ryu"
RYU_HOWTO = ("install a Python 3.9 (for example `pyenv install 3.9.18`, or python3.9 from your distribution) "
             "and run scripts/install again: it then creates .venv-ryu with Ryu 4.34 (requirements-ryu.txt)")
#: controller.framework values (testbed.spec.controller).
FRAMEWORKS = ("os_ken", "ryu")
#: start-up waits on the development machines (s), multiplied by testbed.host.timeout_scale: the
#: controller listening; every switch connected with its flows confirmed; SIGTERM to exit
LISTEN_TIMEOUT_S = 20.0
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class ControllerError(RuntimeError):
    """The controller did not start, or reported OpenFlow errors."""


def write_conf(path: Path, *, run_id: str, port: int, settings_file: Path, log_file: Path,
               listen_host: str = LISTEN_HOST) -> dict:
    """Write the framework's configuration file (oslo.config ini) and return it as ``{section: {key:
    value}}``; paths are written absolute. ``[DEFAULT]``: the framework's own options (listen address
    and port, log file); ``[testbed] settings_file``: the app's settings
    (:class:`controllers.contract.ControllerSettings`, controllers/app.py)."""
    conf = {
        "DEFAULT": {"ofp_listen_host": listen_host, "ofp_tcp_listen_port": str(port),
                    "log_file": str(Path(log_file).resolve())},
        "testbed": {"settings_file": str(Path(settings_file).resolve())},
    }
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_dict(conf)
    with open(path, "w") as fh:
        fh.write(f"# controller settings of run {run_id}, written by the testbed (controllers/app.py)\n")
        parser.write(fh)
    return conf


def ryu_manager() -> Path:
    return RYU_VENV / "bin" / "ryu-manager"


@functools.lru_cache(maxsize=None)
def framework_version(framework: str) -> str:
    """Version of the controller framework ``framework`` (os_ken: this Python's os-ken; ryu: .venv-ryu's ryu).

    Raises ControllerError naming ``controller.framework`` (and how to get Ryu) when it is not installed.
    """
    if framework not in FRAMEWORKS:
        raise ControllerError(f"controller.framework: {framework!r}; allowed: {', '.join(FRAMEWORKS)}")
    if framework == "os_ken":
        from importlib import metadata
        return metadata.version("os-ken")
    if not ryu_manager().exists():
        raise ControllerError(f"controller.framework: 'ryu' needs {RYU_VENV} (Ryu 4.34 on Python 3.9), which is "
                              f"missing: {RYU_HOWTO}")
    out = subprocess.run([str(RYU_VENV / "bin" / "python"), "-c",
                          "from importlib.metadata import version; print(version('ryu'))"],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise ControllerError(f"controller.framework: 'ryu': {RYU_VENV} is broken ({out.stderr.strip()[-200:]}); "
                              f"run scripts/install again")
    return out.stdout.strip()


def preflight(spec) -> dict:
    """The manifest's ``controller`` block, checked before anything touches the kernel:
    ``{"framework", "framework_version", "lb_policy", "lb_weights", "lb_hash_basis", "lb_selection_method",
    "conf_file"}`` (the settings file's
    name in the run directory). Raises testbed.spec.scenario.ScenarioError (exit 2) when
    ``controller.framework`` is not installed here, saying how to get it."""
    from testbed.spec.scenario import ScenarioError

    try:
        version = framework_version(spec.controller.framework)
    except ControllerError as e:
        raise ScenarioError(str(e)) from None
    return {"framework": spec.controller.framework, "framework_version": version,
            "lb_policy": spec.load_balance.policy, "lb_weights": dict(spec.load_balance.weights),
            **({"lb_adaptive": spec.load_balance.adaptive} if spec.load_balance.adaptive else {}),
            "lb_hash_basis": spec.load_balance.hash_basis, "lb_selection_method": spec.load_balance.selection_method,
            "conf_file": contract.CONF_FILE}


def free_tcp_port(host: str = LISTEN_HOST) -> int:
    """A TCP port on ``host`` (an address of this machine) that nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def tenant_settings(tenants) -> TenantSettings | None:
    """The isolation the controller enforces for a testbed.spec.tenants.TenantMap (None: isolation off)."""
    if tenants is None or not tenants.isolation:
        return None
    return TenantSettings(host_tenant=dict(tenants.host_tenant), shared_hosts=list(tenants.shared_hosts))


def controller_settings(spec, run_id: str, run_dir: Path, loop_settings_file: Path | None = None,
                        tenants=None) -> ControllerSettings:
    """The app's settings for a scenario's run (paths absolute, in ``run_dir``): the events file always;
    statistics polling only when the scenario injects faults (the gray-failure detector, ``gray_detect``)
    or uses the adaptive policy (the shorter period of the two), so other runs pay nothing for it;
    ``loop_settings_file``: where the congestion loop's settings will appear (None: no loop;
    testbed.emulation.congestion_conf.loop_settings_file); ``tenants``: the run's
    testbed.spec.tenants.TenantMap (default: the scenario's own, testbed.spec.tenants.tenant_map)."""
    from testbed.spec.tenants import tenant_map

    f, lbs = spec.failover, spec.load_balance
    adaptive = lbs.adaptive  # the adaptive policy reacts to the same polled counters
    periods = ([f.stats_period_ms] if spec.faults else []) + ([adaptive["poll_period_ms"]] if adaptive else [])
    run_dir = Path(run_dir).resolve()
    return ControllerSettings(
        run_id=run_id, topology_file=str(run_dir / contract.TOPOLOGY_FILE), ready_file=str(run_dir / contract.READY_FILE),
        events_file=str(run_dir / contract.EVENTS_FILE), stats_file=str(run_dir / contract.STATS_FILE),
        stats_period_ms=min(periods, default=0),
        load_balance=LoadBalanceSettings(
            policy=lbs.policy, weights=dict(lbs.weights),
            adaptive=AdaptiveSettings(float(adaptive["hot_threshold"]), int(adaptive["min_dwell_ms"]))
            if adaptive else None, hash_basis=lbs.hash_basis, selection_method=lbs.selection_method),
        failover=FailoverSettings(
            gray_detect=bool(spec.faults), gray_loss_threshold=float(f.gray_loss_threshold), gray_window_ms=f.window_ms,
            # a queue filling up looks like loss to the detector: ask for more than one buffer of full frames
            gray_min_lost_pkts=max(5, math.ceil(spec.fabric.buffer_bytes / (spec.fabric.mtu_bytes + 14)))),
        loop_settings_file=str(Path(loop_settings_file).resolve()) if loop_settings_file else None,
        tenants=tenant_settings(tenants if tenants is not None else tenant_map(spec)))


class ControllerProcess:
    """One controller process for one run.

    Files in ``run_dir`` (names: controllers.contract): ``controller.settings.json`` (``settings``),
    ``controller.conf`` (:func:`write_conf`), ``controller.log`` (its log), ``controller.stderr``,
    ``controller.ready`` (written by the app: :class:`controllers.contract.ControllerReady`).
    ``framework``: one of :data:`FRAMEWORKS`. The app appends its events to ``controller.events.jsonl``.
    """

    #: the address it listens on (``listen_host``; a cluster run's: the one the servers reach)
    listen_host: str = LISTEN_HOST

    def __init__(self, run_dir: Path, settings: ControllerSettings, port: int | None = None,
                 framework: str = "os_ken", listen_host: str = LISTEN_HOST):
        if framework not in FRAMEWORKS:
            raise ControllerError(f"controller.framework: {framework!r}; allowed: {', '.join(FRAMEWORKS)}")
        self.run_id = settings.run_id
        self.settings = settings
        self.listen_host = listen_host
        self.port = port or free_tcp_port(listen_host)
        self.framework = framework
        run_dir = Path(run_dir)
        self.conf_path = run_dir / contract.CONF_FILE
        self.log_path = run_dir / contract.LOG_FILE
        self.ready_path = Path(settings.ready_file)
        self.settings_path = run_dir / contract.SETTINGS_FILE
        self.settings_path.write_text(contract.dumps(settings))
        self.conf = write_conf(self.conf_path, run_id=self.run_id, port=self.port, settings_file=self.settings_path,
                               log_file=self.log_path, listen_host=listen_host)
        self.proc: subprocess.Popen | None = None
        self._out = None
        #: set by stop(): the exit that follows is the testbed's doing, not a death
        self.stopped_on_purpose = False

    def command(self) -> tuple[list[str], dict | None]:
        """(argv, environment or None for the testbed's own) that starts the controller."""
        flags = ["--config-file", str(self.conf_path.resolve()), "--testbed-run-id", self.run_id]
        if self.framework == "os_ken":
            return [sys.executable, "-m", "controllers.run", *flags], None
        if not ryu_manager().exists():
            raise ControllerError(f"controller.framework: 'ryu' needs {RYU_VENV}, which is missing: {RYU_HOWTO}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["PYTHONPATH"] = str(REPO)
        return [str(ryu_manager()), "--user-flags", str(REPO / "controllers" / "flags.py"), *flags,
                "controllers.app"], env

    def start(self) -> "ControllerProcess":
        """Spawn the controller and wait until it listens (at most :data:`LISTEN_TIMEOUT_S` x the machine's
        timeout scale, testbed.host.timeout_scale). Raises ControllerError."""
        self.ready_path.unlink(missing_ok=True)
        cmd, env = self.command()
        if self._out is not None:
            self._out.close()
        self.stopped_on_purpose = False
        self._out = open(self.log_path.with_suffix(".stderr"), "ab")
        # own session: a Ctrl-C at the terminal reaches the testbed, which then stops us in order
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        listen_s = startup_s(LISTEN_TIMEOUT_S)
        deadline = time.monotonic() + listen_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ControllerError(f"controller exited with code {self.proc.returncode} at start; "
                                      f"see {self.log_path} and {self._out.name}")
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex((self.listen_host, self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise ControllerError(f"controller did not listen on {self.listen_host}:{self.port} within {listen_s:.0f} s; see {self.log_path} "
                              f"(slow machine? raise {timeout_scale_env} above {timeout_scale():g})")

    def read_ready(self) -> ControllerReady | None:
        """The ready file's record, or None while there is none. Raises controllers.contract.ContractError
        when it is not one."""
        try:
            return contract.read_json(self.ready_path, ControllerReady)
        except FileNotFoundError:
            return None

    def wait_ready(self, timeout_s: float | None = None, give_up=raise_if_interrupted) -> ControllerReady:
        """Block until the app confirmed every switch's flows and groups; return the ready file.

        ``give_up()`` runs every 50 ms and may raise to stop waiting (default:
        a held-back Ctrl-C). Raises ControllerError on timeout, on a dead
        controller, or when the switches answered with OpenFlow errors. ``timeout_s`` defaults to
        :data:`READY_TIMEOUT_S` x the machine's timeout scale.
        """
        if timeout_s is None:
            timeout_s = startup_s(READY_TIMEOUT_S)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            give_up()
            if self.proc is None or self.proc.poll() is not None:
                raise ControllerError(f"controller died (see {self.log_path})")
            ready = self.read_ready()
            if ready is not None:
                if ready.errors:
                    raise ControllerError(f"switches rejected flows or groups: "
                                          f"{[contract.encode(e) for e in ready.errors]}")
                return ready
            time.sleep(0.05)
        raise ControllerError(f"not every switch connected and confirmed its flows within {timeout_s:.0f} s; "
                              f"see {self.log_path}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT_S` (x the timeout scale) (the congestion loop writes its tables on SIGTERM). Safe to call
        twice. A supervisor does not count this exit as a death."""
        self.stopped_on_purpose = True
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=startup_s(STOP_TIMEOUT_S))
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
            except ProcessLookupError:
                pass
        if self._out is not None:
            self._out.close()
            self._out = None
