"""README: "Ctrl-C or SIGTERM: hosts are restored (env files byte-identical, units back to their
state), exit 130". A single SIGTERM (systemd stop, CI timeout, `kill PID`) that lands while the
sweep is restoring at its normal end must not leave the host being restored changed: it marks the
run interrupted and the restore carries on; only a second one skips that host.
(Ported from a review: /tmp/review_crash/test_sigterm_restore.py.)
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from orchestrator.core.records import EventRecord

from .helpers import (
    assert_no_traceback,
    cleanup_processes,
    count_trials,
    leftovers,
    make_simbed,
    matrix_yaml,
    output_of,
    spawn_orch,
    trial_records,
    wait_for,
)

pytestmark = pytest.mark.sim


def _in_final_restore(tmp_path: Path, run_id: str):  # type: ignore[no-untyped-def]
    bed = make_simbed(tmp_path / "bed")
    bed.write_matrix(matrix_yaml(replicates=1))
    # the test hook makes each host's restore step 1 s slow (as a slow unit stop on a real host)
    proc = spawn_orch(bed, bed.run_args(run_id), {"ORCH_TEST_RESTORE_DELAY_S": "1.0"})
    assert wait_for(lambda: count_trials(bed.run_dir(run_id)) >= 4, 180), output_of(proc)
    time.sleep(1.5)  # inside the second host (decode)'s restore step
    return bed, proc


def _events(run_dir: Path) -> list[EventRecord]:
    from orchestrator.store.journal import read_journal

    return [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, EventRecord)]


def test_one_sigterm_during_the_final_restore_restores_every_host_and_exits_130(tmp_path: Path) -> None:
    bed, proc = _in_final_restore(tmp_path, "t")
    try:
        os.kill(proc.pid, signal.SIGTERM)  # ONE SIGTERM
        code = proc.wait(60)
        out = output_of(proc)
        assert_no_traceback(out)
        wait_for(lambda: not leftovers(bed), 10)
        left = leftovers(bed)
        assert not left, f"exit {code} after one SIGTERM during the final restore; left: {left}\n{out}"
        assert code == 130, out
        assert "NOT restored" not in out, out
        assert len(trial_records(bed.run_dir("t"))) == 4
        events = _events(bed.run_dir("t"))
        assert any(e.event == "run_interrupted" for e in events)
        assert [e.message for e in events if e.event == "restored"] == ["all hosts restored"]
    finally:
        if proc.poll() is None:
            proc.kill()
        cleanup_processes(bed)


def test_a_second_sigterm_during_the_final_restore_skips_the_host_being_restored(tmp_path: Path) -> None:
    bed, proc = _in_final_restore(tmp_path, "t2")
    try:
        os.kill(proc.pid, signal.SIGTERM)  # decode's restore starts again (1 s step)
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGTERM)  # inside it: decode is skipped, router still restored
        code = proc.wait(60)
        out = output_of(proc)
        assert_no_traceback(out)
        assert code == 130, out
        assert f"NOT restored: decode; finish with: orch restore {bed.run_dir('t2')}" in out, out
        assert "decode.env.orch-backup-t2" in "\n".join(leftovers(bed)), "decode was left as it was"
    finally:
        if proc.poll() is None:
            proc.kill()
        cleanup_processes(bed)
