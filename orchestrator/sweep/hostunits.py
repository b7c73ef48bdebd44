"""The units' states before a run, kept on each host beside the run's copy of its env file
(<env_file>.orch-units-<run_id>), so that a restore without the run folder knows them (SWEEP).

Why: the run folder's backup/units.json says which units ran before the run; a folder deleted
after a kill -9 took it along, and `orch restore --testbed` (sweep.hostrestore) could only leave
every unit running now running, one the run had started among them. The record is written with
the host copy, in the same way (atomically, with the env file's mode and owner), and removed with
it (sweep.hosts.remove_run_files). A host copy left by an orch from before has no record: its
units' states before the run are unknown, as they were.

Its name must not start with the copy's (`.orch-backup-`): sweep.hosts.unrestored_runs finds runs
by that prefix.
"""

from __future__ import annotations

import json

from orchestrator.core import jsontext
from orchestrator.edges.transport import Transport
from orchestrator.errors import ConfigError


def host_units_path(env_file: str, run_id: str) -> str:
    return f"{env_file}.orch-units-{run_id}"


def write_host_units(transport: Transport, env_file: str, run_id: str, active: dict[str, bool]) -> None:
    """Record, beside the host's copy of its env file, which of its units were active before the run."""
    data = (json.dumps(active, indent=1, sort_keys=True) + "\n").encode()
    transport.write_bytes_atomic(host_units_path(env_file, run_id), data, like=env_file)


def read_host_units(transport: Transport, where: str, path: str, *, sudo: bool) -> dict[str, bool] | None:
    """The run's record (at `path`, on the host `where` names) of which units were active before
    it, or None when the host holds none (a copy written by an orch from before, or a backup killed
    between the copy and the record). A symlink or a file that is not the record orch writes is
    refused (ConfigError, exit 2): the restore would stop or leave running units on someone else's word."""
    data = read_left_file(transport, where, path, sudo=sudo, what="record")
    if data is None:
        return None
    states = _parse(data)
    if states is None:
        raise ConfigError(
            "not the record of the units' states orch writes (a JSON object of unit: true/false); nothing was touched",
            file=f"{where}:{path}",
            hint="remove it to restore without it: the units running now are then left running",
        )
    return states


def read_left_file(
    transport: Transport, where: str, path: str, *, sudo: bool, what: str, hint: str | None = None
) -> bytes | None:
    """A file a run left on a host beside its env file (the env file's copy, the units' record),
    or None when there is none. A symlink is refused (ConfigError, exit 2, nothing touched): orch
    writes a regular file there, and a link's target would be taken for it; the read is bounded by
    the transport (read_bytes)."""
    if transport.run(["test", "-L", path], check=False, sudo=sudo).exit_code == 0:
        raise ConfigError(
            f"not a regular file (a symlink): not the {what} orch wrote; nothing was touched",
            file=f"{where}:{path}",
            hint=hint,
        )
    if transport.run(["test", "-e", path], check=False, sudo=sudo).exit_code != 0:
        return None
    return transport.read_bytes(path)


def _parse(data: bytes) -> dict[str, bool] | None:
    """The record's unit -> active map, or None when `data` is not one."""
    try:
        value = jsontext.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not all(isinstance(v, bool) for v in value.values()):
        return None
    return {str(unit): active for unit, active in value.items()}
