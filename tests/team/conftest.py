"""Fixtures for the team-feature tests: the shared `testbed` fixture (real systemd + sshd hosts,
for the schedule test; registering it in several conftests is harmless, see testbed.fixture), a
throwaway PostgreSQL server (the shared queue's tests), and no webhook or link setting inherited
from the environment the tests run in."""

from __future__ import annotations

from typing import Iterator

import pytest
from helpers.postgres import PgServer, start_server, stop_server
from testbed.fixture import testbed  # noqa: F401


@pytest.fixture(autouse=True)
def _no_ambient_webhooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_WEBHOOKS", raising=False)
    monkeypatch.delenv("ORCH_REPORTS_URL", raising=False)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PgServer]:
    """One throwaway PostgreSQL server per test session (per xdist worker): tests/helpers/postgres."""
    server = start_server()
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture
def pg_url(postgres: PgServer) -> str:
    """A fresh database on it, for one test."""
    return postgres.new_database()
