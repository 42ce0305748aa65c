"""Congestion handling of the controller (issue 7): pure policies, their actuators, and the loop that runs them.

Policies (pure, no kernel access): :mod:`controllers.congestion.ecn` (the RED marking curve and the per-port
marking decision), :mod:`controllers.congestion.pfc` (ingress attribution, Xoff/Xon, headroom),
:mod:`controllers.congestion.watchdog` (the PFC watchdog: storm detection, drop action, restore).
Actuator: :mod:`controllers.congestion.gate` (pause/resume of a class over netlink). The loop:
:mod:`controllers.congestion.loop` (a thread of the os-ken app: 1 ms sampler -> policies -> actuators).
"""
