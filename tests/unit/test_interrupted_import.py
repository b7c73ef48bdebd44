"""An interrupt inside an import must not break the run's own end (sweep.api._load_the_end).

A kill point of `orch hunt` (bench_kill_points.py --command hunt, seed 8713) sent Ctrl-C just after
the run folder was made, while the runs index loaded the report stack for the first time: pandas
was left half initialised, Python cannot import it again in that process, and the interrupted
run's own report failed ('partially initialized module pandas'): a traceback and exit 1 where an
interrupted run exits 130 and says how to go on. The report stack now loads before the run is
touched, so the interrupt ends the command with nothing made.

Each case runs in a fresh interpreter (this one has pandas loaded already), on the fakes
(helpers.parallel_fakes), with an import hook that raises KeyboardInterrupt halfway through
pandas' own import, where the kill point's Ctrl-C landed: after pandas' datetime extension has
loaded, before its interval extension. Before the fix a new run ended in that traceback, and a
resume was interrupted only after both hosts had been contacted.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.parallel_fakes import interrupted_sweep

from orchestrator.store.rundir import RunDir

TESTS = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, sys
    from pathlib import Path
    sys.path[:0] = [{tests!r}]

    class Cut(importlib.abc.MetaPathFinder):
        hit = False
        def find_spec(self, name, path=None, target=None):
            if name == "pandas._libs.interval" and not Cut.hit:
                Cut.hit = True
                raise KeyboardInterrupt
            return None

    import pytest
    from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files
    from orchestrator.sweep import api
    from orchestrator.sweep.progress import QuietProgress

    assert "pandas" not in sys.modules
    sys.meta_path.insert(0, Cut())
    tmp = Path({tmp!r})
    fleet = Fleet({{"prefill": "P=0\\n", "decode": "D=0\\n"}})
    install(pytest.MonkeyPatch(), fleet)
    quiet = lambda started: QuietProgress()
    try:
        if {mode!r} == "run":
            m, i = write_files(tmp, fake_matrix("cut", 1), ["A"])
            req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp / "reports", run_id="r1", skip_preflight=True)
            api.run(req, quiet, warn=lambda message: None)
        else:
            api.resume(api.ResumeRequest(tmp / "reports" / "r1"), quiet, warn=lambda message: None)
        print("no interrupt")
    except KeyboardInterrupt:
        print("interrupted", Cut.hit, "hosts contacted:", len(fleet.transports))
    """
)


def _cut(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    script = SCRIPT.format(tests=str(TESTS), tmp=str(tmp_path), mode=mode)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)


@pytest.mark.process
def test_a_ctrl_c_inside_the_report_stacks_first_import_ends_a_new_run_before_it_exists(tmp_path: Path) -> None:
    done = _cut(tmp_path, "run")
    assert done.stdout.splitlines() == ["interrupted True hosts contacted: 0"], done.stdout + done.stderr
    assert not (tmp_path / "reports" / "r1").exists()  # no run folder, no host touched


@pytest.mark.process
def test_a_ctrl_c_inside_the_report_stacks_first_import_ends_a_resume_before_it_touches_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, outcome, _ = interrupted_sweep(tmp_path, monkeypatch, "cut")
    files = RunDir(outcome.run_dir)
    before = {p: p.read_bytes() for p in (files.journal, files.run_json)}
    done = _cut(tmp_path, "resume")
    assert done.stdout.splitlines() == ["interrupted True hosts contacted: 0"], done.stdout + done.stderr
    assert {p: p.read_bytes() for p in before} == before  # the run as the interrupted sweep left it
