"""`orch resume` continues only the run it was asked to: a changed matrix or inventory is refused
(exit 2, one clear line, nothing touched), and a torn last journal line (the controller died
while writing it) is repaired, never fatal.
"""

from __future__ import annotations

import pytest

from orchestrator.store.journal import read_journal

from .helpers import (
    SimBed,
    assert_clean,
    assert_no_traceback,
    count_trials,
    error_lines,
    journal_tally,
    kill_group,
    matrix_yaml,
    output_of,
    run_cli,
    spawn_orch,
    wait_for,
)

pytestmark = pytest.mark.sim

TORN = b'{"type": "trial", "schema_version": 1, "run_id": "killed", "trial": 3, "sta'


def test_resume_refuses_a_changed_plan_and_repairs_a_torn_journal_tail(bed: SimBed, capsys, monkeypatch) -> None:
    bed.write_matrix(matrix_yaml(replicates=1))
    run_dir = bed.run_dir("k")
    proc = spawn_orch(bed, bed.run_args("k"))
    assert wait_for(lambda: count_trials(run_dir) >= 1, 60), output_of(proc)
    kill_group(proc)
    hosts_now = {role: bed.env_file(role).read_bytes() for role in bed.originals}

    matrix_text, inventory_text = bed.matrix.read_text(), bed.inventory.read_text()
    # orch resumes in this process, from the testbed's folder as a user would (and as the orch
    # subprocess did): the refusals name the files relative to it
    monkeypatch.chdir(bed.root)
    bed.matrix.write_text(matrix_text.replace("replicates: 1", "replicates: 2"))
    done = run_cli(["resume", str(run_dir)], capsys)
    assert done.code == 2, done.output
    assert_no_traceback(done.output)
    assert error_lines(done.output) == [
        "error: matrix m.yaml changed since run k started "
        "(a resumed run must use the same matrix; start a new run instead)"
    ]
    bed.matrix.write_text(matrix_text)

    bed.inventory.write_text(inventory_text + "# edited\n")
    done = run_cli(["resume", str(run_dir)], capsys)
    assert done.code == 2, done.output
    assert_no_traceback(done.output)
    [line] = error_lines(done.output)
    assert line.startswith("error: inventory inventory.yaml changed since run k")
    bed.inventory.write_text(inventory_text)
    # refused before touching anything: the hosts are as the killed controller left them
    assert {role: bed.env_file(role).read_bytes() for role in bed.originals} == hosts_now

    with open(run_dir / "journal.jsonl", "ab") as journal:
        journal.write(TORN)  # the controller died in the middle of this line
    assert read_journal(run_dir / "journal.jsonl").torn_tail
    done = run_cli(["resume", str(run_dir)], capsys)
    assert done.code == 0, done.output
    assert "journal: dropped a torn last line" in done.output
    contents = read_journal(run_dir / "journal.jsonl")
    assert not contents.torn_tail
    planned, lost, twice = journal_tally(run_dir)
    assert (planned, lost, twice) == (4, [], [])
    assert_clean(bed, grace_s=15)
