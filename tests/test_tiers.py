"""The test tiers stay honest: `-m "not sim and not testbed and not browser and not process"` is
the fast unit tier, so every test that needs real processes, hosts or a browser must carry its
marker (a unit test that starts any process fails at once: tests/conftest.py's guard).

A cheap, static check (the source is parsed, nothing is imported or run): modules in the
real-system folders carry a tier marker (module-wide `pytestmark`, or on every test), and any test
that asks for a real-system fixture (`testbed`, the simulator's `sim`, the fault tests' `bed`)
carries the marker of that fixture's tier.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers.workers import workers_for

TESTS = Path(__file__).resolve().parent
TIERS = {"sim", "testbed", "browser"}
# Folders (and name patterns) whose every test module is a real-system test.
REAL_SYSTEM = (
    "e2e/test_*.py",
    "faults/test_*.py",
    "remote/test_*.py",
    "browser/test_*.py",
    "team/test_*testbed*.py",
    "team/test_*browser*.py",
)
# Modules there that need no real system, and why.
EXEMPT = {
    "remote/test_logic.py": "the pure parts of the SSH and systemd edges: no host, only a local `sh` for quoting",
}
# Fixtures that start real processes or hosts -> the tier a test using them belongs to.
FIXTURE_TIER = {"testbed": "testbed", "sim": "sim", "bed": "sim"}


def _marks(decorators: list[ast.expr]) -> set[str]:
    """Tier names in `@pytest.mark.X` decorators (or a `pytestmark = ...` value)."""
    found = set()
    for node in decorators:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and sub.attr in TIERS:
                base = sub.value
                if isinstance(base, ast.Attribute) and base.attr == "mark":
                    found.add(sub.attr)
    return found


def _module(path: Path) -> tuple[set[str], dict[str, tuple[set[str], set[str]]]]:
    """(module-wide tier marks, test name -> (its own tier marks, its argument names))."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    module_marks: set[str] = set()
    tests: dict[str, tuple[set[str], set[str]]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            module_marks |= _marks([node.value])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            args = {a.arg for a in node.args.args} - _parametrized(node.decorator_list)
            tests[node.name] = (_marks(node.decorator_list), args)
    return module_marks, tests


def _parametrized(decorators: list[ast.expr]) -> set[str]:
    """Argument names given by `@pytest.mark.parametrize` (values, not fixtures)."""
    names: set[str] = set()
    for node in decorators:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "parametrize":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names |= {n.strip() for n in first.value.split(",")}
            elif isinstance(first, (ast.List, ast.Tuple)):
                names |= {e.value for e in first.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return names


def _real_system_modules() -> list[Path]:
    return sorted({p for pattern in REAL_SYSTEM for p in TESTS.glob(pattern)})


def test_the_real_system_folders_exist() -> None:
    """The check below must not pass by finding nothing (a folder renamed, a pattern broken)."""
    found = {p.relative_to(TESTS).parts[0] for p in _real_system_modules()}
    assert {"e2e", "faults", "remote", "browser", "team"} <= found
    assert all((TESTS / name).is_file() for name in EXEMPT), "an exemption names a module that is gone"


def _checked_modules() -> list[Path]:
    """The real-system modules less the exempt ones (listed in EXEMPT with the reason): no skip
    in CI, where nothing may be skipped."""
    return [p for p in _real_system_modules() if str(p.relative_to(TESTS)) not in EXEMPT]


@pytest.mark.parametrize("path", _checked_modules(), ids=lambda p: str(p.relative_to(TESTS)))
def test_real_system_modules_carry_a_tier_marker(path: Path) -> None:
    rel = str(path.relative_to(TESTS))
    module_marks, tests = _module(path)
    if module_marks:
        return
    unmarked = [name for name, (marks, _) in tests.items() if not marks]
    assert tests and not unmarked, (
        f"{rel}: tests without a sim/testbed/browser marker: {unmarked or 'the module has no tests'} "
        "(add `pytestmark = pytest.mark.sim` (or testbed, browser) at the top of the module)"
    )


@pytest.mark.parametrize("path", sorted(TESTS.rglob("test_*.py")), ids=lambda p: str(p.relative_to(TESTS)))
def test_tests_that_use_real_system_fixtures_carry_their_tier(path: Path) -> None:
    module_marks, tests = _module(path)
    wrong = []
    for name, (marks, args) in tests.items():
        for fixture, tier in FIXTURE_TIER.items():
            if fixture in args and tier not in marks | module_marks:
                wrong.append(f"{name} uses `{fixture}` without the {tier} marker")
    assert not wrong, f"{path.relative_to(TESTS)}: " + "; ".join(wrong)


def test_auto_workers_are_one_per_core_for_the_unit_tier_alone() -> None:
    unit = "not sim and not testbed and not browser and not process"
    assert workers_for(unit, 2) == 2
    assert workers_for("", 2) == 4  # the whole suite: real-system tests often wait
    assert workers_for("not testbed and not browser", 2) == 4  # sim and process tests still run
    assert workers_for(unit, 0) == 1
