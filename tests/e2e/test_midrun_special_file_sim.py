"""decode.env replaced by a FIFO between two trials, on the bundled simulator (real files, real
processes on free loopback ports, the CLI end to end). Found by the red team: each later trial
failed on "not a regular file" and was retried until the repeated-failure stop, the restore failed
the same way, and `orch restore` said "run it again" for ever: a host left on a cell's units with
no way back but by hand. Now it is drift like a symlink put there: the FIFO is moved aside whole
(never opened: reading one blocks), the original written back, the sweep stops saying where."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from helpers.sim_sweep import sim_overlap_matrix, sim_run

pytestmark = pytest.mark.sim

MATRIX = sim_overlap_matrix("fifo", 'sh -c \'if [ "$1" = 0 ]; then rm -f "$2" && mkfifo "$2"; fi\' edit {trial} DECODE')


def test_an_env_file_replaced_by_a_fifo_mid_sweep_is_set_aside_and_the_original_written_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    decode = tmp_path / "decode.env"
    run = sim_run(tmp_path, MATRIX.replace("DECODE", str(decode)), "fifo", capsys)
    out, err, kept = run.out, run.err, Path(f"{decode}.orch-drift-fifo")
    assert run.code == 1, out + err
    assert f"{decode} was replaced by a FIFO during the run; it is kept as {kept}" in err, err
    assert "Traceback" not in err and "NOT restored" not in out
    assert stat.S_ISFIFO(kept.lstat().st_mode)  # moved whole, never opened
    assert json.loads((run.run_dir / "run.json").read_text())["status"] == "failed"
    assert [(t, r["status"]) for t, r in run.trials().items()] == [(0, "completed")]
    run.assert_restored()  # hosts restored (a regular file again), nothing left running
