"""One controller per run folder at a time: an exclusive flock on <run>/controller.lock (STORE).

Why: `orch resume` repairs a torn journal tail before it can learn from the hosts whether the
run's controller is still alive (the testbed locks are taken later, over SSH). A resume started
beside a live controller could cut off the line that controller was appending, and that
controller's fsync would then make the loss durable. The kernel drops a flock when its holder
dies, kill -9 included, so a crashed run never blocks its own resume.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.core import jsontext
from orchestrator.errors import JournalError, LockError
from orchestrator.store.atomic import run_file_error
from orchestrator.store.rundir import RunDir


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run folder for this process; LockError at once when another process holds it."""
    path = RunDir(run_dir).controller_lock
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise run_file_error(path, "cannot open the run's controller lock", exc) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockError(
                f"{run_dir}: {_holder(fd)} is running this run right now (that run is still running: stop it "
                "first, or wait for it to end; Ctrl-C restores the hosts)"
            ) from None
        except OSError as exc:  # NFS without its lock daemon (ENOLCK), a mount with no locks at all
            raise JournalError(_refused(path, exc)) from exc
        os.ftruncate(fd, 0)  # who holds it, for the message another process shows
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "controller": socket.gethostname()}).encode(), 0)
        yield
    finally:
        os.close(fd)


def lock_refusal(folder: Path, shown: Path) -> str | None:
    """Why run_lock could not lock `folder` (its file system refuses flock), said of the run folder
    `shown`, or None. Asked of a new run's staging folder (sweep.session), so such a --out is
    refused before the run exists, rather than leaving a run that `orch status` calls stale and
    tells to resume."""
    path = RunDir(folder).controller_lock
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError:
        return None  # not a lock's refusal: the run's own writes say what is wrong
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return None
    except OSError as exc:
        return _refused(RunDir(shown).controller_lock, exc)
    finally:
        os.close(fd)  # the lock goes with it, and the file: run_lock makes its own
        with contextlib.suppress(OSError):
            os.unlink(path)
    return None


def _refused(path: Path, exc: OSError) -> str:
    return (
        f"{path}: cannot lock the run folder: {exc.strerror or exc} (its file system refuses file locks: "
        "an NFS mount whose lock daemon is not running? choose another --out)"
    )


def _holder(fd: int) -> str:
    try:
        who = jsontext.loads(os.pread(fd, 4096, 0))
        return f"pid {int(who['pid'])} on {str(who['controller'])[:255]}"
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return "another orch process"
