"""Queue backends of the fabric: the egress queue of every switch port and host link, by name.

``fabric.queue_backend`` picks one of :data:`BACKENDS`: ``htb_bfifo`` (default:
HTB rate limit + bfifo tail drop, :mod:`dataplane.queues.htb_bfifo`) or
``htb_classes`` (priority classes by DSCP with tbf leaves, :mod:`dataplane.queues.htb_classes`).
A new backend is one module with a :class:`~dataplane.queues.base.QueueBackend`
subclass (its parameters, if any, in its ``Settings``: the scenario's ``fabric.<name>`` block),
added to :data:`BACKENDS`; the interface is in :mod:`dataplane.queues.base`. Every backend's tree can
sit under a netem stage that adds the links' propagation delay (:mod:`dataplane.queues.delay`).
"""
from __future__ import annotations

from dataplane.queues.base import QueueBackend, QueueConfig, ShapedLink  # noqa: F401
from dataplane.queues.htb_bfifo import HtbBfifo
from dataplane.queues.htb_classes import HtbClasses

#: name -> backend class
BACKENDS: dict[str, type[QueueBackend]] = {HtbBfifo.name: HtbBfifo, HtbClasses.name: HtbClasses}
DEFAULT_BACKEND = HtbBfifo.name
_SELF_CHECK_TOLERANCE = 0.01
#: netem delay read back within this many us of the configured one (tick rounding)
_DELAY_TOLERANCE_US = 1


def get(name: str, settings=None, delay_us: int = 0, netem: bool | None = None) -> QueueBackend:
    """The backend registered as ``name`` with ``settings`` (its ``Settings``; None: the defaults), the
    links' default propagation delay ``delay_us`` and whether every egress gets the netem stage
    (``netem``, default ``delay_us > 0``; :class:`~dataplane.queues.base.QueueBackend`,
    :mod:`dataplane.queues.delay`); ValueError naming ``fabric.queue_backend`` and the registered names."""
    try:
        cls = BACKENDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"fabric.queue_backend = {name!r} is not one of {sorted(BACKENDS)}") from None
    return cls(settings, delay_us, netem)


def self_check(configured: dict[str, float], readback: dict[str, ShapedLink]) -> list[str]:
    """Compare configured rates with the kernel's, one sentence per violation.

    Args:
        configured: ifname -> configured rate in bit/s.
        readback: ifname -> :class:`ShapedLink` from a backend's ``read_back``.

    Returns: violations (empty when every rate and ceil is within 1 %), e.g.
        ``"tb12abl1-eth3: configured 10000000 bit/s, kernel rate 9000000 bit/s (-10.00%)"``.
    """
    problems: list[str] = []
    for ifname, want_bps in configured.items():
        got = readback.get(ifname)
        if got is None:
            problems.append(f"{ifname}: configured {want_bps:.0f} bit/s, no read-back")
            continue
        for what, got_bps in (("rate", got.rate_bps), ("ceil", got.ceil_bps)):
            err = (got_bps - want_bps) / want_bps
            if abs(err) > _SELF_CHECK_TOLERANCE:
                problems.append(
                    f"{ifname}: configured {want_bps:.0f} bit/s, kernel {what} "
                    f"{got_bps:.0f} bit/s ({err:+.2%})"
                )
    return problems


def delay_check(configured: dict[str, int], readback: dict[str, ShapedLink]) -> list[str]:
    """Compare the configured propagation delay (ifname -> us, each link's own) with the kernel's netem
    stage on every shaped interface, one sentence per interface off by more than
    :data:`_DELAY_TOLERANCE_US` (the kernel keeps it in scheduler ticks), e.g.
    ``"tb12abl1-eth3: configured delay 5000 us, kernel 0 us"`` (a missing read-back is :func:`self_check`'s to
    report)."""
    return [f"{ifname}: configured delay {want} us, kernel {readback[ifname].delay_us} us"
            for ifname, want in configured.items()
            if ifname in readback and abs(readback[ifname].delay_us - want) > _DELAY_TOLERANCE_US]
