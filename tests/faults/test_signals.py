"""SIGINT and SIGTERM in the middle of a sweep, and a second Ctrl-C during the restore.

The first signal: exit 130, hosts restored byte for byte, the journal valid, the manifest says
"interrupted", and `orch resume` finishes the run. A second Ctrl-C during the restore skips only
the host being restored; the output names what is left and the command that finishes it, and
that command does.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import termios
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from orchestrator.core.records import EventRecord, TrialRecord
from orchestrator.store.journal import read_journal

from .helpers import (
    PYTHON,
    SimBed,
    assert_clean,
    assert_no_traceback,
    journal_tally,
    leftovers,
    manifest,
    matrix_yaml,
    orch_env,
    output_of,
    run_cli,
    spawn_orch,
    wait_for,
)

pytestmark = pytest.mark.sim


def http_status(url: str) -> int:
    """The status a GET of `url` answers with; 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def records(run_dir: Path) -> list[TrialRecord | EventRecord]:
    journal = run_dir / "journal.jsonl"
    return read_journal(journal).records if journal.exists() else []


def trials_done(run_dir: Path) -> int:
    return sum(isinstance(r, TrialRecord) for r in records(run_dir))


def has_event(run_dir: Path, event: str) -> bool:
    return any(isinstance(r, EventRecord) and r.event == event for r in records(run_dir))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_mid_sweep_restores_hosts_and_resume_completes(bed: SimBed, sig: signal.Signals, capsys) -> None:
    bed.write_matrix(matrix_yaml(replicates=1))
    run_dir = bed.run_dir("s")
    proc = spawn_orch(bed, bed.run_args("s"))
    assert wait_for(lambda: trials_done(run_dir) >= 1, 60), output_of(proc)
    proc.send_signal(sig)
    code = proc.wait(60)
    text = output_of(proc)
    assert_no_traceback(text)
    assert code == 130, text
    assert f"resume with: orch resume {run_dir}" in text
    assert "NOT restored" not in text
    assert_clean(bed)  # byte-identical env files, no process, lock or host backup left
    contents = read_journal(run_dir / "journal.jsonl")
    assert not contents.torn_tail
    assert any(isinstance(r, EventRecord) and r.event == "run_interrupted" for r in contents.records)
    assert manifest(run_dir).status == "interrupted"

    done = run_cli(["resume", str(run_dir)], capsys)
    assert done.code == 0, done.output
    planned, lost, twice = journal_tally(run_dir)
    assert (planned, lost, twice) == (4, [], [])
    assert manifest(run_dir).status == "completed"
    assert_clean(bed)


def test_second_sigint_during_restore_says_what_is_left_and_orch_restore_finishes(bed: SimBed, capsys) -> None:
    """Each host's restore step is made 1.5 s slow (test hook), so the second Ctrl-C lands
    inside the restore of decode, the second host in restart order (prefill, decode, router)."""
    bed.write_matrix(matrix_yaml(replicates=1))
    run_dir = bed.run_dir("s2")
    proc = spawn_orch(bed, bed.run_args("s2"), {"ORCH_TEST_RESTORE_DELAY_S": "1.5"})
    assert wait_for(lambda: trials_done(run_dir) >= 1, 60), output_of(proc)
    proc.send_signal(signal.SIGINT)
    assert wait_for(lambda: has_event(run_dir, "run_interrupted"), 30), output_of(proc)
    time.sleep(2.25)  # prefill restored (1.5 s pause + its step), decode in its pause
    proc.send_signal(signal.SIGINT)
    code = proc.wait(60)
    text = output_of(proc)
    assert_no_traceback(text)
    assert code == 130, text
    assert "restore of decode interrupted" in text
    assert f"NOT restored: decode; finish with: orch restore {run_dir}" in text
    assert "decode.env.orch-backup-s2" in "\n".join(leftovers(bed)), "decode was left as it was"
    restored = [r for r in records(run_dir) if isinstance(r, EventRecord) and r.event == "restored"]
    assert restored and restored[-1].message == "not restored: decode"

    done = run_cli(["restore", str(run_dir)], capsys)
    assert done.code == 0, done.output
    assert "restored: decode (env files byte-identical, units back)" in done.output
    assert "restored already, nothing to do: prefill, router" in done.output  # by the interrupted run
    assert_clean(bed)


def test_sigint_during_a_health_wait_exits_promptly(tmp_path: Path) -> None:
    """A unit that never becomes ready, a 60 s health timeout: Ctrl-C must not wait it out."""
    from .helpers import cleanup_processes, make_simbed

    extra = """\
  ready:
    levels:
      never: {decode: {SIM_NEVER_READY: "1"}}
      ok: {decode: {SIM_NEVER_READY: null}}
"""
    bed = make_simbed(
        tmp_path / "bed", matrix_yaml(replicates=1, extra_factor=extra, order="sequential"), health_timeout=60
    )
    try:
        run_dir = bed.run_dir("h")
        proc = spawn_orch(bed, bed.run_args("h"))
        assert wait_for(lambda: (run_dir / "trials" / "0000").is_dir(), 30), output_of(proc)
        # the units are up and decode answers 503 for ever (not 1.5 s of sleep hoping they are)
        health = f"http://127.0.0.1:{bed.ports['decode']}/health"
        assert wait_for(lambda: http_status(health) == 503, 30), output_of(proc)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(90)
        took = time.monotonic() - t0
        text = output_of(proc)
        assert_no_traceback(text)
        assert code == 130, text
        assert took < 10, f"Ctrl-C took {took:.1f} s to stop the sweep"
        assert_clean(bed)
    finally:
        cleanup_processes(bed)


def _spawn_on_a_terminal(bed: SimBed, args: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """orch as a login shell's job: the session leader of a new session whose controlling
    terminal is a pseudo-terminal (stdin, stdout and stderr), as under `ssh host orch run ...`.
    Returns the process and the terminal's master end: closing it hangs the terminal up."""
    master, slave = pty.openpty()

    def take_terminal() -> None:  # after setsid (start_new_session): the slave becomes the session's terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        proc = subprocess.Popen(
            [PYTHON, "-m", "orchestrator.cli.main", *args],
            cwd=bed.root,
            env=orch_env(),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=take_terminal,
        )
    finally:
        os.close(slave)
    return proc, master


def _drain(master: int, seen: bytearray, stop: threading.Event) -> None:
    """Read the terminal as a terminal emulator does (a full pty buffer would block orch)."""
    while not stop.is_set():
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            seen.extend(chunk)


def test_a_terminal_that_hangs_up_mid_sweep_restores_hosts_as_sigterm_does(bed: SimBed) -> None:
    """The SSH session or terminal orch runs in closes (a dropped connection, a closed laptop):
    the kernel sends SIGHUP, whose default action ended orch on the spot with the hosts on a
    cell's flags and the simulator's servers running. orch stops as on SIGTERM: hosts restored,
    the run marked interrupted with its resume command, its finished trials kept; what it says
    meanwhile goes nowhere (the terminal is gone) instead of failing the restore."""
    bed.write_matrix(matrix_yaml(replicates=1))
    run_dir = bed.run_dir("hup")
    proc, master = _spawn_on_a_terminal(bed, bed.run_args("hup"))
    seen, stop = bytearray(), threading.Event()
    reader = threading.Thread(target=_drain, args=(master, seen, stop), daemon=True)
    reader.start()
    try:
        assert wait_for(lambda: trials_done(run_dir) >= 1, 60), seen.decode(errors="replace")
        done_before = trials_done(run_dir)
    finally:
        stop.set()
        reader.join(5)
        os.close(master)  # the hang-up
    try:
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code == 130, seen.decode(errors="replace")
    assert_clean(bed)  # byte-identical env files, no process, lock or host backup left
    contents = read_journal(run_dir / "journal.jsonl")
    assert not contents.torn_tail
    events = [r for r in contents.records if isinstance(r, EventRecord)]
    assert any(r.event == "run_interrupted" and "SIGHUP" in r.message for r in events), events
    assert trials_done(run_dir) >= done_before
    assert manifest(run_dir).status == "interrupted"
