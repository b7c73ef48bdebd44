"""`orch run --webhook URL`: a bad URL (or a bad ORCH_WEBHOOKS entry) is bad input, refused with
exit 2 before the sweep starts. Found after the sweep, it replaced the sweep's own exit code with
2 ("nothing touched") although every trial had run."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main

from .helpers import make_site, matrix_text


@pytest.mark.parametrize("where", ["flag", "environment"])
def test_a_bad_webhook_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    site = make_site(tmp_path / "site")
    matrix = tmp_path / "m.yaml"
    matrix.write_text(matrix_text("hooked"))
    hook = "ftp://example.invalid/hook"
    if where == "environment":  # read when some --webhook is given
        monkeypatch.setenv("ORCH_WEBHOOKS", hook)
        hook = "http://127.0.0.1:9/hook"
    reports = tmp_path / "reports"
    code = main(["run", str(matrix), "-i", str(site.inventory), "--out", str(reports), "--webhook", hook])
    assert code == 2
    assert "error:" in capsys.readouterr().err
    assert not reports.exists() or not any(p.is_dir() for p in reports.iterdir())  # no run was made
