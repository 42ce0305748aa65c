"""Start the fabric controller (os-ken, OpenFlow 1.5) for one run.

Usage::

    python -m controllers.run --run-id tb12ab --topology topo.json \\
        --listen-port 6653 --ready-file ready.json --log-file controller.log

Listens on 127.0.0.1 only. Validates the topology file first and exits with
status 2 and a message naming the bad key if it is invalid, if ``--run-id``
does not match the file, or if the port cannot be bound. Removes a stale
ready file, then runs :class:`controllers.fabric_app.FabricRoutingApp`, which
writes the ready file once every switch is installed. SIGTERM or SIGINT stops
the process at once with status 0; status 1 if os-ken dies on its own.
``--run-id`` is kept in the command line so the testbed's cleanup can find
this process.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import List, Optional

LOG = logging.getLogger("controllers.run")

LISTEN_HOST = "127.0.0.1"
APP_MODULE = "controllers.fabric_app"
EXIT_USAGE = 2
EXIT_FAILED = 1


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parse the command line (see module docstring); exits 2 on bad usage."""
    ap = argparse.ArgumentParser(prog="python -m controllers.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-id", required=True, help="run id, 'tb' + 4 hex digits; must match the topology file")
    ap.add_argument("--topology", required=True, type=Path, help="topology JSON written by the testbed")
    ap.add_argument("--listen-port", required=True, type=int, help="OpenFlow TCP port on 127.0.0.1")
    ap.add_argument("--ready-file", required=True, type=Path, help="readiness JSON the app writes")
    ap.add_argument("--log-file", required=True, type=Path, help="log file (appended)")
    ap.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return ap.parse_args(argv)


def setup_logging(log_file: Path, level: str) -> None:
    """Log to ``log_file`` (append) and to stderr; os-ken's own chatter at WARNING."""
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(level)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    for handler in (logging.FileHandler(log_file), logging.StreamHandler(sys.stderr)):
        handler.setFormatter(fmt)
        root.addHandler(handler)
    if level != "DEBUG":
        logging.getLogger("os_ken").setLevel(logging.WARNING)


def check_port_free(port: int) -> None:
    """Raise OSError if 127.0.0.1:``port`` cannot be bound (in use, or not 1..65535)."""
    if not 1 <= port <= 65535:
        raise OSError(f"port {port} is not in 1..65535")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((LISTEN_HOST, port))


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
            return 0
        if not worker.is_alive():
            LOG.error("os-ken stopped on its own%s", f": {failure[0]!r}" if failure else "")
            return EXIT_FAILED


def main(argv: Optional[List[str]] = None) -> int:
    """Validate, configure os-ken and run the app until a signal; returns an exit status."""
    args = parse_args(argv)
    setup_logging(args.log_file, args.log_level)

    # Validation before anything starts: clear messages, status 2.
    from controllers.topology import plan_fabric
    from topology.model import RUN_ID_RE, load

    if not RUN_ID_RE.match(args.run_id):
        LOG.error("--run-id %r is not 'tb' followed by 4 lowercase hex digits", args.run_id)
        return EXIT_USAGE
    try:
        topo = load(args.topology)
        plan_fabric(topo)  # a host some switch cannot reach fails here, before listening
    except ValueError as exc:  # topology.model.TopologyError, topology.routing.RoutingError
        LOG.error("invalid topology: %s", exc)
        return EXIT_USAGE
    if topo.run_id != args.run_id:
        LOG.error("%s: run_id: %r does not match --run-id %r", args.topology, topo.run_id, args.run_id)
        return EXIT_USAGE
    try:
        check_port_free(args.listen_port)
    except OSError as exc:
        LOG.error("cannot listen on %s:%d: %s", LISTEN_HOST, args.listen_port, exc)
        return EXIT_USAGE
    ready_file = args.ready_file.resolve()
    ready_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        ready_file.unlink()
        LOG.info("removed stale ready file %s", ready_file)
    except FileNotFoundError:
        pass

    os.environ["TESTBED_TOPOLOGY"] = str(args.topology.resolve())
    os.environ["TESTBED_READY_FILE"] = str(ready_file)
    os.environ["TESTBED_RUN_ID"] = args.run_id

    # app_manager must be imported before os_ken.controller (circular import);
    # importing os_ken.controller.controller registers the ofp-* options.
    import os_ken.base.app_manager  # noqa: F401
    import os_ken.controller.controller  # noqa: F401
    from os_ken import cfg

    cfg.CONF(
        args=["--ofp-listen-host", LISTEN_HOST, "--ofp-tcp-listen-port", str(args.listen_port)],
        project="os_ken",
        default_config_files=[],
    )
    LOG.info(
        "controller for run %s: %s:%d, %d switches, pid %d",
        args.run_id, LISTEN_HOST, args.listen_port, len(topo.switches), os.getpid(),
    )
    _exit_now(_serve())
    return EXIT_FAILED  # not reached


if __name__ == "__main__":
    sys.exit(main())
