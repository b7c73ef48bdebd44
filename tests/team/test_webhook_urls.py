"""Webhook URLs that cannot be used are bad input, refused whole when given, and never a crash
when already stored. Found in review: Webhook.parse checked only the scheme and the host, so a
port out of range or not a number, or a broken IPv6 literal, got through; `orch notify` then died
with a traceback (exit 1), `orch queue add` stored it and `orch queue list` crashed on it for good,
and send() let httpx.InvalidURL out (not an httpx.HTTPError)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli.main import main
from orchestrator.cli.team import _notifier
from orchestrator.errors import UsageError
from orchestrator.team.notify import Summary, Webhook, send, shown
from orchestrator.team.queue import Queue, SweepOutcome

from .helpers import make_site, matrix_text

SECRET = "T0/B0/tok-secret-1?key=k-secret-2"
BAD = {  # the URL -> how it is shown (scheme and host only)
    f"http://127.0.0.1:99999/{SECRET}": "http://127.0.0.1/…",
    f"http://127.0.0.1:abc/{SECRET}": "http://127.0.0.1/…",
    f"http://127.0.0.1:0/{SECRET}": "http://127.0.0.1/…",
    f"http://[::1/{SECRET}": "http://[::1/…",
    f"slack+https://[::1/{SECRET}": "slack+https://[::1/…",
    f"http://xn--/{SECRET}": "http://xn--/…",
    f"http://h\x01st/{SECRET}": "http://h\x01st/…",
}
SUMMARY = Summary(run_id="r1", name="n", status="completed", headline="h", link="", trials=1, failed=0)


@pytest.mark.parametrize("url", BAD)
def test_an_unusable_url_is_a_usage_error_that_names_scheme_and_host_only(url: str) -> None:
    with pytest.raises(UsageError) as exc:
        Webhook.parse(url)
    assert exc.value.exit_code == 2
    assert repr(BAD[url]) in str(exc.value) and "secret" not in str(exc.value)


@pytest.mark.parametrize("url", BAD)
def test_shown_never_raises(url: str) -> None:
    assert shown(url) == BAD[url]


def test_usable_urls_still_parse() -> None:
    for url in ("http://127.0.0.1:65535/x", "https://[::1]:8443/x?t=1", "https://hooks.slack.com/services/T/B/x"):
        assert Webhook.parse(url).url == url
    assert Webhook.parse("slack+https://héllo.example/x").slack


@pytest.mark.parametrize("url", [f"http://127.0.0.1:abc/{SECRET}", f"http://xn--/{SECRET}"])
def test_send_never_raises_on_a_url_httpx_refuses(url: str) -> None:
    """A Webhook made without parse (an older orch's, a caller's): one attempt, a warning, no raise."""
    warnings: list[str] = []
    with httpx.Client(trust_env=False) as client:
        (delivery,) = send(SUMMARY, [Webhook(url)], client=client, warn=warnings.append, backoff_s=0.01)
    assert not delivery.ok and delivery.attempts == 1 and "not a usable URL" in delivery.error
    assert len(warnings) == 1 and "secret" not in warnings[0]


@pytest.mark.parametrize("url", [f"http://127.0.0.1:99999/{SECRET}", f"http://[::1/{SECRET}"])
def test_notify_with_a_bad_url_exits_2(tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    manifest, records = synthetic_run(replicates=1)
    run_dir = write_run(tmp_path / manifest.run_id, manifest, records)
    assert main(["notify", str(run_dir), "--webhook", url]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err and "secret" not in err


def test_queue_add_refuses_a_bad_port(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = make_site(tmp_path / "site")
    matrix = tmp_path / "m.yaml"
    matrix.write_text(matrix_text("badport"))
    reports = tmp_path / "reports"
    args = ["queue", "add", str(matrix), "-i", str(site.inventory), "--reports", str(reports)]
    assert main([*args, "--webhook", f"http://127.0.0.1:99999/{SECRET}"]) == 2
    assert "secret" not in capsys.readouterr().err
    assert not (reports / "queue.db").exists() or not Queue.in_reports(reports).items()


def stored(reports: Path) -> None:
    """Items whose URLs an older orch let into the queue."""
    reports.mkdir(parents=True, exist_ok=True)
    with Queue.in_reports(reports) as q:
        q.add(Path("/m/nightly.yaml"), Path("/i.yaml"), None, 0, tuple(BAD))


def test_queue_list_shows_stored_bad_urls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stored(tmp_path / "reports")
    assert main(["queue", "list", "--reports", str(tmp_path / "reports")]) == 0
    out = capsys.readouterr().out
    assert "http://127.0.0.1/…" in out and "http://[::1/…" in out and "secret" not in out


def test_the_queue_notifier_warns_about_a_stored_bad_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After a sweep, a bad stored URL is a warning: the queue runner goes on to the next item."""
    stored(tmp_path / "reports")
    with Queue.in_reports(tmp_path / "reports") as q:
        (item,) = q.items()
    _notifier(())(item, SweepOutcome("error", 2, None, "could not start"))
    err = capsys.readouterr().err
    assert "webhooks not sent" in err and "secret" not in err
