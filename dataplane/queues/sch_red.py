"""Kernel RED (``sch_red``) with ECN as a class leaf: the RED curve (Kmin, Kmax, Pmax) marked by the qdisc.

Where the kernel has ``sch_red`` (``congestion.ecn.marker: red``, or ``auto`` there), the marked class of
:mod:`dataplane.queues.htb_classes` gets a RED leaf instead of its tbf: ``limit`` = the class buffer (tail
drop beyond, in RED's bfifo child), ``min`` = Kmin, ``max`` = Kmax, flag ``ecn`` (an ECT packet is marked
CE instead of dropped). It decides per packet at enqueue, from the class backlog, with no sampling loop.

Parameters, and why (include/net/red.h, net/sched/sch_red.c):

* ``Wlog = 0``: RED's average is an EWMA, ``avg <- (1 - w_q) avg + w_q q`` at each arrival (Floyd &
  Jacobson 1993, section 4 and 6), with ``w_q = 2^-Wlog``; Wlog 0 is ``w_q = 1``, so the average is the
  backlog the packet finds (``qavg = backlog``, red_calc_qavg_no_idle_time), the instantaneous queue
  DCQCN's RED marks on (Zhu et al., SIGCOMM 2015), as the nftables marker does with its 1 ms samples.
  tc-red(8) sets the weight from ``burst`` ("how fast the average queue size is influenced by the real
  queue size"; tc's tc_red_eval_ewma picks the smallest Wlog >= 1 whose average reaches Kmin after
  ``burst`` back-to-back packets), so ``tc`` cannot ask for Wlog 0; netlink can and the kernel accepts it
  (red_check_params). An average that lags the queue would also make the marking probability a function
  of the queue's history, which benchmarks/red_curve.py could not bin by the sampled queue. ``stab`` all 31
  decays the average to 0 after any idle time (it was an empty queue).
* ``max_P``: Linux RED spaces marks by a count since the last mark (Floyd & Jacobson 1993, section 7,
  "uniform" marking: a new random draw after each mark, mark when ``count x p_b`` reaches it), so the
  packets between marks are uniform on 1..1/p_b and the fraction marked is ``2 p_b / (1 + p_b)``, not
  ``p_b``. :func:`kernel_max_p` sets max_P = Pmax / (2 - Pmax), which marks exactly Pmax of the packets at
  Kmax and nothing at Kmin; between them the fraction ``2 p / (1 + p)`` (p = max_P x (q - Kmin) / (Kmax -
  Kmin)) lies above the straight RED line by at most :func:`max_line_error` (0.5 points at Pmax 0.2, 3.6
  at 0.5, 17 at 1).
* Above Kmax every ECT packet is marked (RED's hard mark without ``harddrop``), as on the line; a Not-ECT
  packet RED would mark is dropped instead (the kernel cannot mark it), unlike the nftables marker,
  which leaves Not-ECT packets alone. The lossless class carries the ECT RoCE data.

pyroute2 0.9 has no ``red`` plugin: :data:`options` and :func:`get_parameters` are one, registered under
``red`` (struct tc_red_qopt, TCA_RED_STAB, TCA_RED_MAX_P; include/uapi/linux/pkt_sched.h).
"""
from __future__ import annotations

import json
import struct
import subprocess
import sys

from pyroute2.netlink import nla, nla_string
from pyroute2.netlink.rtnl import TC_H_ROOT
from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins

parent = TC_H_ROOT
TC_RED_ECN = 1
#: RED's EWMA weight exponent: 0 = the instantaneous backlog (module doc)
WLOG = 0
#: idle damping: any idle time takes the average to 0
STAB_SHIFT = 31
SCELL_LOG = 10


def kernel_max_p(pmax: float) -> float:
    """RED's max_P for a line reaching ``pmax`` at Kmax: ``pmax / (2 - pmax)`` (module doc)."""
    if not 0 < pmax <= 1:
        raise ValueError(f"pmax={pmax!r} must be in (0, 1]")
    return pmax / (2 - pmax)


def marked_fraction(x: float, pmax: float) -> float:
    """Fraction of packets the kernel marks at relative depth ``x = (q - Kmin) / (Kmax - Kmin)`` in [0, 1)
    with max_P = :func:`kernel_max_p`: ``2 p / (1 + p)``, ``p = max_P x`` (module doc)."""
    p = kernel_max_p(pmax) * x
    return 2 * p / (1 + p)


def max_line_error(pmax: float, steps: int = 1000) -> float:
    """Most the kernel's marked fraction exceeds the RED line ``pmax x`` between Kmin and Kmax (a fraction)."""
    return max(marked_fraction(i / steps, pmax) - pmax * i / steps for i in range(steps))


def get_parameters(kwarg: dict) -> dict:
    """pyroute2 ``tc`` arguments -> TCA_OPTIONS: ``limit``, ``qth_min``, ``qth_max`` (bytes), ``max_p`` (a
    fraction) and ``ecn`` (bool). ValueError naming a bad value."""
    limit, qmin, qmax = int(kwarg["limit"]), int(kwarg["qth_min"]), int(kwarg["qth_max"])
    if not 0 <= qmin < qmax:
        raise ValueError(f"RED thresholds qth_min={qmin} qth_max={qmax}: need 0 <= qth_min < qth_max")
    max_p = float(kwarg["max_p"])
    if not 0 < max_p <= 1:
        raise ValueError(f"RED max_p={max_p!r} must be in (0, 1]")
    plog = max(0, min(31, int(round(-_log2(max_p / (qmax - qmin))))))  # only the adaptive mode reads it
    opt = {"limit": limit, "qth_min": qmin, "qth_max": qmax, "Wlog": WLOG, "Plog": plog, "Scell_log": SCELL_LOG,
           "flags": TC_RED_ECN if kwarg.get("ecn") else 0}
    return {"attrs": [["TCA_RED_PARMS", opt], ["TCA_RED_STAB", [STAB_SHIFT] * 256],
                      ["TCA_RED_MAX_P", min(0xFFFFFFFF, round(max_p * 2 ** 32))]]}


def _log2(v: float) -> float:
    import math
    return math.log2(v)


class options(nla):
    nla_map = (("TCA_RED_UNSPEC", "none"), ("TCA_RED_PARMS", "qopt"), ("TCA_RED_STAB", "stab"),
               ("TCA_RED_MAX_P", "uint32"))

    class qopt(nla):
        fields = (("limit", "I"), ("qth_min", "I"), ("qth_max", "I"), ("Wlog", "B"), ("Plog", "B"),
                  ("Scell_log", "B"), ("flags", "B"))

    class stab(nla_string):
        def encode(self):
            self["value"] = struct.pack("B" * 256, *(int(x) for x in self.value))
            nla_string.encode(self)


_tc_plugins.setdefault("red", sys.modules[__name__])


def red_request(ifindex: int, handle: int, parent_handle: int, limit_bytes: int, kmin_bytes: int,
                kmax_bytes: int, pmax: float) -> tuple:
    """The tc request adding a RED leaf with ECN of the curve (Kmin, Kmax, Pmax) and ``limit_bytes``."""
    return ("add", "red", {"index": ifindex, "handle": handle, "parent": parent_handle, "limit": int(limit_bytes),
                           "qth_min": int(kmin_bytes), "qth_max": int(kmax_bytes), "max_p": kernel_max_p(pmax),
                           "ecn": True})


def red_stats(ifname: str, netns_cmd: tuple = ()) -> list[dict]:
    """Each RED qdisc of ``ifname`` as iproute2 reports it (``tc -s -j qdisc show``): handle, limit,
    ``marked`` (packets RED marked CE), ``early`` and ``pdrop`` (its drops), backlog."""
    out = subprocess.run([*netns_cmd, "tc", "-s", "-j", "qdisc", "show", "dev", ifname], capture_output=True,
                         text=True).stdout
    try:
        return [q for q in json.loads(out or "[]") if q.get("kind") == "red"]
    except json.JSONDecodeError:
        return []
