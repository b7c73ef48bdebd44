"""Preflight: check every host of a deployment before anything is changed, so that a testbed orch
cannot drive is refused at once (exit 2, hosts untouched), not in the middle of the night.

Apart from edges.deployment (the handles) because it needs the plan (every cell's edit is tried
on every env file), and what only handles hosts should not depend on planning.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx

from orchestrator.core import envfile
from orchestrator.core.argsvar import resolve
from orchestrator.core.inventory import Host, host_where
from orchestrator.core.model import CellValue
from orchestrator.core.redact import Redactor
from orchestrator.core.steps import Plan
from orchestrator.core.words import listed
from orchestrator.edges.deployment import Deployment, HostHandle, health_ports, router_host, router_instances
from orchestrator.edges.health import probe_url
from orchestrator.edges.httpread import HttpAnswerError, request
from orchestrator.edges.identity import foreign_holder, units_phrase
from orchestrator.edges.registrations import router_strangers
from orchestrator.errors import CommandFailed, ConnectError, OrchError, PreflightError


def preflight(
    deployment: Deployment, plan: Plan | None = None, client: httpx.Client | None = None, *, inventory: str = ""
) -> list[str]:
    """Check every host of one testbed before the first edit (preflight_testbeds)."""
    return preflight_testbeds([deployment], plan, client, inventory=inventory)


def preflight_testbeds(
    deployments: Sequence[Deployment],
    plan: Plan | None = None,
    client: httpx.Client | None = None,
    *,
    inventory: str = "",
) -> list[str]:
    """Check every host of every testbed before the first edit; raise PreflightError naming each
    host that failed, and where `inventory` (the file as the user named it) declares it.

    Reachable and authenticated, env file readable and writable, units known, health URL host
    resolvable, and every cell's edit of every env file possible (a file orch cannot edit
    faithfully is refused now, not in the middle of the night). The deployment as it is, too:
    each active unit's live env holds what its env file gives as orch reads it (a wrong
    `dialect:` or an overriding drop-in would fail every trial, twice, at up to health_timeout
    each), and the health URL of a host whose units all run answers. Nothing is changed
    anywhere, so a failure here exits 2 with hosts untouched. Every host of every testbed is
    checked before refusing (a user who fixed one is not sent back by the next). Returns
    warnings (lint) worth showing. Each problem and warning starts with its host's
    `INVENTORY:LINE: ` (host_where).
    """
    problems: list[str] = []
    warnings: list[str] = []
    own = client is None
    http = client if client is not None else httpx.Client(timeout=PREFLIGHT_HEALTH_TIMEOUT_S, trust_env=False)
    redactor = plan.matrix.redactor if plan is not None else Redactor()
    try:
        for deployment in deployments:
            for handle in deployment.hosts.values():
                where = host_where(handle.host, inventory)
                try:
                    warnings += [where + w for w in _check_one(deployment, handle, plan, http, redactor)]
                except (ConnectError, PreflightError) as exc:  # the line to fix: its address, key, env file, units
                    problems.append(f"{host_where(handle.host, inventory, exc.about)}{exc}")
                except CommandFailed as exc:  # its own reason on the line: the exception's detail is not shown
                    problems.append(f"{where}{exc}" + (f": {exc.reason}" if exc.reason else ""))
                except OrchError as exc:
                    problems.append(f"{where}{exc}")
    finally:
        if own:
            http.close()
    if len(problems) == 1:
        raise PreflightError(f"{problems[0]} (preflight: nothing was changed)")
    if problems:
        raise PreflightError("preflight failed on several hosts, nothing was changed:\n  " + "\n  ".join(problems))
    return warnings


def _check_one(
    deployment: Deployment, handle: HostHandle, plan: Plan | None, http: httpx.Client, redactor: Redactor
) -> list[str]:
    """One host's checks, in the order a fix is needed (reachable first); its warnings."""
    _check_host(handle)
    if handle.serves:
        check_ports(handle, deployment.testbed.hosts[handle.key])
    warnings = health_lint(handle.host)
    if plan is not None:
        warnings += _check_edits(handle, plan)
    _check_as_it_is(deployment, handle, http, redactor)
    return warnings


def _check_edits(handle: HostHandle, plan: Plan) -> list[str]:
    """Dry-run each distinct assignment set of this role against the file as it is now."""
    host = handle.host
    text = handle.transport.read_bytes(host.env_file).decode("utf-8", errors="surrogateescape")
    where = f"{host.label}: {host.env_file}"
    if host.dialect == "shell" and "\r\n" in text and any(step.env.get(host.role) for step in plan.steps):
        raise PreflightError(
            f"{where}: CRLF line endings in a shell-dialect env file: the shell reads each line's \\r into "
            "its value, so every value orch writes would reach the server with a \\r after it (convert the "
            "file to LF endings, e.g. dos2unix; or dialect: systemd if systemd's EnvironmentFile= reads it)"
        )
    seen: set[tuple[tuple[str, CellValue], ...]] = set()
    try:
        values = envfile.read_values(text, host.dialect)  # flag factors edit these values' args variables
        for step in plan.steps:
            assignments = step.env.get(host.role)
            key = tuple(sorted((assignments or {}).items(), key=lambda kv: kv[0]))
            if not assignments or key in seen:
                continue
            seen.add(key)
            # the edited file must stay one orch can read back (its values are up to 128 KiB each)
            envfile.check_size(envfile.edit(text, resolve(assignments, values), host.dialect))
        return [f"{where}: {w}" for w in envfile.lint(text, host.dialect)]
    except OrchError as exc:
        raise PreflightError(f"{where}: {exc}") from None


PREFLIGHT_HEALTH_TIMEOUT_S = 10.0  # one GET on a server that already runs


def health_lint(host: Host) -> list[str]:
    """A router polled on /health: SGLang's PD router answers 200 there with every worker down
    (its /liveness too), so it proves nothing about readiness; /readiness does (and gets the
    generate probe)."""
    path = urlsplit(host.health).path.rstrip("/")
    if host.role == "router" and path.endswith(("/health", "/liveness")):
        return [
            f"{host.label}: health {host.health} answers 200 even with every worker down on an SGLang router "
            "(point it at /readiness: orch then also sends one generate through the router before each repro)"
        ]
    return []


def _check_as_it_is(deployment: Deployment, handle: HostHandle, client: httpx.Client, redactor: Redactor) -> None:
    """The units that run now (inactive ones are skipped: orch starts them): their live env
    matches the env file as orch reads it for the host's dialect, the health URL answers, and a
    router's list of workers holds only the inventory's instances."""
    host = handle.host
    active = [u for u in handle.units if handle.services.state(u).is_active]
    if not active:
        return
    if host.verify_env:
        text = handle.transport.read_bytes(host.env_file).decode("utf-8", errors="surrogateescape")
        values = envfile.read_values(text, host.dialect)
        for unit in active:
            problem = live_env_difference(values, handle.services.environ(unit), redactor)
            if problem:
                raise PreflightError(
                    f"{host.label}: unit {unit}: {problem} (env file {host.env_file}, dialect: {host.dialect})",
                    hint=(
                        "the unit does not get the file as orch reads it: check `dialect:` (systemd ignores "
                        "`export` lines and does not expand $), a drop-in with EnvironmentFile= or Environment= "
                        f"that overrides it (systemctl cat {unit}), or a file edited since the unit started"
                    ),
                )
    if len(active) == len(handle.units) and handle.serves:
        _check_answers(host, active, client)
        _check_router_list(deployment, handle, client)


def _check_router_list(deployment: Deployment, handle: HostHandle, client: httpx.Client) -> None:
    """A running router (its /readiness polled by orch) registers no worker the inventory lacks.
    Why here too: a worker on its command line or in its env file comes back with every restart, so
    each trial would fail on it (health.check_registered) after the hosts were edited and the router
    restarted, until the sweep stopped; refused now, nothing has been touched. (A router orch will
    start has its workers checked at the first trial's wait.)"""
    host = handle.host
    if probe_url(host.health) is None:
        return
    instances = router_instances(deployment, handle)
    problem = router_strangers(client, host.health, instances, {}, router_host(host)) if instances else None
    if problem is not None:
        raise PreflightError(
            f"{host.label}: the router {problem}",
            hint="take the other worker off the router's command line or env file (or its worker API), "
            "or, if it is one of the instances under another name, write the URL the router lists as that "
            "instance's url: in the inventory",
        )


def live_env_difference(values: dict[str, str], live: dict[str, str] | None, redactor: Redactor) -> str | None:
    """The first key of the env file whose live value differs; variables the unit sets itself
    (absent from the file) are not compared. None when all agree or no process is there."""
    if live is None:
        return None
    for key, want in values.items():
        got = live.get(key)
        if got != want:
            shown = "unset" if got is None else repr(redactor.value(key, got))
            return f"{key} is {shown} in the live process, the env file gives {redactor.value(key, want)!r}"
    return None


def _check_answers(host: Host, active: list[str], client: httpx.Client) -> None:
    what = f"{host.label}: {listed('unit', active)} running, but {host.health}"
    hint = "a server that runs must answer before orch changes anything: fix or stop the unit, or check `health:`"
    try:  # only the status counts: none of the body is read, the whole answer ends in time
        answer = request(client, "GET", host.health, deadline_s=PREFLIGHT_HEALTH_TIMEOUT_S, max_bytes=0)
    except HttpAnswerError as exc:
        raise PreflightError(f"{what} does not answer: {exc.problem}", hint=hint) from None
    except httpx.HTTPError as exc:
        raise PreflightError(f"{what} does not answer: {exc or type(exc).__name__}", hint=hint) from None
    if not 200 <= answer.status < 300:
        raise PreflightError(f"{what} answers HTTP {answer.status}", hint=hint)


def check_ports(handle: HostHandle, host: Host) -> None:
    """Every port orch relies on is free or held by the inventory's own unit: a stranger there (an
    orphaned server, another user's program) would answer the health URL and be measured."""
    scan, ids = handle.services.port_scan(health_ports(host), handle.units)
    for port in health_ports(host):
        stranger = foreign_holder(scan, port, ids)
        if stranger is not None:
            raise PreflightError(
                f"{host.label}: port {port} is held by {stranger}, not by {units_phrase(ids)}",
                hint="stop it, or point the inventory at another port",
            )


# What an edit needs (the transports' atomic write: a temp file in the folder, renamed over the
# file), checked without changing anything and without opening the file for writing: an open for
# writing is seen (its close is inotify's IN_CLOSE_WRITE, on which a systemd .path unit's
# PathChanged= restarts a service). `test -w` (access(2): permission, a read-only mount) and the
# file's attributes (lsattr: immutable or append-only, which `test -w` passes for +a) say why it
# cannot be replaced; its folder must take a new file (findmnt and lsattr then say why, where they
# exist). $1 = the env file. Prints `file: REASON` or `folder DIR: REASON` and exits 1 when it cannot.
WRITE_PROBE = r"""
p=$(readlink -f -- "$1") || p=$1
d=${p%/*}; d=${d:-/}
ro() { case ",$(findmnt -no OPTIONS -T "$1" 2>/dev/null)," in *,ro,*) return 0 ;; esac; return 1; }
locked() { a=$(lsattr -d -- "$1" 2>/dev/null) && case "${a%% *}" in *[ia]*) return 0 ;; esac; return 1; }
[ -e "$p" ] || { printf 'file: No such file or directory\n'; exit 1; }
if locked "$p"; then printf 'file: Operation not permitted\n'; exit 1; fi
if ! [ -w "$p" ]; then
  if ro "$p"; then r="Read-only file system"; else r="Permission denied"; fi
  printf 'file: %s\n' "$r"; exit 1
fi
[ -w "$d" ] && ! locked "$d" && exit 0
r="Permission denied"
ro "$d" && r="Read-only file system"
locked "$d" && r="Operation not permitted"
printf 'folder %s: %s\n' "$d" "$r"; exit 1
"""
# the probe's reason -> (what to say, the hint); anything else is said as the probe printed it
_WRITE_CAUSES = {
    "Read-only file system": ("on a read-only mount", "remount it read-write (see `findmnt -T {path}`)"),
    "Operation not permitted": (
        "immutable or append-only (chattr)",
        "see `lsattr -d {path}`; `chattr -i -a {path}` as root lets orch replace it",
    ),
}


def _not_writable(host: Host, said: str, *, as_root: bool) -> PreflightError:
    """Why the env file cannot be edited, from WRITE_PROBE's line (host_where points at `env_file:`)."""
    where, _, reason = said.strip().partition(": ")
    folder = where.startswith("folder ")
    path = where[len("folder ") :] if folder else host.env_file
    reason = reason.strip() or "unknown reason"
    if reason in _WRITE_CAUSES:
        what, hint = _WRITE_CAUSES[reason]
        hint = hint.format(path=path)
    elif reason == "Permission denied":
        what = "permission denied"
        hint = (
            "even as root: a network file system that maps root to nobody (root_squash)?"
            if as_root
            else "set ssh.sudo: true or let the login user write it"
        )
    else:
        what, hint = reason, "check the file and its folder on the host"
    if folder:
        message = f"env file {host.env_file} is not writable: its folder {path} takes no new file ({what})"
        hint = f"orch writes a temp file beside the env file and renames it over it; {hint}"
    else:
        message = f"env file {host.env_file} is not writable ({what})"
    return PreflightError(f"{host.label}: {message}", hint=hint, about="env_file")


def _check_units_read(handle: HostHandle) -> None:
    """With dialect systemd the units read the env file through EnvironmentFile=: one of them must
    name it, or every edit goes to a file no process reads (an identical copy even passes the live
    env check; verification then failed each changed trial blaming a drop-in)."""
    host, said = handle.host, []
    for unit in handle.units:
        files = handle.services.env_files(unit, host.env_file)
        if files is None or files[0]:
            return
        said.append(f"{unit} reads {', '.join(files[1]) or 'no EnvironmentFile='}")
    raise PreflightError(
        f"{host.label}: env file {host.env_file} is read by none of its units with EnvironmentFile= "
        f"({'; '.join(said)})",
        hint="point env_file: at the file the unit reads (systemctl cat UNIT), or, if a wrapper script "
        "sources it, set dialect: shell",
        about="env_file",
    )


def _check_host(handle: HostHandle) -> None:
    host, t = handle.host, handle.transport
    t.run(["true"], timeout=host.ssh.connect_timeout + 5 if host.ssh else 10)
    if not t.exists(host.env_file):
        raise PreflightError(f"{host.label}: env file {host.env_file} does not exist", about="env_file")
    t.read_bytes(host.env_file)
    sudo = bool(host.ssh and host.ssh.sudo)
    probe = t.run(["sh", "-c", WRITE_PROBE, "orch-probe", host.env_file], check=False, sudo=sudo)
    if not probe.ok:
        raise _not_writable(host, probe.stdout, as_root=sudo or bool(host.ssh and host.ssh.user == "root"))
    for unit in handle.units:  # a masked unit runs on, but every restart (and the restore's) is refused
        problem = handle.services.unusable(unit)
        if problem is not None:
            raise PreflightError(f"{host.label}: unit {unit} {problem}", about="units")
    if host.dialect == "systemd":
        _check_units_read(handle)
    for url in (host.url, host.health):
        name = urlsplit(url).hostname or ""
        try:
            socket.getaddrinfo(name, None)
        except OSError:
            raise PreflightError(f"{host.label}: cannot resolve {name!r} in {url}") from None
