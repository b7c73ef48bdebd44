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
from helpers.netutil import port_open
from helpers.sim_sweep import ENV_FILES, make_inventory, overlap_matrix

from orchestrator.cli.main import main

pytestmark = pytest.mark.sim

MATRIX = overlap_matrix("fifo", 'sh -c \'if [ "$1" = 0 ]; then rm -f "$2" && mkfifo "$2"; fi\' edit {trial} DECODE')


def test_an_env_file_replaced_by_a_fifo_mid_sweep_is_set_aside_and_the_original_written_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv, ports = make_inventory(tmp_path)
    decode = tmp_path / "decode.env"
    (tmp_path / "m.yaml").write_text(MATRIX.replace("DECODE", str(decode)))
    originals = {n: (tmp_path / n).read_bytes() for n in ENV_FILES}
    reports = tmp_path / "reports"
    code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inv), "--out", str(reports), "--run-id", "fifo"])
    out, err = capsys.readouterr()
    run_dir, kept = reports / "fifo", Path(f"{decode}.orch-drift-fifo")
    assert code == 1, out + err
    assert f"{decode} was replaced by a FIFO during the run; it is kept as {kept}" in err, err
    assert "Traceback" not in err and "NOT restored" not in out
    assert stat.S_ISFIFO(kept.lstat().st_mode)  # moved whole, never opened
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    lines = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert [(r["trial"], r["status"]) for r in lines if r.get("type") == "trial"] == [(0, "completed")]
    for name, data in originals.items():  # hosts restored (a regular file again), nothing left running
        assert (tmp_path / name).read_bytes() == data, name
    assert not any(port_open(p) for p in ports)
