"""Start-up timeouts that scale with the machine: ``TESTBED_TIMEOUT_SCALE``.

Every fixed wait for something to start (the controller listening, every
switch connected and synced, the agents ready, the congestion loop running,
background iperf3 servers listening) and for the controller to stop is
``base_s x scale``. The bases were set on the development machines (2 cores,
stock Python), where scale 1 is right. scripts/vm sets the scale for its guest
from the acceleration it booted with (8 under software emulation, where the
os-ken controller alone took ~28 s to listen against a 20 s base; 2 under
KVM); a user on a slow machine sets it by hand. Waits for traffic (an op's
``timeout_s``, from the op's own expected time) do not use it.
"""
from __future__ import annotations

import os

#: the environment variable read; a number >= 1 (unset: 1)
ENV = "TESTBED_TIMEOUT_SCALE"


def timeout_scale() -> float:
    """The multiplier from ``$TESTBED_TIMEOUT_SCALE`` (1.0 when unset or empty).

    Raises ValueError naming the variable and what is allowed when it is not a
    finite number >= 1 (a scale below 1 would only make start-ups fail)."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return 1.0
    try:
        scale = float(text)
    except ValueError:
        scale = float("nan")
    if not (1.0 <= scale < float("inf")):
        raise ValueError(f"{ENV}={text!r}: allowed a number >= 1 (a multiplier of the testbed's start-up "
                         f"timeouts; unset means 1)")
    return scale


def startup_s(base_s: float) -> float:
    """``base_s`` (seconds, as measured on the development machines) x :func:`timeout_scale`, in seconds.

    Raises ValueError as :func:`timeout_scale`."""
    return base_s * timeout_scale()
