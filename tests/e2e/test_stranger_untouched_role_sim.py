"""An auditor's scenario, on the bundled simulator: the matrix toggles a decode variable only, so
prefill keeps running from trial 0. Once trial 0 is journaled, prefill's server is killed -9 and a
stranger binds the freed port, answering 200 JSON to every GET and POST. prefill's health URL
answers at once, so no alive check between health polls ever runs: every later trial must still
be void (the unit orch relies on runs no process; after the retry restarts it, the stranger holds
its port), retried, never data."""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers.sim_sweep import ENV_FILES, make_inventory
from helpers.strangers import AlwaysOk, stranger_overlap_matrix

from orchestrator.cli.main import main
from orchestrator.core.records import TrialRecord
from orchestrator.report.build import suspect_reasons
from orchestrator.report.render import load_report
from orchestrator.store.journal import read_journal
from orchestrator.sweep.runner import Runner, RunResult

pytestmark = pytest.mark.sim

MATRIX = stranger_overlap_matrix("untouched")


class _Squatter:
    """Kills the unit's process by the pid in its pid file, binds its port as soon as the kernel
    frees it, and serves it from a thread of this process until stopped."""

    def __init__(self, pid_file: Path, port: int) -> None:
        self.pid_file, self.port = pid_file, port
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    def strike(self) -> None:
        os.kill(int(self.pid_file.read_text().split()[0]), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.server is None:
            try:
                self.server = ThreadingHTTPServer(("127.0.0.1", self.port), AlwaysOk)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.thread is not None:
            self.thread.join(timeout=10)


def test_a_stranger_on_the_port_of_a_role_the_trials_do_not_restart_voids_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    inv, (prefill_port, _, _) = make_inventory(tmp_path)  # free ports, never fixed ones
    (tmp_path / "m.yaml").write_text(MATRIX)
    originals = {n: (tmp_path / n).read_bytes() for n in ENV_FILES}
    squatter = _Squatter(tmp_path / "state" / "t-prefill.pid", prefill_port)
    journaled = Runner._record

    def record_then_strike(runner: Runner, record: TrialRecord, result: RunResult) -> None:
        journaled(runner, record, result)
        if squatter.server is None:  # after trial 0's record, before trial 1 starts
            assert record.status == "completed", record.failure
            squatter.strike()

    monkeypatch.setattr(Runner, "_record", record_then_strike)
    reports = tmp_path / "reports"
    try:
        code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inv), "--out", str(reports), "--run-id", "untouched"])
    finally:
        squatter.stop()
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert squatter.server is not None
    records = [r for r in read_journal(reports / "untouched" / "journal.jsonl").records if isinstance(r, TrialRecord)]
    first, later = records[0], records[1:]
    assert first.status == "completed"
    assert later and all(r.status == "failed" and r.metrics == {} for r in later), [(r.trial, r.status) for r in later]
    for r in later:
        assert r.failure is not None and r.failure.kind == "infrastructure", r.failure
    for trial in {r.trial for r in later}:  # every affected trial was retried (--retries 1): both attempts journaled
        assert sorted(r.attempt for r in later if r.trial == trial) == [1, 2], trial
    messages = [r.failure.message for r in later if r.failure]
    assert any("unit t-prefill is not running" in m for m in messages), messages
    assert any(f"is served by pid {os.getpid()}" in m for m in messages), messages  # the stranger, named
    assert " 0 failed" not in out
    report = load_report(reports / "untouched")  # every failed attempt counted, not one per trial
    assert report.failed == len(later) == 2 * len({r.trial for r in later})
    assert any(f"{len(later)} trial attempts failed" in reason for reason in suspect_reasons(report))
    for name, data in originals.items():  # hosts restored
        assert (tmp_path / name).read_bytes() == data, name
