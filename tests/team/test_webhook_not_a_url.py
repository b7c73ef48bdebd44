"""A webhook given without `scheme://` is named in the user's words: `--webhook not-a-url` said
`webhook ':///…': not an http(s) URL` (urlsplit reads a bare word as a path, and shown() printed
an empty scheme and host). Still never the secret: a bare word may be the token itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli.main import main
from orchestrator.errors import UsageError
from orchestrator.team.notify import NOT_A_URL, Webhook, shown

CASES = {  # text -> (how it is shown, what the error says)
    "not-a-url": (NOT_A_URL, "missing https://"),
    "xoxb-1234-tok-secret": (NOT_A_URL, "missing https://"),
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIx.tok-secret": (NOT_A_URL, "missing https://"),
    "hooks.slack.com/services/T0/B0/tok-secret": ("hooks.slack.com/…", "missing https://"),
    "slack+hooks.slack.com/services/tok-secret": ("slack+hooks.slack.com/…", "missing https://"),
    "10.0.0.1:8080/tok-secret": ("10.0.0.1:8080/…", "missing https://"),
    "user:tok-secret@example.com/x": (NOT_A_URL, "missing https://"),
    "://example.com/tok-secret": (NOT_A_URL, "missing https://"),
    "https:/example.com/tok-secret": (NOT_A_URL, "needs :// after its scheme"),
    "http://": ("http://", "no host after http://"),
}


@pytest.mark.parametrize("text", CASES)
def test_a_text_without_a_scheme_is_shown_and_refused_in_plain_words(text: str) -> None:
    label, problem = CASES[text]
    assert shown(text) == label
    with pytest.raises(UsageError) as exc:
        Webhook.parse(text)
    message = str(exc.value)
    assert ":///" not in message and "secret" not in message
    assert problem in message
    assert (f"webhook {NOT_A_URL}:" if label == NOT_A_URL else f"webhook {label!r}:") in message


def test_notify_with_not_a_url_says_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest, records = synthetic_run(replicates=1)
    run_dir = write_run(tmp_path / manifest.run_id, manifest, records)
    assert main(["notify", str(run_dir), "--webhook", "not-a-url"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "error: webhook (not a URL): missing https:// at the start (write https://host/path" in err
    assert ":///" not in err and "Traceback" not in err
