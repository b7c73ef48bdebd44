"""A sweep that keeps failing the same way stops, and still ends like a run: hosts restored,
run.json says failed, the report is written with the trials it has, and the terminal says why
and how to go on. On the bundled simulator (real processes on free loopback ports)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.netutil import port_open
from helpers.sim_sweep import ENV_FILES, make_inventory

from orchestrator.cli.main import main

pytestmark = pytest.mark.sim

MATRIX = """\
name: stuck
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
replicates: 3
order: sequential
stop_after_repeated_failures: 2
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 4 --rounds 1 --seed {trial_seed}"
  timeout: 120
  metrics:
    corruption: {kind: proportion, regex: 'NO SUCH LINE (?P<k>\\d+)/(?P<n>\\d+)'}
"""


def test_repeated_identical_failures_stop_and_the_run_still_ends_with_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv, ports = make_inventory(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    originals = {n: (tmp_path / n).read_bytes() for n in ENV_FILES}
    reports = tmp_path / "reports"
    code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inv), "--out", str(reports), "--run-id", "stuck"])
    out, err = capsys.readouterr()
    run_dir = reports / "stuck"
    assert code == 1, out + err
    assert "2 consecutive trials failed the same way" in err and f"orch resume {run_dir}" in err
    assert "Traceback" not in err
    assert "0 trials completed, 2 failed" in out and f"report: {run_dir / 'index.html'}" in out
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    assert (run_dir / "index.html").is_file() and json.loads((run_dir / "summary.json").read_text())["failed"] == 2
    for name, data in originals.items():  # hosts restored, nothing left running
        assert (tmp_path / name).read_bytes() == data, name
    assert not any(port_open(p) for p in ports)
