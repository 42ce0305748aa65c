"""The controller's command-line flags (``--testbed-run-id``), registered before the framework parses them.

``ryu-manager`` loads this file with ``--user-flags <repo>/controllers/flags.py``
(Ryu's hook for an app's own command-line flags); ``controllers.run`` imports it
before parsing for os-ken. Every other setting comes from the configuration
file (controllers/app.py, ``OPTS``).
"""
from controllers.app import CLI_OPTS, CONF_GROUP
from controllers.ryu_api import cfg

cfg.CONF.register_cli_opts(CLI_OPTS, group=CONF_GROUP)
