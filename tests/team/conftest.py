"""The shared `testbed` fixture (real systemd + sshd hosts) for the schedule test; registering
it here as well as elsewhere is harmless (see testbed.fixture)."""

from testbed.fixture import testbed  # noqa: F401
