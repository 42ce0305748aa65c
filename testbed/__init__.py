"""AI fabric testbed. Scripting API (testbed.api): ``from testbed import Scenario, run, sweep``."""

_API = ("Scenario", "RunResult", "run", "sweep", "shipped", "script_args")


def __getattr__(name):  # lazy: ``import testbed.x`` does not load the API and its imports
    if name in _API:
        from testbed import api
        return getattr(api, name)
    raise AttributeError(f"module 'testbed' has no attribute {name!r}")
