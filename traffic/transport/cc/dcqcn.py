"""``dcqcn``: the DCQCN reaction point (RP), Zhu et al., SIGCOMM 2015, section 3.1.

State per QP: current rate RC, target rate RT (both start at the line rate), alpha (starts at
``initial_alpha``), the timer and byte-counter stage counts, the bytes sent since the last
rate event. With the settings of :class:`~traffic.transport.cc.dcqcn_params.DcqcnSettings`
(g, K = ``alpha_timer_us``, T = ``rate_timer_us``, B = ``byte_counter_bytes``, F =
``fast_recovery_stages``, R_AI = ``rai_bps``, R_HAI = ``rhai_bps``)::

    on CNP:          RT <- RC;  RC <- max(R_min, RC x (1 - alpha/2));  alpha <- (1 - g) alpha + g
                     timer and byte stages <- 0, bytes <- 0; the alpha timer and the rate timer restart
                     (``clamp_target_rate`` false: RT <- RC only if the timer stage was > 0, i.e. the
                     rate timer raised the rate since the last cut: NVIDIA ConnectX's clamp_tgt_rate = 0
                     with clamp_tgt_rate_after_time_inc = 1)
    alpha timer:     every K without a CNP, alpha <- (1 - g) alpha
    rate timer:      every T after the last cut: timer stage += 1, then a rate increase
    byte counter:    every B bytes sent after the last cut: byte stage += 1, then a rate increase
    rate increase:   with t, b the stage counts after the event
                     max(t, b) <= F: fast recovery   RC <- (RT + RC) / 2
                     min(t, b) >  F: hyper increase  RT <- RT + i x R_HAI, i = min(t, b) - F;  RC <- (RT + RC) / 2
                     otherwise:      additive        RT <- RT + R_AI;                         RC <- (RT + RC) / 2
                     RT and RC never exceed the line rate

(the cut uses alpha before its update, as in the paper's Figure 5). Timers run from the first
CNP on and stop once RC and RT are back at the line rate; a rate within 0.1 % of the line rate
snaps to it (the RNIC's rate granularity: a pacing sleep that short would cost more CPU than it
shapes). Timers are evaluated lazily: every hook first applies the expiries due up to its
``now_ns`` at their own times, in time order (alpha first on a tie), so the rate log is exact
however late the QP asks.

Rate log (:attr:`Dcqcn.rate_log`, qp_rates.csv): one row per state change with its cause
(``event``: ``start``, ``cnp`` the cut, ``alpha_timer`` a decay, ``timer`` / ``bytes`` a rate
increase, whose ``stage`` is ``fast_recovery``, ``additive`` or ``hyper``) and RC, RT and alpha
after it, at the change's own time. Alpha decays are logged one row each while alpha >=
:data:`ALPHA_LOG_FLOOR`; below it they are applied without a row (a cut then moves RC by less than
the line-rate snap, and an idle QP's alpha timer would otherwise add a row every K forever).

Pacing: below the line rate, a packet may leave ``frame bits / RC`` after the previous one
(:meth:`Dcqcn.next_send_ns`); at the line rate the host link's HTB paces, as with ``none``.
"""
from __future__ import annotations

import time

from traffic.transport.cc.base import CongestionControl
from traffic.transport.cc.dcqcn_params import DcqcnSettings, manifest_block, settings_for

#: a rate within this fraction of the line rate counts as the line rate
LINE_RATE_SNAP = 1e-3
#: alpha-timer decays of an alpha below this are applied but not logged (module docstring)
ALPHA_LOG_FLOOR = 1e-3


class Dcqcn(CongestionControl):
    """The DCQCN reaction point of one requester QP (see the module docstring for the algorithm).

    ``settings``: the run's DcqcnSettings (default: the published values undilated; a run's:
    :meth:`run_settings`, the scenario's ``transport.dcqcn`` keys over the values scaled by its dilation);
    ``now_ns``: creation time on ``time.monotonic_ns()`` (the first row of :attr:`rate_log`).
    Raises ValueError for a line rate <= 0 or a minimum rate above the line rate.
    """

    name = "dcqcn"
    Settings = DcqcnSettings

    def __init__(self, line_rate_bps: float, payload_bytes: int, settings: DcqcnSettings | None = None,
                 now_ns: int | None = None):
        super().__init__(line_rate_bps, payload_bytes, settings)
        s = self.settings
        if s.min_rate_bps > self.line_rate_bps:
            raise ValueError(f"min_rate_bps={s.min_rate_bps:g} is above the line rate {self.line_rate_bps:g}")
        self.rc = self.rt = self.line_rate_bps
        self.alpha = float(s.initial_alpha)
        self.timer_stage = self.byte_stage = 0
        self.bytes_since_event = 0
        self._rate_timer_ns: int | None = None   # next rate-timer expiry; None: idle at line rate
        self._alpha_timer_ns: int | None = None  # next alpha decay; None: no CNP yet
        self._t_ns, self._k_ns = int(s.rate_timer_us * 1000), int(s.alpha_timer_us * 1000)
        self._last_send_ns: int | None = None
        self._last_bits = 0
        self._log(time.monotonic_ns() if now_ns is None else now_ns, "start")

    @classmethod
    def cnp_interval_ns(cls, settings: DcqcnSettings) -> int:
        return int(round(settings.cnp_interval_us * 1000))

    @classmethod
    def run_settings(cls, given, dilation: float) -> DcqcnSettings:
        """The published values scaled by ``dilation``, then the scenario's keys (dcqcn_params.settings_for)."""
        return settings_for(dilation, given)

    @classmethod
    def check_run(cls, settings: DcqcnSettings, line_rate_bps: float, dilation: float) -> None:
        """Refuse a minimum rate above the host link, or an alpha timer K not longer than the CNP interval
        N (Zhu et al.: K must exceed N, else alpha decays between the CNPs of a lasting congestion)."""
        s = settings
        if s.min_rate_bps > line_rate_bps:
            raise ValueError(f"transport.dcqcn.min_rate_bps = {s.min_rate_bps:g} is above fabric.host_link_bps = "
                             f"{line_rate_bps:g}: allowed up to the line rate")
        if s.alpha_timer_us <= s.cnp_interval_us:
            raise ValueError(f"transport.dcqcn.alpha_timer_us = {s.alpha_timer_us:g} us is not longer than "
                             f"cnp_interval_us = {s.cnp_interval_us:g} us (at dilation {dilation:g}): the alpha "
                             "timer K must exceed the CNP interval N; set both")

    @classmethod
    def manifest(cls, given, dilation: float) -> dict:
        """The dilation, the scaling formula and every setting with its published value and source
        (dcqcn_params.manifest_block)."""
        return manifest_block(dilation, given)

    @property
    def rate_bps(self) -> float:
        return self.rc

    # -- hooks ---------------------------------------------------------------------------------
    def on_cnp(self, now_ns: int) -> None:
        self._advance(now_ns)
        s = self.settings
        if s.clamp_target_rate or self.timer_stage > 0:
            self.rt = self.rc
        self.rc = max(s.min_rate_bps, self.rc * (1 - self.alpha / 2))
        self.alpha = (1 - s.g) * self.alpha + s.g
        self.timer_stage = self.byte_stage = self.bytes_since_event = 0
        self._alpha_timer_ns = now_ns + self._k_ns
        self._rate_timer_ns = now_ns + self._t_ns
        self._log(now_ns, "cnp")

    def on_send(self, wire_bytes: int, now_ns: int) -> None:
        self._advance(now_ns)
        self._last_send_ns, self._last_bits = now_ns, wire_bytes * 8
        if self._rate_timer_ns is None:
            return
        b = self.settings.byte_counter_bytes
        self.bytes_since_event += wire_bytes
        while self.bytes_since_event >= b and self._rate_timer_ns is not None:
            self.bytes_since_event -= b
            self.byte_stage += 1
            self._increase(now_ns, "bytes")

    def next_send_ns(self, now_ns: int) -> int:
        self._advance(now_ns)
        if self.rc >= self.line_rate_bps or self._last_send_ns is None:
            return now_ns
        at = self._last_send_ns + int(self._last_bits * 1e9 / self.rc)
        if at <= now_ns:
            return now_ns
        if self._rate_timer_ns is not None and self._rate_timer_ns < at:
            return self._rate_timer_ns  # the rate rises then: ask again
        return at

    # -- the algorithm -------------------------------------------------------------------------
    def _advance(self, now_ns: int) -> None:
        """Apply the alpha-timer and rate-timer expiries due up to ``now_ns``, each at its own time, in time
        order (alpha first on a tie)."""
        a, r = self._alpha_timer_ns, self._rate_timer_ns
        if (a is None or a > now_ns) and (r is None or r > now_ns):
            return  # nothing due: the per-packet path
        while True:
            a, r = self._alpha_timer_ns, self._rate_timer_ns
            a_due, r_due = a is not None and a <= now_ns, r is not None and r <= now_ns
            if a_due and (not r_due or a <= r):
                self._decay_alpha(now_ns if not r_due else r)
            elif r_due:
                self._rate_timer_ns = r + self._t_ns
                self.timer_stage += 1
                self._increase(r, "timer")
            else:
                return

    def _decay_alpha(self, until_ns: int) -> None:
        """Every alpha-timer expiry up to ``until_ns``: alpha <- (1 - g) alpha, one row each while alpha >=
        ALPHA_LOG_FLOOR, the rest at once (closed form)."""
        k = (until_ns - self._alpha_timer_ns) // self._k_ns + 1
        keep = 1 - self.settings.g
        while k and self.alpha >= ALPHA_LOG_FLOOR:
            self.alpha *= keep
            self._log(self._alpha_timer_ns, "alpha_timer")
            self._alpha_timer_ns += self._k_ns
            k -= 1
        if k:
            self.alpha *= keep ** k
            self._alpha_timer_ns += k * self._k_ns

    def _increase(self, t_ns: int, event: str) -> None:
        s, line = self.settings, self.line_rate_bps
        lo, hi = min(self.timer_stage, self.byte_stage), max(self.timer_stage, self.byte_stage)
        if hi <= s.fast_recovery_stages:
            stage = "fast_recovery"
        elif lo > s.fast_recovery_stages:
            stage = "hyper"
            self.rt += (lo - s.fast_recovery_stages) * s.rhai_bps
        else:
            stage = "additive"
            self.rt += s.rai_bps
        self.rt = min(self.rt, line)
        self.rc = min((self.rt + self.rc) / 2, line)
        if self.rc >= line * (1 - LINE_RATE_SNAP):
            self.rc = self.rt = line
        if self.rc >= line and self.rt >= line:
            self._rate_timer_ns = None  # back at line rate: nothing left to increase
        self._log(t_ns, event, stage)

    def _log(self, t_ns: int, event: str, stage: str = "") -> None:
        self.rate_log.add(t_ns, event, self.rc, self.rt, self.alpha, stage)
