"""The one place the controller apps import the Ryu API from.

os-ken (Ryu's maintained fork, package ``os_ken``) is preferred; if it is not
installed, the same names come from ``ryu`` so the apps also load under
``ryu-manager`` with Ryu 4.34 (Python <= 3.9; Ryu does not start on 3.10+).

Exported names:

* ``FRAMEWORK``: ``"os_ken"`` or ``"ryu"``; ``FRAMEWORK_VERSION``: its version.
* ``cfg``: the framework's oslo.config wrapper (``cfg.CONF`` is the
  configuration the framework's own options and the app's live in).
* ``BaseApp``: ``OSKenApp`` or ``RyuApp``.
* ``ofp_event``, ``set_ev_cls``, ``CONFIG_DISPATCHER``, ``MAIN_DISPATCHER``,
  ``DEAD_DISPATCHER``.
* ``ofproto_v1_5``, ``ofproto_v1_5_parser``, ``ofproto_protocol`` (for
  ``ProtocolDesc``, a stand-in datapath that lets tests serialize messages).
* ``packet``, ``ethernet``, ``arp``, ``ether_types`` from ``lib.packet``.

Only a missing ``os_ken`` package selects Ryu; an os-ken that is installed
but fails to import raises its own error instead of silently switching.
"""
from __future__ import annotations

import importlib.util

if importlib.util.find_spec("os_ken") is not None:
    # app_manager first: importing os_ken.controller before it is circular.
    from os_ken import cfg
    from os_ken import __version__ as FRAMEWORK_VERSION
    from os_ken.base import app_manager as _app_manager
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import (
        CONFIG_DISPATCHER,
        DEAD_DISPATCHER,
        MAIN_DISPATCHER,
        set_ev_cls,
    )
    from os_ken.lib import hub
    from os_ken.lib.packet import arp, ether_types, ethernet, packet
    from os_ken.ofproto import ofproto_protocol, ofproto_v1_5, ofproto_v1_5_parser

    BaseApp = _app_manager.OSKenApp
    FRAMEWORK = "os_ken"
else:  # pragma: no cover - exercised only where Ryu is installed instead
    from ryu import cfg
    from ryu import version as FRAMEWORK_VERSION
    from ryu.base import app_manager as _app_manager
    from ryu.controller import ofp_event
    from ryu.controller.handler import (
        CONFIG_DISPATCHER,
        DEAD_DISPATCHER,
        MAIN_DISPATCHER,
        set_ev_cls,
    )
    from ryu.lib import hub
    from ryu.lib.packet import arp, ether_types, ethernet, packet
    from ryu.ofproto import ofproto_protocol, ofproto_v1_5, ofproto_v1_5_parser

    BaseApp = _app_manager.RyuApp
    FRAMEWORK = "ryu"

__all__ = [
    "FRAMEWORK",
    "FRAMEWORK_VERSION",
    "cfg",
    "BaseApp",
    "ofp_event",
    "set_ev_cls",
    "CONFIG_DISPATCHER",
    "MAIN_DISPATCHER",
    "DEAD_DISPATCHER",
    "ofproto_v1_5",
    "ofproto_v1_5_parser",
    "ofproto_protocol",
    "packet",
    "ethernet",
    "arp",
    "ether_types",
    "hub",
]
