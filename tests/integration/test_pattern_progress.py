"""A pattern run says what it runs (issue 31, item 9): its estimate counts the pattern's operations (every flow
of every trial; it said "0 operations") and each trial prints a line as it starts (flows, ideal span, limit)
and one as it ends (flows done in, ideal). Tiny: 1 leaf, 2 hosts at 10 Mbit/s, one 32 KiB flow, 2 trials."""
import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import run_scenario_file

pytestmark = pytest.mark.integration

SCENARIO = """
name: pattern_progress
fabric: {spines: 1, leaves: 1, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M}
workload:
  pattern: {kind: flows, flows: [{src: h1, dst: h2, size_bytes: 32KiB}], trials: 2}
"""


def test_pattern_run_counts_its_operations_and_says_each_trial(tmp_path):
    res, summary = run_scenario_file(tmp_path, SCENARIO, timeout=180, expect_rc=None, name="pattern_progress")
    err = res.stderr
    print(err)
    assert "(2 operations: 2 trials x 1 flows; " in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("trial ")]
    assert [re.sub(r"\(seed \d+\): 1 flows (starting|done).*", r"\1", ln) for ln in lines] == [
        "trial 1/2 starting", "trial 1/2 done", "trial 2/2 starting", "trial 2/2 done"], lines
    ideal = float(re.search(r"ideal ([\d.]+) s \(limit", lines[0]).group(1))
    assert 32 * 1024 * 8 / 10e6 < ideal < 0.1  # the flow's bytes at 10 Mbit/s, plus headers
    fct = pd.read_csv(Path(summary["run_dir"]) / "fct.csv")
    assert len(fct) == 2  # one flow in each of the two trials
