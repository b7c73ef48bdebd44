"""`orch hunt MATRIX --resume RUN_DIR` with a MATRIX that is not the run's is refused (exit 2, at
its first differing line, nothing touched), as `orch resume` refuses a run whose matrix changed.
It was silently ignored: a hunt resumed with `posterior: 0.99999` edited in went on to the
run's old target and exited 0."""

from __future__ import annotations

from pathlib import Path

from helpers.hunt_runs import hunt_run, small_hunt, truth_answer

from orchestrator.cli.hunt import check_same_matrix
from orchestrator.cli.main import main
from orchestrator.store.manifest import load_manifest, save_manifest


def test_a_changed_matrix_passed_with_resume_is_refused_at_its_first_difference(tmp_path: Path, capsys) -> None:
    m = small_hunt(tmp_path)
    run = tmp_path / "reports" / "hunt"
    hunt_run(run, m, truth_answer(m), limit=6, status="interrupted")
    # no inventory to resume on: whatever happens, no testbed is touched by this test
    save_manifest(run, load_manifest(run).model_copy(update={"inventory_path": str(tmp_path / "gone.yaml")}))
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    changed = tmp_path / "changed.yaml"
    changed.write_text(m.text.replace("  max_sessions: 600\n", "  max_sessions: 600\n  posterior: 0.99999\n"))
    line = m.text.splitlines().index("  max_sessions: 600") + 2

    assert main(["hunt", str(changed), "--resume", str(run)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"changed.yaml:{line}: differs from the matrix of run hunt: 'posterior: 0.99999' here" in err, err
    assert f"orch resume {run}" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before

    same = tmp_path / "copy.yaml"  # the same text elsewhere is the run's matrix
    same.write_text(m.text)
    check_same_matrix(same, run)
