"""Identity on real systemd hosts over SSH (issue 12): a stranger on a health port is refused at
preflight naming its pid and command line, and a unit restarted during the repro (new MainPID
and InvocationID, read with `systemctl show`) voids the trial instead of counting it."""

from __future__ import annotations

import re
import shlex
import socket
import time
from pathlib import Path

import httpx
import pytest
from helpers.ssh_sweep import ENV_FILES, attempts_of, no_leftovers, snapshot, ssh_overlap_matrix, trials_of
from testbed.fixture import Testbed

from orchestrator.cli.main import main

pytestmark = pytest.mark.testbed

DECODE = "sglang-dsv4-decode"
FILES = {**ENV_FILES, "decode": "/etc/sglang/decode.env"}
LISTENER = (
    "import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
    "s.bind(('0.0.0.0', 30002)); s.listen(); time.sleep(120)"
)


def wait_healthy(tb: Testbed, host: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(tb.url(host) + "/health", timeout=1, trust_env=False).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{host} not healthy after {timeout} s")


def listening(tb: Testbed, host: str, timeout: float = 10) -> None:
    """The stranger accepts connections on decode's port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((tb.host(host).ip, 30002)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {host}:30002 after {timeout} s")


def run(tb: Testbed, tmp_path: Path, matrix: str, run_id: str) -> int:
    (tmp_path / "m.yaml").write_text(matrix)
    argv = ["run", str(tmp_path / "m.yaml"), "-i", str(tb.inventory), "-t", "dsv4-pd", "--out", str(tmp_path / "r")]
    return main([*argv, "--run-id", run_id])


MATRIX = ssh_overlap_matrix(
    "identity",
    """\
  command: "echo 'CORRUPTION sessions: 0/8'"
  timeout: 60
""",
)


def test_a_stranger_on_a_health_port_is_refused_at_preflight(testbed: Testbed, tmp_path: Path, capsys) -> None:
    before = snapshot(testbed, FILES)
    testbed.ssh("decode", f"systemctl stop {DECODE}")
    started = testbed.ssh(
        "decode",
        f"setsid {shlex.quote(testbed.python)} -c {shlex.quote(LISTENER)} >/dev/null 2>&1 </dev/null & echo $!",
    )
    pid = int(started.stdout.strip())
    try:
        listening(testbed, "decode")
        code = run(testbed, tmp_path, MATRIX, "stranger")
        err = capsys.readouterr().err
        assert code == 2, err
        assert "decode (" in err and f"port 30002 is held by pid {pid} (" in err, err
        assert "-c import socket" in err and "user root" in err, err
        assert f"not by unit {DECODE} (not running)" in err, err
        assert "stop it, or point the inventory at another port" in err, err
        assert snapshot(testbed, FILES) == before
    finally:
        testbed.ssh("decode", f"kill {pid}; systemctl start {DECODE}", check=False)
    wait_healthy(testbed, "decode")
    no_leftovers(testbed)


def test_a_unit_restarted_during_the_repro_voids_the_trial(testbed: Testbed, tmp_path: Path, capsys) -> None:
    before = snapshot(testbed, FILES)
    # on decode's host: once orch has checked who serves (beside the repro), the unit restarts
    matrix = MATRIX.replace(
        "command: \"echo 'CORRUPTION sessions: 0/8'\"",
        f"command: \"sleep 3; systemctl restart {DECODE}; echo 'CORRUPTION sessions: 0/8'\"\n  on: decode",
    )
    run(testbed, tmp_path, matrix, "restarted")
    trials = trials_of(tmp_path / "r" / "restarted")
    assert len(trials) == 2, capsys.readouterr()
    for t in attempts_of(tmp_path / "r" / "restarted"):  # each trial's two attempts, both void
        assert t.status == "failed" and t.failure is not None, t
        assert t.failure.error == "IdentityError" and t.metrics == {}, t.failure
        pattern = rf"unit {DECODE} restarted during the repro \((pid \d+ -> \d+|invocation \w+ -> \w+)\)"
        assert re.search(pattern, t.failure.message), t.failure.message
    assert snapshot(testbed, FILES) == before
    wait_healthy(testbed, "decode")
    no_leftovers(testbed)


# A stranger that waits for decode's port and serves 200 to every request once it has it: what an
# orphaned server or an old process that has not let go looks like to a health check.
STRANGER = """\
import json, os, time
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def _ok(self):
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = _ok
    def log_message(self, *a): pass
open("/root/stranger.pid", "w").write(str(os.getpid()))
deadline = time.time() + 120
while time.time() < deadline:
    try:
        server = HTTPServer(("0.0.0.0", 30002), H); break
    except OSError:
        time.sleep(0.001)
server.timeout = 1
while time.time() < deadline:
    server.handle_request()
"""


def test_a_stranger_taking_a_health_port_mid_sweep_voids_the_trial(testbed: Testbed, tmp_path: Path, capsys) -> None:
    """After trial 0 (clean), a stranger started from the repro's SSH session waits for decode's
    port; decode's restart for trial 1 lets it in, decode dies with 'Address already in use', and
    the stranger answers /health 200. Trial 1 must be void, never data."""
    before = snapshot(testbed, FILES)
    testbed.ssh("decode", f"cat > /root/stranger.py <<'EOF'\n{STRANGER}EOF")
    # the whole background list detached from the SSH channel, so the repro's command returns at once;
    # a transient service of systemd's, so without the repro's mark and outside the repro's scope: a
    # stranger is no child of orch's repro (one that kept the mark, or stayed in the scope even without
    # it, `env -u ORCH_REPRO_MARK setsid`, would be stopped as the repro's leftover and void trial 0
    # instead, tests/remote/test_repro_stop_ssh.py, test_repro_scope_ssh.py)
    stranger = f"systemd-run --quiet --collect -- {shlex.quote(testbed.python)} /root/stranger.py"
    spawn = f"( test {{trial}} != 0 || {stranger} ) >/dev/null 2>&1 </dev/null & echo 'CORRUPTION sessions: 0/8'"
    matrix = MATRIX.replace("command: \"echo 'CORRUPTION sessions: 0/8'\"", f'command: "{spawn}"\n  on: decode')
    matrix += "stop_after_repeated_failures: 0\n"
    try:
        run(testbed, tmp_path, matrix, "stranger-mid")
        pid = int(testbed.ssh("decode", "cat /root/stranger.pid").stdout.strip())
    finally:
        testbed.ssh(
            "decode",
            "kill $(cat /root/stranger.pid) 2>/dev/null; rm -f /root/stranger.py /root/stranger.pid",
            check=False,
        )
    trials = sorted(trials_of(tmp_path / "r" / "stranger-mid"), key=lambda t: t.trial)
    assert [t.trial for t in trials] == [0, 1], capsys.readouterr()
    assert trials[0].status == "completed"  # before the stranger had the port
    void = trials[1]
    assert void.status == "failed" and void.metrics == {} and void.failure is not None, void
    assert void.failure.error == "IdentityError", void.failure
    assert f"port 30002 is served by pid {pid} (" in void.failure.message, void.failure.message
    testbed.ssh("decode", f"systemctl reset-failed {DECODE}; systemctl restart {DECODE}", check=False)
    wait_healthy(testbed, "decode")
    assert snapshot(testbed, FILES) == before
    no_leftovers(testbed)
