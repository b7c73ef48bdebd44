"""kill -9 of the controller during a repro on a host (`repro.on: decode`), on real systemd + sshd
hosts: the SSH connection dies with the controller, and closing it does not stop the command, so
the repro (here a `sleep` in the background, its environment cleared, and one in the foreground)
runs on there, past its
trial. Its trial folder recorded where it runs (trials/NNNN/repro.remote: testbed, host key, mark,
scope), and `orch restore RUN` or `orch resume RUN` stops it on decode with the leftover check's
one round trip before doing anything else there, says so, and drops the record. With the run
folder deleted, `orch restore --testbed` finds it by the run's id in its environment (ORCH_REPRO_RUN)
and in its scope's name (the sleep without an environment). (Only the first
repro sleeps: the resume's re-run of that trial prints its summary and ends.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.ssh_sweep import ENV_FILES, no_leftovers, snapshot, ssh_overlap_matrix
from testbed.fixture import Testbed

from orchestrator.cli.main import main

pytestmark = pytest.mark.testbed

FILES = {**ENV_FILES, "decode": "/etc/sglang/decode.env"}
MATRIX = ssh_overlap_matrix(
    "repro-orphan",
    """\
  command: >-
    if [ -e PIDFILE ]; then echo 'CORRUPTION sessions: 0/8';
    else env -i sleep 300.125 & echo "$! $$" > PIDFILE; exec sleep 300.25; fi
  on: decode
  timeout: 240
""",
)


@pytest.mark.parametrize("command", ["restore", "resume", "restore-testbed"])
def test_restore_and_resume_stop_the_repro_a_killed_controller_left_running_on_a_host(
    command: str, testbed: Testbed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(testbed, FILES)
    pidfile = f"/var/tmp/orch-repro-orphan-{os.getpid()}.pid"
    (tmp_path / "m.yaml").write_text(MATRIX.replace("PIDFILE", pidfile))
    run_dir = tmp_path / "orphaned"
    argv = ["run", str(tmp_path / "m.yaml"), "-i", str(testbed.inventory), "-t", "dsv4-pd", "--out", str(tmp_path)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli.main", *argv, "--run-id", "orphaned"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while testbed.ssh("decode", f"test -s {pidfile}", check=False).returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.2)
        proc.kill()  # SIGKILL, during the repro: nothing of orch runs any more
        proc.communicate(timeout=30)
        background, foreground = testbed.ssh("decode", f"cat {pidfile}").stdout.split()
        alive = testbed.ssh("decode", f"kill -0 {background} {foreground}", check=False)
        assert alive.returncode == 0, "the repro did not outlive its controller: nothing to test"
        assert list(run_dir.glob("trials/*/repro.remote")), "the repro on decode was not recorded"

        if command == "restore-testbed":  # the run folder gone: found by the run's id in the repro's environment
            shutil.rmtree(run_dir)
            argv = ["restore", "--testbed", "dsv4-pd", "-i", str(testbed.inventory)]
        else:
            argv = [command, str(run_dir)]
        t0 = time.monotonic()
        code = main(argv)
        took = time.monotonic() - t0
        out = capsys.readouterr()
        text = out.out + out.err
        assert code == 0, text
        assert "Traceback" not in text
        if command == "restore-testbed":
            said = "what run orphaned's repro left running when its controller was killed: pid "
            assert "stopped on decode" in text and said in text and "sleep 300.125" in text, text
        else:
            assert "trial 0000: stopped its repro on decode" in text, text
            assert "left running by a controller that was killed" in text, text
        left = testbed.ssh("decode", f"kill -0 {background}; kill -0 {foreground}", check=False)
        assert left.returncode != 0 and "No such process" in left.stderr, "a sleep of the repro still runs on decode"
        for pid in (background, foreground):
            assert testbed.ssh("decode", f"kill -0 {pid}", check=False).returncode != 0, f"pid {pid} still runs"
        assert not list(run_dir.glob("trials/*/repro.remote")), "the record outlived its repro"
        assert snapshot(testbed, FILES) == before
        no_leftovers(testbed)
        with capsys.disabled():
            print(f"\n[ssh] {command} after kill -9 during a repro on decode: {took:.2f} s, its repro stopped there")
    finally:
        if proc.poll() is None:
            proc.kill()
        testbed.ssh("decode", f"pkill -f 'sleep 300[.](125|25)'; rm -f {pidfile}", check=False)
