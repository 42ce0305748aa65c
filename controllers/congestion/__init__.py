"""Congestion-handling policies of the controller (issue 7): pure decisions, no kernel access.

:mod:`controllers.congestion.ecn`: the RED marking curve and the per-port marking decision;
:mod:`controllers.congestion.watchdog`: the PFC watchdog (storm detection, drop action, restore).
"""
