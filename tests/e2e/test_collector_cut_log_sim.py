"""A `collect:` pattern over a unit log longer than orch reads of it (the last 256 KB of what the
unit wrote during the trial), on the bundled simulator. Found by the red team: decode logging
~100 MB of ANOMALY lines in a trial was recorded as `anomalies = 1148` (the lines of the last
256 KB), a count the report compared between cells as if whole. A count over a cut log is no
measurement: the trial fails naming the collector and the cut, like a metric the repro did not
print; a log that fits is counted as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.netutil import port_open
from helpers.sim_sweep import sim_overlap_matrix, sim_run

pytestmark = pytest.mark.sim

MATRIX = sim_overlap_matrix(
    "chatty",
    r"""{python} -c "import sys; open(sys.argv[1], 'a').write('FLOOD x\n' * int(sys.argv[2]))" LOG {trial}0000""",
    "collect:\n  floods: {role: decode, pattern: FLOOD}\n",
)


def test_a_count_over_a_cut_log_fails_the_trial_and_one_that_fits_is_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = sim_run(tmp_path, MATRIX.replace("LOG", str(tmp_path / "state" / "t-decode.log")), "c", capsys)
    out, err, trials = run.out, run.err, run.trials()
    # trial 0 wrote no line (0 x 10,000 = 0); trial 1 wrote 10,000 lines, 100 KB: both fit
    assert trials[0]["status"] == "completed" and trials[0]["metrics"]["floods"]["value"] == 0, out + err
    assert trials[1]["status"] == "completed" and trials[1]["metrics"]["floods"]["value"] == 10_000, out + err
    run.assert_restored()

    big = tmp_path / "big"
    big.mkdir()
    matrix = MATRIX.replace("LOG", str(big / "state" / "t-decode.log")).replace("{trial}0000", "{trial}00000")
    run = sim_run(big, matrix, "c", capsys)
    out, err, trials = run.out, run.err, run.trials()
    assert run.code == 1 and trials[0]["status"] == "completed", out + err
    assert trials[1]["status"] == "failed" and "floods" not in (trials[1].get("metrics") or {}), trials[1]
    said = "collector 'floods': decode's log during the trial is longer than the 256 KB orch reads"
    assert said in out + err, out + err
    assert not any(port_open(p) for p in run.ports)
