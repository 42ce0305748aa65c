"""Start the fabric controller (os-ken, OpenFlow 1.5) for one run.

Usage::

    python -m controllers.run --config-file controller.conf --testbed-run-id tb12ab

Every setting comes from the configuration file (os-ken's ``CONF``; written
by testbed.emulation.controller_proc, keys in controllers/app.py): listen
address and port (``[DEFAULT] ofp_listen_host``: 127.0.0.1, or in a run over several
servers the IPv4 address of this machine that the servers reach (testbed.cluster); and
``ofp_tcp_listen_port``), log file (``[DEFAULT] log_file``) and the app's
settings file (``[testbed] settings_file``: controllers.contract.ControllerSettings,
with the topology, ready file and load-balancing policy). Validates them first
(loading and planning the fabric once, for the app to take:
controllers.app.preload_fabric) and exits with status 2 and a message naming the
bad key if the settings or topology file is invalid, the policy unknown,
``--testbed-run-id`` does not match the files, or the port cannot be bound. Removes a stale ready file, then runs
:class:`controllers.app.FabricRoutingApp`, which writes the ready file once
every switch is installed. SIGTERM or SIGINT stops the process at once with
status 0; status 1 if os-ken dies on its own. ``--testbed-run-id`` is kept in
the command line so the testbed's cleanup can find this process. Under Ryu,
``ryu-manager`` takes the same file and flag (controllers/app.py).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any, List, Optional

LOG = logging.getLogger("controllers.run")

LISTEN_HOST = "127.0.0.1"
APP_MODULE = "controllers.app"
EXIT_USAGE = 2
EXIT_FAILED = 1


def setup_logging(log_file: Optional[Path], level: str) -> None:
    """Log to ``log_file`` (append; None: nowhere) and to stderr; os-ken's own chatter at WARNING."""
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(level)
    handlers: List[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.insert(0, logging.FileHandler(log_file))
    for handler in handlers:
        handler.setFormatter(fmt)
        root.addHandler(handler)
    if level != "DEBUG":
        logging.getLogger("os_ken").setLevel(logging.WARNING)


def check_port_free(port: int, host: str = LISTEN_HOST) -> None:
    """Raise OSError if ``host``:``port`` cannot be bound (in use, not 1..65535, or ``host`` not an address of
    this machine)."""
    if not 1 <= port <= 65535:
        raise OSError(f"port {port} is not in 1..65535")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))


def listen_host_ok(host: str) -> bool:
    """``host`` is an IPv4 address literal (127.0.0.1, or the LAN address of a cluster run's driver)."""
    import ipaddress

    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def _exit_now(status: int) -> None:
    """Flush logs and leave. os-ken's native hub threads cannot be stopped
    (``hub.kill`` is a no-op) and are not daemons, so a normal interpreter exit
    would wait for them forever."""
    logging.shutdown()
    os._exit(status)


STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
#: How often the main thread checks that os-ken is still running (seconds).
WATCH_PERIOD_S = 0.5


def _run_os_ken(failure: List[BaseException]) -> None:
    """Thread body: run the app until os-ken stops; record an exception."""
    from os_ken.base.app_manager import AppManager

    try:
        AppManager.run_apps([APP_MODULE])
    except BaseException as exc:  # reported by the main thread
        failure.append(exc)
        LOG.exception("controller failed")


def _serve() -> int:
    """Run os-ken in a worker thread and wait for SIGTERM/SIGINT in this one.

    The stop signals are blocked before any thread starts (threads inherit
    the mask) and collected with ``sigtimedwait``: a Python handler would run
    only once the main thread wakes, which can take seconds when the kernel
    delivers the signal to one of os-ken's threads.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    failure: List[BaseException] = []
    worker = threading.Thread(target=_run_os_ken, args=(failure,), name="os-ken", daemon=True)
    worker.start()
    while True:
        info = signal.sigtimedwait(STOP_SIGNALS, WATCH_PERIOD_S)
        if info is not None:
            LOG.info("received %s: stopping controller", signal.Signals(info.si_signo).name)
            from controllers.congestion.loop import stop_all
            stop_all()  # resume what the congestion loop paused, write its tables
            return 0
        if not worker.is_alive():
            LOG.error("os-ken stopped on its own%s", f": {failure[0]!r}" if failure else "")
            return EXIT_FAILED


def parse_conf(argv: Optional[List[str]]) -> Any:
    """Register every option (os-ken's OpenFlow and log options, the app's ``[testbed]``
    group and its ``--testbed-run-id`` flag) and parse ``argv``; returns os-ken's CONF.
    Exits 2 on unknown flags; raises cfg.Error for an unreadable configuration file."""
    # app_manager must be imported before os_ken.controller (circular import);
    # importing os_ken.controller.controller registers the ofp-* options, os_ken.log log_file.
    import os_ken.base.app_manager  # noqa: F401
    import os_ken.controller.controller  # noqa: F401
    import os_ken.log  # noqa: F401
    import controllers.flags  # noqa: F401
    from os_ken import cfg

    cfg.CONF(args=argv, prog="python -m controllers.run", project="os_ken", default_config_files=[])
    return cfg.CONF


def main(argv: Optional[List[str]] = None) -> int:
    """Validate, configure os-ken and run the app until a signal; returns an exit status."""
    from controllers.parent_watch import note_parent

    note_parent()  # before the slow imports and validation: a testbed killed meanwhile is still noticed
    from os_ken import cfg

    try:
        conf = parse_conf(sys.argv[1:] if argv is None else argv)
    except cfg.oslo_config.cfg.Error as exc:
        print(f"controllers.run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from controllers.app import CONF_GROUP, preload_fabric

    settings = conf[CONF_GROUP]
    setup_logging(Path(conf.log_file) if conf.log_file else None, "DEBUG" if conf.verbose else "INFO")

    # Validation before anything starts: clear messages, status 2.
    from topology.model import RUN_ID_RE

    if not settings.run_id or not RUN_ID_RE.match(settings.run_id):
        LOG.error("--testbed-run-id %r is not 'tb' followed by 4 lowercase hex digits", settings.run_id)
        return EXIT_USAGE
    if not settings.settings_file:
        LOG.error("[%s] settings_file: not set in the configuration file (--config-file)", CONF_GROUP)
        return EXIT_USAGE
    try:
        # a bad settings file, an unreachable host, unknown policy or bad weights fail here, before listening
        loaded = preload_fabric(settings.settings_file, settings.run_id)
    except (OSError, ValueError) as exc:  # ContractError, TopologyError, RoutingError, run id mismatch
        LOG.error("invalid controller settings: %s", exc)
        return EXIT_USAGE
    topo, app_settings = loaded.layout, loaded.settings
    host = conf.ofp_listen_host
    if not listen_host_ok(host):
        LOG.error("ofp_listen_host: %r; allowed: an IPv4 address of this machine (%s, or in a run over several "
                  "servers the address the servers reach)", host, LISTEN_HOST)
        return EXIT_USAGE
    port = conf.ofp_tcp_listen_port
    try:
        if port is None:
            raise OSError("not set in the configuration file")
        check_port_free(port, host)
    except OSError as exc:
        LOG.error("ofp_tcp_listen_port: cannot listen on %s:%s: %s", host, port, exc)
        return EXIT_USAGE
    ready_file = Path(app_settings.ready_file).resolve()
    ready_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        ready_file.unlink()
        LOG.info("removed stale ready file %s", ready_file)
    except FileNotFoundError:
        pass

    LOG.info(
        "controller for run %s: %s:%d, %d switches, load balancing %s, pid %d",
        settings.run_id, host, port, len(topo.switches), app_settings.load_balance.policy, os.getpid(),
    )
    _exit_now(_serve())
    return EXIT_FAILED  # not reached


if __name__ == "__main__":
    sys.exit(main())
