"""The repro workload: run it time-bound, capture its output, extract its metrics (EDGE + PURE).

Why this shape:
- The repro is a user's script (e.g. ``python repro_agent.py --sessions 40 ...``) that may spawn
  children (a client pool, a helper server). It runs in its own session so that a timeout or a
  Ctrl-C can kill the whole process group, with a mark in its environment that its children
  keep even when they leave that group (setsid, a double fork: edges.leftovers), and under a
  reaper of its own that adopts what it orphans even when they clear that environment (env -i:
  edges.reaper). Whatever it started that is still running once it exited is stopped and reported
  (ReproOutcome.left_behind): nothing it started outlives the trial and skews the next one, and
  the caller voids the trial.
- Output goes straight to files (the OS does the copying), so a chatty repro costs no memory;
  only a bounded tail is read back for the journal.
- Metrics are named-group regexes (Ramble's idea). The LAST match wins because a repro prints
  progress lines first and its summary last. A proportion keeps k and n (6 of 40 sessions), never
  just a percentage, so the report can put a confidence interval on it.
- A regex is the user's: ``(a+)+$`` over one long line backtracks for hours while every host is
  in a changed state. So matching runs on the ``regex`` engine with a deadline per metric and
  over the output's last MAX_SCAN_CHARS only (the summary is at the end); a timeout is a clear
  workload failure naming the metric, never a hang.
"""

from __future__ import annotations

import math
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, NoReturn, Protocol

import regex

from orchestrator.core.bounded import read_bounded_bytes
from orchestrator.core.bounds import MAX_SESSIONS
from orchestrator.core.model import MetricSpec, ValidRule
from orchestrator.core.noproxy import loopback_unproxied
from orchestrator.core.records import MetricValue, ReproOutcome
from orchestrator.edges import leftovers, reaper
from orchestrator.edges.interrupts import uninterrupted
from orchestrator.edges.leftovers import Marked
from orchestrator.edges.reaper import Reaped
from orchestrator.edges.transport import STOP_POLL_S  # a repro's wait looks at its stop Event as a command's does
from orchestrator.errors import ConfigError, Interrupted, OrchError, WorkloadError

__all__ = [
    "InvalidOutput",
    "MetricSpec",
    "check_metric_rules",
    "check_output_rules",
    "count_matching_lines",
    "extract_metrics",
    "output_tail",
    "run_command",
    "scan",
    "stop_recorded_group",
    "TAIL_BYTES",
    "KILL_GRACE_S",
]

TAIL_BYTES = 4096  # stdout tail kept in the journal; the full text stays in the file
ERROR_TAIL_CHARS = 1500  # output tail quoted under a "metrics missing" error
KILL_GRACE_S = 2.0  # SIGTERM, then SIGKILL after this long
KILL_SETTLE_S = 1.0  # how long to wait for SIGKILL to land
# What the repro started gets this long to exit after the repro did (a pool's workers, a resource
# tracker reading EOF) before it counts as left behind; only paid when something is still running.
SETTLE_S = 0.5
_POLL_S = 0.01
_POLL_CHUNK_S = 3600.0  # poll() takes milliseconds as a C int: wait at most an hour per call
MAX_SCAN_CHARS = 4 * 1024 * 1024  # a metric regex sees at most the output's last 4 MiB
MAX_RECORD_BYTES = 4096  # a repro.pid record: `PGID START_TICKS MARK`
# What a repro may write to its stdout or its stderr file per trial. Only the last 4 MiB is ever
# read, so more is no data, and a repro printing without end would fill the run's disk before its
# timeout (which may be hours): past this, its process group is killed and the trial fails.
MAX_OUTPUT_BYTES = 256 * 1024 * 1024
OUTPUT_CHECK_S = 0.2  # how often the output files' sizes are looked at while the repro runs
# per metric, in CPU seconds (the regex engine's clock: on a loaded machine the wall time is a few
# times longer): far above a sane regex over 4 MiB (milliseconds), far below a hang
MATCH_TIMEOUT_S = 1.0


# ---------------------------------------------------------------- metrics (PURE)


def extract_metrics(text: str, specs: Sequence[MetricSpec]) -> dict[str, MetricValue]:
    """Extract every metric from a repro's output; the LAST match of each regex wins.

    proportion: named groups ``k`` and ``n`` (integers, 0 <= k <= n, n > 0).
    number: named group ``value``, or the regex's only group (a float).
    Raises WorkloadError naming every missing or unparseable metric at once (so one run shows
    all the regexes to fix), with the output tail as detail."""
    values: dict[str, MetricValue] = {}
    problems: list[str] = []
    for spec in specs:
        try:
            match = _last_match(spec, text)
        except TimeoutError:
            problems.append(
                f"{spec.name} (/{spec.regex}/ took longer than {MATCH_TIMEOUT_S:g} s: "
                "catastrophic backtracking? make the regex more specific)"
            )
            continue
        if match is None:
            problems.append(f"{spec.name} (no match for /{spec.regex}/)")
            continue
        try:
            values[spec.name] = _metric_value(spec, match)
        except ValueError as exc:
            problems.append(f"{spec.name} ({exc})")
    if problems:
        raise WorkloadError(
            f"repro output: metrics missing or unparseable: {', '.join(problems)} "
            "(check the regexes against the end of the repro's output)",
            detail=_tail(text, ERROR_TAIL_CHARS),
        )
    return values


def _last_match(spec: MetricSpec, text: str) -> regex.Match[str] | None:
    try:
        pattern = regex.compile(spec.regex, regex.MULTILINE)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise ConfigError(f"invalid regular expression: {exc}", path=f"repro.metrics.{spec.name}.regex") from None
    return scan(pattern, text)[0]


def scan(pattern: regex.Pattern[str], text: str) -> tuple[regex.Match[str] | None, int]:
    """(the last match, the number of matches) of `pattern` in the last MAX_SCAN_CHARS of
    `text`, within MATCH_TIMEOUT_S in all (read at each call; TimeoutError after that); only the
    last match is kept, so an empty pattern over 4 MiB costs no memory. Collectors count log
    lines with it too."""
    last, count = None, 0
    for match in pattern.finditer(text[-MAX_SCAN_CHARS:], timeout=MATCH_TIMEOUT_S):
        last, count = match, count + 1
    return last, count


def count_matching_lines(name: str, pattern: str, text: str) -> int:
    """How many lines of (the last MAX_SCAN_CHARS of) `text` the collector regex `pattern`
    matches, within MATCH_TIMEOUT_S in all (read at each call); a slower pattern is a
    WorkloadError naming the collector."""
    timeout_s = MATCH_TIMEOUT_S
    rx = regex.compile(pattern)
    deadline = time.monotonic() + timeout_s
    count = 0
    try:
        for line in text[-MAX_SCAN_CHARS:].splitlines():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            count += rx.search(line, timeout=left) is not None
    except TimeoutError:
        raise WorkloadError(
            f"collector {name!r}: /{pattern}/ took longer than {timeout_s:g} s over the unit logs "
            "(catastrophic backtracking? make the regex more specific)"
        ) from None
    return count


def output_tail(path: Path, limit: int = MAX_SCAN_CHARS) -> str:
    """The last `limit` bytes of a repro output file, decoded: a chatty repro costs no memory."""
    return _read_tail(path, limit)


def _metric_value(spec: MetricSpec, match: regex.Match[str]) -> MetricValue:
    """Turn one match into a MetricValue; ValueError says what is wrong with the matched text."""
    if spec.kind == "proportion":
        k, n = _int_group(spec, match, "k"), _int_group(spec, match, "n")
        if n <= 0 or not 0 <= k <= n:
            raise ValueError(f"{k}/{n} is not a proportion: need 0 <= k <= n and n > 0")
        if n > MAX_SESSIONS:
            raise ValueError(f"{k}/{n}: more than {MAX_SESSIONS:,} sessions in one trial")
        return MetricValue(kind="proportion", k=k, n=n, unit=spec.unit)
    return MetricValue(kind="number", value=parse_number(_group(spec, match, "value")), unit=spec.unit)


# A number as repros print them: ASCII digits, an optional sign, point and exponent. Python's
# float() also takes "inf", "nan", "1_000" and other scripts' digits ("١٢٣"); none of those is a
# measurement, and an infinity reached the journal as null beside a "completed" status.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_MAX_NUMBER_CHARS = 400  # int() of a longer digit string is refused by Python anyway (and slow)


def parse_number(raw: str) -> float:
    """A finite float from a repro's text; ValueError naming the text otherwise."""
    shown = raw if len(raw) <= 40 else raw[:40] + "..."
    if len(raw) > _MAX_NUMBER_CHARS or not _NUMBER.fullmatch(raw):
        raise ValueError(f"{shown!r} is not a number")
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError(f"{shown!r} is out of range (not a finite number)")
    return value


def _int_group(spec: MetricSpec, match: regex.Match[str], name: str) -> int:
    raw = _group(spec, match, name)
    if len(raw) > _MAX_NUMBER_CHARS or not _INTEGER.fullmatch(raw):
        raise ValueError(f"group {name}={raw[:40]!r} is not an integer")
    return int(raw)


def _group(spec: MetricSpec, match: regex.Match[str], name: str) -> str:
    """The text of group `name`, or of the only group for a number metric."""
    if name in match.re.groupindex:
        text = match.group(name)
    elif spec.kind == "number" and match.re.groups == 1:
        text = match.group(1)
    else:
        needs = "(?P<k>...) and (?P<n>...)" if spec.kind == "proportion" else "(?P<value>...) or exactly one group"
        raise ConfigError(
            f"regex lacks group {name!r}", path=f"repro.metrics.{spec.name}.regex", hint=f"a {spec.kind} needs {needs}"
        )
    if text is None:
        raise ValueError(f"group {name} did not take part in the match")
    return text.strip()


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


# ---------------------------------------------------------------- validity (PURE)


class InvalidOutput(OrchError):
    """The repro ran, but its output says it did not measure the deployment (error sessions,
    HTTP errors, fewer sessions than asked): the trial is void. An infrastructure failure, so it
    is retried per the retry policy and never counted as data."""

    kind = "infrastructure"


def check_output_rules(text: str, rules: Sequence[ValidRule]) -> None:
    """The `regex:` and `absent:` rules over the repro's output; InvalidOutput on the first broken
    one, naming the rule and what was seen. Run before the metrics are read: a trial full of HTTP
    errors is void even when its summary line is missing."""
    for rule in rules:
        if rule.check == "absent":
            _check_absent(rule, text)
        elif rule.check == "regex":
            _check_number(rule, _rule_number(rule, text))


def check_metric_rules(metrics: Mapping[str, MetricValue], rules: Sequence[ValidRule]) -> None:
    """The `metric:` rules over the extracted metrics; InvalidOutput on the first broken one."""
    for rule in rules:
        if rule.check != "metric" or rule.target not in metrics:
            continue
        value = metrics[rule.target]
        if value.kind == "proportion":
            k, n = value.k or 0, value.n or 0
            if rule.min_n is not None and n < rule.min_n:
                _void(rule, f"n={n} (k={k})")
            _check_number(rule, k / n if n else 0.0)
        else:
            _check_number(rule, value.value if value.value is not None else float("nan"))


def _check_absent(rule: ValidRule, text: str) -> None:
    match, count = _rule_scan(rule, text)
    if match is not None:
        _void(rule, f"{count} match(es), last: {match.group(0)[:200]!r}")


def _rule_number(rule: ValidRule, text: str) -> float:
    match, _ = _rule_scan(rule, text)
    if match is None:
        _void(rule, "no match in the output")
    raw = (match.group("value") if "value" in match.re.groupindex else match.group(1)) or ""
    try:
        return parse_number(raw.strip())
    except ValueError as exc:
        _void(rule, str(exc))


def _check_number(rule: ValidRule, value: float) -> None:
    if value != value:
        _void(rule, "not a number")
    if rule.min is not None and value < rule.min:
        _void(rule, f"{value:g}")
    if rule.max is not None and value > rule.max:
        _void(rule, f"{value:g}")


def _rule_scan(rule: ValidRule, text: str) -> tuple[regex.Match[str] | None, int]:
    try:
        return scan(regex.compile(rule.target, regex.MULTILINE), text)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise ConfigError(f"invalid regular expression: {exc}", path=rule.where) from None
    except TimeoutError:
        raise WorkloadError(
            f"{rule.where}: /{rule.target}/ took longer than {MATCH_TIMEOUT_S:g} s "
            "(catastrophic backtracking? make the regex more specific)"
        ) from None


def _void(rule: ValidRule, seen: str) -> NoReturn:
    raise InvalidOutput(
        f"void trial: the repro output breaks {rule.describe()}: saw {seen} "
        "(not counted as data; retried per the retry policy)"
    )


# ---------------------------------------------------------------- running (EDGE)


class Running(Protocol):
    """What the waits and the group kill use of a running repro (edges.reaper.Reaped)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def run_command(
    argv_or_shell: str,
    *,
    timeout_s: float,
    cwd: Path,
    env: Mapping[str, str] | None,
    stdout_path: Path,
    stderr_path: Path,
    run_dir: Path | None = None,
    on_spawn: Callable[[], None] | None = None,
    stop: threading.Event | None = None,
    pid_path: Path | None = None,
    on_left: Callable[[list[str]], None] | None = None,
) -> ReproOutcome:
    """Run a shell command time-bound, output streamed to files; return what it did.

    Runs ``/bin/sh -c`` in a new session (its own process group), under a reaper of its own
    (edges.reaper). ``env`` is the full environment (like subprocess; None inherits ours), plus the
    run's mark (edges.leftovers). On timeout the whole group gets SIGTERM, then SIGKILL after
    KILL_GRACE_S, and exit_code is None; a process killed by a signal otherwise has exit_code
    -SIGNUM. The duration runs from the shell's start to orch learning its exit. Processes the
    command started that still run when it ended (in its group, anywhere carrying its mark, or
    under its reaper: daemonised ones) get SETTLE_S to exit, then are killed the same way and
    named in the outcome's ``left_behind``; the reaper is gone when this returns. Ctrl-C
    (KeyboardInterrupt) kills the group before re-raising. Paths in the outcome are relative to
    ``run_dir`` when given. Does not judge the exit code: the caller does.
    ``on_spawn`` is called once the process exists (the runner starts the checks that run beside
    the repro there, so their threads do not compete with the spawn); if it raises, the group is
    killed and its error propagates. ``stop`` set (the runner's Ctrl-C/SIGTERM Event) kills the
    group and raises Interrupted, as a Ctrl-C does: a runner thread of a parallel sweep gets no
    KeyboardInterrupt, so without it Ctrl-C would wait out a hung repro.
    ``pid_path`` (the trial's repro.pid) records the group while it may be alive, so a later orch
    process can stop the repro of a controller killed -9 (stop_recorded_group).
    ``on_left`` is given what a command ended by an exception (Ctrl-C, ``stop``, ``on_spawn``
    failing) left running, once stopped, before the exception goes on: the caller names them (the
    outcome that names them otherwise is never returned then).
    """
    mark = leftovers.new_mark()
    with _open_output(stdout_path) as out, _open_output(stderr_path) as err:
        proc: Reaped | None = None
        found: leftovers.Finder | None = None
        try:
            with uninterrupted():  # an interrupt waits until `proc` is set, so the group is killed below
                proc = _spawn(argv_or_shell, cwd, env, mark, out, err)
                found = leftovers.Either(Marked(mark, proc.pid), proc)
                _record_group(pid_path, proc.pid, mark, proc.start_ticks)
            if on_spawn is not None:
                on_spawn()
            exit_code = _wait_or_kill(proc, timeout_s, stop, lambda: _check_output_size(out, err))
            duration_s = time.monotonic() - proc.started
            left = _stop_leftovers(proc.pid, found)
        except BaseException:
            if proc is not None:
                _stop_on_error(proc, found, pid_path, on_left)
            raise
        finally:
            if proc is not None:
                proc.close()
        _forget_group(pid_path, proc.pid)
    return _outcome(argv_or_shell, exit_code, duration_s, (stdout_path, stderr_path), run_dir, left)


def _outcome(
    command: str,
    exit_code: int | None,
    duration_s: float,
    paths: tuple[Path, Path],
    run_dir: Path | None,
    left: list[str],
) -> ReproOutcome:
    """What a command did: its output's tail and files (relative to the run folder when given)."""
    stdout_path, stderr_path = paths
    return ReproOutcome(
        command=command,
        exit_code=exit_code,
        duration_s=duration_s,
        stdout_tail=_read_tail(stdout_path, TAIL_BYTES),
        stdout_path=_recorded(stdout_path, run_dir),
        stderr_path=_recorded(stderr_path, run_dir),
        left_behind=left,
    )


def _stop_on_error(
    proc: Running,
    found: leftovers.Finder | None,
    pid_path: Path | None,
    on_left: Callable[[list[str]], None] | None,
) -> None:
    """A command ended by an exception: its group killed, what it left running stopped at once
    and named to `on_left` (the outcome that would name them is never returned), its pid file gone."""
    _kill_group(proc)
    if found is not None:
        left = _stop_leftovers(proc.pid, found, settle_s=0.0)
        if left and on_left is not None:
            on_left(left)
    _forget_group(pid_path, proc.pid)


def _open_output(path: Path) -> BinaryIO:
    """A new file at `path`, never the old one truncated: a repro that outlived a killed
    controller keeps writing into the old (now unlinked) file, never into this attempt's."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        return open(path, "xb")  # noqa: SIM115 - closed by the caller's with
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot write repro output: {exc.strerror} (check the run directory)") from exc


def _spawn(command: str, cwd: Path, env: Mapping[str, str] | None, mark: str, out: BinaryIO, err: BinaryIO) -> Reaped:
    """``/bin/sh -c command`` under a reaper of its own (edges.reaper), in its own session, with
    `env` (None: orch's own) marked (edges.leftovers) and the loopback kept off a proxy (core.noproxy)."""
    given = loopback_unproxied(os.environ if env is None else env)
    return reaper.start(command, cwd, leftovers.marked_env(given, mark), out, err)


def _check_output_size(*files: BinaryIO) -> None:
    """WorkloadError once the repro wrote more than MAX_OUTPUT_BYTES to one of its output files
    (the caller kills its group)."""
    for f in files:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_OUTPUT_BYTES:
            raise WorkloadError(
                f"repro: stopped after writing {size >> 20} MiB to {Path(f.name).name} "
                f"(more than {MAX_OUTPUT_BYTES >> 20} MiB; only its last {MAX_SCAN_CHARS >> 20} MiB is read: "
                "print less, e.g. a summary line per run)"
            )


def _wait_or_kill(
    proc: Running,
    timeout_s: float,
    stop: threading.Event | None = None,
    watch: Callable[[], None] | None = None,
) -> int | None:
    """The exit code, or None when the command outlived its timeout (and was killed). `watch` is
    called every OUTPUT_CHECK_S while the command runs; what it raises ends the wait."""
    if not _wait_exit(proc, timeout_s, stop, watch):
        _kill_group(proc)
        return None
    return proc.wait()


def _wait_exit(
    proc: Running,
    timeout_s: float,
    stop: threading.Event | None = None,
    watch: Callable[[], None] | None = None,
) -> bool:
    """True once the command exited, False when timeout_s passed first; Interrupted once `stop`
    is set (looked at every STOP_POLL_S; the caller kills the group).

    Why not proc.wait(timeout=...): with a timeout, CPython polls waitpid with sleeps growing to
    50 ms, so orch noticed a finished repro up to 50 ms late, every trial. A pidfd (Linux >= 5.3),
    or a repro's reaper's socket (its exit status is written there the moment the reaper reaped
    it), becomes readable then, and poll() sleeps until then (in chunks, so the stop Event is
    seen; the exit still wakes it at once)."""
    deadline = time.monotonic() + timeout_s
    chunk = _POLL_CHUNK_S if stop is None else STOP_POLL_S
    if watch is not None:
        chunk = min(chunk, OUTPUT_CHECK_S)
    try:
        exit_fd = _exit_fd(proc)
    except (AttributeError, OSError):  # an old kernel (no pidfd): fall back to a polling wait
        return _wait_polling(proc, deadline, chunk, stop, watch)
    try:
        waiter = select.poll()
        waiter.register(exit_fd, select.POLLIN)
        while True:
            _raise_if_stopped(stop)
            if watch is not None:
                watch()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return proc.poll() is not None
            if waiter.poll(min(remaining, chunk) * 1000):
                return True
    finally:
        os.close(exit_fd)


def _exit_fd(proc: Running) -> int:
    """A new file descriptor that becomes readable once `proc` exited: a repro's, from its reaper
    (edges.reaper.Reaped.exit_fd); a child's of orch (a Popen), its pidfd."""
    if isinstance(proc, Reaped):
        return proc.exit_fd()
    return os.pidfd_open(proc.pid)


def _wait_polling(
    proc: Running,
    deadline: float,
    chunk: float,
    stop: threading.Event | None,
    watch: Callable[[], None] | None,
) -> bool:
    """_wait_exit without a pidfd: CPython's polling wait, in chunks that look at `stop`."""
    while True:
        _raise_if_stopped(stop)
        if watch is not None:
            watch()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return proc.poll() is not None
        try:
            proc.wait(timeout=min(remaining, chunk))
            return True
        except subprocess.TimeoutExpired:
            continue


def _raise_if_stopped(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise Interrupted("stopping: interrupted by the user or a signal")


def _kill_group(proc: Running) -> None:
    """Stop the command and everything in its process group, and learn the leader's exit."""
    _terminate_group(proc.pid, proc.poll)
    proc.wait()


def _stop_leftovers(pgid: int, found: leftovers.Finder, settle_s: float = SETTLE_S) -> list[str]:
    """What the repro left running once it ended (exited, or its group was killed): processes
    still in its process group, and those `found` finds (what carries its mark anywhere, what its
    reaper adopted: daemonised by setsid, a double fork, env -i), given `settle_s` to exit by
    themselves. Each is described, then stopped (SIGTERM, SIGKILL after KILL_GRACE_S), so the
    next trial starts on a quiet deployment. Returns the descriptions: [] for a repro that left
    nothing (the usual case: an empty group, one look at the /proc entries newer than the repro
    and one read of its reaper's children)."""

    def find() -> list[int]:
        return sorted({*_group_members(pgid), *found.find()})

    left = leftovers.settle(find, settle_s)
    if not left:
        return []
    shown = [leftovers.describe(pid) for pid in left]
    survivors = leftovers.stop(left, find, lambda pid: found.carries(pid) or _in_group(pid, pgid), KILL_GRACE_S)
    if survivors:  # another user's (a setuid child): orch may not signal it
        shown.append(leftovers.survivors_shown(survivors))
    return shown


def _terminate_group(pgid: int, reap: Callable[[], object]) -> None:
    """SIGTERM the group; SIGKILL whatever is left after the grace period. Returns once the
    group is empty (SIGKILL lands asynchronously), so the next trial starts on a quiet host."""
    _signal_group(pgid, signal.SIGTERM)
    if _await_group_gone(pgid, KILL_GRACE_S, reap):
        return
    _signal_group(pgid, signal.SIGKILL)
    _await_group_gone(pgid, KILL_SETTLE_S, reap)


def _await_group_gone(pgid: int, timeout_s: float, reap: Callable[[], object]) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        reap()  # an unreaped leader still counts as a group member for kill()
        if not _group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)


def _group_alive(pgid: int) -> bool:
    """True while any live process is in the group. Zombies (orphans not yet reaped by init)
    still count for kill(0), so look at /proc to ignore them."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(_in_group(int(entry.name), pgid) for entry in os.scandir("/proc") if entry.name.isdigit())


def _group_members(pgid: int) -> list[int]:
    """The live processes of the group (one kill(0) when it is empty, the usual case)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and _in_group(int(e.name), pgid)]


def _in_group(pid: int, pgid: int) -> bool:
    """Is `pid` a live (not zombie) member of process group `pgid`?"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # Fields after the command name (which may contain spaces): state ppid pgrp ...
    fields = stat[stat.rfind(b")") + 2 :].split()
    return len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _read_tail(path: Path, limit: int) -> str:
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - limit))
        return f.read().decode("utf-8", errors="replace")


def _recorded(path: Path, run_dir: Path | None) -> str:
    if run_dir is not None:
        try:
            return str(path.resolve().relative_to(run_dir.resolve()))
        except ValueError:
            pass
    return str(path)


# ---------------------------------------------------------------- a killed controller's repro (EDGE)
#
# Why: a repro runs in its own session, so a kill -9 of the controller leaves it running with no
# timeout (only the controller enforced it); `orch resume` would then measure the re-run trial
# beside it, and it would keep loading the deployment. Its group is recorded in the trial folder
# while it may be alive (``PGID START_TICKS MARK``, as LocalServiceManager records its units), so
# resume and restore can stop it, and only it: the start time proves the pid was not reused. The
# mark (edges.leftovers) finds what it daemonised out of that group. Its reaper (edges.reaper)
# already stops it and all it started once the controller's end of their socket closes; the record
# is for what that missed (the reaper killed too, a repro of an orch before the reaper).


def _record_group(path: Path | None, pgid: int, mark: str, ticks: int = 0) -> None:
    """Write `PGID START_TICKS MARK` to `path` atomically (a rename): a reader sees all or nothing.
    `ticks`: the leader's start time as its reaper read it; read here only when it could not (0):
    the reaper reaps a shell that ended at once, and /proc/PID is gone by then."""
    if path is None:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(f"{pgid} {ticks or _start_ticks(pgid)} {mark}\n")
        os.replace(tmp, path)
    except (OSError, ValueError, IndexError) as exc:
        tmp.unlink(missing_ok=True)
        raise WorkloadError(f"{path}: cannot record the repro's process group: {exc} (check the run folder)") from exc


def _forget_group(path: Path | None, pgid: int) -> None:
    """Remove the record once the group is gone (a group that survived its kill stays recorded;
    the callers stopped what carries the mark first)."""
    if path is not None and not _group_alive(pgid):
        _unlink_quietly(path)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def stop_recorded_group(path: Path) -> int | None:
    """Stop the repro group recorded in `path` by a controller that died (kill -9, power cut), and
    every process carrying its mark (what it daemonised): SIGTERM, SIGKILL after KILL_GRACE_S.
    Returns its pgid if any of it was running, None otherwise; the record is removed once the group
    is gone. A group whose leader is a process with another start time is a stranger on a reused
    pid: it is left alone."""
    try:
        # bounded, and never a FIFO or a device: the run folder is the user's (one line of three fields)
        fields = read_bounded_bytes(path, MAX_RECORD_BYTES).decode("ascii").split()
        pgid, ticks = int(fields[0]), int(fields[1])
    except (ConfigError, OSError, ValueError, IndexError):  # none (file not found), or not a record this
        _unlink_quietly(path)  # code wrote: nothing to trust in it
        return None
    group = pgid > 1 and _group_alive(pgid) and _same_group(pgid, ticks)
    marked = Marked(fields[2], pgid, since_start=False) if len(fields) > 2 and leftovers.is_mark(fields[2]) else None
    daemons = marked.find() if marked is not None else []
    if not group and not daemons:
        _unlink_quietly(path)
        return None
    if marked is not None:
        leftovers.stop(daemons, marked.find, marked.carries, KILL_GRACE_S)
    if group:
        try:
            _terminate_group(pgid, lambda: None)
        except PermissionError:
            return pgid
    _forget_group(path, pgid)
    return pgid


def _same_group(pgid: int, ticks: int) -> bool:
    """Is the live group `pgid` the one recorded with the leader's start time `ticks`? A leader
    still there must have that start time; a group whose leader exited is still ours, because
    Linux never hands out a pid that a live process group still uses as its id."""
    try:
        return _start_ticks(pgid) == ticks and os.getpgid(pgid) == pgid
    except (OSError, ValueError, IndexError):  # no such process: only its group is left
        return True


def _start_ticks(pid: int) -> int:
    """When the process started (clock ticks since boot: /proc/PID/stat field 22)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rfind(b")") + 2 :].split()[19])
