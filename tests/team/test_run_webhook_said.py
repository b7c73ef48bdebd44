"""`orch run --webhook URL`'s end (cli.main._finished, on a synthetic run: no sweep, no process):
a delivered summary is said, as `orch notify` says it; a failed one says the sweep is unaffected."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli.main import _finished
from orchestrator.sweep.apitypes import SweepOutcome
from orchestrator.team.notify import Webhook

from .helpers import webhook_receiver


def test_a_sweeps_webhook_says_whether_it_was_delivered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest, records = synthetic_run(replicates=1)
    run_dir = write_run(tmp_path / manifest.run_id, manifest, records)
    outcome = SweepOutcome(run_dir, manifest.run_id, "completed", len(records), 0, len(records))
    with webhook_receiver() as rx:
        assert _finished(outcome, [Webhook.parse(rx.url + "/ok")]) == 0
        rx.answers = [500, 500, 500]
        _finished(outcome, [Webhook.parse(rx.url + "/down")])
    err = " ".join(capsys.readouterr().err.split())
    assert f"webhook {rx.url}/…: delivered (1 attempt)" in err
    assert "not delivered after 3 attempts: HTTP 500 (the sweep itself is unaffected)" in err
