"""An env file edited by someone else while a sweep runs (a human adds a line to decode.env
between two trials), on the fakes.

Before: the next trial's write replaced the file with orch's computed text (the bytes orch last
wrote were remembered, so nothing was read), the edit was gone with no copy, nobody was told, and
the sweep went on measuring on a testbed someone was working on. Now every trial's write is told
what the file must hold (what orch last wrote there) and compares it on the host in its own round
trip; a file re-read after a failure must be one orch knows. Otherwise the edit is set aside as
the restore sets drift aside (`<env>.orch-drift-<run_id>`, mode 600), the sweep stops with an
error naming host, file and copy (EnvFileChanged, exit 1), finished trials stay in the journal,
the trial about to start is not recorded, and the hosts are restored."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from fakes import FakeBed, FakeUnit, Reply, Role, flag, linked_decode_bed, make_bed, make_plan

from orchestrator.core.records import TrialRecord
from orchestrator.core.steps import Plan
from orchestrator.errors import EnvFileChanged
from orchestrator.store.journal import read_journal
from orchestrator.sweep.drift import drift_path
from orchestrator.sweep.hosts import host_backup_path
from orchestrator.sweep.runner import Runner, RunOptions, RunResult

RUN_ID = "fake-run"
ORIGINAL = b"# decode\nDECODE_FLAG=0\n"
PREFILL = b"# prefill\nPREFILL_FLAG=0\n"
HUMAN = b"MY_NEW_FLAG=1\n"  # the line someone adds by hand
MODE = (0o640, 0, 12)  # the original's mode and owner, which the restore must keep


class Edits:
    """A Progress that adds HUMAN to decode's env file once trial `after` is journaled (between two
    trials, as a human at a shell would), and keeps the notes."""

    def __init__(self, bed: FakeBed, after: int) -> None:
        self.bed, self.after, self.lines = bed, after, list[str]()
        self.edited: bytes | None = None
        self.calls_before = 0  # decode's transport calls made before the edit

    def start(self, total: int, done: int) -> None: ...
    def retotal(self, left: int) -> None: ...
    def stop(self) -> None: ...
    def restore_ended(self, not_restored: Sequence[str]) -> None: ...

    def trial_done(self, record: TrialRecord) -> None:
        if record.trial == self.after:
            files, env = self.bed.transports["decode"].files, self.bed.env_file("decode")
            files[env] += HUMAN
            self.edited = files[env]
            self.calls_before = len(self.bed.transports["decode"].calls)

    def note(self, message: str) -> None:
        self.lines.append(message)


def bed_of(*roles: str) -> FakeBed:
    texts = {"decode": ORIGINAL, "prefill": PREFILL}
    bed = make_bed({r: Role(texts[r].decode(), [FakeUnit(f"{r}-server", active=True)]) for r in roles})
    bed.transports["decode"].modes[bed.env_file("decode")] = MODE
    return bed


def run(bed: FakeBed, plan: Plan, run_dir: Path, edits: Edits) -> EnvFileChanged:
    runner = Runner(
        plan, bed.deployment, run_dir, RunOptions(RUN_ID, retry_backoff_s=0.0), progress=edits, client=bed.client
    )
    with pytest.raises(EnvFileChanged) as caught:
        runner.execute()
    return caught.value


def assert_kept_and_restored(bed: FakeBed, edits: Edits, exc: EnvFileChanged) -> None:
    """The edit is beside the file, whole and private; the host is back on its original."""
    t, env = bed.transports["decode"], bed.env_file("decode")
    kept = drift_path(env, RUN_ID)
    assert edits.edited is not None and t.files[kept] == edits.edited  # the edit, intact
    assert t.modes[kept][0] == 0o600
    assert t.files[env] == ORIGINAL and t.modes[env] == MODE  # restored, mode and owner kept
    assert host_backup_path(env, RUN_ID) not in t.files
    assert bed.states() == {f"{r}:{r}-server": True for r in bed.managers}  # units back, running
    message = str(exc)
    assert message.startswith(f"{bed.deployment.hosts['decode'].host.label}: {env} was changed during the run")
    assert f"its content is kept in {kept} (mode 600)" in message and "The sweep stops" in message
    assert any(line.startswith("WARNING:") and kept in line for line in edits.lines)
    assert isinstance(exc.result, RunResult) and exc.result.kept == {"decode": kept}


def reads_after(bed: FakeBed, edits: Edits) -> int:
    """How often decode's env file was read after the edit."""
    calls = bed.transports["decode"].calls[edits.calls_before :]
    return sum(c.op == "read" and c.target == bed.env_file("decode") for c in calls)


def journaled(run_dir: Path) -> list[tuple[int, str]]:
    return [(r.trial, r.status) for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]


@pytest.mark.parametrize("roles", [("decode",), ("decode", "prefill")], ids=["with-its-restart", "two-files"])
def test_an_edit_between_trials_stops_the_sweep_and_is_kept_aside(tmp_path: Path, roles: tuple[str, ...]) -> None:
    """One changed file is written in its unit's restart (restart_with_file); two changed files
    are written one by one before the restarts: neither writes over the edit. (A trial that does
    not write decode's file leaves the edit where it is and its unit running on its env from before
    the edit: such a trial still counts; the next write of the file, or the restore, finds it.)"""
    bed = bed_of(*roles)
    factor = {"env": {r: f"{r.upper()}_FLAG" for r in roles}, "levels": ["0", "1", "2"]}  # every file, every trial
    plan = make_plan(bed, {"f": factor}, order="sequential")
    first, second = plan.steps[0].trial.index, plan.steps[1].trial.index
    edits = Edits(bed, after=first)
    exc = run(bed, plan, tmp_path / "run", edits)
    assert_kept_and_restored(bed, edits, exc)
    assert journaled(tmp_path / "run") == [(first, "completed")]  # the second trial left no record
    assert second not in {t for t, _ in journaled(tmp_path / "run")}
    assert isinstance(exc.result, RunResult) and exc.result.completed == 1
    assert reads_after(bed, edits) == 2  # the set-aside's and the restore's: the refused write read nothing


def test_an_edit_found_by_the_read_after_a_failed_trial_stops_the_sweep_too(tmp_path: Path) -> None:
    """After a failure the next trial reads the file (it may hold either of two files then): one
    orch never wrote stops the sweep as a refused write does, with no read more."""
    bed = bed_of("decode")
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG", ("1", "2", "0"))}, order="sequential")
    first = plan.steps[0].trial.index
    bed.transports["decode"].script(f"fake-repro --trial {first}", Reply(1, "", "boom\n"), times=1)
    edits = Edits(bed, after=first)
    exc = run(bed, plan, tmp_path / "run", edits)
    assert_kept_and_restored(bed, edits, exc)
    assert journaled(tmp_path / "run") == [(first, "failed")]
    assert reads_after(bed, edits) == 2  # the second trial's own read (judged as read) and the restore's


def test_no_edit_no_change_a_sweep_writes_without_reading(tmp_path: Path) -> None:
    """The normal sweep: every write after the first trial is told what to expect, and no trial
    but the first reads the file (the cost of the check is nothing but a hash on the host)."""
    bed = bed_of("decode")
    t, env = bed.transports["decode"], bed.env_file("decode")
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG", ("1", "2", "0"))}, order="sequential")
    expected: list[bytes | None] = []
    write = t.write_bytes_atomic

    def told(path: str, data: bytes, **kw: bytes | None) -> None:
        if path == env and "like" not in kw:  # a trial's write, not the backup's copy
            expected.append(kw.get("expect"))
        write(path, data, **kw)  # type: ignore[arg-type]

    t.write_bytes_atomic = told  # type: ignore[method-assign]
    runner = Runner(plan, bed.deployment, tmp_path / "run", RunOptions(RUN_ID, retry_backoff_s=0.0), client=bed.client)
    result = runner.execute()
    assert (result.completed, result.failed, result.kept) == (3, 0, {})
    assert bed.file("decode") == ORIGINAL
    cells = [runner.services.cell_bytes("decode", s.env.get("decode")) for s in plan.steps]
    assert expected[:3] == [ORIGINAL, cells[0], cells[1]]  # each trial: what the last one wrote; then the restore
    ops = [c.op for c in bed.transports["decode"].calls if c.target == bed.env_file("decode")]
    assert ops.count("read") == 3  # the backup's, the first trial's, the restore's: none per trial


def test_the_stopped_run_resumes_once_the_testbed_is_free(tmp_path: Path) -> None:
    """What the error promises: `orch resume` runs the trial that was about to start and the rest,
    from the originals; the copy of the edit stays where it was put."""
    bed = bed_of("decode")
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG", ("1", "2", "0"))}, order="sequential")
    edits = Edits(bed, after=plan.steps[0].trial.index)
    exc = run(bed, plan, tmp_path / "run", edits)
    assert f"`orch resume {tmp_path / 'run'}` runs it and the rest" in str(exc)
    done = {t for t, status in journaled(tmp_path / "run") if status == "completed"}
    again = Runner(plan, bed.deployment, tmp_path / "run", RunOptions(RUN_ID, retry_backoff_s=0.0), client=bed.client)
    result = again.execute(done, resume=True)
    assert (result.completed, result.failed) == (2, 0)
    assert [t for t, _ in journaled(tmp_path / "run")] == [s.trial.index for s in plan.steps]
    t = bed.transports["decode"]
    assert (
        t.files[bed.env_file("decode")] == ORIGINAL
        and t.files[drift_path(bed.env_file("decode"), RUN_ID)] == edits.edited
    )


def test_a_symlinked_env_file_replaced_during_the_run_stops_the_sweep_saying_how_to_relink(tmp_path: Path) -> None:
    """The file was a symlink when the run began and someone put a regular file there between two
    trials: orch writes the original only through that link, so nothing is set aside or written
    (the new file is left as it is) and the error says what the link was and how to put it back,
    not that an edit was kept somewhere (mutation survivor of sweep/drift.py's during_run)."""
    real = "/etc/orch/real/decode.env"
    bed = linked_decode_bed(ORIGINAL, real)  # started on the linked file
    t, env = bed.transports["decode"], bed.env_file("decode")
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG", ("1", "2", "0"))}, order="sequential")

    class Relink(Edits):
        def trial_done(self, record: TrialRecord) -> None:
            if record.trial == plan.steps[0].trial.index:
                del t.links[env]
                t.files[env] = ORIGINAL + HUMAN

    exc = run(bed, plan, tmp_path / "run", Relink(bed, after=-1))
    message = str(exc)
    assert f"{env} was a symlink to {real} when the run began and is now a regular file" in message
    assert f"ln -sfn {real} {env}" in message and "The sweep stops" in message
    assert "kept in" not in message
    assert t.files[env] == ORIGINAL + HUMAN and drift_path(env, RUN_ID) not in t.files  # left as found
