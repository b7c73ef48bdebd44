"""Drift: an env file a restore finds neither as the run left it nor as the run began.

Why a module of its own: the restore used to write the original over whatever it found, so an
edit made during the run (or while a killed run waited for `orch restore`) was destroyed with no
copy left, a symlink put there was written THROUGH (the original landed in the file it points
to, which orch never backed up), and a deleted file made the restore fail for good. Before it
writes, the restore now judges what is there against what this run could have written:

    original   the original bytes, the same kind of file: nothing to write
    ours       the original edited with one of the run's trials' env: written back, as always
    missing    nothing there: the original is written back with the original's mode and owner
    edited     a regular file with other bytes: someone else's edit (drift)
    link       a symlink where the run began with a regular file (drift)
    special    neither a regular file nor a symlink (a FIFO, a directory, a device: drift); it
               is never opened (a FIFO blocks its reader for ever) and the restore could only fail
               on it for good ("not a regular file"), so it is moved aside whole, like a symlink
    unsure     other bytes, and orch cannot tell whether a trial wrote them (`orch restore`
               without the run's matrix, or a hunt trial no journal line records)
    relinked   the run began with a symlink and the path is no longer that symlink

Drift is never destroyed and never stops the restore: what is there is set aside on the host,
beside the file (`<env_file>.orch-drift-<run_id>`, mode 600; a symlink is moved there whole, so
it still points where it pointed and its target is not touched), the original is written back
and the restore says so loudly. Refusing the host instead would leave it on a cell's flags with
its units running a cell's env (the promise broken the other way) for an edit the copy keeps
anyway. `relinked` is the exception: orch writes an originally symlinked file through its link
and will not guess where a replaced link should point, so that host is left unrestored with the
command that finishes it once the link is back.

A trial's write finds drift too (Services.apply tells each write what orch last wrote there):
HostGuard.keep_edit sets it aside the same way before the sweep stops (during_run says why).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from orchestrator.edges.transport import FileEntry, Transport

Kind = Literal["original", "ours", "missing", "edited", "link", "special", "unsure", "relinked"]
KEEPS: frozenset[Kind] = frozenset({"edited", "link", "special", "unsure"})  # what is there is set aside first
RECREATES: frozenset[Kind] = frozenset({"missing", "link", "special"})  # the path is empty when the original is written


@dataclass(frozen=True)
class Shape:
    """What an original env file was besides its bytes, as the backup found it: a symlink (and
    where it pointed) or a regular file, and the mode and owner of the file read. Kept in the run
    folder (backup/files.json), so a restore after a kill -9 knows them too."""

    link: str | None = None
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None

    @classmethod
    def of(cls, entry: FileEntry) -> Shape:
        return cls(entry.link, entry.mode, entry.uid, entry.gid)

    def to_json(self) -> dict[str, object]:
        return {"link": self.link, "mode": self.mode, "uid": self.uid, "gid": self.gid}

    @classmethod
    def from_json(cls, value: object) -> Shape:
        """One role's entry of files.json (ValueError when it is not one orch wrote)."""
        if not isinstance(value, Mapping) or set(value) != {"link", "mode", "uid", "gid"}:
            raise ValueError("an entry is not {link, mode, uid, gid}")
        link, mode, uid, gid = value["link"], value["mode"], value["uid"], value["gid"]
        if link is not None and (not isinstance(link, str) or not link or "\n" in link):
            raise ValueError(f"link {link!r} is not a path")
        numbers = (mode, uid, gid)
        if any(n is not None and (type(n) is not int or n < 0 or n > 2**32) for n in numbers):
            raise ValueError(f"mode, uid, gid {numbers} are not numbers of a file")
        if isinstance(mode, int) and mode > 0o7777:
            raise ValueError(f"mode {mode:o} is not a file's mode")
        return cls(link, mode, uid, gid)


def judge(entry: FileEntry, original: bytes, shape: Shape | None, written: Callable[[bytes], bool | None]) -> Kind:
    """What the restore found (see the module doc). `shape` None: a backup from before orch kept
    shapes, taken as a regular file. `written(data)`: did this run write those bytes (None:
    cannot tell); asked last, since it may have to rebuild the run's trials."""
    was_link = shape.link if shape is not None else None
    if was_link is not None and entry.link != was_link:
        return "relinked"
    if was_link is None and entry.link is not None:
        return "link"
    if entry.special is not None:
        return "special"
    if entry.data is None:
        return "missing"
    if entry.data == original:
        return "original"
    ours = written(entry.data)
    return "ours" if ours else ("edited" if ours is False else "unsure")


def found(kind: Kind, entry: FileEntry) -> str:
    """What was there, for messages: `missing`, `a symlink to X`, `a regular file`, `changed`."""
    if entry.link is not None:
        return f"a symlink to {entry.link}" + (" (its target missing)" if entry.data is None else "")
    if entry.special is not None:
        return entry.special
    if entry.data is None:
        return "missing"
    return "a regular file" if kind == "relinked" else "changed (not by orch)"


def drift_path(env_file: str, run_id: str) -> str:
    return f"{env_file}.orch-drift-{run_id}"


# $1 = the env file; $2 = where to set aside what is there ('': nothing to keep; taken: .2, .3...);
# $3 = the original's mode in octal, $4 = its owner uid:gid ('': unknown). A symlink is moved
# aside whole (it keeps pointing where it did), as is anything else that is not a regular file (a
# FIFO is never opened), a regular file copied (mode 600). Then, when
# nothing is at the path, an empty file with the original's mode and owner is made, so the
# write that follows (which keeps an existing file's mode and owner) never shows the original
# under another mode, not even for a moment. Prints `orch-kept PATH` for what it set aside.
SET_ASIDE = r"""
set -eu
umask 077
if [ -n "$2" ]; then
  d=$2; n=1
  while [ -e "$d" ] || [ -L "$d" ]; do n=$((n + 1)); d="$2.$n"; done
  if [ -L "$1" ] || [ ! -f "$1" ]; then mv -T -- "$1" "$d"; else cp -- "$1" "$d"; chmod 600 -- "$d"; fi
  printf 'orch-kept %s\n' "$d"
fi
if [ -n "$3" ] && [ ! -e "$1" ]; then
  : > "$1"
  chown "$4" -- "$1"
  chmod "$3" -- "$1"
fi
"""


def set_aside(t: Transport, env_file: str, keep_as: str | None, shape: Shape | None, *, sudo: bool) -> str | None:
    """Set aside what is at the host's env file (to `keep_as`, or a free name after it) and, when
    nothing is left there, create it empty with the original's mode and owner (`shape`). One
    command; none when there is nothing to do. Returns where the kept copy went."""
    known = shape is not None and None not in (shape.mode, shape.uid, shape.gid)
    if keep_as is None and not known:
        return None
    mode = f"{shape.mode:o}" if known and shape is not None and shape.mode is not None else ""
    owner = f"{shape.uid}:{shape.gid}" if known and shape is not None else ""
    argv = ["sh", "-c", SET_ASIDE, "orch-drift", env_file, keep_as or "", mode, owner]
    res = t.run(argv, sudo=sudo)
    kept = [line[len("orch-kept ") :] for line in res.stdout.splitlines() if line.startswith("orch-kept ")]
    return kept[-1] if kept else None


def describe(where: str, env: str, kind: Kind, entry: FileEntry, kept: str | None, shape: Shape | None) -> str:
    """The restore's sentence about a host (`where`) whose env file was not as the run left it.
    Drift starts with WARNING: someone's file was set aside, they must hear where it went."""
    mode = _mode_text(shape)
    if kind == "missing":
        return f"{where}: {env} was missing: the original is written back{mode}, its units put back on it"
    if kind == "link":
        return (
            f"WARNING: {where}: {env} was replaced by {found(kind, entry)} since the run began: the link is kept "
            f"as {kept} ({entry.link} itself not touched) and the original written back as a regular file{mode}"
        )
    if kind == "special":
        return (
            f"WARNING: {where}: {env} was replaced by {found(kind, entry)} since the run began: it is moved "
            f"whole to {kept} and the original written back as a regular file{mode}"
        )
    why = (
        "something other than orch changed it since the run began"
        if kind == "edited"
        else "orch cannot tell whether one of the run's trials wrote it (the run's matrix is not available)"
    )
    return (
        f"WARNING: {where}: {env} is neither the original nor what the run left there ({why}): its content "
        f"is kept in {kept} (mode 600) and the original written back"
    )


def during_run(
    where: str, env: str, kind: Kind, entry: FileEntry, kept: str | None, shape: Shape | None, resume: str
) -> str:
    """Why the sweep stopped when a trial found a host's env file changed by someone else: where,
    what was there, where it went, and why no trial runs after it."""
    if kind == "relinked" and shape is not None:
        now = relinked(where, env, entry, shape)
    elif kind == "missing":
        now = f"{where}: {env} was deleted during the run (nothing to keep; the original is written back)"
    elif kind == "original":
        now = f"{where}: {env} was put back to the original during the run (nothing to keep)"
    elif kind == "link":
        now = f"{where}: {env} was replaced by {found(kind, entry)} during the run; the link is kept as {kept}"
    elif kind == "special":
        now = f"{where}: {env} was replaced by {found(kind, entry)} during the run; it is kept as {kept}"
    else:
        now = f"{where}: {env} was changed during the run, not by orch; its content is kept in {kept} (mode 600)"
    return (
        f"{now}. The sweep stops: someone is working on this testbed, and trials from here on would not "
        "measure the matrix's cells. Finished trials stay in the journal; the trial about to start wrote "
        f"nothing over the edit, restarted nothing and is not recorded (`{resume}` runs it and the rest "
        "once the testbed is free again)"
    )


def relinked(where: str, env: str, entry: FileEntry, shape: Shape) -> str:
    """Why a host whose env file was a symlink when the run began is left unrestored."""
    now = found("relinked", entry)
    return (
        f"{where}: {env} was a symlink to {shape.link} when the run began and is now {now}; orch writes "
        f"its original only through that link (make it that link again: ln -sfn {shape.link} {env}; "
        "the restore then puts the original back through it)"
    )


def _mode_text(shape: Shape | None) -> str:
    if shape is None or shape.mode is None:
        return " (the run's backup does not say its mode and owner: the write's default)"
    return f" (mode {shape.mode:o}, owner {shape.uid}:{shape.gid})"
