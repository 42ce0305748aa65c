"""The controller as a child process of the testbed: configure, start, wait ready, stop.

The testbed writes the controller's settings as an ini file, ``controller.conf``
in the run directory (:func:`write_conf`; the options are os-ken's/Ryu's
``CONF``, declared in controllers/app.py), and starts the app with
``--config-file`` under the framework the scenario names
(``controller.framework``): ``os_ken`` (default) runs ``python -m
controllers.run`` in the testbed's own Python; ``ryu`` runs Ryu 4.34's
``ryu-manager`` from ``.venv-ryu`` (Python 3.9, made by scripts/install). Either
way the controller listens on 127.0.0.1 only, on a free port chosen per run,
logs into the run directory, and writes a ready file once every switch of the
topology has connected and a barrier confirmed its flows and groups. The run
id stays on the command line (``--testbed-run-id``), where the testbed's
cleanup finds the process. ``start()`` may be called again after the process
died (testbed.emulation.controller_supervisor restarts it): same port, same
configuration file, logs appended.
"""
from __future__ import annotations

import configparser
import functools
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from controllers.run import LISTEN_HOST
from testbed.lifecycle import raise_if_interrupted

#: The repository (its controllers/ and topology/ packages are what ryu-manager imports).
REPO = Path(__file__).resolve().parents[2]
#: Ryu's Python 3.9 environment (scripts/install makes it where a Python 3.9 exists).
RYU_VENV = REPO / ".venv-ryu"
RYU_HOWTO = ("install a Python 3.9 (for example `pyenv install 3.9.18`, or python3.9 from your distribution) "
             "and run scripts/install again: it then creates .venv-ryu with Ryu 4.34 (requirements-ryu.txt)")
#: controller.framework values (testbed.spec.controller).
FRAMEWORKS = ("os_ken", "ryu")


#: the app's failover events (JSON lines), in the run directory
EVENTS_FILE = "controller.events.jsonl"


class ControllerError(RuntimeError):
    """The controller did not start, or reported OpenFlow errors."""


def write_conf(path: Path, *, run_id: str, port: int, topology: Path, ready_file: Path, log_file: Path,
               lb_policy: str, lb_weights: dict[str, int] | None = None, failover: dict | None = None) -> dict:
    """Write the controller's configuration file (oslo.config ini) and return it as
    ``{section: {key: value}}``; paths are written absolute.

    ``[DEFAULT]``: the framework's own options (listen address and port, log file);
    ``[testbed]``: the app's (controllers/app.py ``OPTS``, ``CLI_OPTS``); ``lb_weights`` (next-hop
    switch name -> weight) is written as a list ``s1:1,s2:3`` when given; ``failover`` (events_file,
    stats_period_ms, gray_loss_threshold, gray_window_ms: controllers/failover_app.py) as they are.
    """
    conf = {
        "DEFAULT": {"ofp_listen_host": LISTEN_HOST, "ofp_tcp_listen_port": str(port),
                    "log_file": str(Path(log_file).resolve())},
        "testbed": {"run_id": run_id, "topology": str(Path(topology).resolve()),
                    "ready_file": str(Path(ready_file).resolve()), "lb_policy": lb_policy},
    }
    conf["testbed"].update({k: str(v) for k, v in (failover or {}).items()})
    if lb_weights:
        conf["testbed"]["lb_weights"] = ",".join(f"{name}:{w}" for name, w in sorted(lb_weights.items()))
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
    ``{"framework", "framework_version", "lb_policy", "lb_weights", "conf_file"}`` (the settings file's
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
            "conf_file": "controller.conf"}


def free_tcp_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def failover_conf(spec, run_dir: Path) -> dict:
    """The app's failure-handling and adaptive settings for a scenario: the events file always; statistics
    polling only when the scenario injects faults (the gray-failure detector, ``gray_detect``) or uses the
    adaptive policy (the shorter period of the two), so other runs pay nothing for it."""
    f = spec.failover
    adaptive = spec.load_balance.adaptive  # the adaptive policy reacts to the same polled counters
    periods = ([f.stats_period_ms] if spec.faults else []) + ([adaptive["poll_period_ms"]] if adaptive else [])
    return {"events_file": str((Path(run_dir) / EVENTS_FILE).resolve()),
            "stats_period_ms": min(periods, default=0), "gray_detect": bool(spec.faults),
            **({"adaptive_hot_threshold": adaptive["hot_threshold"], "adaptive_min_dwell_ms": adaptive["min_dwell_ms"]}
               if adaptive else {}),
            "gray_loss_threshold": f.gray_loss_threshold, "gray_window_ms": f.window_ms,
            # a queue filling up looks like loss to the detector: ask for more than one buffer of full frames
            "gray_min_lost_pkts": max(5, math.ceil(spec.fabric.buffer_bytes / (spec.fabric.mtu_bytes + 14)))}


class ControllerProcess:
    """One controller process for one run.

    Files in ``run_dir``: ``controller.conf`` (its settings, :func:`write_conf`),
    ``controller.log`` (its log), ``controller.stderr``, ``controller.ready``
    (JSON written by the app: dpids, flows, groups, errors). ``framework``:
    one of :data:`FRAMEWORKS`; ``lb_policy``: a controllers.lb policy name; ``lb_weights``:
    ``load_balance.weights`` (next-hop switch name -> weight); ``failover``: the failure-handling
    settings of :func:`failover_conf`. The app appends failover events to ``controller.events.jsonl``.
    """

    def __init__(self, run_id: str, run_dir: Path, topology_path: Path, port: int | None = None,
                 framework: str = "os_ken", lb_policy: str = "ecmp", lb_weights: dict[str, int] | None = None,
                 failover: dict | None = None):
        if framework not in FRAMEWORKS:
            raise ControllerError(f"controller.framework: {framework!r}; allowed: {', '.join(FRAMEWORKS)}")
        self.run_id = run_id
        self.port = port or free_tcp_port()
        self.framework = framework
        self.conf_path = run_dir / "controller.conf"
        self.log_path = run_dir / "controller.log"
        self.ready_path = run_dir / "controller.ready"
        self.topology_path = topology_path
        self.conf = write_conf(self.conf_path, run_id=run_id, port=self.port, topology=topology_path,
                               ready_file=self.ready_path, log_file=self.log_path, lb_policy=lb_policy,
                               lb_weights=lb_weights, failover=failover)
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
        """Spawn the controller and wait until it listens (at most 20 s). Raises ControllerError."""
        self.ready_path.unlink(missing_ok=True)
        cmd, env = self.command()
        if self._out is not None:
            self._out.close()
        self.stopped_on_purpose = False
        self._out = open(self.log_path.with_suffix(".stderr"), "ab")
        # own session: a Ctrl-C at the terminal reaches the testbed, which then stops us in order
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ControllerError(f"controller exited with code {self.proc.returncode} at start; "
                                      f"see {self.log_path} and {self._out.name}")
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise ControllerError(f"controller did not listen on 127.0.0.1:{self.port} within 20 s; see {self.log_path}")

    def read_ready(self) -> dict | None:
        """The ready file's content, or None while there is none."""
        try:
            return json.loads(self.ready_path.read_text())
        except FileNotFoundError:
            return None

    def wait_ready(self, timeout_s: float = 60.0, give_up=raise_if_interrupted) -> dict:
        """Block until the app confirmed every switch's flows and groups; return the ready file.

        ``give_up()`` runs every 50 ms and may raise to stop waiting (default:
        a held-back Ctrl-C). Raises ControllerError on timeout, on a dead
        controller, or when the switches answered with OpenFlow errors.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            give_up()
            if self.proc is None or self.proc.poll() is not None:
                raise ControllerError(f"controller died (see {self.log_path})")
            if self.ready_path.exists():
                ready = json.loads(self.ready_path.read_text())
                if ready.get("errors"):
                    raise ControllerError(f"switches rejected flows or groups: {ready['errors']}")
                return ready
            time.sleep(0.05)
        raise ControllerError(f"not every switch connected and confirmed its flows within {timeout_s:.0f} s; "
                              f"see {self.log_path}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s (the congestion loop writes its tables on SIGTERM). Safe to call
        twice. A supervisor does not count this exit as a death."""
        self.stopped_on_purpose = True
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
            except ProcessLookupError:
                pass
        if self._out is not None:
            self._out.close()
            self._out = None
