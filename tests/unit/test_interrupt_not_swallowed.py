"""A SIGTERM is never swallowed by a best-effort read or write.

SIGTERM's handler raises Interrupted at whatever instruction the main thread is on. It was an
OrchError, and orch catches OrchError on purpose in ~45 places where a failure must not stop
the sweep (GPU facts, status.json, the report at the end, the runs index...): a SIGTERM landing
in one was swallowed with its failures (the kill-point harness: a SIGTERM in the report's phase
exited 0 with "report not written: received SIGTERM"; one while the runs index was written ran
the whole sweep). Interrupted is now a BaseException, as KeyboardInterrupt is: each test below
raises it inside one such site, as the handler would, and it must go on up. No process starts.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.edges import provenance
from orchestrator.errors import CommandInterrupted, Interrupted, OrchError
from orchestrator.store.rundir import TrialDir
from orchestrator.sweep import api
from orchestrator.team import livestatus

SIGTERM = "received SIGTERM"


def _raises(exc: BaseException):  # type: ignore[no-untyped-def]
    def fn(*args: object, **kwargs: object) -> None:
        raise exc

    return fn


def test_interrupted_speaks_as_before_but_is_no_error_a_failure_handler_catches() -> None:
    exc = CommandInterrupted(SimpleNamespace(host="h", stdout="", stderr="so far"))  # type: ignore[arg-type]
    assert (exc.exit_code, exc.kind, exc.detail) == (130, "interrupted", "so far")
    assert isinstance(exc, Interrupted)
    assert str(Interrupted(SIGTERM)) == SIGTERM
    for caught_for_failures in (OrchError, Exception):
        assert not isinstance(Interrupted(SIGTERM), caught_for_failures)


def test_a_sigterm_while_gpu_facts_are_read_stops_the_sweep() -> None:
    """provenance.gpu_facts: nvidia-smi failing is 'not available'; a SIGTERM is not a failure."""
    handle = SimpleNamespace(transport=SimpleNamespace(run=_raises(Interrupted(SIGTERM))))
    with pytest.raises(Interrupted, match=SIGTERM):
        provenance.gpu_facts(handle)  # type: ignore[arg-type]
    failing = SimpleNamespace(transport=SimpleNamespace(run=_raises(OrchError("nvidia-smi: not found"))))
    assert provenance.gpu_facts(failing) == provenance.gpuinfo.GpuInfo()  # type: ignore[arg-type]


def test_a_sigterm_while_the_report_is_written_exits_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """api._write_report: a report that cannot be written is a warning (exit 0); a SIGTERM during
    it was that warning too ('report not written: received SIGTERM', exit 0)."""
    from orchestrator.report import render
    from orchestrator.store.rundir import RunDir

    RunDir(tmp_path).journal.write_text("")
    monkeypatch.setattr(render, "write_report_and_summary", _raises(Interrupted(SIGTERM)))
    with pytest.raises(Interrupted, match=SIGTERM):
        api._write_report(tmp_path)
    monkeypatch.setattr(render, "write_report_and_summary", _raises(OrchError("disk full")))
    assert api._write_report(tmp_path) == (None, "disk full", ())


def test_a_sigterm_while_status_json_is_started_stops_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """livestatus.LiveStatus.start: a run folder it cannot read only leaves status.json out."""
    monkeypatch.setattr(livestatus, "load_manifest", _raises(Interrupted(SIGTERM)))
    with pytest.raises(Interrupted, match=SIGTERM):
        livestatus.LiveStatus(tmp_path).start(8, 0)
    monkeypatch.setattr(livestatus, "load_manifest", _raises(OrchError("run.json: unreadable")))
    status = livestatus.LiveStatus(tmp_path)
    status.start(8, 0)
    assert status.error == "run.json: unreadable"


def test_a_sigterm_during_a_remote_repro_still_stops_what_it_left_on_the_host(tmp_path: Path) -> None:
    """phases.Repro._run_remote stops what a repro cut short left running on its host, named on the
    exception. It caught (OrchError, KeyboardInterrupt): a SIGTERM's Interrupted, no longer an
    OrchError, must still get there (a SIGTERM between two of the transport's instructions, not
    inside its wait, which raises CommandInterrupted)."""
    from orchestrator.edges.remote_scope import Scoping
    from orchestrator.edges.transport import Result
    from orchestrator.sweep.phases import Repro

    calls: list[object] = []

    def run(command: object, **kwargs: object) -> Result:
        calls.append(command)
        if len(calls) == 1:
            raise Interrupted(SIGTERM)
        return Result("decode", "check", 0, "left|4242|c2xlZXAgNjA=\n", "", 0.0)  # one leftover: sleep 60

    host = SimpleNamespace(transport=SimpleNamespace(run=run, host="decode"))
    repro = Repro.__new__(Repro)
    repro.deployment = SimpleNamespace(  # type: ignore[assignment]
        hosts={"decode": host}, testbed=SimpleNamespace(name="tb", first=lambda role: SimpleNamespace(key="decode"))
    )
    repro.stopping = None  # type: ignore[assignment]
    repro.guard = SimpleNamespace(run_id="r1")  # type: ignore[assignment]  # its repros carry the run's id
    repro.scoping = {"decode": Scoping(False, "not root")}  # the mark check only (asked before the first repro)
    left: list[str] = []
    with pytest.raises(Interrupted, match=SIGTERM):
        outputs = (tmp_path / "out", tmp_path / "err")
        repro._run_remote("decode", "bench", 60.0, outputs, TrialDir(tmp_path), left.extend)
    assert len(calls) == 2 and "sh" in calls[1]  # the leftovers' check ran on the host
    assert left == ["pid 4242 (sleep 60)"]
    assert not TrialDir(tmp_path).repro_remote.exists()  # its check ran: nothing for a resume to stop


def test_a_sigterm_while_a_queue_item_is_announced_stops_the_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """cli.team's notifier, called by `orch queue run` between two items: webhooks that cannot be
    read are a warning, and the queue goes on to the next item; a SIGTERM then (systemd stopping
    the overnight queue) was that warning too, and the next item's sweep started."""
    from orchestrator.cli.team import _notifier
    from orchestrator.team import notify

    item = SimpleNamespace(webhooks=(), matrix="m.yaml")
    outcome = SimpleNamespace(message="", run_dir=None)
    monkeypatch.setattr(notify, "configured", _raises(Interrupted(SIGTERM)))
    with pytest.raises(Interrupted, match=SIGTERM):
        _notifier(())(item, outcome)  # type: ignore[arg-type]
    monkeypatch.setattr(notify, "configured", _raises(OrchError("webhooks.yaml: bad URL")))
    _notifier(())(item, outcome)  # type: ignore[arg-type]  # warned, not raised
