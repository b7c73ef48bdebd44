"""The issue's scenario, on the bundled simulator: a stranger takes decode's port after preflight
passed (as an orphaned server or an old process that has not let go would), so orch's own decode
dies with "Address already in use" while the stranger answers /health with 200. No trial may be
counted: each one is void, naming the stranger, and the hosts are restored."""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers.sim_sweep import ENV_FILES, make_inventory
from helpers.strangers import AlwaysOk, stranger_overlap_matrix

from orchestrator.cli.main import main
from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal

pytestmark = pytest.mark.sim

MATRIX = stranger_overlap_matrix("stranger")


class _Stranger:
    """Waits until the sweep has started (its journal exists: preflight is behind it), then grabs
    the port the moment it is free and serves it until stopped."""

    def __init__(self, port: int, journal: Path) -> None:
        self.port, self.journal = port, journal
        self.server: ThreadingHTTPServer | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.journal.exists() and not self.stopping.is_set():
            time.sleep(0.005)
        while not self.stopping.is_set():
            try:
                self.server = ThreadingHTTPServer(("127.0.0.1", self.port), AlwaysOk)
                break
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                time.sleep(0.001)
        if self.server is not None:
            self.server.serve_forever(poll_interval=0.05)

    def stop(self) -> None:
        self.stopping.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self.thread.join(timeout=10)


def test_a_stranger_on_a_health_port_mid_sweep_voids_every_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv, (prefill_port, router_port, decode_port) = make_inventory(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    originals = {n: (tmp_path / n).read_bytes() for n in ENV_FILES}
    run_dir = tmp_path / "reports" / "stranger"
    stranger = _Stranger(decode_port, run_dir / "journal.jsonl")
    try:
        code = main(
            [
                "run",
                str(tmp_path / "m.yaml"),
                "-i",
                str(inv),
                "--out",
                str(tmp_path / "reports"),
                "--run-id",
                "stranger",
            ]
        )
        assert stranger.server is not None, "the stranger never got the port"
    finally:
        stranger.stop()
    out, err = capsys.readouterr()
    assert code == 1, out + err
    trials = [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]
    assert trials and all(t.status == "failed" for t in trials), [(t.trial, t.status) for t in trials]
    assert all(not t.metrics for t in trials)  # nothing the stranger served became data
    me = f"pid {os.getpid()}"  # the stranger runs in this test's process
    named = [t for t in trials if t.failure and me in t.failure.message]
    assert named, [t.failure.message for t in trials if t.failure]
    assert "0 trials completed" in out
    for name, data in originals.items():  # hosts restored
        assert (tmp_path / name).read_bytes() == data, name
    with socket.socket() as s:  # and orch's own units are gone (the stranger is stopped above)
        assert s.connect_ex(("127.0.0.1", prefill_port)) != 0 and s.connect_ex(("127.0.0.1", router_port)) != 0
