"""The import contracts of ``.importlinter`` hold (docs/architecture.md "Layers"), and break on an import that
goes the wrong way.

``lint-imports`` (import-linter, pinned in requirements.txt) reads every import of the five packages, at module
level and inside functions alike, and checks three contracts: the packages stack (testbed above controllers
above dataplane above topology and traffic), the layers inside ``testbed/`` (every sub-package in one layer:
``exhaustive``), and no import cycle among the modules of any one ``testbed/`` package (``acyclic_siblings``).
The layers imply that no two ``testbed/`` sub-packages import each other, directly or through others.

The planted-import tests copy the five packages and ``.importlinter`` into ``tmp_path``, add one import there and
run ``lint-imports`` on the copy: the run fails, naming the contract and the offending import as
``importer -> imported (l.<line>)``.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("testbed", "controllers", "dataplane", "traffic", "topology")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
#: the contracts' names in .importlinter
PACKAGES_CONTRACT = "Packages: testbed above controllers above dataplane above topology and traffic"
TESTBED_CONTRACT = "testbed/ layers, from the commands down to the inert spec"
ACYCLIC_CONTRACT = "No import cycle among the modules of any one testbed/ package"


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the packages under ``cwd`` with ``cwd``'s .importlinter (no cache written)."""
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the five packages and .importlinter, to plant imports in."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def _plant(path: Path, text: str) -> None:
    path.write_text(path.read_text() + "\n\n" + text + "\n")


def test_the_contracts_hold():
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in (PACKAGES_CONTRACT, TESTBED_CONTRACT, ACYCLIC_CONTRACT):
        assert f"{name} KEPT" in out.stdout
    assert "Contracts: 3 kept, 0 broken." in out.stdout


def test_an_upward_import_inside_a_function_breaks_the_testbed_layers(tree: Path):
    """The inert spec importing the CLI (the top layer), deferred into a function: still an import."""
    units = tree / "testbed" / "spec" / "units.py"
    lines = len(units.read_text().splitlines())
    _plant(units, "def _planted():\n    import testbed.cli  # noqa: F401")
    out = lint_imports(tree)
    assert out.returncode == 1, out.stdout
    assert f"{TESTBED_CONTRACT} BROKEN" in out.stdout
    assert "testbed.spec is not allowed to import testbed.cli" in out.stdout
    assert f"testbed.spec.units -> testbed.cli (l.{lines + 4})" in out.stdout


def test_an_import_of_a_higher_package_breaks_the_packages_contract(tree: Path):
    _plant(tree / "topology" / "model.py", "from traffic import wire  # noqa: E402,F401")
    _plant(tree / "controllers" / "contract.py", "import testbed.spec.units  # noqa: E402,F401")
    out = lint_imports(tree)
    assert out.returncode == 1, out.stdout
    assert f"{PACKAGES_CONTRACT} BROKEN" in out.stdout
    assert "controllers is not allowed to import testbed" in out.stdout
    assert "topology is not allowed to import traffic" in out.stdout  # the two bottom packages are independent


def test_an_import_cycle_inside_a_package_breaks_the_acyclic_contract(tree: Path):
    """Two modules of testbed/measure importing each other: no layer is crossed, the cycle is still refused."""
    measure = tree / "testbed" / "measure"
    (measure / "planted_a.py").write_text("from testbed.measure import planted_b  # noqa: F401\n")
    (measure / "planted_b.py").write_text("def f():\n    from testbed.measure import planted_a  # noqa: F401\n")
    out = lint_imports(tree)
    assert out.returncode == 1, out.stdout
    assert f"{ACYCLIC_CONTRACT} BROKEN" in out.stdout
    assert "No cycles are allowed in testbed.measure." in out.stdout
    assert "- .planted_a -> .planted_b (1 import)" in out.stdout or "- .planted_b -> .planted_a (1 import)" in out.stdout


def test_a_testbed_package_outside_the_layers_breaks_the_testbed_layers(tree: Path):
    """A new sub-package must be placed in a layer (``exhaustive``): one left out is named."""
    (tree / "testbed" / "unplaced").mkdir()
    (tree / "testbed" / "unplaced" / "__init__.py").write_text("")
    out = lint_imports(tree)
    assert out.returncode == 1, out.stdout
    assert f"{TESTBED_CONTRACT} BROKEN" in out.stdout
    assert "testbed.unplaced" in out.stdout
