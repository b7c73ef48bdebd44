"""The restore against an env file that is not as the run left it (sweep.drift), on the fakes.

Found by an audit on real hosts: a deleted env file made every restore fail for good ("cannot
read ...: no such file or directory"), the unit left on a cell's env; a human's edit made during
the run (or after a kill -9) was written over with no copy anywhere; a symlink put in place of the
file was written THROUGH, destroying the file it pointed to. Now the missing file is written back
with the original's mode and owner, drift is set aside beside the file (mode 600; a link whole)
before the original goes back, loudly, and a resume refuses (exit 2) a host a killed run left
drifted. The normal restore is unchanged: the same commands, byte for byte, and no copy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fakes import REPRO_OUTPUT, FakeBed, FakeUnit, Reply, Role, flag, linked_decode_bed, make_bed, make_plan, runner_for
from helpers.notes import Notes

from orchestrator.core.config import read_matrix
from orchestrator.core.huntplan import hunt_cell, hunt_plan
from orchestrator.core.records import MetricValue, TrialRecord
from orchestrator.core.steps import Plan
from orchestrator.errors import JournalError, UsageError
from orchestrator.store.journal import Journal
from orchestrator.sweep.drift import drift_path
from orchestrator.sweep.hosts import HostGuard, host_backup_path
from orchestrator.sweep.hunt import HuntSource
from orchestrator.sweep.runner import Runner, RunOptions

RUN_ID = "fake-run"
ORIGINAL = b"# decode\nDECODE_FLAG=0\n"
EDITED = ORIGINAL + b"MY_NEW_FLAG=1\n"
TEAM = "/etc/orch/team.env"
MODE = (0o640, 0, 12)  # not what a write creates (0o644 root:root): the restore must have set it
REPO = Path(__file__).resolve().parents[2]


def decode_bed() -> FakeBed:
    bed = make_bed({"decode": Role(ORIGINAL.decode(), [FakeUnit("decode-server", active=True)])})
    bed.transports["decode"].modes[bed.env_file("decode")] = MODE
    return bed


def plan_of(bed: FakeBed) -> Plan:
    return make_plan(bed, {"d": flag("decode", "DECODE_FLAG")})  # DECODE_FLAG=0, then =1: the last trial edits


def runner(bed: FakeBed, plan: Plan, run_dir: Path, notes: Notes) -> Runner:
    return Runner(
        plan, bed.deployment, run_dir, RunOptions(RUN_ID, retry_backoff_s=0.0), progress=notes, client=bed.client
    )


def during_last_trial(bed: FakeBed, plan: Plan, act: Callable[[dict[str, bytes]], None]) -> None:
    """`act` on decode's files while the last trial's repro runs (after its env file was written)."""

    def repro(text: str, argv: object) -> Reply:
        act(bed.transports["decode"].files)
        return Reply(0, REPRO_OUTPUT)

    bed.transports["decode"].script(f"fake-repro --trial {plan.steps[-1].trial.index}", repro, times=1)


def link_to_team(bed: FakeBed) -> Callable[[dict[str, bytes]], None]:
    t = bed.transports["decode"]

    def act(files: dict[str, bytes]) -> None:
        files[TEAM] = b"TEAM=1\n"
        del files[bed.env_file("decode")]
        t.links[bed.env_file("decode")] = "team.env"  # relative, as `ln -s team.env decode.env` makes it

    return act


def restore_commands(monkeypatch: pytest.MonkeyPatch, bed: FakeBed) -> list[list[tuple[str, str]]]:
    """Every restore's calls on decode's transport, one list per restore."""
    seen: list[list[tuple[str, str]]] = []
    restore = HostGuard.restore

    def counted(self: HostGuard, run_dir: Path) -> list[str]:
        t = bed.transports["decode"]
        start = len(t.calls)
        try:
            return restore(self, run_dir)
        finally:
            seen.append([(c.op, c.target) for c in t.calls[start:]])

    monkeypatch.setattr(HostGuard, "restore", counted)
    return seen


# ---------------------------------------------------------------------------- the normal case
def test_the_normal_restore_is_byte_identical_keeps_no_copy_and_runs_the_same_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bed, seen = decode_bed(), None
    seen = restore_commands(monkeypatch, bed)
    notes = Notes()
    result = runner(bed, plan_of(bed), tmp_path / "run", notes).execute()
    env = bed.env_file("decode")
    assert result.not_restored == [] and result.kept == {}
    assert bed.transports["decode"].files == {env: ORIGINAL} and bed.transports["decode"].links == {}
    assert bed.transports["decode"].modes[env] == MODE
    # what the restore did before sweep.drift: read the file, write the original, tidy up (one
    # command); the unit's restart goes through its service manager
    ops = [op for op, _ in seen[0]]
    assert ops == ["read", "write", "run"] and seen[0][0] == ("read", env) and "orch-tidy" in seen[0][2][1]
    assert bed.managers["decode"].restarts()[-1] == "decode-server"
    assert not any("WARNING" in line or "missing" in line for line in notes.lines)


# ---------------------------------------------------------------------------- a deleted file
def test_a_file_deleted_during_the_run_is_written_back_with_the_originals_mode_and_owner(tmp_path: Path) -> None:
    """Before: `restore of decode failed: ... cannot read ...: No such file or directory`, the
    unit left on the last cell's env, and every later restore failed the same way."""
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    env = bed.env_file("decode")
    during_last_trial(bed, plan, lambda files: files.pop(env))
    result = runner(bed, plan, tmp_path / "run", notes).execute()
    t = bed.transports["decode"]
    assert result.not_restored == [] and result.kept == {}
    assert t.files == {env: ORIGINAL} and t.modes[env] == MODE  # no copy: there was nothing to keep
    assert bed.managers["decode"].environ("decode-server")["DECODE_FLAG"] == "0"  # restarted on the original
    assert f"{env} was missing: the original is written back (mode 640, owner 0:12)" in notes.text()


def test_orch_restore_of_a_killed_run_whose_file_was_deleted_writes_it_back(tmp_path: Path) -> None:
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    killed(bed, plan, tmp_path / "run", lambda files: files.pop(bed.env_file("decode")))
    again = runner(bed, plan, tmp_path / "run", notes)
    assert again.adopt_backup() and again.restore() == []
    env = bed.env_file("decode")
    assert bed.transports["decode"].files == {env: ORIGINAL} and bed.transports["decode"].modes[env] == MODE
    assert bed.managers["decode"].environ("decode-server")["DECODE_FLAG"] == "0"


def test_a_backup_from_before_files_json_still_restores_a_deleted_file(tmp_path: Path) -> None:
    """A run folder an older orch wrote has no backup/files.json: the file comes back with the
    write's default mode, and the restore says it could not know the original's."""
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    killed(bed, plan, tmp_path / "run", lambda files: files.pop(bed.env_file("decode")))
    (tmp_path / "run" / "backup" / "files.json").unlink()
    again = runner(bed, plan, tmp_path / "run", notes)
    assert again.adopt_backup() and again.restore() == []
    assert bed.transports["decode"].files == {bed.env_file("decode"): ORIGINAL}
    assert "does not say its mode and owner" in notes.text()


def test_a_files_json_orch_never_wrote_is_refused_before_anything_is_touched(tmp_path: Path) -> None:
    """files.json says what mode and owner a deleted file comes back with: a mode no file has
    (or a link that is no path) means the run folder was edited, not a file to act on."""
    bed = decode_bed()
    plan = plan_of(bed)
    killed(bed, plan, tmp_path / "run", lambda files: files.pop(bed.env_file("decode")))
    files_json = tmp_path / "run" / "backup" / "files.json"
    files_json.write_text('{"decode": {"link": null, "mode": 99999, "uid": 0, "gid": 0}}')
    with pytest.raises(JournalError, match=r"backup.*mode 303237 is not a file's mode"):
        runner(bed, plan, tmp_path / "run", Notes()).adopt_backup()
    assert bed.env_file("decode") not in bed.transports["decode"].files  # nothing written


# ---------------------------------------------------------------------------- someone's edit
def test_an_edit_made_during_the_run_is_kept_beside_the_file_before_the_original_goes_back(tmp_path: Path) -> None:
    """Before: the original was written over MY_NEW_FLAG=1, exit 0, and the edit existed nowhere."""
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    env = bed.env_file("decode")
    during_last_trial(bed, plan, lambda files: files.__setitem__(env, files[env] + b"MY_NEW_FLAG=1\n"))
    result = runner(bed, plan, tmp_path / "run", notes).execute()
    t, kept = bed.transports["decode"], drift_path(env, RUN_ID)
    assert result.not_restored == [] and result.kept == {"decode": kept}
    assert t.files[env] == ORIGINAL and t.modes[env] == MODE
    assert t.files[kept].endswith(b"DECODE_FLAG=1\nMY_NEW_FLAG=1\n") and t.modes[kept][0] == 0o600
    assert set(t.files) == {env, kept}  # the host-side backup is gone: the host is restored
    warning = next(line for line in notes.lines if line.startswith("WARNING"))
    assert env in warning and kept in warning and "original written back" in warning
    journal = (tmp_path / "run" / "journal.jsonl").read_text()
    assert f"changed env files set aside (decode: {kept})" in journal


def test_drift_after_a_kill_9_is_kept_by_orch_restore(tmp_path: Path) -> None:
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    env = bed.env_file("decode")
    killed(bed, plan, tmp_path / "run", lambda files: files.__setitem__(env, EDITED))
    again = runner(bed, plan, tmp_path / "run", notes)
    assert again.adopt_backup() and again.restore() == []
    t, kept = bed.transports["decode"], drift_path(env, RUN_ID)
    assert t.files == {env: ORIGINAL, kept: EDITED} and again.guard.kept == {"decode": kept}
    assert any(line.startswith("WARNING") and kept in line for line in notes.lines)


def test_a_second_drift_of_the_same_run_never_overwrites_the_first_copy(tmp_path: Path) -> None:
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    env = bed.env_file("decode")
    killed(bed, plan, tmp_path / "run", lambda files: files.__setitem__(env, EDITED))
    bed.transports["decode"].files[drift_path(env, RUN_ID)] = b"AN EARLIER COPY\n"
    again = runner(bed, plan, tmp_path / "run", notes)
    assert again.adopt_backup() and again.restore() == []
    files = bed.transports["decode"].files
    assert files[drift_path(env, RUN_ID)] == b"AN EARLIER COPY\n" and files[drift_path(env, RUN_ID) + ".2"] == EDITED


def test_resume_refuses_a_host_a_killed_run_left_drifted_and_restores_it_keeping_the_edit(tmp_path: Path) -> None:
    """Before: the resumed run's first trial wrote its cell over the edit, with no copy. Now the
    resume stops (exit 2) before any trial, as it does for a host restored and edited since, and
    the restore that ends it sets the edit aside; a second resume goes on from the original."""
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    env = bed.env_file("decode")
    killed(bed, plan, tmp_path / "run", lambda files: files.__setitem__(env, EDITED))
    with pytest.raises(
        UsageError, match=r"changed while the run was stopped, not by orch .*decode\.env is changed"
    ) as e:
        runner(bed, plan, tmp_path / "run", notes).execute({0}, resume=True)
    assert e.value.exit_code == 2 and "resume again" in str(e.value)
    kept = drift_path(env, RUN_ID)
    assert bed.transports["decode"].files == {env: ORIGINAL, kept: EDITED}
    resumed = runner(bed, plan, tmp_path / "run", Notes()).execute({0}, resume=True)
    assert [r.trial for r in resumed.records] == [1] and resumed.not_restored == []


def test_resume_refuses_a_deleted_file_and_writes_it_back(tmp_path: Path) -> None:
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    env = bed.env_file("decode")
    killed(bed, plan, tmp_path / "run", lambda files: files.pop(env))
    with pytest.raises(UsageError, match=r"decode\.env is missing"):
        runner(bed, plan, tmp_path / "run", notes).execute({0}, resume=True)
    assert bed.transports["decode"].files == {env: ORIGINAL}


def test_without_the_runs_matrix_a_changed_file_is_kept_and_said_to_be_unsure(tmp_path: Path) -> None:
    """`orch restore` builds the run's plan only when a file is not the original; with the matrix
    gone it cannot tell a trial's file from an edit, and keeps a copy rather than guess."""
    bed = decode_bed()
    plan = plan_of(bed)
    killed(bed, plan, tmp_path / "run", lambda files: None)  # decode holds the last cell's file
    shell = Plan(None, plan.testbed, plan.seed, 1, (), ())  # type: ignore[arg-type]
    for load, copies in ((lambda: plan, 0), (lambda: None, 1)):
        bed2 = decode_bed()
        bed2.transports["decode"].files.update(bed.transports["decode"].files)
        notes = Notes()
        again = runner(bed2, shell, tmp_path / "run", notes)
        again.load_plan = load
        assert again.adopt_backup() and again.restore() == []
        env = bed2.env_file("decode")
        assert bed2.transports["decode"].files[env] == ORIGINAL
        assert len(again.guard.kept) == copies
        assert ("cannot tell whether one of the run's trials wrote it" in notes.text()) == bool(copies)


# ---------------------------------------------------------------------------- symlinks
def test_a_symlink_put_in_place_of_the_file_is_set_aside_whole_and_its_target_left_alone(tmp_path: Path) -> None:
    """Before: the original was written THROUGH the link into team.env (never backed up), exit 0."""
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    env = bed.env_file("decode")
    during_last_trial(bed, plan, link_to_team(bed))
    result = runner(bed, plan, tmp_path / "run", notes).execute()
    t, kept = bed.transports["decode"], drift_path(env, RUN_ID)
    assert result.not_restored == [] and result.kept == {"decode": kept}
    assert t.files == {env: ORIGINAL, TEAM: b"TEAM=1\n"} and t.modes[env] == MODE
    assert t.links == {kept: "team.env"}  # the link, as it was, under another name
    warning = next(line for line in notes.lines if line.startswith("WARNING"))
    assert "replaced by a symlink to team.env" in warning and kept in warning and "regular file" in warning


def test_orch_restore_after_a_kill_9_replaces_a_symlink_too(tmp_path: Path) -> None:
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    killed(bed, plan, tmp_path / "run", link_to_team(bed))
    again = runner(bed, plan, tmp_path / "run", notes)
    assert again.adopt_backup() and again.restore() == []
    env, t = bed.env_file("decode"), bed.transports["decode"]
    assert t.files == {env: ORIGINAL, TEAM: b"TEAM=1\n"} and t.links == {drift_path(env, RUN_ID): "team.env"}


def test_an_env_file_that_is_a_symlink_from_the_start_is_still_written_through(tmp_path: Path) -> None:
    """Teams link env files into place; orch writes through the link and keeps it (no drift)."""
    real = "/etc/orch/real/decode.env"
    bed = linked_decode_bed(ORIGINAL, real)  # started on the linked file
    t, env = bed.transports["decode"], bed.env_file("decode")
    notes = Notes()
    result = runner(bed, plan_of(bed), tmp_path / "run", notes).execute()
    assert result.not_restored == [] and result.kept == {}
    assert t.files == {real: ORIGINAL} and t.links == {env: real}
    assert not any("WARNING" in line for line in notes.lines)


def test_a_symlinked_env_file_replaced_by_a_regular_file_is_left_unrestored_with_how_to_finish(
    tmp_path: Path,
) -> None:
    real = "/etc/orch/real/decode.env"
    bed = linked_decode_bed(ORIGINAL, real, started=False)
    t, env = bed.transports["decode"], bed.env_file("decode")
    plan = plan_of(bed)

    def replace(files: dict[str, bytes]) -> None:
        del t.links[env]
        files[env] = EDITED

    during_last_trial(bed, plan, replace)
    notes = Notes()
    result = runner(bed, plan, tmp_path / "run", notes).execute()
    assert result.not_restored == ["decode"]
    assert t.files[env] == EDITED and host_backup_path(env, RUN_ID) in t.files  # nothing lost, a way back kept
    assert f"was a symlink to {real} when the run began and is now a regular file" in notes.text()
    assert f"ln -sfn {real} {env}" in notes.text()
    # "NOT restored: decode; finish with: orch restore RUN" is the summary's line, printed once from
    # result.not_restored (asserted above; tests/unit/test_restore_messages.py checks the printing)


# ---------------------------------------------------------------------------- hunts
def test_a_hunt_trial_past_the_first_wave_is_the_runs_own_file_not_drift(tmp_path: Path) -> None:
    """A hunt's later trials are the search's picks, in no plan: the journal has them."""
    matrix = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml")
    spec = matrix.hunt
    assert spec is not None
    names = [*matrix.mentioned, "router"]
    roles = {r: Role(f"# {r}\nSGLANG_X=1\n", [FakeUnit(f"{r}-server", active=True)]) for r in names}
    bed = make_bed(roles)
    plan = hunt_plan(matrix, bed.deployment.testbed, seed=1)
    first_wave = {s.trial.cell for s in plan.steps}
    config = 0b11  # two flags left on: not in the first wave (all, none, each left out)
    cell = hunt_cell(matrix, config)
    assert cell not in first_wave
    run_dir = tmp_path / "run"
    first = runner(bed, plan, run_dir, Notes())
    first.guard.backup()
    role = "decode"  # prefill's part of this configuration is also a first-wave one's
    first_wave_files = {first.services.cell_bytes(role, s.env.get(role)) for s in plan.steps}
    assert first.services.cell_bytes(role, cell.env[role]) not in first_wave_files
    bed.transports[role].files[bed.env_file(role)] = first.services.cell_bytes(role, cell.env[role])
    journal = Journal(run_dir / "journal.jsonl")
    journal.append(record(len(plan.steps), dict(cell.levels)))
    journal.close()
    notes = Notes()
    again = runner(bed, plan, run_dir, notes)
    assert again.adopt_backup() and again.restore() == []
    assert again.guard.kept == {} and not any("WARNING" in line for line in notes.lines)
    assert bed.transports[role].files == {bed.env_file(role): bed.originals[role]}


def test_a_hunt_trial_killed_before_its_record_is_the_runs_own_file_not_drift(tmp_path: Path) -> None:
    """The trial a killed hunt was running is in no journal: its configuration, past the first
    wave, was the search's pick. Found by the kill-point harness (bench_kill_points.py --command
    hunt, seeds 511, 523: SIGKILL while a new configuration's logs were collected): `orch resume`
    refused the hunt (exit 2, "decode.env is changed (not by orch)") and `orch restore` set the
    file aside as someone's edit. The step source notes each configuration before handing it out."""
    matrix = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml")
    assert matrix.hunt is not None
    roles = {
        r: Role(f"# {r}\nSGLANG_X=1\n", [FakeUnit(f"{r}-server", active=True)]) for r in [*matrix.mentioned, "router"]
    }
    bed = make_bed(roles)
    plan = hunt_plan(matrix, bed.deployment.testbed, seed=1)
    run_dir = tmp_path / "run"
    first = runner(bed, plan, run_dir, Notes())
    first.guard.backup()
    source = HuntSource(matrix, run_dir=run_dir)
    first_wave = {s.trial.cell for s in plan.steps}
    truth = ("bf16_index_k", "cuda_graph", "overlap")
    for _ in range(60):  # the DSV4 AND (5 of 20 sessions with all three on), until the search's own pick
        later = source.next()
        assert later is not None
        if later.trial.cell not in first_wave:
            break  # its trial is killed running: never journaled
        levels = dict(later.trial.cell.levels)
        k = 5 if all(levels[f] == matrix.hunt.failing[f] for f in truth) else 0
        done = record(later.trial.index, levels).model_copy(
            update={"metrics": {"corruption": MetricValue(kind="proportion", k=k, n=20)}}
        )
        source.record(done)
    assert later.trial.cell not in first_wave
    role = "decode"
    bed.transports[role].files[bed.env_file(role)] = first.services.cell_bytes(role, later.env.get(role))
    notes = Notes()
    again = runner(bed, plan, run_dir, notes)
    assert again.adopt_backup()
    again.guard.check_resumable()  # a resume takes the hunt up: nothing here was edited by anyone else
    assert again.restore() == []
    assert again.guard.kept == {} and not any("WARNING" in line for line in notes.lines)
    assert bed.transports[role].files == {bed.env_file(role): bed.originals[role]}


# ---------------------------------------------------------------------------- helpers
class Killed(BaseException):
    """Stands for kill -9 of the controller: nothing after it runs (no restore)."""


def killed(bed: FakeBed, plan: Plan, run_dir: Path, act: Callable[[dict[str, bytes]], None]) -> None:
    """A run killed in its last trial's repro (decode holds that cell's file, both copies of the
    original are there); then `act` on decode's files, as a human would while it waits."""

    def kill(text: str, argv: object) -> Reply:
        raise Killed

    bed.transports["decode"].script(f"fake-repro --trial {plan.steps[-1].trial.index}", kill, times=1)
    mp = pytest.MonkeyPatch()
    mp.setattr(HostGuard, "restore", lambda self, run_dir: [])
    try:
        with pytest.raises(Killed):
            runner_for(bed, plan, run_dir).execute()
    finally:
        mp.undo()
    assert host_backup_path(bed.env_file("decode"), RUN_ID) in bed.transports["decode"].files
    act(bed.transports["decode"].files)


def record(trial: int, levels: dict[str, str]) -> TrialRecord:
    """A finished trial of these levels, as the journal holds it (what the restore reads of it)."""
    stamp = "2026-01-01T00:00:00Z"
    fields = {"run_id": RUN_ID, "trial": trial, "round": 0, "cell": "c", "levels": levels, "testbed": "fakebed"}
    return TrialRecord(**fields, status="completed", started=stamp, ended=stamp, duration_s=1.0)


# ---------------------------------------------------------------------------- mutation survivors
# (bench/mutants.py on sweep/drift.py, seed 1: each test below fails on a wrong line no test saw)
@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ('{"link": null, "mode": 420, "uid": 0, "gid": 0, "size": 9}', "an entry is not {link, mode, uid, gid}"),
        ('{"link": null, "mode": 420, "uid": 0}', "an entry is not {link, mode, uid, gid}"),
        ('{"link": "", "mode": 420, "uid": 0, "gid": 0}', "link '' is not a path"),
        ('{"link": "a\\nb", "mode": 420, "uid": 0, "gid": 0}', "is not a path"),
        ('{"link": 7, "mode": 420, "uid": 0, "gid": 0}', "link 7 is not a path"),
        ('{"link": null, "mode": 420, "uid": -1, "gid": 0}', "are not numbers of a file"),
        ('{"link": null, "mode": 420, "uid": "0", "gid": 0}', "are not numbers of a file"),
        ('{"link": null, "mode": 420, "uid": 0, "gid": true}', "are not numbers of a file"),
        ('{"link": null, "mode": 420, "uid": 0, "gid": 4294967297}', "are not numbers of a file"),
    ],
    ids=["extra-key", "missing-key", "empty-link", "newline-link", "number-link", "negative", "text", "bool", "huge"],
)
def test_every_files_json_entry_orch_never_wrote_is_refused(tmp_path: Path, entry: str, says: str) -> None:
    """A link that is no path or an owner no file has would be handed to chown/ln on the host:
    each is refused naming what is wrong, before anything is touched."""
    bed = decode_bed()
    plan = plan_of(bed)
    killed(bed, plan, tmp_path / "run", lambda files: files.pop(bed.env_file("decode")))
    (tmp_path / "run" / "backup" / "files.json").write_text('{"decode": %s}' % entry)
    with pytest.raises(JournalError) as caught:
        runner(bed, plan, tmp_path / "run", Notes()).adopt_backup()
    assert "backup" in str(caught.value) and says in str(caught.value)
    assert bed.env_file("decode") not in bed.transports["decode"].files  # nothing written


def test_a_backup_that_could_not_read_the_originals_mode_restores_a_deleted_file(tmp_path: Path) -> None:
    """files.json holds nulls where the backup could not read the original's mode and owner: they
    are accepted, the file is written back with the write's default (said so), and no set-aside
    command runs (nothing to keep, nothing to create with a mode orch does not know)."""
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    env, t = bed.env_file("decode"), bed.transports["decode"]
    killed(bed, plan, tmp_path / "run", lambda files: files.pop(env))
    (tmp_path / "run" / "backup" / "files.json").write_text(
        '{"decode": {"link": null, "mode": null, "uid": null, "gid": null}}'
    )
    again = runner(bed, plan, tmp_path / "run", notes)
    start = len(t.calls)
    assert again.adopt_backup() and again.restore() == []
    assert t.files == {env: ORIGINAL}
    assert "does not say its mode and owner" in notes.text()
    assert not [c for c in t.calls[start:] if c.op == "run" and "orch-drift" in c.target]


def test_an_edit_made_during_the_run_is_said_to_be_someone_elses_not_a_file_orch_cannot_place(tmp_path: Path) -> None:
    """With the run's matrix at hand orch knows every file its trials wrote: an edit is named as
    someone else's change, not as the `orch restore`-without-a-matrix doubt."""
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    env = bed.env_file("decode")
    during_last_trial(bed, plan, lambda files: files.__setitem__(env, files[env] + b"MY_NEW_FLAG=1\n"))
    runner(bed, plan, tmp_path / "run", notes).execute()
    warning = next(line for line in notes.lines if line.startswith("WARNING"))
    assert "something other than orch changed it since the run began" in warning
    assert "cannot tell" not in warning


def test_a_dangling_symlink_put_in_place_of_the_file_is_said_to_point_at_nothing(tmp_path: Path) -> None:
    """A link to a file that does not exist: kept whole, the original written back, and the
    warning says the link's target is missing (what the person who made it must fix)."""
    bed, notes = decode_bed(), Notes()
    plan = plan_of(bed)
    env, t = bed.env_file("decode"), bed.transports["decode"]

    def dangle(files: dict[str, bytes]) -> None:
        del files[env]
        t.links[env] = "gone.env"

    during_last_trial(bed, plan, dangle)
    result = runner(bed, plan, tmp_path / "run", notes).execute()
    kept = drift_path(env, RUN_ID)
    assert result.not_restored == [] and t.files == {env: ORIGINAL} and t.links == {kept: "gone.env"}
    warning = next(line for line in notes.lines if line.startswith("WARNING"))
    assert "replaced by a symlink to gone.env (its target missing)" in warning


def test_a_files_json_that_is_not_an_object_is_refused_before_anything_is_touched(tmp_path: Path) -> None:
    """A JSON list (or number) as backup/files.json: the typed refusal naming it, not a traceback.
    Mutation survivor of sweep/hosts.py's _read_shapes."""
    bed = decode_bed()
    plan = plan_of(bed)
    killed(bed, plan, tmp_path / "run", lambda files: files.pop(bed.env_file("decode")))
    (tmp_path / "run" / "backup" / "files.json").write_text("[]")
    with pytest.raises(JournalError, match=r"backup.*files\.json is not an object"):
        runner(bed, plan, tmp_path / "run", Notes()).adopt_backup()
    assert bed.env_file("decode") not in bed.transports["decode"].files


def test_a_backup_json_nested_too_deeply_is_refused_saying_so(tmp_path: Path) -> None:
    """json.loads gives up on a file nested thousands deep (a RecursionError, no ValueError): the
    refusal says why, not that the file is 'not an object'. Mutation survivor of _backup_json."""
    bed = decode_bed()
    plan = plan_of(bed)
    killed(bed, plan, tmp_path / "run", lambda files: None)
    (tmp_path / "run" / "backup" / "files.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(JournalError, match=r"files\.json is nested too deeply to be a backup orch wrote"):
        runner(bed, plan, tmp_path / "run", Notes()).adopt_backup()
