"""``none``: no congestion control. The QP sends whenever its window is open; the host link's
HTB shaping paces it (the transport's behaviour before congestion controls existed)."""
from __future__ import annotations

from traffic.transport.cc.base import CongestionControl


class NoCongestionControl(CongestionControl):
    """Never cuts the rate, never holds a packet back (all hooks are the interface's no-ops)."""

    name = "none"
