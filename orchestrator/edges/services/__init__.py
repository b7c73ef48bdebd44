"""Service managers: restart units, read their state, logs and live environment (EDGE).

SystemdManager drives systemctl/journalctl through a Transport; LocalServiceManager runs the
bundled simulator's servers as child processes for the embedded default deployment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from orchestrator.edges.identity import PortScan, UnitId
from orchestrator.edges.transport import Transport

# The first line of a unit's log text when orch read only its end (logs_since's max_bytes): what
# follows is not all the unit wrote, so a collector's count over it would be short (log_was_cut).
LOG_CUT = "-- (log truncated"


def log_was_cut(text: str) -> bool:
    """Whether logs_since's text is only the end of what the unit wrote (its first line says so)."""
    return text.startswith(LOG_CUT)


@dataclass(frozen=True)
class UnitState:
    unit: str
    active_state: str  # active, activating, inactive, failed, deactivating
    sub_state: str  # running, dead, failed, auto-restart, ...
    main_pid: int | None
    n_restarts: int = 0
    started_at: float | None = None  # epoch seconds of ExecMainStartTimestamp
    result: str = ""  # systemd Result=, e.g. "start-limit-hit", "exit-code"

    @property
    def is_active(self) -> bool:
        return self.active_state == "active"


class ServiceManager(Protocol):
    """Operations orch needs on the units of one host."""

    def unusable(self, unit: str) -> str | None:
        """Why the unit cannot be restarted however it runs now ("not found", "is masked (...)"),
        said after "unit NAME "; None when it can."""
        ...

    def state(self, unit: str) -> UnitState: ...

    def restart(self, unit: str) -> float:
        """(Re)start the unit so it re-reads its env file; return the epoch time of the restart.
        Clears a start-limit-hit first instead of waiting out a timeout."""
        ...

    def restart_with_file(
        self, unit: str, transport: Transport, path: str, data: bytes, *, expect: bytes | None = None
    ) -> float:
        """transport.write_bytes_atomic(path, data, expect=expect), then restart(unit) (only once the
        write went through): in one round trip where the manager drives that transport (systemd
        over SSH). A file that is not `expect` raises FileChanged: nothing written, nothing restarted."""
        ...

    def stop(self, unit: str) -> None: ...

    def check_alive(self, unit: str, since: float) -> None:
        """Raise ServiceError at once if the unit failed or crash-looped since `since`
        (called between health polls, so a dead unit never waits out the health timeout)."""
        ...

    def logs_since(self, unit: str, since: float, max_bytes: int = 256_000) -> str: ...

    def environ(self, unit: str) -> dict[str, str] | None:
        """The environment of the unit's live main process (/proc/PID/environ), or None."""
        ...

    def env_files(self, unit: str, path: str) -> tuple[bool, list[str]] | None:
        """(whether the unit's EnvironmentFile= names `path` or a link to the same file, the files it
        names), or None when this manager cannot tell (no systemd)."""
        ...

    def logs_and_ids(
        self, units: Sequence[str], since: float, max_bytes: int = 256_000
    ) -> tuple[dict[str, str], dict[str, UnitId]]:
        """Each unit's logs_since and the units' ids now, in one round trip: after the repro, the
        trial's log collection also confirms that nothing restarted during it."""
        ...

    def unit_ids(self, units: Sequence[str]) -> dict[str, UnitId]:
        """Each unit's main pid and invocation id now (one round trip): compared after the repro
        with what they were after the restart, so a unit that restarted or died meanwhile voids
        the trial."""
        ...

    def port_scan(self, ports: Sequence[int], units: Sequence[str]) -> tuple[PortScan, dict[str, UnitId]]:
        """Who listens on `ports` on this host, and the units' ids, in one round trip."""
        ...
