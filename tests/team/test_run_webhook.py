"""`orch run --webhook URL`: the summary is POSTed when a plain sweep ends, and the sweep writes
status.json for `orch status` / `orch serve` like a queued one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli.main import main

from .helpers import make_site, matrix_text, webhook_receiver

pytestmark = pytest.mark.sim


def test_run_posts_its_summary_and_writes_live_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """In-process (the webhook and status.json are no process matter; an `orch` process costs
    ~1 s of start-up): conftest drops ORCH_WEBHOOKS, so only --webhook is heard."""
    site = make_site(tmp_path / "site")
    (tmp_path / "m.yaml").write_text(matrix_text("hooked"))
    with webhook_receiver() as hook:
        args = ["run", str(tmp_path / "m.yaml"), "-i", str(site.inventory), "--out", str(tmp_path / "reports")]
        code = main([*args, "--run-id", "hooked", "--webhook", hook.url])
        out, err = capsys.readouterr()
        assert code == 0, out + err
        assert len(hook.received) == 1
        body = hook.received[0][1]
        assert body["run_id"] == "hooked" and body["status"] == "completed" and body["trials"] == 2
    status = json.loads((tmp_path / "reports" / "hooked" / "status.json").read_text())
    assert status["done"] == status["total"] == 2
    assert site.env_files_unchanged() == [] and site.listening() == []
