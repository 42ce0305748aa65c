"""A pattern run's printed estimate counts the pattern's operations, every flow of every trial (issue 31,
item 9): it said "(0 operations; ...)" because the pattern's trials are outside the op plan. The line is
printed by the runner's validation, before anything is built."""
import re
from pathlib import Path

import pytest

from testbed.pipeline.runner import _validate
from testbed.spec.scenario import parse_scenario
from testbed.workloads import workload_for

FABRIC = {"spines": 1, "leaves": 2, "hosts_per_leaf": 2}


@pytest.mark.parametrize("pattern,flows", [
    ({"kind": "incast", "senders": 3, "receiver": "h1", "size_bytes": "64KiB", "trials": 3}, 3),
    ({"kind": "flows", "flows": [{"src": "h1", "dst": "h3", "size_bytes": "64KiB"},
                                 {"src": "h2", "dst": "h4", "size_bytes": "64KiB"}], "trials": 1}, 2),
])
def test_estimate_counts_every_flow_of_every_trial(pattern, flows, tmp_path, capsys):
    spec = parse_scenario({"name": "p", "fabric": FABRIC, "workload": {"pattern": pattern}})
    _validate(spec, tmp_path / "results", False, None)
    err = capsys.readouterr().err
    print(err)
    trials = pattern["trials"]
    m = re.search(r"estimated duration (\d+) s \((\d+) operations: (\d+) trials? x (\d+) flows; ", err)
    assert m, err
    assert (int(m.group(2)), int(m.group(3)), int(m.group(4))) == (trials * flows, trials, flows)
    ops = workload_for(spec).plan().ops
    assert workload_for(spec).operations(ops) == (trials * flows, f"{trials} trial{'s' if trials > 1 else ''} "
                                                                  f"x {flows} flows")


def test_a_sweep_still_counts_its_op_plan(tmp_path, capsys):
    spec = parse_scenario({"name": "s", "fabric": FABRIC,
                           "workload": {"sizes": {"min_bytes": "64KiB", "max_bytes": "128KiB"}, "iterations": 2}})
    _validate(spec, tmp_path / "results", False, None)
    n = len(workload_for(spec).plan().ops)
    assert n > 0 and f"({n} operations; " in capsys.readouterr().err
