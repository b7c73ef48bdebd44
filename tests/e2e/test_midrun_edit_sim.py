"""A line added by hand to decode.env between two trials, on the bundled simulator (real files,
real processes on free loopback ports, the CLI end to end): the next trial's write (LocalTransport,
told what orch last wrote) refuses to go over it, the edit is kept beside the file (mode 600), the
sweep stops with exit code 1 and says where, the finished trial stays in the journal, run.json
says failed, and every host is back on its original. What the fakes cannot show: the local
transport's own comparison, and the CLI's outcome (status, kept-aside line, exit code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.sim_sweep import sim_overlap_matrix, sim_run

pytestmark = pytest.mark.sim

MATRIX = sim_overlap_matrix(
    "edited", r"""sh -c 'if [ "$1" = 0 ]; then printf "\nMY_NEW_FLAG=1\n" >> "$2"; fi' edit {trial} DECODE"""
)


def test_a_hand_edit_mid_sweep_is_kept_and_stops_the_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    decode = tmp_path / "decode.env"
    run = sim_run(tmp_path, MATRIX.replace("DECODE", str(decode)), "edited", capsys)
    out, err, run_dir, kept = run.out, run.err, run.run_dir, Path(f"{decode}.orch-drift-edited")
    assert run.code == 1, out + err
    assert f"{decode} was changed during the run, not by orch; its content is kept in {kept}" in err
    assert f"`orch resume {run_dir}` runs it and the rest" in err
    assert f"kept aside: decode ({kept})" in out and "1 trial completed, 0 failed" in out
    assert "Traceback" not in err
    assert kept.read_bytes().endswith(b"\nMY_NEW_FLAG=1\n") and kept.stat().st_mode & 0o777 == 0o600
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    assert [(t, r["status"]) for t, r in run.trials().items()] == [(0, "completed")]
    run.assert_restored()  # hosts restored, nothing left running
