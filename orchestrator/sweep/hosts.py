"""The host guard: the hosts' original env files and unit states, saved before a sweep's first
edit and put back at its end, whatever ends it.

Why a guard of its own: restoring the hosts is the one promise a sweep keeps on every exit (last
trial, error, Ctrl-C, SIGTERM, and after a kill -9 through `orch resume`/`orch restore`). The
originals live twice: in the run folder (backup/<role>.env, units.json written last as the mark
of a complete backup) and on each host beside its env file (<env_file>.orch-backup-<run_id>, with
the units' states before the run beside it, sweep.hostunits; removed once that host is restored),
so a run whose restore never finished can be found from the hosts alone (unrestored_runs).
Besides the bytes, the backup notes what each file was (a symlink? its mode and owner:
backup/files.json), so a restore that finds the file deleted, edited by someone else or replaced
by a symlink puts it back without destroying anything (sweep.drift).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.core import jsontext
from orchestrator.core.bounded import read_bounded_bytes
from orchestrator.core.startorder import restart_order
from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.transport import FileEntry
from orchestrator.edges.transport.local import MAX_READ_BYTES
from orchestrator.errors import ConfigError, Interrupted, JournalError, OrchError, TransportError, UsageError
from orchestrator.store.atomic import run_file_op, write_bytes_atomic
from orchestrator.store.rundir import BackupDir
from orchestrator.sweep import drift
from orchestrator.sweep.drift import Shape
from orchestrator.sweep.hostunits import host_units_path, write_host_units
from orchestrator.sweep.progress import Progress

# what a run's trials may have written on a host (role -> the files), None: orch cannot tell
CellFiles = Callable[[str], "Collection[bytes] | None"]


@dataclass
class HostState:
    """What the guard knows of one host during a run."""

    original: bytes  # env file bytes before the run
    active: dict[str, bool]  # unit -> was it active before the run
    current: bytes | None = None  # what the file holds now, as orch last read or wrote it
    # units whose process may hold an env orch wrote: orch wrote a non-original file since orch
    # last restarted them on the original one (a unit may also restart by itself, Restart=)
    stale: set[str] = field(default_factory=set)
    clock_offset: float = 0.0  # host clock - controller clock: journal windows use host time
    # the file bytes each unit was last started on, as far as orch knows (none: unknown, e.g.
    # after a kill -9): a unit whose bytes differ from `current` runs a stale env
    running_on: dict[str, bytes] = field(default_factory=dict)
    shape: Shape | None = None  # what the original was besides its bytes (None: a backup from before)

    def runs_stale(self, unit: str) -> bool:
        """Does this unit (maybe) run on other bytes than the file holds now?"""
        return self.current is not None and self.running_on.get(unit) != self.current


class HostGuard:
    """Backup, adopt a killed run's backup, restore. `states` and `started_units` are shared
    with the trial phases, which note each edit and each unit they start."""

    def __init__(
        self,
        deployment: Deployment,
        backup: BackupDir,
        run_id: str,
        progress: Progress,
        cell_files: CellFiles | None = None,
        edits: Callable[[str], bool] | None = None,
    ) -> None:
        self.deployment, self.backup_dir, self.run_id, self.progress = deployment, backup, run_id, progress
        self.cell_files: CellFiles = cell_files or (lambda role: None)
        # may the run's trials write this host's env file (False: its role is in no level; True when
        # orch cannot tell, `orch restore` without the matrix at hand)
        self.edits: Callable[[str], bool] = edits or (lambda role: True)
        self.states: dict[str, HostState] = {}
        self.started_units: set[tuple[str, str]] = set()
        self._skip_lock = threading.Lock()
        self._restoring: _HostRestore | None = None  # the host a runner thread is restoring now
        # roles whose originals were adopted from an earlier process and whose host-side backup
        # this process has not written: that backup missing means the host was restored already
        self.adopted: set[str] = set()
        # role -> is this run's host-side copy of the original there, as adopt() found it (one
        # `test -e` a host: nothing else touches it while the run's testbed lock is held)
        self.host_copy: dict[str, bool] = {}
        self.untouched: dict[str, str] = {}  # role -> env file: restored before, changed since, left as is
        self.already: set[str] = set()  # roles restored before and still original: nothing was done
        self.host_lines: list[str] = []  # what the restore found on those hosts, for the caller's summary
        self.kept: dict[str, str] = {}  # role -> where its drifted env file was set aside (sweep.drift)
        self.on_first_interrupt: Callable[[], None] | None = None  # see restore(); used once
        self.interrupted = False  # a Ctrl-C or SIGTERM reached restore(): `orch restore` exits 130

    def backup(self) -> None:
        """Save each env file (run folder and host) and each unit's state before the first edit.

        units.json is written last and atomically: it marks the backup complete. A run killed
        before it exists edited nothing, so resume takes a fresh backup and restore has nothing
        to put back."""
        folder = self.backup_dir
        run_file_op(folder.path, "cannot create the backup folder", lambda: _private_folders(folder))
        for role, h in self.deployment.hosts.items():
            pause_for_tests("BACKUP")
            self.states[role] = self._backup_host(role, h)
        shapes = {role: s.shape.to_json() for role, s in self.states.items() if s.shape is not None}
        write_bytes_atomic(
            folder.files_json, json.dumps(shapes, indent=1).encode(), mode=BACKUP_MODE, what="cannot write"
        )
        units = {role: s.active for role, s in self.states.items()}
        write_bytes_atomic(
            folder.units_json, json.dumps(units, indent=1).encode(), mode=BACKUP_MODE, what="cannot write"
        )

    def _backup_host(self, role: str, h: HostHandle) -> HostState:
        """One host's backup: its env file in the run folder and beside it on the host (the host's
        copy, for a restore without this folder: sweep.hostunits), and its units' states."""
        entry = h.transport.read_entry(h.host.env_file)  # the bytes, and what the restore must rebuild
        if entry.data is None:
            raise TransportError(h.host.label, f"cannot read {h.host.env_file}: no such file or directory")
        original = entry.data
        write_bytes_atomic(self.backup_dir.env(role), original, mode=BACKUP_MODE, what="cannot write")
        active = {u: h.services.state(u).is_active for u in h.units}
        try:  # from here the host may hold the run's files: a stop removes them (before, it holds none)
            h.transport.write_bytes_atomic(
                host_backup_path(h.host.env_file, self.run_id), original, like=h.host.env_file
            )
            write_host_units(h.transport, h.host.env_file, self.run_id, active)
        except BaseException:
            _tidy_quietly(h, self.run_id)
            raise
        running_on = {u: original for u, up in active.items() if up}
        return HostState(original, active, clock_offset=clock_offset(h), running_on=running_on, shape=Shape.of(entry))

    def adopt(self) -> bool:
        """Load the originals saved by an earlier (killed) process, for resume and `orch restore`.

        False when that process never completed its backup (then it never edited a file)."""
        folder = self.backup_dir
        if not folder.path.exists():
            self._refuse_missing_backup()  # backup() makes the folder before any host-side copy
        if not folder.units_json.exists():  # written last: the backup was never complete
            return False
        try:
            units = _backup_json(folder.units_json)
            if not isinstance(units, dict):
                raise ValueError(f"{folder.units_json.name} is not an object")
            originals = {role: _read_backup(folder.env(role)) for role in self.deployment.hosts}
            shapes = _read_shapes(folder)
        except (OSError, ValueError) as exc:
            raise JournalError(
                f"{folder.path}: cannot read the backup of the original env files: {exc} "
                "(the run directory is damaged; restore the hosts by hand)"
            ) from None
        self._check_against_hosts(originals)
        for role, original in originals.items():  # what the killed run's units hold is unknown,
            # unless no trial ever writes the host's file: then they run on its original (a file
            # someone else edited is still found, and its units restarted, by the restore)
            units_of, active = set(self.deployment.hosts[role].units), units.get(role, {})
            edited = self.edits(role)
            running_on = {} if edited else {u: original for u, up in active.items() if up}
            self.states[role] = HostState(
                original, active, stale=units_of if edited else set(), running_on=running_on, shape=shapes.get(role)
            )
            self.started_units.update((role, u) for u in self.deployment.hosts[role].units)
        self.adopted = set(originals)
        return True

    def _check_against_hosts(self, originals: dict[str, bytes]) -> None:
        """Refuse (exit 2, nothing touched) when the run folder's copy of a host's original differs
        from the copy this run left on the host itself. Both were written from the same bytes, so
        one was changed since: writing the run folder's copy back would put whatever it now holds
        into the host's env file and delete the host's copy, the one witness left."""
        differ = []
        for role, original in originals.items():
            h = self.deployment.hosts[role]
            copy = host_backup_path(h.host.env_file, self.run_id)
            self.host_copy[role] = _has_host_backup(h, self.run_id)
            if self.host_copy[role]:
                on_host = h.transport.read_bytes(copy)
                if on_host != original:
                    differ.append(f"{self.backup_dir.env(role)} vs {h.host.label}: {copy}")
        if differ:
            raise ConfigError(
                f"the run's backup of the original env files does not match the copy it left on the host "
                f"({'; '.join(differ)}); one of them was changed after the backup. Nothing was touched",
                hint="compare the two, put the right one in place by hand and remove the run's copy on the host",
            )

    def _refuse_missing_backup(self) -> None:
        """The run folder has no backup/ although a host still holds this run's copy of its
        original: the folder was deleted or the run folder copied without it. Saying "stopped
        before its first edit" would leave that host edited with its original unreferenced."""
        held = [
            f"{h.host.label}: {host_backup_path(h.host.env_file, self.run_id)}"
            for h in self.deployment.hosts.values()
            if _has_host_backup(h, self.run_id)
        ]
        if held:
            raise ConfigError(
                f"the run folder has no backup/ ({self.backup_dir.path}), but the hosts still hold this run's "
                f"copies of their original env files ({'; '.join(held)}). Nothing was touched",
                hint="copy each one back over its env file by hand, restart the units, then remove the copy",
            )

    def restored_before(self, role: str) -> bool:
        """Was this host restored already, by the process that ended the run or an earlier
        `orch restore`? Then this run's host-side backup is gone: removing it is the last step of a
        host's restore. Such a host is left alone: writing the run's backup/ back would destroy an
        edit made since (with no copy left), and restarting its units would reload each model for
        nothing. Whether the copy is there was asked once, by adopt()."""
        if role not in self.adopted:
            return False
        if role not in self.host_copy:
            self.host_copy[role] = _has_host_backup(self.deployment.hosts[role], self.run_id)
        return not self.host_copy[role]

    def check_resumable(self) -> None:
        """Before a resume edits anything: refuse (UsageError, exit 2) when a host holds an env file
        this run did not leave there, naming each host and file: one restored already that holds
        neither the run's original nor one of its cell files (`cell_files`), or one a killed run
        left edited that is now missing, a symlink, or edited by someone else (sweep.drift).
        Resuming would measure the rest of the run on another base, and the first trial's write
        would destroy that edit with no copy left. On refusal the hosts restored already are
        dropped from the guard (nothing of theirs is this process's to put back); the others are
        restored as usual, where a drifted file is set aside before the original goes back."""
        restored, changed, drifted = [], [], []
        for role in sorted(self.adopted):
            h = self.deployment.hosts[role]
            unrestored = not self.restored_before(role)  # adopt() asked whether the host copy is there
            entry = h.transport.read_entry(h.host.env_file)
            kind = self.judge(role, entry)
            where = f"{h.host.label}: {h.host.env_file}"
            if unrestored:
                if kind not in ("original", "ours"):
                    drifted.append(f"{where} is {drift.found(kind, entry)}")
                continue
            restored.append(role)
            if kind not in ("original", "ours"):
                changed.append(where)
        if not changed and not drifted:
            return
        for role in restored:
            del self.states[role]
            self.adopted.discard(role)
            self.started_units -= {(role, u) for u in self.deployment.hosts[role].units}
        raise _not_resumable(changed, drifted)

    def rewrite_host_backups(self) -> None:
        """Put the adopted originals back on the hosts as their host-side copies, before a resumed
        run edits anything. Why: the restore that ended the earlier process (Ctrl-C, SIGTERM,
        `orch restore`) removed them; without them a kill -9 of the resumed controller would leave
        edited files that `unrestored_runs` cannot find, and the next `orch run` would back up a
        cell as its originals."""
        for role, state in self.states.items():
            h = self.deployment.hosts[role]
            h.transport.write_bytes_atomic(
                host_backup_path(h.host.env_file, self.run_id), state.original, like=h.host.env_file
            )
            write_host_units(h.transport, h.host.env_file, self.run_id, state.active)
            self.adopted.discard(role)  # in this run's hands again

    def discard_host_backups(self) -> None:
        """Remove the host-side copies a killed, incomplete backup may have left (and the temp
        file of a copy it was writing)."""
        for h in self.deployment.hosts.values():
            remove_run_files(h, self.run_id)

    def restore(self, run_dir: Path | None, *, again: str = "") -> list[str]:
        """Put every env file back byte for byte and every unit back in its original state.

        A unit originally active is restarted only when its file differed from the original
        here, or orch wrote a non-original file since it last restarted it on the original one.

        Returns the roles that could not be restored (empty when all is well; each one's failure is
        noted as it happens, the summary line is the caller's to show once). A second Ctrl-C
        (or a SIGTERM) during the restore skips only the host being restored: the others are
        still restored, and what is left is said with the command that finishes it. In a runner
        thread of a parallel sweep, which no signal reaches, the main thread asks for that skip
        through skip_current().

        With `on_first_interrupt` set (by the runner, at a sweep's own end, not interrupted before)
        the first Ctrl-C or SIGTERM only calls it (the run is interrupted: exit 130) and the host's
        restore starts again; it is the next one that skips a host. A SIGTERM is sent once (systemd, a CI
        timeout, `kill`), and must restore the hosts, not leave the one being restored changed.
        `again`: the command that finishes it, when not `orch restore RUN_DIR` (sweep.hostrestore)."""
        left: list[str] = []
        for role in restart_order(self.deployment.testbed, set(self.states)):
            while True:
                try:
                    self._restore_one(role)
                except (KeyboardInterrupt, Interrupted):
                    self.interrupted = True
                    first, self.on_first_interrupt = self.on_first_interrupt, None
                    if first is not None:
                        first()
                        continue  # restoring a host again is harmless: it ends in the same state
                    left.append(role)
                    self.progress.note(f"restore of {role} interrupted; continuing with the other hosts")
                except OrchError as exc:
                    left.append(role)
                    self.progress.note(f"restore of {role} failed: {exc}")
                break
        return left  # what is left, and how to finish, is said once, by whoever ends the command

    def skip_current(self) -> str | None:
        """Give up waiting for the host being restored (a runner thread's restore only): restore()
        counts it as not restored and goes on with the others, as a second Ctrl-C does in the main
        thread. Called by the main thread of a parallel sweep; returns the role skipped, if any."""
        with self._skip_lock:
            current = self._restoring
        return current.role if current is not None and current.skip() else None

    def _restore_one(self, role: str) -> None:
        """Restore one host. In the main thread, inline: a second Ctrl-C raises right here. In a
        runner thread, the host's restore runs in a helper thread and this one waits for it or for
        skip_current(): the wait ends at once, whatever the host is stuck in (a unit that takes
        minutes to stop); the abandoned helper may still finish that host later."""
        if threading.current_thread() is threading.main_thread():
            self._restore_host(role)
            return
        job = _HostRestore(role)
        with self._skip_lock:
            self._restoring = job
        try:
            threading.Thread(target=job.run, args=(self._restore_host,), name=f"restore-{role}", daemon=True).start()
            job.wait()
        finally:
            with self._skip_lock:
                self._restoring = None

    def note_write(self, role: str, data: bytes) -> None:
        """orch wrote `data` to the role's env file: any unit may run on it from now on."""
        state = self.states[role]
        if data != state.original:
            state.stale.update(self.deployment.hosts[role].units)

    def note_restart(self, role: str, unit: str) -> None:
        """orch restarted a unit: it runs on the original env exactly when the file is original."""
        state = self.states.get(role)
        if state is None:
            return
        state.running_on[unit] = state.original if state.current is None else state.current
        if state.current is None or state.current == state.original:
            state.stale.discard(unit)
        else:
            state.stale.add(unit)

    def offset(self, role: str) -> float:
        """The host's clock offset (0 before the backup measured it)."""
        state = self.states.get(role)
        return state.clock_offset if state else 0.0

    def _restore_host(self, role: str) -> None:
        pause_for_tests("RESTORE")
        h, state = self.deployment.hosts[role], self.states[role]
        if self.restored_before(role):
            now = h.transport.read_entry(h.host.env_file)  # ours or not, an edit since is left alone
            if drift.judge(now, state.original, state.shape, lambda data: False) == "original":
                self.already.add(role)
                self.host_lines.append(f"{h.host.label}: restored already; nothing to do")
            else:  # the edit since is not ours
                self.untouched[role] = h.host.env_file
                self.host_lines.append(
                    f"{h.host.label}: already restored; not touched (the file changed since: {h.host.env_file})"
                )
            return
        entry = h.transport.read_entry(h.host.env_file)
        kind = self.judge(role, entry)
        if kind != "original":
            self._write_original(role, kind, entry)
            state.stale.update(h.units)  # someone or something changed it: reload every unit
        state.current = state.original
        for unit in h.units:  # restart only what may run on a non-original env (a model load each)
            if state.active.get(unit):
                if unit in state.stale or not h.services.state(unit).is_active:  # or what is down
                    h.services.restart(unit)
                    state.stale.discard(unit)
            elif (role, unit) in self.started_units or h.services.state(unit).is_active:
                h.services.stop(unit)
        remove_run_files(h, self.run_id)
        self.host_copy[role] = False  # restoring it again (an interrupted restore) finds it restored

    def judge(self, role: str, entry: FileEntry) -> drift.Kind:
        """What the restore (or a resume) finds at the host's env file (sweep.drift.judge)."""
        state = self.states[role]
        return drift.judge(entry, state.original, state.shape, lambda data: self._written(role, data))

    def keep_edit(
        self, role: str, kind: drift.Kind | None = None, entry: FileEntry | None = None
    ) -> tuple[drift.Kind, FileEntry, str | None]:
        """A host's env file changed during the run, not by orch (a trial's write found other bytes
        than orch left there, or a re-read found a file orch never wrote): before the sweep stops,
        set what is there aside and write the original back, exactly as the restore does (same name,
        mode 600, WARNING line), so the restore that follows finds the original and only puts the
        units back. `kind` and `entry`: what a re-read found; else the file is read now, and any
        bytes but the original count as the edit (the write just refused them). A replaced symlink
        (`relinked`) is left as it is: the restore says how to finish. Returns (kind, entry, where
        the content was kept)."""
        h, state = self.deployment.hosts[role], self.states[role]
        if kind is None or entry is None:
            entry = h.transport.read_entry(h.host.env_file)
            kind = drift.judge(entry, state.original, state.shape, lambda data: False)
        if kind in ("original", "relinked"):
            return kind, entry, None
        self._write_original(role, kind, entry)
        state.current = state.original
        state.stale.update(h.units)  # they run a cell's env: the restore puts them back on the original
        return kind, entry, self.kept.get(role)

    def _written(self, role: str, data: bytes) -> bool | None:
        """Did this run write `data` on the host: the bytes orch last wrote or read there, or one of
        the run's cell files (None: orch cannot tell)."""
        if data == self.states[role].current:
            return True
        files = self.cell_files(role)
        return None if files is None else data in files

    def _write_original(self, role: str, kind: drift.Kind, entry: FileEntry) -> None:
        """Write the original over what `kind` says is there, first setting drift aside (and making a
        missing file with the original's mode and owner), and say what was done."""
        h, state = self.deployment.hosts[role], self.states[role]
        if kind == "relinked":
            assert state.shape is not None  # only a recorded link is relinked
            raise OrchError(drift.relinked(h.host.label, h.host.env_file, entry, state.shape))
        keep_as = drift.drift_path(h.host.env_file, self.run_id) if kind in drift.KEEPS else None
        recreate = state.shape if kind in drift.RECREATES else None
        kept = drift.set_aside(h.transport, h.host.env_file, keep_as, recreate, sudo=_sudo(h))
        h.transport.write_bytes_atomic(h.host.env_file, state.original)
        if kept is not None:
            self.kept[role] = kept
        if kind != "ours":
            self.progress.note(drift.describe(h.host.label, h.host.env_file, kind, entry, kept, state.shape))


class _HostRestore:
    """One host's restore in a helper thread, which a runner thread waits for until it ends or is
    skipped (whichever comes first decides: a host that was restored is never called skipped)."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.settled = threading.Event()
        self.skipped = False
        self.error: BaseException | None = None
        self._lock = threading.Lock()

    def run(self, restore: Callable[[str], None]) -> None:
        try:
            restore(self.role)
        except BaseException as exc:  # noqa: BLE001 - raised by wait(), in the runner's thread
            self.error = exc
        finally:
            with self._lock:
                self.settled.set()

    def skip(self) -> bool:
        """Skip the host unless its restore has ended already; True if it was skipped."""
        with self._lock:
            if self.settled.is_set():
                return False
            self.skipped = True
            self.settled.set()
            return True

    def wait(self) -> None:
        self.settled.wait()
        if self.skipped:
            raise Interrupted(f"restore of {self.role} skipped (interrupted again)")
        if self.error is not None:
            raise self.error


def _tidy_quietly(h: HostHandle, run_id: str) -> None:
    """A host's backup stopped while writing there (a SIGTERM, Ctrl-C, a failed write): remove what it wrote.
    Why at once: nothing is edited before the backup ends, so the copy and its temp file only told
    the next run and `orch restore` of a change that never happened, and status.json named none. A
    host that cannot be reached keeps them for `orch restore` (best effort: the first error wins)."""
    with contextlib.suppress(OrchError):
        remove_run_files(h, run_id)


def remove_run_files(h: HostHandle, run_id: str) -> None:
    """Remove, in one command, what the run keeps beside the host's env file once it is restored:
    its host-side backup and the record of the units' states beside it, and the temp files of
    writes a killed controller left half done
    (`.NAME.orch-XXXXXX`, both transports' name; the file itself is always either the old or the
    new one). Safe while this run holds the testbed's lock: no other orch writes that file then."""
    env_file = h.host.env_file
    backup, units = host_backup_path(env_file, run_id), host_units_path(env_file, run_id)
    h.transport.run(["sh", "-c", REMOVE_RUN_FILES, "orch-tidy", env_file, backup, units], check=False, sudo=_sudo(h))


# $1 = the env file, $2 = the run's backup of it, $3 = its record of the units' states (removed
# first: the backup's removal marks the host restored); the temp files sit beside the file $1
# resolves to (writes go through symlinks)
REMOVE_RUN_FILES = (
    'rm -f -- "$3" "$2"; p=$(readlink -f -- "$1") || exit 0; d=${p%/*}; d=${d:-/}; rm -f -- "$d/.${p##*/}.orch-"*'
)


# The run folder's copies of the originals hold real values (a token in an env file: restore must
# write it back), so unlike the run's other files, which mask secrets, they are the owner's alone.
BACKUP_MODE = 0o600
BACKUP_FOLDER_MODE = 0o700


def _private_folders(backup: BackupDir) -> None:
    """backup/ (and a parallel run's backup/<testbed>/) made, or tightened, to 0700: an earlier
    process (or an older orch) may have left one wider."""
    for folder in backup.folders:
        folder.mkdir(mode=BACKUP_FOLDER_MODE, parents=True, exist_ok=True)
        folder.chmod(BACKUP_FOLDER_MODE)


# The originals orch saved: env files (a few KiB; a host refuses to hand over more than its
# transport's MAX_READ_BYTES) and units.json. A bigger file in backup/ is not one orch wrote.
MAX_BACKUP_BYTES = MAX_READ_BYTES


def _not_resumable(changed: list[str], drifted: list[str]) -> UsageError:
    """check_resumable's refusal: hosts restored already and edited since (`changed`), and hosts
    a killed run left whose file is not as it left it (`drifted`, restored now)."""
    why = []
    if changed:
        why.append(f"the env file changed since this run restored it ({'; '.join(changed)})")
    if drifted:
        why.append(f"an env file was changed while the run was stopped, not by orch ({'; '.join(drifted)})")
    hint = (
        "the hosts it had not restored are restored now, a changed file set aside beside itself (see above); "
        "resume again to run the remaining trials on the originals, or start a new run"
        if drifted
        else "put the run's original back (it is in the run's backup/ folder) to resume, or start a new run"
    )
    return UsageError(
        f"cannot resume: {'; '.join(why)}; resuming would run the remaining trials on another base and write "
        "the run's old original over that edit at its end",
        hint=hint,
    )


def _read_shapes(folder: BackupDir) -> dict[str, Shape]:
    """backup/files.json: what each original env file was besides its bytes. A backup taken by an
    orch from before it has none: its originals are taken as regular files of unknown mode."""
    if not folder.files_json.exists():
        return {}
    shapes = _backup_json(folder.files_json)
    if not isinstance(shapes, dict):
        raise ValueError(f"{folder.files_json.name} is not an object")
    return {str(role): Shape.from_json(value) for role, value in shapes.items()}


def _backup_json(path: Path) -> object:
    """A backup's JSON file; ValueError naming it when it is not JSON or nested so deep that
    json.loads gives up (RecursionError, which is no ValueError: resume and restore ended in a
    traceback)."""
    try:
        return jsontext.loads(_read_backup(path))
    except RecursionError:
        raise ValueError(f"{path.name} is nested too deeply to be a backup orch wrote") from None


def _read_backup(path: Path) -> bytes:
    """A run-folder copy of an original, as orch wrote it: a regular file (not a symlink to
    somewhere else: restore would write what it points to onto a host) of bounded size."""
    if path.is_symlink():
        raise ConfigError("not a regular file (a symlink)", file=str(path), hint="the run's backup/ was edited")
    return read_bounded_bytes(path, MAX_BACKUP_BYTES)


def host_backup_path(env_file: str, run_id: str) -> str:
    return f"{env_file}.orch-backup-{run_id}"


def _has_host_backup(h: HostHandle, run_id: str) -> bool:
    """Is this run's host-side backup still beside the env file (the host not restored yet)?"""
    res = h.transport.run(["test", "-e", host_backup_path(h.host.env_file, run_id)], check=False, sudo=_sudo(h))
    return res.exit_code == 0


def unrestored_runs(h: HostHandle) -> list[str]:
    """Run ids whose host-side backup of this host's env file is still there: runs whose restore
    never finished on this host."""
    prefix = host_backup_path(h.host.env_file, "")
    res = h.transport.run(
        ["sh", "-c", 'for f in "$1"*; do [ -e "$f" ] && printf "%s\\n" "$f"; done; true', "orch-unrestored", prefix],
        check=False,
        sudo=_sudo(h),
    )
    return sorted({line[len(prefix) :] for line in res.stdout.splitlines() if line.startswith(prefix)})


def clock_offset(h: HostHandle) -> float:
    """Host clock minus controller clock, measured once (midpoint of the round trip), so
    `journalctl --since` windows are right on hosts whose clocks are off. 0 where the
    service manager runs on the controller's clock."""
    now = getattr(h.services, "now", None)
    if now is None:
        return 0.0
    before = time.time()
    host = now()
    return float(host - (before + time.time()) / 2)


def pause_for_tests(phase: str) -> None:
    """Test hook: ORCH_TEST_<PHASE>_DELAY_S makes each host's backup or restore step slow, so the
    fault tests can kill or interrupt the controller inside that phase (as a slow unit stop on a
    real host would). Unset in normal use."""
    delay = os.environ.get(f"ORCH_TEST_{phase}_DELAY_S")
    if delay:
        time.sleep(float(delay))


def _sudo(h: HostHandle) -> bool:
    return bool(h.host.ssh and h.host.ssh.sudo)
