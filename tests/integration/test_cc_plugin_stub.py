"""A new congestion control is its own module and one registry line: a stub written here, registered at
test time, selected by a scenario, runs end to end on a real fabric (2 hosts at 10 Mbit/s, a few seconds).

The stub, ``fixed_rate``, paces every QP at ``rate_fraction`` of the line rate (its one parameter, in the
scenario's ``transport.fixed_rate`` block). The run proves the parameter reached the agents (their rate
log, qp_rates.csv) and changed a figure (the bus bandwidth falls to about that fraction), and the test
states the files the new control needed: its own module, plus the registry line inside it; nothing in
the repository changes."""
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.integration

STUB_MODULE = "cc_fixed_rate_stub"
REGISTRY_LINE = "register(FixedRate)"
STUB = f'''"""``fixed_rate``: every QP paced at ``rate_fraction`` of the line rate, whatever the network says."""
import time
from dataclasses import dataclass

from traffic.registry import setting
from traffic.transport.cc import register
from traffic.transport.cc.base import CongestionControl


@dataclass(frozen=True)
class Settings:
    """``rate_fraction``: the share of the line rate every QP sends at."""

    rate_fraction: float = setting(1.0, gt=0, le=1)


class FixedRate(CongestionControl):
    name = "fixed_rate"
    Settings = Settings

    def __init__(self, line_rate_bps, payload_bytes, settings=None):
        super().__init__(line_rate_bps, payload_bytes, settings)
        self._last_ns, self._bits = None, 0
        self.rate_log.add(time.monotonic_ns(), "start", self.rate_bps, self.rate_bps, 0.0)

    @property
    def rate_bps(self):
        return self.line_rate_bps * self.settings.rate_fraction

    def on_send(self, wire_bytes, now_ns):
        self._last_ns, self._bits = now_ns, wire_bytes * 8

    def next_send_ns(self, now_ns):
        if self._last_ns is None:
            return now_ns
        return max(now_ns, self._last_ns + int(self._bits * 1e9 / self.rate_bps))


{REGISTRY_LINE}
'''

FRACTION = 0.5
SCENARIO = {
    "name": "cc_stub",
    "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "host_link_bps": "10M"},
    "transport": {"congestion_control": "fixed_rate", "fixed_rate": {"rate_fraction": FRACTION}},
    "workload": {"sizes": {"min_bytes": "1MiB", "max_bytes": "1MiB"}, "iterations": 2, "warmup_iterations": 0},
}


def _repo_state() -> str:
    """Every change to the repository's files (tracked and untracked), as git reports them."""
    return subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout


def test_a_one_parameter_cc_stub_runs_end_to_end_from_its_own_module(tmp_path, monkeypatch):
    before = _repo_state()
    module = tmp_path / f"{STUB_MODULE}.py"
    module.write_text(STUB)
    # the agents import the stub by its module name (TransportParams.cc_module): put it on their path too
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.chdir(REPO)  # the agents run ``python -m traffic.agent`` from here
    monkeypatch.delitem(sys.modules, STUB_MODULE, raising=False)
    from traffic.transport.cc import CONGESTION_CONTROLS
    monkeypatch.setattr("traffic.transport.cc.CONGESTION_CONTROLS", dict(CONGESTION_CONTROLS))
    __import__(STUB_MODULE)  # its last line registers it

    from testbed import api
    r = api.run(api.Scenario.from_dict(SCENARIO), results=tmp_path / "results")
    assert r.run_dir is not None and r.summary["complete"] is True, r.exit_code

    # the parameter reached the agents: every rate they logged is the fraction of the line rate
    m = r.tables.manifest
    assert m["transport"]["congestion_control"] == "fixed_rate"
    assert m["transport"]["cc_settings"] == {"rate_fraction": FRACTION}
    assert m["transport"]["cc_module"] == STUB_MODULE
    assert m["congestion_control"] == {"name": "fixed_rate",
                                       "parameters": {"rate_fraction": {"value": FRACTION, "origin": "scenario"}}}
    rates = r.qp_rates
    assert len(rates) >= 2 and set(rates["rate_bps"]) == {FRACTION * 10e6}, rates
    # ... and changed a figure: the bus bandwidth is about that fraction of the line rate (quickstart: >= 0.95)
    largest = max(r.summary["sizes"], key=lambda s: s["size_bytes"])
    print("fixed_rate", FRACTION, "busbw ratio", largest["busbw_ratio"])
    assert 0.3 * FRACTION <= largest["busbw_ratio"] <= 1.1 * FRACTION

    # the files the new congestion control needed: its own module, whose last line is the registry line
    needed = [module]
    assert needed == sorted(tmp_path.glob("*.py"))
    assert [ln for ln in module.read_text().splitlines() if "register(" in ln and not ln.startswith("from")] == \
        [REGISTRY_LINE]
    assert _repo_state() == before, "a new congestion control must not need any change in the repository"
