"""`orch compare` of two parallel runs, end to end on the fakes: testbed y on other GPUs in B.

The compare of testbeds' host facts (report.unlikefacts) was tested on manifests built in memory
only; this drives two real sweeps on two testbeds each through the sweep API (tests/fakes.py via
helpers.parallel_fakes: nvidia-smi answers per testbed), then the `orch compare` command, so what
run.json really keeps of each testbed is what compare reads. Unit tier: no socket, no process."""

from __future__ import annotations

import html
import threading
from pathlib import Path

import pytest
from helpers.parallel_fakes import H100, H200, GpuFleet, fake_matrix, fleet, write_files

from orchestrator.cli.main import main
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress

MATRIX = fake_matrix("pair", 1)
LINE = "testbed y's decode role's GPU model differed: '2 x NVIDIA H100 80GB HBM3' in A, '2 x NVIDIA H200' in B"


def sweep(folder: Path, run_id: str, f: GpuFleet) -> Path:
    """`orch run` on testbeds x and y through the API, each running one of the two cells: the run's
    folder. Why held: a testbed's host facts are asked once its servers first answer, and under
    load one testbed could take both cells before the other's first trial, leaving the other's
    facts unrecorded; each testbed's trial waits at its repro until the other's has started."""
    started = {name: threading.Event() for name in ("x", "y")}

    def hold(testbed: str, command: str) -> None:
        started[testbed].set()
        other = "y" if testbed == "x" else "x"
        if not started[other].wait(60):
            raise AssertionError(f"testbed {other} never started a trial")

    f.repro_hook = hold
    folder.mkdir()
    matrix, inventory = write_files(folder, MATRIX, ["x", "y"])
    req = api.SweepRequest(
        matrix, inventory, testbeds=("x", "y"), reports_dir=folder / "reports", run_id=run_id, skip_preflight=True
    )
    outcome = api.run(req, lambda started: QuietProgress(), warn=lambda message: None)
    assert outcome.status == "completed" and outcome.completed == 2
    return outcome.run_dir


def test_compare_names_the_testbed_and_the_gpu_that_differed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run A on H100s everywhere, run B with testbed y's decode host on H200s: one line names
    testbed y, the role and both models, on the terminal and on the page; testbed x is not named."""
    f = fleet(monkeypatch, x=H100, y=H100)
    run_a = sweep(tmp_path / "a", "ra", f)
    f.gpus["y"] = H200  # its decode host answers nvidia-smi so from the next connect
    run_b = sweep(tmp_path / "b", "rb", f)
    capsys.readouterr()
    out = tmp_path / "cmp.html"
    assert main(["compare", str(run_a), str(run_b), "-o", str(out)]) == 0
    terminal = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert LINE in terminal, terminal
    assert "testbed x's" not in terminal
    page = html.unescape(out.read_text())
    assert LINE in page
    assert page.count("GPU model differed") == 1
