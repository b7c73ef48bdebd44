"""Ctrl-C/SIGTERM stops a repro that runs on a host (`repro.on: ROLE`), on the fakes: the runner
hands its stop Event to the transport (Transport.run's `stop`), the transport ends the command
(the SSH transport kills its process group on the host: tests/remote/test_ssh.py), and the trial
ends as interrupted, its output so far kept, the hosts restored, as with a repro on the controller."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from fakes import FakeTransport, Reply
from helpers.parallel_fakes import Fleet, install, run, runner_threads, trials_journaled, write_files

from orchestrator.errors import CommandInterrupted, Interrupted

ENV = {"prefill": "P=0\n", "decode": "D=0\n"}
MATRIX = """\
name: par
factors:
  d: {env: {decode: D}, levels: ["1", "2"]}
replicates: 4
repro:
  command: "fake-repro --trial {trial}"
  on: prefill
  timeout: 240
  metrics:
    events: {kind: proportion, regex: 'events=(?P<k>\\d+)/(?P<n>\\d+)'}
"""


def wait_for(condition, what: str, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_the_fake_honours_the_stop_event_and_keeps_the_output() -> None:
    t = FakeTransport("decode")
    t.script("repro", until_stopped=True, stdout="partial\n", stderr="oops\n")
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(CommandInterrupted) as exc:
        t.run("repro", timeout=240, check=False, stop=stop)
    assert time.monotonic() - t0 < 2
    assert isinstance(exc.value, Interrupted) and exc.value.exit_code == 130
    assert (exc.value.result.stdout, exc.value.result.stderr) == ("partial\n", "oops\n")
    assert t.calls[-1].stop is stop
    with pytest.raises(AssertionError, match="run without one"):  # nothing could cancel it
        t.run("repro", timeout=240, check=False)


def test_ctrl_c_stops_a_repro_on_a_host_at_once_and_restores_every_testbed(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Both testbeds' repros run on their prefill host and hang (until cancelled) when Ctrl-C comes:
    the sweep returns within seconds, not after the 240 s repro timeout, with both testbeds
    restored; each hung repro got the runner's stop Event, and what it printed is in repro.out."""
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, MATRIX, ["A", "B"])
    journal = tmp_path / "reports" / "r1" / "journal.jsonl"
    hung: set[str] = set()

    def hook(testbed: str, command: str) -> Reply | None:
        if trials_journaled(journal) < 2:
            return None
        hung.add(testbed)
        return Reply(until_stopped=True, stdout="session 1/40 done\n", stderr="still going\n")

    sent: list[float] = []

    def interrupter() -> None:
        wait_for(lambda: hung == {"A", "B"}, "both repros hung")
        time.sleep(0.3)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    fleet.repro_hook = hook
    thread = threading.Thread(target=interrupter, daemon=True)
    thread.start()
    outcome = run(tmp_path, m, i, ("A", "B"))
    took = time.monotonic() - sent[0]
    thread.join(5)
    assert took < 5, f"Ctrl-C took {took:.1f} s: the sweep waited for the repros on the hosts"
    assert not runner_threads() and outcome.interrupted and outcome.not_restored == ()
    for tb in "AB":
        assert fleet.file(tb, "decode") == ENV["decode"].encode() and fleet.extra_files(tb, "decode") == []
        repros = [c for c in fleet.transports[(tb, "prefill")].calls if c.target.startswith("fake-repro")]
        assert repros and all(c.stop is not None for c in repros)  # every repro could be stopped
        assert repros[-1].stop is not None and repros[-1].stop.is_set()
    outs = sorted((tmp_path / "reports" / "r1").glob("trials/*/repro.out"))
    kept = [p for p in outs if p.read_text() == "session 1/40 done\n"]
    assert len(kept) == 2, [p.read_text() for p in outs]  # the two interrupted trials' output so far
    assert all((p.parent / "repro.err").read_text() == "still going\n" for p in kept)
