"""A throwaway PostgreSQL server for the tests: Debian's `postgresql` package (installed by
.ci/run), a cluster made with initdb in a temporary folder, listening on 127.0.0.1 on a free port
(netutil) and on a socket in that folder, with trust auth and fsync off (it dies with the test
session). As root, initdb and the server run as `nobody` (PostgreSQL refuses to run as root).
Stopped by its PID (postmaster.pid) at the end; its folder is deleted."""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.netutil import free_ports

IN_CI = os.environ.get("CI", "").lower() == "true"
START_TIMEOUT_S = 60


def pg_bindir() -> Path | None:
    """The newest installed server's bin folder (Debian keeps them per major version)."""

    def major(path: str) -> int:
        found = re.search(r"/postgresql/(\d+)/", path)
        return int(found.group(1)) if found else 0

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=major)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass(frozen=True)
class PgServer:
    folder: Path
    port: int
    pid: int

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def new_database(self) -> str:
        """A fresh, empty database (one per test): its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def sql(self, url: str, statement: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(statement, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []


def _as_user() -> tuple[list[str], int | None]:
    """(command prefix, uid) to run the server unprivileged when we are root."""
    if os.geteuid() != 0:
        return [], None
    nobody = pwd.getpwnam("nobody")
    return ["runuser", "-u", "nobody", "--"], nobody.pw_uid


def start_server() -> PgServer:
    bindir = pg_bindir()
    if bindir is None:
        message = "PostgreSQL server binaries not found (apt-get install postgresql; .ci/run does)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    folder = Path(tempfile.mkdtemp(prefix="orch-pg-"))
    folder.chmod(0o755)  # the unprivileged server must reach its data and socket folders
    prefix, uid = _as_user()
    data, sock = folder / "data", folder / "sock"
    for d in (data, sock):
        d.mkdir()
        if uid is not None:
            os.chown(d, uid, -1)
    if uid is not None:
        (folder / "log").touch()
        os.chown(folder / "log", uid, -1)
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8"]
        + ["--locale=C", "--no-sync", "--no-instructions"],
        check=True,
        capture_output=True,
        timeout=120,
        cwd=folder,
    )
    for _ in range(3):  # a free port can be taken between the pick and the bind: pick again
        (port,) = free_ports(1)
        options = (
            f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=80"
        )
        proc = subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-o", options]
            + ["-w", "-t", str(START_TIMEOUT_S), "start"],
            capture_output=True,
            timeout=START_TIMEOUT_S + 30,
            cwd=folder,
        )
        if proc.returncode == 0:
            pid = int((data / "postmaster.pid").read_text().split()[0])
            return PgServer(folder, port, pid)
    log = (folder / "log").read_text(errors="replace")[-2000:]
    shutil.rmtree(folder, ignore_errors=True)
    raise RuntimeError(f"postgres did not start: {proc.stderr.decode(errors='replace')}\n{log}")


def stop_server(server: PgServer) -> None:
    """Fast shutdown (SIGINT) by PID, then SIGKILL if it lingers; the folder goes."""
    try:
        os.kill(server.pid, signal.SIGINT)
        deadline = time.monotonic() + 20
        while Path(f"/proc/{server.pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if Path(f"/proc/{server.pid}").exists():
            os.kill(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    shutil.rmtree(server.folder, ignore_errors=True)
