"""What a repro run on a host (`repro.on: ROLE`) leaves running there: found and stopped in one
round trip (EDGE, plus the PURE parse of the host's answer).

Why: a repro on the controller is marked and checked when it ends (edges.leftovers), but one run
on a host through the transport was not. Measured on the testbed (real sshd, before this module):
`setsid sleep 41 >/dev/null 2>&1 & echo done` on decode ended 0 and its trial counted, with the
sleep still running; at the repro's timeout coreutils `timeout` killed its process group, and the
setsid child, outside that group, lived on. A load generator so left loads every later trial.

How: the repro gets the same kind of mark in its environment (Transport.run's `env`, so its
command text stays the user's). Once it ended (exited, timed out, interrupted), one `sh -c` on that
host (POSIX sh, grep, head, base64, sleep: no ps, pgrep, lsof) reads /proc/*/environ with one grep,
as the user the repro ran as (its sudo too: the transport applies the same), and, only when
something carries the mark, names each (``pid N (command line)``, the local check's wording:
leftovers.shown), gives them the local check's settle time to exit by themselves, then SIGTERM,
SIGKILL after the grace, the KILL rounds again for what was forked meanwhile. Its answer is lines
``left|PID|BASE64(cmdline)``, ``more|N`` past MAX_NAMED, ``alive|PID`` for what outlived SIGKILL.

Cost: a repro that left nothing costs one round trip (~10 ms over an open SSH connection): one
grep over the environ files of the processes the user may read (and, with a scope, one over their
/proc/PID/cgroup). Only a leftover pays the waits.

Limits: those of edges.leftovers (a process that drops or replaces its environment, e.g.
`env -i`, sudo's env_reset, systemd-run, is not seen by its mark; where the repro ran in a scope,
edges.remote_scope, one that stayed in the scope is seen by its cgroup), and two of its own. A shell has no pidfd:
every signal goes to the pids a scan found carrying the mark an instant before, so a pid reused in
that instant would be hit (Linux hands out pids upwards: that needs the counter to wrap meanwhile).
And the repro's process group is not looked at, only the mark (the transport kills that group at a
timeout or a stop; a process that left it and cleared its environment is invisible to both checks).
"""

from __future__ import annotations

import base64
import binascii

from orchestrator.edges.leftovers import (
    CMDLINE_BYTES,
    KILL_ROUNDS,
    MARK_VAR,
    RUN_VAR,
    shown,
    survivors_shown,
    unnamed_shown,
)
from orchestrator.edges.remote_scope import run_units
from orchestrator.edges.transport import Transport
from orchestrator.errors import TransportError

__all__ = ["MAX_NAMED", "SCRIPT", "check_argv", "parse", "stop_marked", "stop_run"]

MAX_NAMED = 64  # leftovers named per check (all are stopped); the rest are counted
STEP_S = 0.05  # the script's poll step
CHECK_SLACK_S = 10.0  # the check's timeout beyond its own waits (a slow host, a big /proc)

# argv: NEEDLE SETTLE_STEPS GRACE_STEPS MAX_NAMED CMDLINE_BYTES KILL_ROUNDS [SCOPE]
# NEEDLE (``ORCH_REPRO_MARK=<16 hex>``) as one whole entry of an environ (grep -z -x: its entries
# end in NUL) is the mark: only a process that got the random mark from the repro holds that entry.
# Not anywhere in it: through sudo (`ssh: sudo: true`) the check's own shell holds NEEDLE inside
# SUDO_COMMAND (sudo's copy of the command line), and it found and killed itself ("connection lost",
# measured on the testbed). A grep without -z (busybox) matches anywhere, as before. SCOPE, when the
# repro ran in a transient scope (edges.remote_scope), is its unit: a process whose cgroup path
# holds ``/SCOPE`` (the scope or a cgroup below it) is the repro's too, mark or not; each pid once.
# The scope is signalled as a whole too (systemctl kill: what forked since the scan), and a scope
# still loaded once its processes are gone is stopped. SCOPE may be a pattern ending in ``*.scope``
# (a run's scopes, edges.remote_scope.run_units): the cgroup paths are matched on what precedes the
# ``*``, and systemctl's kill, show and stop take the pattern for every loaded unit it matches.
_SCRIPT = r"""
needle=$1 settle=$2 grace=$3 max=$4 bytes=$5 rounds=$6 unit=${7-}
cg=${unit%%\**}  # a pattern's fixed start
for c in grep head base64 sleep; do
  command -v "$c" >/dev/null 2>&1 || { echo "orch-left: $c not found" >&2; exit 3; }
done
[ -r /proc/self/environ ] || { echo "orch-left: cannot read /proc/PID/environ" >&2; exit 3; }
whole="-z -x"; printf 'e\0' | grep -q -z -x -F -e e 2>/dev/null || whole=""
marked() {
  { grep -l -s $whole -F -e "$needle" /proc/[0-9]*/environ
    [ -z "$unit" ] || grep -l -s -F -e "/$cg" /proc/[0-9]*/cgroup
  } | { seen=" "; while IFS=/ read -r _ _ p _; do
    case $seen in *" $p "*) ;; *) seen="$seen$p "; echo "$p" ;; esac
  done; }
}
scope_kill() {  # the whole scope, when there is one
  [ -z "$unit" ] || systemctl kill -s "$1" "$unit" >/dev/null 2>&1 || :
}
quiet_or_wait() {  # until nothing carries the mark, at most $1 steps
  n=0; while [ "$n" -lt "$1" ] && [ -n "$(marked)" ]; do sleep __STEP__; n=$((n+1)); done
}
left=$(marked)
[ -n "$left" ] || exit 0
n=0
while [ -n "$left" ] && [ "$n" -lt "$settle" ]; do sleep __STEP__; n=$((n+1)); left=$(marked); done
[ -n "$left" ] || exit 0
k=0
for p in $left; do
  k=$((k+1)); [ "$k" -le "$max" ] || continue
  echo "left|$p|$(head -c "$bytes" "/proc/$p/cmdline" 2>/dev/null | base64 -w0)"
done
[ "$k" -le "$max" ] || echo "more|$((k-max))"
live=$(marked); [ -z "$live" ] || kill -s TERM $live 2>/dev/null
scope_kill TERM
quiet_or_wait "$grace"
r=0
while [ "$r" -lt "$rounds" ]; do
  live=$(marked); [ -n "$live" ] || break
  kill -s KILL $live 2>/dev/null
  scope_kill KILL
  quiet_or_wait "$grace"; r=$((r+1))
done
k=0
for p in $(marked); do k=$((k+1)); [ "$k" -gt "$max" ] || echo "alive|$p"; done
if [ -n "$unit" ] && [ "$k" -eq 0 ]; then  # empty now: systemd unloads it (--collect); else stop it
  n=0
  while systemctl show -p LoadState --value "$unit" 2>/dev/null | grep -q -x loaded; do
    [ "$n" -ne "$grace" ] || systemctl stop --no-block "$unit" >/dev/null 2>&1
    [ "$n" -lt $((2*grace)) ] || break
    sleep __STEP__; n=$((n+1))
  done
fi
exit 0
"""
SCRIPT = _SCRIPT.replace("__STEP__", f"{STEP_S:g}")


def check_argv(mark: str, settle_s: float, grace_s: float, scope: str | None = None) -> list[str]:
    """The one command of a check for `mark` (and, when the repro ran in one, what is in the
    transient unit `scope`): settle and grace in the script's poll steps."""
    return _argv(f"{MARK_VAR}={mark}", settle_s, grace_s, scope)


def _argv(needle: str, settle_s: float, grace_s: float, scope: str | None) -> list[str]:
    return [
        "sh",
        "-c",
        SCRIPT,
        "orch-left",
        needle,
        str(_steps(settle_s)),
        str(_steps(grace_s)),
        str(MAX_NAMED),
        str(CMDLINE_BYTES),
        str(KILL_ROUNDS),
        *([scope] if scope else []),
    ]


def stop_marked(
    transport: Transport, mark: str, *, settle_s: float, grace_s: float, scope: str | None = None
) -> list[str]:
    """Name and stop what still carries `mark` on the transport's host, and what is still in the
    repro's transient unit `scope` (edges.remote_scope) when it ran in one: one round trip either
    way; returns the descriptions, [] when nothing was left. TransportError when the host cannot be
    looked at: a trial whose leftovers are unknown is not data."""
    return _stop(transport, f"{MARK_VAR}={mark}", settle_s, grace_s, scope)


def stop_run(transport: Transport, run_id: str, *, grace_s: float) -> list[str]:
    """Name and stop what still carries run `run_id`'s entry (leftovers.RUN_VAR, given to each repro
    on a host beside its mark) on the transport's host, and what is in one of the run's repro
    scopes (edges.remote_scope.run_units): what a killed controller's repros left running, found
    without their marks (the run folder that recorded them is gone). One round trip; [] when
    nothing runs; TransportError when the host cannot be looked at."""
    return _stop(transport, f"{RUN_VAR}={run_id}", 0.0, grace_s, run_units(run_id))


def _stop(transport: Transport, needle: str, settle_s: float, grace_s: float, scope: str | None) -> list[str]:
    """The check for what carries `needle` (a whole environ entry), and what is in `scope`."""
    timeout = settle_s + (1 + KILL_ROUNDS) * grace_s + CHECK_SLACK_S
    if scope:
        timeout += 2 * grace_s  # the scope's unload wait
    res = transport.run(_argv(needle, settle_s, grace_s, scope), timeout=timeout, check=False)
    if res.exit_code != 0:
        why = (res.stderr.strip().splitlines() or [f"exit code {res.exit_code}"])[-1]
        raise TransportError(
            transport.host,
            f"cannot look for processes the repro left running: {why[:300]} "
            "(orch needs sh, grep, head, base64 and a readable /proc/PID/environ on the host)",
        )
    return parse(res.stdout)


def parse(stdout: str) -> list[str]:
    """The script's answer as the local check words it (PURE): ``pid N (command line)`` per named
    leftover, one entry for those past MAX_NAMED, one for what outlived SIGKILL. Other lines (a
    login script's chatter) are not the script's and are skipped."""
    named: list[str] = []
    more = 0
    alive: list[int] = []
    for line in stdout.splitlines():
        kind, _, rest = line.partition("|")
        if kind == "left":
            pid, _, encoded = rest.partition("|")
            if pid.isdigit():
                named.append(shown(int(pid), _decoded(encoded)))
        elif kind == "more" and rest.isdigit():
            more += int(rest)
        elif kind == "alive" and rest.isdigit():
            alive.append(int(rest))
    if more:
        named.append(unnamed_shown(more))
    if alive:
        named.append(survivors_shown(alive))
    return named


def _decoded(encoded: str) -> bytes:
    try:
        return base64.b64decode(encoded, validate=True)[:CMDLINE_BYTES]
    except (binascii.Error, ValueError):
        return b""


def _steps(seconds: float) -> int:
    return max(0, round(seconds / STEP_S))
