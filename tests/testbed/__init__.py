"""Real systemd + OpenSSH test hosts in namespaces (fixture.py, testbed.sh)."""
