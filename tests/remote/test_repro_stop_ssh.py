"""SIGTERM during a repro that runs on a host (`repro.on: decode`), on real systemd + sshd hosts:
orch kills the repro's process group ON THE HOST at once (closing the channel would leave it
running, and the sweep would wait out the repro's 240 s timeout before restoring), keeps what it
printed, restores every host and exits 130."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from helpers.ssh_sweep import ENV_FILES, no_leftovers, snapshot, ssh_overlap_matrix
from testbed.fixture import Testbed

from orchestrator.cli.main import main

pytestmark = pytest.mark.testbed

FILES = {**ENV_FILES, "decode": "/etc/sglang/decode.env"}
MATRIX = ssh_overlap_matrix(
    "repro-stop",
    """\
  command: "echo $$ > PIDFILE; echo 'session 1/8 done'; sleep 300.375"
  on: decode
  timeout: 240
""",
)


def test_sigterm_during_a_repro_on_a_host_kills_it_there_and_restores(
    testbed: Testbed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(testbed, FILES)
    pidfile = f"/var/tmp/orch-repro-stop-{os.getpid()}.pid"
    (tmp_path / "m.yaml").write_text(MATRIX.replace("PIDFILE", pidfile))
    sent: list[float] = []
    finished = threading.Event()

    def terminate_once_the_repro_sleeps() -> None:
        deadline = time.monotonic() + 120
        while testbed.ssh("decode", f"test -s {pidfile}", check=False).returncode != 0:
            if time.monotonic() > deadline:
                return  # the assertions below say what went wrong
            time.sleep(0.2)
        time.sleep(0.5)
        if not finished.is_set():  # never a SIGTERM once orch returned: it would end pytest
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=terminate_once_the_repro_sleeps, daemon=True)
    thread.start()
    argv = ["run", str(tmp_path / "m.yaml"), "-i", str(testbed.inventory), "-t", "dsv4-pd", "--out", str(tmp_path)]
    try:
        try:
            code = main([*argv, "--run-id", "stopped"])
        finally:
            finished.set()
        took = time.monotonic() - sent[0] if sent else float("nan")
        thread.join(5)
        err = capsys.readouterr().err
        assert sent, f"the repro never started on decode: {err}"
        assert code == 130, err
        # the restore (env files back, units restarted and healthy) is most of it; the repro's
        # kill on the host takes ~0.1 s
        assert took < 30, f"orch exited {took:.1f} s after SIGTERM: it waited for the repro on decode"
        pid = testbed.ssh("decode", f"cat {pidfile}").stdout.strip()
        left = testbed.ssh("decode", f"kill -0 {pid}; pgrep -f 'sleep 300[.]375'", check=False)
        assert left.returncode == 1 and left.stdout == "", f"the repro still runs on decode: {left.stdout}"
        outs = list((tmp_path / "stopped" / "trials").glob("*/repro.out"))
        assert [p.read_text() for p in outs] == ["session 1/8 done\n"]  # its output so far is kept
        assert snapshot(testbed, FILES) == before
        no_leftovers(testbed)
        with capsys.disabled():
            print(f"\n[ssh] SIGTERM during a repro on decode: orch exited 130 after {took:.2f} s (hosts restored)")
    finally:
        testbed.ssh("decode", f"pkill -f 'sleep 300[.]375'; rm -f {pidfile}", check=False)
