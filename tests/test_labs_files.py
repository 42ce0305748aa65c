"""The teaching labs' files (labs/): every scenario validates, every lab's README names the commands for
its own scenario files and gives its expected observation, and the index lists every lab. No fabric."""
import re
from pathlib import Path

import pytest

from testbed.labcheck.bands import scenario_files
from testbed.workloads import load_scenario
from testbed.workloads.simai.plan import simai_plan

LABS = Path(__file__).resolve().parents[1] / "labs"
LAB_DIRS = sorted(p for p in LABS.iterdir() if p.is_dir())


def test_at_least_five_labs_all_indexed():
    assert len(LAB_DIRS) >= 5
    index = (LABS / "README.md").read_text()
    for lab in LAB_DIRS:
        assert f"({lab.name}/README.md)" in index, lab.name


NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve".split()


@pytest.mark.parametrize("doc, pattern", [
    ("docs/scenarios.md", r"`labs/`: (\w+) teaching labs"),
    ("labs/README.md", r"^(\w+) labs, each a folder"),
    ("README.md", r"`labs/` \((\w+) teaching\s+labs"),
    ("README.md", r"labs/README.md\]\(labs/README.md\): (\w+) teaching labs"),
])
def test_the_docs_count_the_labs_that_ship(doc, pattern):
    """Every page that says how many labs there are says how many labs/ holds (issue 31 item 9)."""
    text = (LABS.parent / doc).read_text()
    said = re.findall(pattern, text, flags=re.MULTILINE)
    assert said, f"{doc} no longer says {pattern!r}: update this test"
    assert {w.lower() for w in said} == {NUMBERS[len(LAB_DIRS)]}, f"{doc} says {said}, labs/ holds {len(LAB_DIRS)}"


@pytest.mark.parametrize("lab", LAB_DIRS, ids=lambda p: p.name)
def test_lab_scenarios_validate_and_readme_runs_them(lab):
    readme = (lab / "README.md").read_text()
    scenarios = scenario_files(lab)   # expected.yaml is the lab's bands file (tests/test_labcheck.py)
    assert len(scenarios) >= 2, "a lab compares at least two runs"
    for path in scenarios:
        spec = load_scenario(path)
        assert spec.name.startswith("lab")
        assert f"testbed run labs/{lab.name}/{path.name}" in readme, path.name
    for section in ("**Goal.**", "**Background.**", "**Commands", "**Questions.**", "**Expected observation**"):
        assert section in readme, section
    expected = readme.split("**Expected observation**", 1)[1]
    assert re.search(r"\d+\.\d+", expected), "the expected observation gives its measured numbers"


def test_lab5_expert_groups_lie_along_or_across_the_rails():
    """Rank r is GPU r mod 2 of server r div 2, on rail leaf r mod 2: TP 2 / EP 4 puts each EP group on
    one rail, TP 1 / EP 4 on both."""
    def groups(name):
        plan = simai_plan(load_scenario(LABS / "05_moe_rail" / f"{name}.yaml"))
        assert {op.collective for op in plan.ops} == {"alltoall"} and len(plan.ops) == 8
        return {tuple(tuple(g) for g in op.groups) for op in plan.ops}
    assert groups("rail_aligned") == {((0, 2, 4, 6), (1, 3, 5, 7))}
    assert groups("cross_rail") == {((0, 1, 2, 3), (4, 5, 6, 7))}
