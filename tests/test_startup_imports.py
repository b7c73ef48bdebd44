"""What a fresh `orch` (and a simulator process) imports before it does anything.

The suite starts over a thousand of these processes, and every one paid for the whole stack at
import time: `orch --help` imported the sweep API (pydantic, YAML, numpy, httpx) and rich, and
`orch validate` the statistics stack (scipy, statsmodels, pandas) for a matrix without gates, and
`orch validate`/`plan`/`run --dry-run` the run machinery (sweep.api: transports, httpx, the runner).
Each case here starts a fresh interpreter and reads its sys.modules, so a module-level import
that creeps back in fails here, not as a slow suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.benchrun import bench_module, bench_output

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent
REPORT_STACK = ("pandas", "scipy", "statsmodels", "jinja2")
SSH_STACK = ("fabric", "paramiko", "invoke")
SWEEP_STACK = ("numpy", "pydantic", "yaml", "httpx", "tenacity", "regex")
RUN_STACK = ("httpx", "tenacity")  # what a sweep needs beyond its plan: HTTP to the servers, retries
RUN_MODULES = ("orchestrator.sweep.api", "orchestrator.sweep.runner", "orchestrator.edges.transport")

# runs in the fresh interpreter: CODE, then prints the top-level names and orchestrator modules it
# loaded beyond what the interpreter had at start (site, the editable install's finder), and
# scipy's subpackages (scipy.special is cheap, scipy.stats is not)
PROBE = """
import json, sys
before = set(sys.modules)
try:
    exec(compile(sys.argv[1], "<probe>", "exec"), {"__name__": "probe"})
except SystemExit:
    pass
new = set(sys.modules) - before
print(json.dumps({
    "top": sorted({m.split(".")[0] for m in new}),
    "orch": sorted(m for m in new if m.startswith("orchestrator")),
    "scipy": sorted(m for m in new if m.startswith("scipy.") and m.count(".") == 1),
}), file=sys.__stderr__)
"""

MATRIX = bench_module("bench_startup.py").MATRIX  # the 2-cell matrix the bench times the same paths on


def _loaded(code: str, cwd: Path = ROOT) -> dict[str, list[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    loaded: dict[str, list[str]] = json.loads(done.stderr.strip().splitlines()[-1])
    return loaded


def _orch(*argv: str) -> str:
    """Python that runs `orch ARGV` in the probe and checks it exits 0 (its output is not read here)."""
    return (
        "import contextlib, io\n"
        "from orchestrator.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main({list(argv)!r})\n"
        "assert code == 0, code\n"
    )


def _none_of(loaded: dict[str, list[str]], names: tuple[str, ...]) -> None:
    assert [n for n in names if n in loaded["top"]] == []


def _modules_of(loaded: dict[str, list[str]], packages: tuple[str, ...]) -> list[str]:
    """The loaded modules that are one of `packages` or inside one."""
    return [m for m in loaded["orch"] if any(m == p or m.startswith(p + ".") for p in packages)]


def test_orch_help_loads_only_the_parser() -> None:
    loaded = _loaded(_orch("--help"))
    _none_of(loaded, REPORT_STACK + SSH_STACK + SWEEP_STACK + ("rich",))
    # the parser: the command modules' registrations and the bounds they check, nothing below;
    # cli.stdio (standard library only) sets the streams' error handler before anything prints
    assert loaded["orch"] == [
        "orchestrator",
        "orchestrator.cli",
        "orchestrator.cli.args",
        "orchestrator.cli.argtypes",
        "orchestrator.cli.hunt",
        "orchestrator.cli.main",
        "orchestrator.cli.reports",
        "orchestrator.cli.stdio",
        "orchestrator.cli.team",
        "orchestrator.core",
        "orchestrator.core.bounds",
        "orchestrator.errors",
    ]


def test_building_the_parser_loads_no_third_party_module() -> None:
    loaded = _loaded("import orchestrator.cli.main as m\nm.build_parser()")
    third_party = [n for n in loaded["top"] if n not in sys.stdlib_module_names and n != "orchestrator"]
    assert third_party == []


@pytest.mark.parametrize("module", ["orchestrator.sim.server", "orchestrator.sim.repro"])
def test_the_simulator_imports_the_standard_library_only(module: str) -> None:
    loaded = _loaded(f"import {module}")
    third_party = [n for n in loaded["top"] if n not in sys.stdlib_module_names and n != "orchestrator"]
    assert third_party == []
    assert all(m == "orchestrator" or m.startswith("orchestrator.sim") for m in loaded["orch"]), loaded["orch"]
    # http.server and http.client pull in email, ssl and calendar, dataclasses pulls in inspect
    # (~37 ms of each start's ~80, bench_startup.py): sim.http1 and NamedTuples do their work
    assert [n for n in loaded["top"] if n in ("http", "email", "ssl", "dataclasses", "inspect")] == []


def test_validate_without_gates_loads_no_statistics_and_no_run_machinery(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(MATRIX)
    loaded = _loaded(_orch("validate", str(tmp_path / "m.yaml"), "-i", str(ROOT / "inventory/local.yaml")))
    assert "orchestrator.sweep.prepare" in loaded["orch"]  # it did validate: the matrix was read and planned
    _none_of(loaded, REPORT_STACK + SSH_STACK + RUN_STACK)
    assert _modules_of(loaded, RUN_MODULES + ("orchestrator.report", "orchestrator.cli.planview")) == []


@pytest.mark.parametrize("command", [["plan"], ["run", "--dry-run"]], ids=["plan", "run-dry-run"])
def test_plan_loads_no_report_and_no_run_machinery(tmp_path: Path, command: list[str]) -> None:
    # the plan's power lines need scipy.special (core.dist) only: scipy.stats, statsmodels and
    # pandas are imported by the report's tests that need them, when they run
    (tmp_path / "m.yaml").write_text(MATRIX)
    inventory = str(ROOT / "inventory/local.yaml")
    out = ["--out", str(tmp_path / "r")] if command[0] == "run" else []
    loaded = _loaded(_orch(*command, str(tmp_path / "m.yaml"), "-i", inventory, *out))
    assert "orchestrator.cli.planview" in loaded["orch"]  # it did print the plan
    _none_of(loaded, ("jinja2", "pandas", "statsmodels") + SSH_STACK + RUN_STACK)
    assert "scipy.special" in loaded["scipy"] and "scipy.stats" not in loaded["scipy"]
    assert _modules_of(loaded, RUN_MODULES + ("orchestrator.report",)) == []
    assert not (tmp_path / "r").exists()  # touched nothing


def test_a_report_loads_neither_statsmodels_nor_scipy_stats(tmp_path: Path) -> None:
    """A run with a rate and two number metrics over two rounds: its report's intervals and tests
    (Wilson, Newcombe, Fisher, the drift trend test in core.stats; Mann-Whitney in core.ranks)
    are the libraries' calls written out, so rendering it costs neither import (~1 CPU-s of a
    ~3 CPU-s render)."""
    from helpers.report_synth import synthetic_run, write_run

    manifest, records = synthetic_run()
    run = write_run(tmp_path / manifest.run_id, manifest, records)
    loaded = _loaded(_orch("report", str(run)))
    page = (run / "index.html").read_text()
    assert "corruption" in page and "anomalies" in page  # it did render the rate and the numbers
    _none_of(loaded, ("statsmodels",))
    assert "scipy.special" in loaded["scipy"] and "scipy.stats" not in loaded["scipy"]


def test_status_loads_no_sweep_or_report_stack(tmp_path: Path) -> None:
    loaded = _loaded(_orch("status", "--reports", str(tmp_path)))
    _none_of(loaded, REPORT_STACK + SSH_STACK + ("numpy", "httpx"))
    assert _modules_of(loaded, RUN_MODULES + ("orchestrator.report",)) == []


def test_startup_bench_prints_each_path_with_its_ratio() -> None:
    out = bench_output("bench_startup.py", "--starts", "1", timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    for path in (
        "eager import set",
        "orch --help",
        "orch validate",
        "orch plan",
        "orch status",
        "orch report",
        "sim.server",
        "sim.repro",
    ):
        line = next(row for row in out.splitlines() if path in row)
        assert line.rstrip().endswith("x"), line  # its median and the eager set's ratio to it
