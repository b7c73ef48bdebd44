"""Fixtures for the team-feature tests: the shared `testbed` fixture (real systemd + sshd hosts,
for the schedule test; registering it in several conftests is harmless, see testbed.fixture), and
no webhook or link setting inherited from the environment the tests run in."""

from __future__ import annotations

import pytest
from testbed.fixture import testbed  # noqa: F401


@pytest.fixture(autouse=True)
def _no_ambient_webhooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_WEBHOOKS", raising=False)
    monkeypatch.delenv("ORCH_REPORTS_URL", raising=False)
