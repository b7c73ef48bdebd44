"""The controller SIGKILLed at >= 20 points of real sweeps on the simulator; `orch resume` (itself
killed again, in a chain) must always finish the run: every planned trial exactly once in the
journal as completed/failed, env files byte-identical, no sim process, lock or backup left.

Kill points are drawn from a seeded RNG over the whole life of the controller (start-up,
backup, trials, restore, report): a third timed from the spawn, the rest from the moment the
controller wrote its start event, so a slow start on a loaded machine still leaves most kills
inside the trials. Two points are forced because random times rarely hit them:
during the backup and during the restore (a test hook makes each host's step 0.4 s slow there).
ORCH_FAULT_SEED picks another seed; the seed and the tally are printed.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from orchestrator.core.records import EventRecord, TrialRecord
from orchestrator.store.journal import read_journal

from .helpers import (
    SimBed,
    assert_clean,
    assert_no_traceback,
    cleanup_processes,
    journal_tally,
    kill_group,
    make_simbed,
    manifest,
    matrix_yaml,
    orch,
    output_of,
    run_cli,
    sim_processes,
    spawn_orch,
)

pytestmark = pytest.mark.sim

MIN_KILLS = 21
SEED = int(os.environ.get("ORCH_FAULT_SEED", "20261130"))


@dataclass
class Tally:
    kills: int = 0
    phases: Counter[str] = field(default_factory=Counter)
    sweeps: int = 0
    trials: int = 0
    lost: int = 0
    duplicated: int = 0
    log: list[str] = field(default_factory=list)


def phase_of(run_dir: Path, starts_before: int) -> str:
    """Where the killed controller was, read from what it left behind (and whether it got as far
    as writing its start event)."""
    if not (run_dir / "run.json").exists():
        return "start-up"
    if not (run_dir / "backup" / "units.json").exists():
        return "backup"
    records = _records(run_dir)  # never raises on a torn tail: proves the journal is readable
    if _starts(run_dir) == starts_before:
        return "start-up"
    if _finished_trials(run_dir) < len(manifest(run_dir).plan):
        return "trials"
    last = records[-1] if records else None
    if isinstance(last, EventRecord) and last.event == "restored":
        return "report"
    return "restore"


def start(bed: SimBed, run_id: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`orch resume` when the run directory exists, else `orch run` again (killed before its
    run directory existed: nothing was changed, the same run id is free)."""
    run_dir = bed.run_dir(run_id)
    if (run_dir / "run.json").exists():
        return spawn_orch(bed, ["resume", str(run_dir)], env)
    return spawn_orch(bed, bed.run_args(run_id), env)


def kill_at(proc: subprocess.Popen[bytes], when) -> bool:  # type: ignore[no-untyped-def]
    """SIGKILL the controller once `when()` is true; False if it finished first."""
    while proc.poll() is None:
        if when():
            kill_group(proc)
            return True
        time.sleep(0.005)
    return False


def finish(bed: SimBed, run_id: str, tally: Tally, capsys) -> None:  # type: ignore[no-untyped-def]
    """Let one last resume run to the end, then check everything. It runs in this process (its
    interpreter start and imports already paid): nothing signals it, and every resume that is
    killed is a process of its own."""
    run_dir = bed.run_dir(run_id)
    # as start(): `orch run` again when the last kill came before the run folder existed
    args = ["resume", str(run_dir)] if (run_dir / "run.json").exists() else bed.run_args(run_id)
    done = run_cli(args, capsys)
    assert_no_traceback(done.output)
    assert done.code == 0, done.output
    check_done(bed, run_id, tally)


def check_done(bed: SimBed, run_id: str, tally: Tally) -> None:
    run_dir = bed.run_dir(run_id)
    planned, lost, twice = journal_tally(run_dir)
    tally.sweeps += 1
    tally.trials += planned
    tally.lost += len(lost)
    tally.duplicated += len(twice)
    assert not lost, f"{run_id}: trials lost: {lost}"
    assert not twice, f"{run_id}: trials recorded more than once: {twice}"
    assert manifest(run_dir).status == "completed"
    assert (run_dir / "index.html").exists()
    # a repro orphaned by a kill may still be finishing its last request: give it a moment
    assert_clean(bed, grace_s=15)


def sweep_with_kills(  # type: ignore[no-untyped-def]
    bed: SimBed, run_id: str, rng: random.Random, tally: Tally, budget: int, capsys, forced: bool = False
) -> None:
    """One sweep, killed up to `budget` times at random while it runs trials (plus, if forced,
    once during its backup and once during its restore), then finished by a last resume."""
    run_dir = bed.run_dir(run_id)
    if forced:
        proc = spawn_orch(bed, bed.run_args(run_id), {"ORCH_TEST_BACKUP_DELAY_S": "0.4"})
        assert kill_at(proc, lambda: (run_dir / "backup").is_dir()), output_of(proc)
        assert record(tally, run_dir, 0, "forced") == "backup"
    phase = "trials"
    while phase in ("start-up", "backup", "trials") and budget > 0:
        before = _starts(run_dir)
        proc = start(bed, run_id)
        when, how = kill_point(rng, run_dir, before)
        if not kill_at(proc, when):
            text = output_of(proc)
            assert_no_traceback(text)
            assert proc.returncode == 0, text  # it finished before its kill point
            check_done(bed, run_id, tally)
            return
        budget -= 1
        phase = record(tally, run_dir, before, how)
    if forced and phase in ("start-up", "backup", "trials"):
        before = _starts(run_dir)
        proc = start(bed, run_id, {"ORCH_TEST_RESTORE_DELAY_S": "0.4"})
        planned = len(manifest(run_dir).plan)
        # this process got going (its start event is in) and every trial is done: it is
        # restoring, host by host, each step 0.4 s slow
        assert kill_at(proc, lambda: _starts(run_dir) > before and _finished_trials(run_dir) >= planned)
        assert record(tally, run_dir, before, "forced") == "restore"
    finish(bed, run_id, tally, capsys)


def kill_point(rng: random.Random, run_dir: Path, starts_before: int) -> tuple[Callable[[], bool], str]:
    """When to kill a controller just started: a third of the time a random moment after the
    spawn (it may land in start-up or backup), else a random moment after the process has
    written its start event (inside the trials). Counted from the start event, not the spawn,
    because a loaded machine can take seconds to import and connect: timed from the spawn alone,
    most kills would land in start-up there and few in the trials."""
    if rng.random() < 1 / 3:
        delay = rng.uniform(0.3, 3.0)
        deadline = time.monotonic() + delay
        return (lambda: time.monotonic() >= deadline), f"random {delay:.2f} s"
    delay = rng.uniform(0.0, 2.5)
    started: list[float] = []
    looked = [0.0]

    def when() -> bool:
        if not started:
            # the journal is parsed to look: every 50 ms, not at every 5 ms poll (the parsing
            # would take a core from the controller being tested)
            if time.monotonic() - looked[0] < 0.05:
                return False
            looked[0] = time.monotonic()
            if _starts(run_dir) <= starts_before:
                return False
            started.append(time.monotonic())
        return time.monotonic() >= started[0] + delay

    return when, f"{delay:.2f} s after start"


def _records(run_dir: Path) -> list[TrialRecord | EventRecord]:
    journal = run_dir / "journal.jsonl"
    return read_journal(journal).records if journal.exists() else []


def _finished_trials(run_dir: Path) -> int:
    return len({r.trial for r in _records(run_dir) if isinstance(r, TrialRecord)})


def _starts(run_dir: Path) -> int:
    return sum(isinstance(r, EventRecord) and r.event in ("run_started", "run_resumed") for r in _records(run_dir))


def record(tally: Tally, run_dir: Path, starts_before: int, how: str) -> str:
    phase = phase_of(run_dir, starts_before)
    tally.kills += 1
    tally.phases[phase] += 1
    tally.log.append(f"kill {tally.kills:2d} {run_dir.name} {how:16s} -> {phase}")
    return phase


def test_sigkill_at_random_points_then_resume_loses_nothing(tmp_path: Path, capsys) -> None:

    rng = random.Random(SEED)
    tally = Tally()
    bed = make_simbed(tmp_path / "bed")
    try:
        bed.write_matrix(matrix_yaml(replicates=3))  # 12 trials a sweep
        sweep = 0
        while tally.kills < MIN_KILLS:
            # the first sweep: killed in its backup, a few times at random, then in its restore
            budget = 2 if sweep == 0 else min(12, MIN_KILLS - tally.kills)
            sweep_with_kills(bed, f"k{sweep}", rng, tally, budget, capsys, forced=sweep == 0)
            sweep += 1
    finally:
        cleanup_processes(bed)
    summary = (
        f"kill-and-resume (seed {SEED}): {tally.kills} SIGKILL points over {tally.sweeps} sweeps "
        f"({tally.trials} planned trials): {tally.lost} trials lost, {tally.duplicated} duplicated; "
        f"phases: {dict(sorted(tally.phases.items()))}"
    )
    with capsys.disabled():
        print("\n" + "\n".join(tally.log) + "\n" + summary)
    assert tally.kills >= MIN_KILLS
    assert tally.phases["backup"] >= 1 and tally.phases["restore"] >= 1 and tally.phases["trials"] >= 10
    assert tally.lost == 0 and tally.duplicated == 0


def test_orch_restore_after_sigkill_mid_trial_then_resume_completes(bed: SimBed, capsys) -> None:
    """kill -9 in the middle of a sweep, then `orch restore`: hosts back at once (the run can
    still be resumed later, and resuming finishes it)."""
    bed.write_matrix(matrix_yaml(replicates=1))
    run_dir = bed.run_dir("r")
    proc = spawn_orch(bed, bed.run_args("r"))
    assert kill_at(proc, lambda: _finished_trials(run_dir) >= 1), output_of(proc)
    assert sim_processes(bed), "the killed controller's units should still be up"
    # restore and resume run in this process (nothing signals them; the restore after a kill in
    # a real process is test_orch_restore_after_sigkill_during_backup_has_nothing_to_put_back's)
    done = run_cli(["restore", str(run_dir)], capsys)
    assert done.code == 0, done.output
    assert "restored: prefill, decode, router" in done.output
    assert_clean(bed, grace_s=15)
    assert manifest(run_dir).status == "interrupted"
    done = run_cli(["resume", str(run_dir)], capsys)
    assert done.code == 0, done.output
    planned, lost, twice = journal_tally(run_dir)
    assert planned == 4 and not lost and not twice
    assert_clean(bed, grace_s=15)


def test_orch_restore_after_sigkill_during_backup_has_nothing_to_put_back(bed: SimBed) -> None:
    run_dir = bed.run_dir("b")
    proc = spawn_orch(bed, bed.run_args("b"), {"ORCH_TEST_BACKUP_DELAY_S": "0.4"})
    # killed after the first host's copy was saved (run dir and host), during the second's
    saved = run_dir / "backup" / "prefill.env"
    assert kill_at(proc, lambda: saved.exists() and time.sleep(0.1) is None), output_of(proc)
    assert list(bed.root.glob("prefill.env.orch-backup-b"))
    done = orch(bed, ["restore", str(run_dir)])
    assert done.code == 0, done.output
    assert "nothing to restore" in done.output
    assert_clean(bed)
