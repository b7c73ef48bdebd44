"""Schedules as systemd timers: orch-NAME.timer starts orch-NAME.service, which runs the queue.

Why systemd rather than cron or a daemon of our own: the machines already run systemd; a timer
with Persistent=true catches up a night missed while the controller was off, the service's
journal keeps the queue's output, `systemctl list-timers` shows the next run, and a stop
(SIGTERM) makes the queue restore its hosts and leave the sweep resumable.

Unit text is built here (pure); installing writes it atomically into the unit directory and calls
systemctl through one injectable function, so tests can check the files without a booted
systemd and the real thing on the testbed hosts.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Literal, Sequence

from orchestrator.edges.transport import Result
from orchestrator.errors import OrchError, UsageError
from orchestrator.team.queue import parse_until, time_of_day

Scope = Literal["system", "user"]
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
PREFIX = "orch-"
MARK = "# written by `orch schedule install`"
SYSTEMCTL_TIMEOUT_S = 60


class ScheduleError(OrchError):
    """systemctl refused or failed (the unit files may be in place: see the message)."""


Systemctl = Callable[[Scope, Sequence[str]], Result]


@dataclass(frozen=True)
class Schedule:
    """What to install: when (a calendar spec or a delay after activation) and what to run."""

    name: str
    python: str
    workdir: str
    queue_args: tuple[str, ...]  # after `-m orchestrator.cli.main queue run`
    on_calendar: str | None = None
    on_active_s: float | None = None
    pythonpath: str | None = None  # where the orchestrator package lives
    webhooks: tuple[str, ...] = ()  # given to the queue as ORCH_WEBHOOKS, from a 0600 file
    run_as: str | None = None  # User= of the service (a system unit run by root must name one)
    store: str | None = None  # the queue's store (a URL may hold a password: ORCH_QUEUE_STORE in the 0600 file)

    @property
    def secrets(self) -> bool:
        return bool(self.webhooks or self.store)

    @property
    def env_name(self) -> str:
        return f"{PREFIX}{self.name}.env"

    @property
    def service(self) -> str:
        return f"{PREFIX}{self.name}.service"

    @property
    def timer(self) -> str:
        return f"{PREFIX}{self.name}.timer"


@dataclass(frozen=True)
class TimerInfo:
    name: str
    trigger: str  # OnCalendar=... or OnActiveSec=...
    active: str
    next_run: str
    last_run: str
    last_result: str


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise UsageError(
            f"schedule name {name!r} is not valid", hint="letters, digits, '_', '.', '-'; it becomes orch-NAME.timer"
        )
    return name


def service_text(s: Schedule, unit_dir: Path) -> str:
    """Type=oneshot: the queue runs to its end; TimeoutStartSec=infinity, as a night of sweeps
    outlasts any default; KillMode=mixed sends SIGTERM to the queue only, so it can restore the
    hosts before systemd kills what is left. Webhook URLs are secrets: they go to an
    EnvironmentFile only its owner can read, never into the world-readable unit."""
    argv = [s.python, "-m", "orchestrator.cli.main", "queue", "run", *s.queue_args]
    env = f"Environment={quote_word('PYTHONPATH=' + s.pythonpath, dollars=False)}\n" if s.pythonpath else ""
    if s.secrets:
        env += f"EnvironmentFile={path_value(str(unit_dir / s.env_name))}\n"
    user = f"User={s.run_as}\n" if s.run_as else ""
    return (
        f"{MARK}\n[Unit]\nDescription=orch queue run ({s.name})\n\n"
        f"[Service]\nType=oneshot\n{user}"
        f"WorkingDirectory={path_value(s.workdir)}\n"
        f"{env}Environment=PYTHONUNBUFFERED=1\n"
        f"ExecStart={' '.join(quote_word(a) for a in argv)}\n"
        "TimeoutStartSec=infinity\nKillMode=mixed\nTimeoutStopSec=300\n"
    )


def timer_text(s: Schedule) -> str:
    if s.on_calendar is not None:
        trigger = f"OnCalendar={s.on_calendar}\nPersistent=true\n"
    else:
        trigger = f"OnActiveSec={s.on_active_s:g}s\n"
    return (
        f"{MARK}\n[Unit]\nDescription=orch queue schedule {s.name}\n\n"
        f"[Timer]\n{trigger}AccuracySec=1s\nUnit={s.service}\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )


def quote_word(arg: str, *, dollars: bool = True) -> str:
    """One quoted word for ExecStart= (dollars=True: `$` is doubled, ExecStart expands $VAR) or
    Environment= (which does not); `%` is doubled for both (specifiers)."""
    _one_line(arg)
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{escaped.replace("$", "$$") if dollars else escaped}"'


def path_value(path: str) -> str:
    """A path for WorkingDirectory=: taken literally to the line's end (no quotes), specifiers
    expanded, so only `%` is escaped."""
    _one_line(path)
    if not path.startswith("/") or path != path.strip():
        raise UsageError(f"working directory {path!r} must be absolute, without surrounding blanks")
    return path.replace("%", "%%")


def _one_line(text: str) -> None:
    if "\n" in text or "\r" in text or "\0" in text:
        raise UsageError(f"cannot put {text!r} in a unit file", hint="no newlines or NUL bytes")


def default_unit_dir(scope: Scope) -> Path:
    if scope == "system":
        return Path("/etc/systemd/system")
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "systemd" / "user"


def run_systemctl(scope: Scope, args: Sequence[str]) -> Result:
    """The real systemctl (the one EDGE call); a missing binary is an OrchError, not a crash."""
    argv = ["systemctl", *(["--user"] if scope == "user" else []), *args]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S)
    except FileNotFoundError as exc:
        raise ScheduleError("systemctl not found (schedules need systemd)") from exc
    except subprocess.TimeoutExpired as exc:
        raise ScheduleError(f"`{' '.join(argv)}` did not answer in {SYSTEMCTL_TIMEOUT_S} s") from exc
    return Result("localhost", " ".join(argv), proc.returncode, proc.stdout, proc.stderr, 0.0)


CALENDAR_EXAMPLES = "e.g. '*-*-* 01:00' or 'Mon..Fri 22:30'"  # an empty spec (`--on-calendar "$AT"`) got none


def check_calendar(spec: str) -> str:
    """Ask systemd-analyze (when present) whether systemd understands the calendar spec."""
    if "\n" in spec or not spec.strip():
        raise UsageError(f"--on-calendar {spec!r} is empty or spans lines", hint=CALENDAR_EXAMPLES)
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return spec
    proc = subprocess.run([tool, "calendar", spec], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["not a calendar spec"])[-1]
        raise UsageError(f"--on-calendar {spec!r}: {why}", hint=CALENDAR_EXAMPLES)
    return spec


def env_text(s: Schedule) -> str:
    """ORCH_WEBHOOKS and ORCH_QUEUE_STORE for the queue, in the one form systemd and a shell read
    alike."""
    for url in (*s.webhooks, *([s.store] if s.store else [])):
        if any(c in url for c in ' \t"\\$`,') or not url.isprintable():
            kind = "webhook URL" if url in s.webhooks else "queue store"
            raise UsageError(
                f"{kind} {url[:40]!r}… has blanks, quotes, commas or control characters",
                hint="percent-encode them",
            )
    lines = [MARK]
    if s.webhooks:
        lines.append(f'ORCH_WEBHOOKS="{" ".join(s.webhooks)}"')
    if s.store:
        lines.append(f'ORCH_QUEUE_STORE="{s.store}"')
    return "\n".join(lines) + "\n"


def install(s: Schedule, scope: Scope, unit_dir: Path, systemctl: Systemctl = run_systemctl) -> list[Path]:
    """Write the units (atomically; the webhook file first, mode 0600), reload systemd and
    enable + start the timer."""
    unit_dir.mkdir(parents=True, exist_ok=True)
    env = unit_dir / s.env_name
    if s.secrets:
        paths = [_write_atomic(env, env_text(s), mode=0o600)]
    else:
        paths = []
        if env.is_file() and MARK in env.read_text(errors="replace"):  # left by an earlier install
            env.unlink()
    paths += [
        _write_atomic(unit_dir / s.service, service_text(s, unit_dir)),
        _write_atomic(unit_dir / s.timer, timer_text(s)),
    ]
    _call(systemctl, scope, ["daemon-reload"])
    _call(systemctl, scope, ["enable", "--now", s.timer])
    return paths


def dry_run(s: Schedule, scope: Scope, unit_dir: Path, shown: Callable[[str], str]) -> str:
    """What `install` would write and run, written nowhere (pure). Secrets are shown masked."""
    masked = dataclasses.replace(s, webhooks=tuple(shown(w) for w in s.webhooks))
    parts = []
    if s.secrets:
        text = env_text(s)  # refuses what install would refuse
        for secret in (*s.webhooks, *([s.store] if s.store else [])):
            text = text.replace(secret, shown(secret))
        parts.append((unit_dir / s.env_name, text + "# (mode 0600; secrets masked here)\n"))
    parts += [(unit_dir / s.service, service_text(masked, unit_dir)), (unit_dir / s.timer, timer_text(s))]
    ctl = "systemctl" + (" --user" if scope == "user" else "")
    body = "".join(f"# ---- {path}\n{text}\n" for path, text in parts)
    return f"{body}# ---- then: {ctl} daemon-reload && {ctl} enable --now {s.timer}\n"


def decide_run_as(scope: Scope | None, user: str | None, euid: int, me: str) -> tuple[Scope, str | None]:
    """(scope, User=) for `schedule install` (pure). `--user` alone is the caller's user manager;
    `--user NAME` a system unit run as NAME. Root installing a system unit must name the account:
    sweeps run as root otherwise, which nobody should get by accident (`--user root` says so)."""
    if user == "":  # `--user` without a name: the user manager, as before
        if scope == "system":
            raise UsageError(
                "--user (the user manager) and --system conflict", hint="--user NAME runs a system unit as NAME"
            )
        return "user", None
    if user is not None:
        if not USER_NAME.match(user):
            raise UsageError(f"--user {user!r} is not a user name")
        if euid != 0 and scope != "system":
            if user != me:
                raise UsageError(f"--user {user}: only root installs a schedule that runs as another user")
            return "user", None
        return "system", user
    chosen: Scope = scope or ("system" if euid == 0 else "user")
    if chosen == "system" and euid == 0:
        raise UsageError(
            "as root, this schedule would run every queued sweep as root (no User= in the service)",
            hint="pass --user NAME (the account that owns the reports and the checkout), or --user root to mean it",
        )
    return chosen, None


def scheduled_time_of_day(spec: str) -> str | None:
    """The one time of day a calendar spec fires at (HH:MM:SS), or None when it fires at several
    or systemd cannot tell. systemd-analyze normalizes the spec (daily -> *-*-* 00:00:00)."""
    normalized = spec.strip()
    tool = shutil.which("systemd-analyze")
    if tool is not None:
        proc = subprocess.run([tool, "calendar", spec], capture_output=True, text=True, timeout=30)
        found = re.search(r"Normalized form: (.*)", proc.stdout)
        normalized = found.group(1).strip() if found else normalized
    clock = re.search(r"(?:^|\s)(\d{1,2}):(\d{2})(?::(\d{2}))?$", normalized)
    if clock is None:
        return None
    h, m, sec = clock.group(1), clock.group(2), clock.group(3) or "00"
    return f"{int(h):02d}:{m}:{sec}"


def until_args(until: str | None, on_calendar: str | None, on_active_s: float | None, now: datetime) -> list[str]:
    """`queue run` options for --until: a calendar schedule passes its time of day (--scheduled), so
    the deadline counts from the scheduled start, not from whenever a late catch-up starts; a
    one-shot (--on-active) gets the absolute deadline. Bad input fails now, not at 1 am."""
    if not until:
        return []
    if on_calendar is None:
        start = now + timedelta(seconds=on_active_s or 0.0)
        return ["--until", parse_until(until, start).isoformat(timespec="seconds")]
    # a date-time would hold for one night: every later night's window would end before it began
    time_of_day(until, "--until")
    at = scheduled_time_of_day(on_calendar)
    if at is None:
        raise UsageError(
            f"--until with --on-calendar {on_calendar!r}: it fires at several times of day, so a deadline "
            "cannot be counted from its start",
            hint="schedule one time a day (e.g. '*-*-* 01:00') or drop --until",
        )
    return ["--until", until, "--scheduled", at]


def check_account(name: str) -> None:
    """The account a system unit runs as must exist here (systemd would fail the unit at 1 am)."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise UsageError(
            f"--user {name}: no such user on this machine", hint="the account that runs the sweeps"
        ) from None


def current_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def remove(name: str, scope: Scope, unit_dir: Path, systemctl: Systemctl = run_systemctl) -> list[Path]:
    """Stop and disable the timer, delete both files, reload. A running queue is left to finish."""
    timer, service = unit_dir / f"{PREFIX}{name}.timer", unit_dir / f"{PREFIX}{name}.service"
    env = unit_dir / f"{PREFIX}{name}.env"
    ours = [p for p in (timer, service, env) if p.is_file() and MARK in p.read_text(errors="replace")]
    if not ours:
        raise UsageError(f"no schedule {name!r} in {unit_dir}", hint="see `orch schedule list`")
    _call(systemctl, scope, ["disable", "--now", timer.name], ok_codes=(0, 1, 5))
    for p in ours:
        p.unlink()
    _call(systemctl, scope, ["daemon-reload"])
    return ours


def installed(unit_dir: Path) -> list[str]:
    """Names of the schedules orch wrote into unit_dir."""
    if not unit_dir.is_dir():
        return []
    return sorted(
        p.name[len(PREFIX) : -len(".timer")]
        for p in unit_dir.glob(f"{PREFIX}*.timer")
        if MARK in p.read_text(errors="replace")
    )


def describe(name: str, scope: Scope, unit_dir: Path, systemctl: Systemctl = run_systemctl) -> TimerInfo:
    """One schedule as `orch schedule list` shows it (what systemd says, when it can)."""
    text = (unit_dir / f"{PREFIX}{name}.timer").read_text(errors="replace")
    trigger = next((ln for ln in text.splitlines() if ln.startswith(("OnCalendar=", "OnActiveSec="))), "?")
    timer = _show(
        systemctl, scope, f"{PREFIX}{name}.timer", ["ActiveState", "NextElapseUSecRealtime", "LastTriggerUSec"]
    )
    service = _show(systemctl, scope, f"{PREFIX}{name}.service", ["Result", "ExecMainStatus"])
    result = service.get("Result", "")
    if result and service.get("ExecMainStatus", "0") != "0":
        result += f" (exit {service['ExecMainStatus']})"
    return TimerInfo(
        name,
        trigger,
        timer.get("ActiveState", "?"),
        timer.get("NextElapseUSecRealtime", "") or "-",
        timer.get("LastTriggerUSec", "") or "-",
        result or "-",
    )


def _show(systemctl: Systemctl, scope: Scope, unit: str, props: list[str]) -> dict[str, str]:
    try:
        res = systemctl(scope, ["show", unit, "-p", ",".join(props)])
    except OrchError:
        return {}
    if res.exit_code != 0:
        return {}
    return dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)


def _call(systemctl: Systemctl, scope: Scope, args: list[str], ok_codes: tuple[int, ...] = (0,)) -> Result:
    res = systemctl(scope, args)
    if res.exit_code not in ok_codes:
        detail = (res.stderr or res.stdout).strip()
        hint = (
            "for --system, run as root; for --user, a user manager must be running"
            if "denied" in detail.lower() or "bus" in detail.lower()
            else "see the detail below"
        )
        raise ScheduleError(f"systemctl {' '.join(args)}: exit code {res.exit_code} ({hint})", detail=detail)
    return res


def _write_atomic(path: Path, text: str, mode: int = 0o644) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)  # never readable by others, even briefly
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(
            f"cannot write {path}: {exc.strerror}", hint="for --system, run as root (or pass --unit-dir)"
        ) from exc
    return path


def this_python() -> str:
    return sys.executable


def package_root() -> str:
    """The directory holding the orchestrator package, for the unit's PYTHONPATH."""
    import orchestrator

    return str(Path(orchestrator.__file__).resolve().parent.parent)
