"""`orch schedule` on a real systemd 252 host (the testbed): the timer fires, its service runs
`orch queue run`, and the queued sweep completes.

Everything happens inside the testbed host "prefill", driven over SSH with the OpenSSH client (not
the code under test): orch (this checkout and interpreter, which the host sees read-only) queues a
tiny sweep on a simulated deployment of its own inside the host (ports 318xx of the host's network
namespace), installs a timer a few seconds ahead with a webhook (a receiver on the host's
loopback), and systemd does the rest: the service runs the queue, the sweep completes, the hosts
are restored and the webhook hears about it through the unit's 0600 EnvironmentFile.
"""

from __future__ import annotations

import base64
import json
import shlex
import time

import pytest
from testbed.fixture import Testbed

from .helpers import ENV_FILES, inventory_text, matrix_text

pytestmark = pytest.mark.testbed

HOST = "prefill"
WORK = "/root/orch-schedule-test"  # on the host's own tmpfs
PORTS = (31800, 31801, 31802)
LEAD_S = 10  # the calendar time is this far ahead of `schedule install`
RX_PORT = 31899
RECEIVER = """
import http.server, sys
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open(sys.argv[2], "ab") as f:
            f.write(body + b"\\n")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Hook).serve_forever()
"""


def put(tb: Testbed, path: str, data: bytes) -> None:
    b64 = base64.b64encode(data).decode()
    tb.ssh(HOST, f"mkdir -p {shlex.quote(path.rsplit('/', 1)[0])} && echo {b64} | base64 -d > {shlex.quote(path)}")


def show(tb: Testbed, unit: str, *props: str) -> dict[str, str]:
    out = tb.ssh(HOST, f"systemctl show {unit} -p {','.join(props)}").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def orch(tb: Testbed, args: str, check: bool = True) -> str:
    proc = tb.ssh(
        HOST, f"cd {WORK} && {shlex.quote(tb.python)} -m orchestrator.cli.main {args}", check=check, timeout=120
    )
    return proc.stdout + proc.stderr


def test_timer_runs_the_queue_on_real_systemd(testbed: Testbed) -> None:
    tb = testbed
    for name, text in ENV_FILES.items():
        put(tb, f"{WORK}/site/{name}", text.encode())
    put(tb, f"{WORK}/site/inventory.yaml", inventory_text(PORTS).encode())
    put(tb, f"{WORK}/m.yaml", matrix_text("nightly_sweep").encode())
    put(tb, f"{WORK}/rx.py", RECEIVER.encode())
    try:
        # a webhook receiver inside the host (its loopback), as a transient unit
        tb.ssh(
            HOST,
            f"systemd-run --unit=orch-test-rx --collect {shlex.quote(tb.python)} {WORK}/rx.py "
            f"{RX_PORT} {WORK}/hooks.jsonl",
        )
        assert "queued item 1: nightly_sweep (2 trials" in orch(tb, "queue add m.yaml -i site/inventory.yaml")
        refused = orch(tb, "schedule install nightly --on-calendar '*-*-* 01:00' --system", check=False)
        assert "would run every queued sweep as root" in refused  # root must say who runs the sweeps
        assert "orch-nightly" not in tb.ssh(HOST, "ls /etc/systemd/system").stdout
        at = tb.ssh(HOST, f"date -d @$(( $(date +%s) + {LEAD_S} )) '+%Y-%m-%d %H:%M:%S'").stdout.strip()
        hook = f"http://127.0.0.1:{RX_PORT}/hook"
        installed = orch(
            tb, f"schedule install nightly --on-calendar {shlex.quote(at)} --system --user root --webhook {hook}"
        )
        assert "installed orch-nightly.timer (system)" in installed
        assert tb.ssh(HOST, "stat -c %a /etc/systemd/system/orch-nightly.env").stdout.strip() == "600"
        assert str(RX_PORT) not in tb.ssh(HOST, "cat /etc/systemd/system/orch-nightly.service").stdout
        assert tb.ssh(HOST, "systemctl is-enabled orch-nightly.timer").stdout.strip() == "enabled"
        timer = show(tb, "orch-nightly.timer", "ActiveState", "NextElapseUSecRealtime", "LastTriggerUSec")
        assert timer["ActiveState"] == "active"
        assert timer["NextElapseUSecRealtime"] or timer["LastTriggerUSec"], (
            f"install took longer than {LEAD_S} s: {at} passed before the timer was enabled ({timer})"
        )
        unit = tb.ssh(HOST, "cat /etc/systemd/system/orch-nightly.service").stdout
        assert f"WorkingDirectory={WORK}\n" in unit and "queue" in unit and "Type=oneshot" in unit
        assert "\nUser=root\n" in unit
        assert (
            tb.ssh(
                HOST,
                "systemd-analyze verify /etc/systemd/system/orch-nightly.timer "
                "/etc/systemd/system/orch-nightly.service",
                check=False,
            ).returncode
            == 0
        )

        ran = wait_for_service(tb, timeout_s=120)
        journal = tb.ssh(HOST, "journalctl -u orch-nightly.service --no-pager -o cat").stdout
        assert ran["Result"] == "success" and ran["ExecMainStatus"] == "0", journal[-3000:]
        assert "2 trials completed, 0 failed" in journal
        (hook_body,) = [json.loads(line) for line in tb.ssh(HOST, f"cat {WORK}/hooks.jsonl").stdout.splitlines()]
        assert (hook_body["name"], hook_body["status"], hook_body["trials"]) == ("nightly_sweep", "completed", 2)

        runs = tb.ssh(HOST, f"ls -d {WORK}/reports/*/run.json").stdout.split()
        assert len(runs) == 1
        run = json.loads(tb.ssh(HOST, f"cat {runs[0]}").stdout)
        assert run["status"] == "completed" and run["name"] == "nightly_sweep"
        lines = tb.ssh(HOST, f"wc -l < {runs[0].rsplit('/', 1)[0]}/journal.jsonl").stdout
        assert int(lines) >= 2
        listed = orch(tb, "queue list")
        assert "completed" in listed and "2/2 trials, 0 failed" in listed
        for name, text in ENV_FILES.items():  # the host's own sim deployment was restored
            assert tb.ssh(HOST, f"base64 -w0 {WORK}/site/{name}").stdout == base64.b64encode(text.encode()).decode()
        assert (
            tb.ssh(
                HOST, f"ss -Hltn '( sport = :{PORTS[0]} or sport = :{PORTS[1]} or sport = :{PORTS[2]} )'"
            ).stdout.strip()
            == ""
        )

        listing = orch(tb, "schedule list --system")
        assert "nightly" in listing and f"OnCalendar={at}" in listing and "success" in listing
        assert "removed" in orch(tb, "schedule remove nightly --system")
        assert tb.ssh(HOST, "ls /etc/systemd/system/orch-nightly.* 2>/dev/null", check=False).stdout == ""
        assert "orch-nightly" not in tb.ssh(HOST, "systemctl list-timers --all --no-pager").stdout
    finally:
        tb.ssh(
            HOST,
            "systemctl stop orch-test-rx 2>/dev/null; systemctl disable --now orch-nightly.timer 2>/dev/null; "
            "rm -f /etc/systemd/system/orch-nightly.*; systemctl daemon-reload; "
            f"systemctl reset-failed orch-nightly.service 2>/dev/null; rm -rf {WORK}",
            check=False,
        )


def wait_for_service(tb: Testbed, timeout_s: float) -> dict[str, str]:
    """Until the timer's oneshot service has run once and exited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        state = show(
            tb, "orch-nightly.service", "ActiveState", "Result", "ExecMainStatus", "ExecMainExitTimestampMonotonic"
        )
        if state.get("ExecMainExitTimestampMonotonic", "0") not in ("", "0") and state["ActiveState"] != "activating":
            return state
        time.sleep(0.5)
    timer = show(tb, "orch-nightly.timer", "ActiveState", "NextElapseUSecRealtime", "LastTriggerUSec")
    raise AssertionError(f"orch-nightly.service did not run within {timeout_s} s (timer: {timer})")
