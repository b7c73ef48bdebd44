"""A repro on a host (`repro.on: ROLE`) runs in a transient systemd scope of its own, where orch
may make one (EDGE, plus the PURE parse of the host's answer and the command's wrapping).

Why: on a host orch found what a repro left running by its mark only (edges.remote_leftovers): a
daemon that clears its environment (`env -i setsid sleep 300 &`, a double fork with `env -i`)
outlived its trial there and the trial counted as data. On the controller a reaper adopts such
orphans (edges.reaper); over SSH orch has no process of its own beside the repro to do that.

How: where orch runs as root on the host (ssh user root, or `ssh: sudo: true`) and systemd is PID
1, the repro runs through `systemd-run --scope --unit=orch-repro-<run>-<mark>.scope --collect --quiet --`
(Transport.run's `scope`; on SSH right after the line that prints the pid, before `timeout`).
systemd-run asks systemd for the scope, moves itself into it and execs what follows in place: same
pid, so `timeout` still leads the process group the transport's stop kills (`kill -- -PGID`),
stdout, stderr and exit code untouched, the command text the user's. Every process the repro starts
stays in that scope's cgroup whatever it does to its environment, session or process group, so the
leftover check, in its one round trip, also names what is still in the scope (`/proc/PID/cgroup`),
gives it the same settle time, then signals the scope (TERM, KILL after the grace) and waits until
systemd unloaded it. `--collect` unloads a scope whose processes all ended, a failed one too.
`<run>` is 12 hex digits of the run id's sha256 (`run_tag`; a run id is free text, and no run's tag
is a prefix of another's): `orch restore --testbed`, whose run folder and so whose marks are gone,
finds every scope of the run by that prefix (`run_units`), what cleared its environment included.

Whether a host can: asked once per host and session (`probe`: one round trip that also starts a
scope of `true`, so a systemd-run that refuses, e.g. no D-Bus, is found before any trial); the
answer is the host's `repro_check` fact in run.json (edges.provenance's facts, shown on the
report's host line): where a reader checks what a host was, and `orch compare` says when two runs
or testbeds differ in it. Why not the trial's record: it is the same for every trial of a session.
Where it cannot (not root, no systemd-run, systemd not PID 1, systemd-run refused), the mark check
runs exactly as before and the fact says why.

Cost, measured on the testbed (systemd 252, OpenSSH, one open connection; 2 cores shared, load
5-8), median of 20 repros of `true` each way, interleaved (tests/remote/test_repro_scope_ssh.py
prints it), five runs: the scope added 18.7, 20.1, 20.7, 21.4 and 27.9 ms a trial (10.2-19.4 ms
plain): systemd-run's D-Bus call and systemd making the scope. The leftover check's grep over
/proc/*/cgroup, in the same round trip, added -1.2 to 6.5 ms (median 2.2: within the noise of a
12-27 ms check). Plus the probe: one round trip and a scope of `true`, once per host and session.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from orchestrator.edges.transport import Transport
from orchestrator.errors import OrchError

__all__ = ["PROBE", "Scoping", "is_repro_unit", "parse_probe", "probe", "run_tag", "run_units", "unit_name"]

UNIT_PREFIX = "orch-repro-"
TAG_DIGITS = 12  # hex digits of a run id's sha256 in its repros' scope names (run_tag)
PROBE_TIMEOUT_S = 20.0
_WHY_CHARS = 160  # of systemd-run's refusal, in the host fact

# $1: the probe scope's unit. One line `orch-scope|yes|<systemd version>` or `orch-scope|no|<why>`.
PROBE = r"""
say() { echo "orch-scope|$1|$2"; exit 0; }
[ "$(id -u)" = 0 ] || say no "not root (ssh user $(id -un), no sudo)"
command -v systemd-run >/dev/null 2>&1 || say no "no systemd-run"
[ -d /run/systemd/system ] || say no "systemd is not PID 1"
err=$(systemd-run --scope --unit="$1" --collect --quiet -- true 2>&1) ||
  say no "systemd-run refused: $(echo "$err" | head -n 1)"
say yes "$(systemctl --version 2>/dev/null | head -n 1)"
"""


@dataclass(frozen=True)
class Scoping:
    """Whether a host's repros run in a scope, and the words for its `repro_check` fact."""

    usable: bool
    why: str = ""  # no: why not; yes: the systemd version

    @property
    def fact(self) -> str:
        if self.usable:
            return "transient scope and mark" + (f" ({self.why})" if self.why else "")
        return f"mark only ({self.why}): a process that clears its environment is not found"


def run_tag(run_id: str) -> str:
    """The run's part of its repros' scope names: fixed length and hex whatever the run id holds."""
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:TAG_DIGITS]


def unit_name(mark: str, run_id: str) -> str:
    """The repro's scope, named by its run and its mark (each repro has its own)."""
    return f"{UNIT_PREFIX}{run_tag(run_id)}-{mark}.scope"


def run_units(run_id: str) -> str:
    """A systemctl pattern for every scope of run `run_id`'s repros (unit_name's)."""
    return f"{UNIT_PREFIX}{run_tag(run_id)}-*.scope"


def is_repro_unit(scope: str, mark: str) -> bool:
    """Whether `scope` is the unit orch names for the repro marked `mark` (of any run, or of a run
    recorded before scope names held the run): what a record read back from a trial folder must
    name before orch signals it, so a record edited by hand cannot make orch stop another unit."""
    return re.fullmatch(rf"{UNIT_PREFIX}(?:[0-9a-f]{{{TAG_DIGITS}}}-)?{re.escape(mark)}\.scope", scope) is not None


def probe(transport: Transport, unit: str) -> Scoping:
    """Can this host run a repro in a scope (one round trip, the probe's own scope `unit`)? A host
    that cannot be asked gets the mark check (the repro's own run will say what is wrong)."""
    try:
        res = transport.run(["sh", "-c", PROBE, "orch-scope", unit], timeout=PROBE_TIMEOUT_S, check=False)
    except OrchError as exc:
        return Scoping(False, f"cannot ask: {str(exc)[:_WHY_CHARS]}")
    if res.exit_code != 0:
        return Scoping(False, f"cannot ask: exit code {res.exit_code}")
    return parse_probe(res.stdout)


def parse_probe(stdout: str) -> Scoping:
    """The probe's answer (PURE); a login script's chatter around it is skipped, and no answer is
    a no."""
    for line in stdout.splitlines():
        tag, _, rest = line.partition("|")
        answer, _, why = rest.partition("|")
        if tag == "orch-scope" and answer in ("yes", "no"):
            return Scoping(answer == "yes", why.strip()[:_WHY_CHARS])
    return Scoping(False, "the host gave no answer")
