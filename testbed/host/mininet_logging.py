"""Undo what importing Mininet does to Python's logging.

``mininet.log`` calls ``logging.setLoggerClass(MininetLogger)``: every logger created after that import
(our modules' ``logging.getLogger(__name__)``) is a MininetLogger with its own console handler that writes
without a newline, and the record then reaches the root handler too. A warning such as the controller
supervisor's "controller pid N died" came out twice, the first copy glued to the next line (a fresh user's
C10 run). :func:`restore_logging` puts the standard logger class back and takes Mininet's handler off
every logger but Mininet's own ``mininet`` logger (which keeps printing Mininet's messages as before).
"""
from __future__ import annotations

import logging


def restore_logging() -> list[str]:
    """Standard logger class again; Mininet's console handler removed from every other logger.

    Returns the names of the loggers it changed (sorted)."""
    logging.setLoggerClass(logging.Logger)
    changed = []
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name == "mininet" or not isinstance(logger, logging.Logger):
            continue
        ch = getattr(logger, "ch", None)  # MininetLogger keeps its console handler as .ch
        if ch is not None and ch in logger.handlers:
            logger.removeHandler(ch)
            changed.append(name)
    return sorted(changed)
