"""Congestion handling of the controller: pure policies and the loop that runs them.

Policies (pure, no kernel access): :mod:`controllers.congestion.pfc` (ingress attribution, Xoff/Xon,
headroom), :mod:`controllers.congestion.watchdog` (the PFC watchdog: storm detection, drop action, restore);
the ECN marking policy is :mod:`dataplane.ecn_policy`, shared with the testbed. Actuators live in
:mod:`dataplane` (the PFC gate, PFC frames, the ECN marker, the watchdog's drop rules). The loop:
:mod:`controllers.congestion.loop` (a thread of the os-ken app: 1 ms sampler -> policies -> actuators).
"""
