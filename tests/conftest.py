"""Shared fixtures. Real-system fixtures (sim processes, testbed hosts, browser) live in their
own modules and are registered here so every test module can ask for them by name.

tests/ is on sys.path once, through pyproject's pytest `pythonpath`: shared code imports as
`helpers.<module>` (tests/helpers/), `fakes` (tests/fakes.py: fake transport, service manager
and health side for runner tests) and `testbed.<module>`. No test module imports another."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture
def repo() -> Path:
    return REPO


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# Real systemd + sshd hosts (tests/testbed/fixture.py): one booted testbed per session.
# Headless Chromium over the DevTools pipe (tests/helpers/chromium.py), for the browser tests.
from helpers.chromium import browser  # noqa: E402,F401
from testbed.fixture import testbed  # noqa: E402,F401
