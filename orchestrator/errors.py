"""Typed errors that speak the user's language.

Every error orch raises on purpose is an OrchError. The CLI maps them to a message and an exit
code in one place (cli.py), so a user never sees a traceback for a mistake they can fix.
Message shape: ``<where>: <what failed> (<hint>)``.

Failures are also classified for the journal: ``config`` (found before anything changes),
``infrastructure`` (SSH, units, health, verification: worth a retry) and ``workload`` (the
repro itself: exit code, timeout, missing metrics).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

FailureKind = Literal["config", "infrastructure", "workload", "interrupted"]


def notes(exc: BaseException) -> tuple[str, ...]:
    """The notes added to `exc` on its way up (BaseException.add_note; none: no attribute)."""
    return tuple(str(note) for note in getattr(exc, "__notes__", ()))


class OrchError(Exception):
    """Base of every error orch raises deliberately."""

    exit_code: int = 1
    kind: FailureKind = "infrastructure"

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        # detail: a bounded log tail or output excerpt shown under the message
        self.detail = detail

    def __str__(self) -> str:
        return self.message


class ConfigError(OrchError):
    """Bad input: a matrix, an inventory, a flag. Found before any host is touched."""

    exit_code = 2
    kind = "config"

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        path: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.file, self.line, self.path, self.hint = file, line, path, hint
        where = file or ""
        if file and line:
            where = f"{file}:{line}"
        text = message
        if path:
            text = f"{path}: {text}"
        if where:
            text = f"{where}: {text}"
        if hint:
            text = f"{text} ({hint})"
        super().__init__(text)


class EnvFileError(ConfigError):
    """An env-file key or value that cannot be written faithfully (bad name, NUL, newline)."""


class UsageError(ConfigError):
    """A command-line mistake (missing file, bad flag combination, unsafe path)."""


class PreflightError(ConfigError):
    """A host failed its pre-run check; nothing has been changed anywhere. `about`: the host's
    inventory key the fix is at ("env_file", "units"; "" its role's line), as ConnectError's."""

    def __init__(self, message: str, *, hint: str | None = None, about: str = "") -> None:
        self.about = about
        super().__init__(message, hint=hint)


class LockError(OrchError):
    """Another sweep holds the testbed."""

    exit_code = 2
    kind = "config"


class StaleLockError(LockError):
    """A run whose controller died holds the testbed: its lock was left behind, and its hosts may
    still hold its edits. Unlike a busy testbed it never frees itself: that run must be resumed or
    restored first (the overnight queue reports it as a failure, not as a testbed to wait for)."""


class TransportError(OrchError):
    """A command could not be run on a host (connection, authentication, I/O)."""

    def __init__(self, host: str, message: str, *, detail: str = "") -> None:
        self.host = host
        super().__init__(f"{host}: {message}", detail=detail)


class ConnectError(TransportError):
    """Connecting to a host failed. `about` is the inventory's `ssh:` key to fix: "host" (refused,
    unresolvable, no route, timed out, the host key), "key" (the login refused) or "sudo" (logged
    in, but `sudo -n` refused), so a message can point at the line that spells it rather than the
    role's."""

    def __init__(self, host: str, message: str, *, about: str = "host") -> None:
        self.about = about
        self.located = False
        super().__init__(host, message)

    def locate(self, where: str) -> None:
        """Start the message with `INVENTORY:LINE: ` (once): the transport raising it knows the
        host, not the inventory; the sweep that connected knows both (sweep.session.at_lines)."""
        if where and not self.located:
            self.message, self.located = where + self.message, True
            self.args = (self.message,)


class CommandFailed(TransportError):
    """A command ran on a host and exited non-zero."""

    def __init__(self, host: str, command: str, exit_code: int, stdout: str, stderr: str) -> None:
        self.command, self.result_code, self.stdout, self.stderr = command, exit_code, stdout, stderr
        tail = (stderr or stdout).strip()[-2000:]
        super().__init__(host, f"command failed with exit code {exit_code}: {command}", detail=tail)

    @property
    def reason(self) -> str:
        """The command's last word (stderr's last line, else stdout's), at most 200 characters:
        what a one-line message adds ("Failed to connect to bus: ..."); a login's noise comes first."""
        lines = [line.strip() for line in (self.stderr or self.stdout).strip()[-2000:].splitlines() if line.strip()]
        last = lines[-1] if lines else ""
        return last if len(last) <= 200 else last[:197] + "..."


class FileChanged(TransportError):
    """A write told what the file must hold (`expect`: the bytes orch last wrote there) found
    other bytes, or no file: nothing was written and nothing run after it. Someone else edited
    the file since; writing over it would destroy that edit with no copy left."""

    def __init__(self, host: str, path: str) -> None:
        self.path = path
        super().__init__(host, f"{path} changed since orch last wrote it; not written")


class CommandOutput(Protocol):
    """What CommandTimedOut needs of a transport Result (errors.py imports no other module)."""

    @property
    def host(self) -> str: ...
    @property
    def command(self) -> str: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...


class CommandTimedOut(TransportError):
    """A command ran past its timeout and was killed. Like Invoke's CommandTimedOut it carries the
    Result (stdout and stderr up to the kill), so a caller decides by type, not by message text,
    and can still keep what the command printed."""

    def __init__(self, result: CommandOutput, timeout: float, *, host: str | None = None) -> None:
        self.result, self.timeout = result, timeout
        command = result.command if len(result.command) <= 120 else result.command[:117] + "..."
        super().__init__(
            host or result.host,
            f"command timed out after {timeout:g} s and was killed: {command}",
            detail=(result.stderr or result.stdout)[-2000:],
        )


class GroupError(OrchError):
    """The same step ran on several hosts at once and more than one failed. Like Fabric's
    GroupException it holds every host's failure (role -> exception), so the user sees each
    broken host at once instead of fixing them one run at a time."""

    kind = "infrastructure"

    def __init__(self, failures: Mapping[str, BaseException], *, what: str = "hosts") -> None:
        self.failures = dict(failures)
        lines = [str(exc) if str(exc).startswith(role) else f"{role}: {exc}" for role, exc in self.failures.items()]
        details = [f"--- {role}\n{d}" for role, exc in self.failures.items() if (d := getattr(exc, "detail", ""))]
        super().__init__(
            f"{len(lines)} {what} failed: " + "; ".join(lines),
            detail="\n".join(details),
        )


class ServiceError(OrchError):
    """A unit failed to (re)start, crash-looped, or hit systemd's start limit."""

    def __init__(self, host: str, unit: str, message: str, *, detail: str = "") -> None:
        self.host, self.unit = host, unit
        super().__init__(f"{host}: unit {unit}: {message}", detail=detail)


class HealthTimeout(OrchError):
    """A health URL did not report ready within its timeout. `role` (the health check's: a host
    key) names whose units a retry restarts: one still warming up is not waited on again."""

    def __init__(self, message: str, *, role: str = "", detail: str = "") -> None:
        self.role = role
        super().__init__(message, detail=detail)


class VerificationError(OrchError):
    """The live process did not get the environment the cell asked for."""


class ReportedMismatch(VerificationError):
    """A server reports (e.g. on /server_info) a value other than the one a matrix `verify:` rule
    asks for: the flag did not reach the live process, so the trial is void like an env mismatch."""

    def __init__(self, where: str, field: str, expected: object, actual: object, hint: str = "") -> None:
        self.field, self.expected, self.actual = field, expected, actual
        shown = "missing" if actual is MISSING else repr(actual)
        super().__init__(f"{where}: field {field} is {shown}, expected {expected!r}" + (f" ({hint})" if hint else ""))


MISSING = object()  # a reported field that is absent (distinct from a JSON null)


class ScrapeError(OrchError):
    """A metrics endpoint could not be scraped or parsed: recorded as missing, never voids a trial."""


class IdentityError(VerificationError):
    """A health port was served by a process that is not the unit orch restarted (a stranger on
    the port, an orphaned server), a router registered a worker that is none of the inventory's
    instances, or a unit restarted or died during the repro: the trial was
    not served by orch's own processes, so it is void (retried, never data). `roles` (host keys)
    names the hosts whose ports someone else held: a retry restarts their units."""

    def __init__(self, message: str, *, roles: tuple[str, ...] = (), detail: str = "") -> None:
        self.roles = roles
        super().__init__(message, detail=detail)


class ReproNotServed(IdentityError):
    """The repro reported sessions, but orch's servers counted no request while it ran (their
    request counters, scraped before and after): its URL reached another server, so the trial was
    not served by orch's processes (void: retried, never data)."""


class WorkloadError(OrchError):
    """The repro failed: non-zero exit, timeout, or metrics missing from its output."""

    kind = "workload"


class LeftBehind(OrchError):
    """The repro (or its warm-up) exited but processes it started still ran (a daemonised load
    generator, a server it never stopped). orch stopped them before the next trial; this trial is
    void: they loaded the deployment beside the repro, which is not what it measures (retried,
    never data)."""


class WarmupFailed(OrchError):
    """repro.warmup failed (non-zero exit or timeout): the servers are not in the state the
    measured repro assumes, so the trial is void (retried, never data)."""


class JournalError(OrchError):
    """The journal (or another run file) could not be written or read back."""


class SweepStopped(OrchError):
    """The sweep stopped early for a reason a user must see (hosts restored, finished trials kept,
    the run resumable, exit code 1); the caller still ends the run like any other: its status, its
    report, the reason on the terminal. `result`: what the runner finished (sweep.runner sets it)."""

    result: object | None = None


class EnvFileChanged(SweepStopped):
    """Someone else changed an env file the sweep edits, during the run. Orch never writes over it
    (its content is set aside first) and runs no further trial: someone is working on the testbed,
    and what it measures from now on is not the matrix's cells."""


class Interrupted(BaseException):
    """The user (or a signal) stopped the sweep.

    Why a BaseException and not an OrchError, as KeyboardInterrupt is one: it arrives at any
    instruction (SIGTERM's handler raises it in the main thread), and orch catches OrchError (and
    Exception) on purpose in ~45 best-effort places (status, GPU facts, provenance, the runs index,
    webhooks, the report): a SIGTERM landing in one was swallowed with its failures, and a sweep
    systemd stopped ran on until SIGKILL. The code that stops on it names it (or KeyboardInterrupt
    beside it); tests/unit/test_interrupt_not_swallowed.py keeps new handlers from swallowing it.
    It speaks as an OrchError does (message, detail, exit code, kind)."""

    exit_code: int = 130
    kind: FailureKind = "interrupted"

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail  # e.g. a killed command's output so far

    def __str__(self) -> str:
        return self.message


STOPPING = "stopping: interrupted by the user or a signal"


class CommandInterrupted(Interrupted):
    """A command stopped because the sweep is stopping (Ctrl-C, SIGTERM, the runner's stop Event):
    killed where it ran, its process group included. An Interrupted, so it ends the trial and the
    sweep as a Ctrl-C does; like CommandTimedOut it carries the Result (the output up to the kill)."""

    def __init__(self, result: CommandOutput, *, host: str | None = None) -> None:
        self.result, self.host = result, host or result.host
        super().__init__(STOPPING, detail=(result.stderr or result.stdout)[-2000:])
