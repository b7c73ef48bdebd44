"""The `testbed` fixture for the tests against real hosts. Registering it here as well as in
tests/conftest.py is harmless: both share one booted testbed (see testbed.fixture)."""

from testbed.fixture import testbed  # noqa: F401
