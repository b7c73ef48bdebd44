"""The record of a repro running on a host (`repro.on: ROLE`), in its trial folder (STORE).

Why: a kill -9 of the controller leaves such a repro running there (closing the SSH connection
does not stop it); resume and restore read this record to stop it (sweep.orphans). It is written
before the repro starts and removed once the trial's own leftover check ran (sweep.phases): a
record found later belongs to a controller that died, or to a host that could not be looked at.

    {"testbed": NAME, "host": HOST KEY, "mark": ORCH_REPRO_MARK's value, "scope": UNIT or null}

Written atomically (a reader sees all or nothing), without fsync, as the local repro's repro.pid:
a power cut ends the repro too. Read bounded, and only a record of this shape is returned; what
the fields may name (a mark's form, the scope being the mark's own unit) is the reader's check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from orchestrator.core.bounded import read_bounded_bytes
from orchestrator.errors import ConfigError
from orchestrator.store.atomic import write_json_atomic
from orchestrator.store.rundir import TrialDir

MAX_RECORD_BYTES = 4096  # four short fields


@dataclass(frozen=True)
class RemoteRepro:
    """Where a repro on a host runs: its testbed, its host's key there, its mark and its scope."""

    testbed: str
    host: str
    mark: str
    scope: str | None


def record(trial: TrialDir, repro: RemoteRepro) -> None:
    """Record `repro` in its trial folder, before it starts."""
    data = {"testbed": repro.testbed, "host": repro.host, "mark": repro.mark, "scope": repro.scope}
    write_json_atomic(trial.repro_remote, data, fsync=False)


def forget(trial: TrialDir) -> None:
    """Drop the record once the repro's own leftover check ran (nothing of it runs any more)."""
    try:
        trial.repro_remote.unlink(missing_ok=True)
    except OSError:
        pass


def recorded(trial: TrialDir) -> RemoteRepro | None:
    """The record, or None: none, or not of the shape this module writes."""
    try:
        data = json.loads(read_bounded_bytes(trial.repro_remote, MAX_RECORD_BYTES))
        testbed, host, mark, scope = data["testbed"], data["host"], data["mark"], data["scope"]
    except (ConfigError, OSError, ValueError, TypeError, KeyError):
        return None
    if not all(isinstance(v, str) for v in (testbed, host, mark)) or not isinstance(scope, (str, type(None))):
        return None
    return RemoteRepro(testbed, host, mark, scope)
