"""Webhook notifications against a real local HTTP receiver."""

from __future__ import annotations

import socket
from dataclasses import asdict
from pathlib import Path

import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli.main import _finished, main
from orchestrator.errors import ConfigError, UsageError
from orchestrator.report.build import result_headline, suspect_reasons
from orchestrator.report.render import load_report
from orchestrator.store.journal import trial_statuses
from orchestrator.sweep.apitypes import SweepOutcome
from orchestrator.team.notify import Summary, Webhook, configured, send, shown, summarize_run

from .helpers import webhook_receiver

SUMMARY = Summary(
    run_id="r1",
    name="overlap_ablation",
    status="completed",
    headline="Corruption is 15% with X",
    link="http://orch:8765/r1/index.html",
    trials=8,
    failed=1,
    planned=8,
)
KEYS = {"run_id", "name", "status", "headline", "link", "trials", "failed"}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again on return: nothing listens there


def test_json_summary_is_posted() -> None:
    with webhook_receiver() as rx:
        deliveries = send(SUMMARY, [Webhook.parse(rx.url + "/hook")])
    assert [(d.ok, d.attempts) for d in deliveries] == [(True, 1)]
    path, body = rx.received[0]
    assert path == "/hook" and isinstance(body, dict)
    assert KEYS <= set(body) and body == asdict(SUMMARY)


def test_a_webhook_goes_through_the_proxy_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lab's controller reaches Slack only through its proxy (https_proxy exported, as for pip):
    the webhook went straight to the internet and was "not delivered" every night. It honours the
    environment's proxy and NO_PROXY as curl does. The stand-in proxy is a loopback receiver: it
    gets the request in proxy form (the whole URL), for an address where nothing listens."""
    hook = f"http://127.0.0.2:{closed_port()}/services/T/B/x"
    with webhook_receiver() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        deliveries = send(SUMMARY, [Webhook.parse(hook)])
    assert [(d.ok, d.attempts) for d in deliveries] == [(True, 1)], deliveries
    assert proxy.received and proxy.received[0][0] == hook


def test_no_proxy_sends_a_webhook_past_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    with webhook_receiver() as rx:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed_port()}")  # a proxy used fails
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        deliveries = send(SUMMARY, [Webhook.parse(rx.url + "/hook")])
    assert [(d.ok, d.attempts) for d in deliveries] == [(True, 1)], deliveries
    assert rx.received[0][0] == "/hook"


def test_slack_variant_posts_text_to_the_url_without_prefix() -> None:
    with webhook_receiver() as rx:
        send(SUMMARY, [Webhook.parse("slack+" + rx.url + "/services/T/B/secret")])
    path, body = rx.received[0]
    assert path == "/services/T/B/secret"
    assert set(body) == {"text"}  # type: ignore[arg-type]
    text = body["text"]  # type: ignore[index]
    for part in ("overlap_ablation", "r1", "completed", "8/8 trials, 1 failed", "Corruption is 15%", SUMMARY.link):
        assert part in text


def test_server_errors_are_retried_until_delivered() -> None:
    with webhook_receiver() as rx:
        rx.answers[:] = [503, 500]
        deliveries = send(SUMMARY, [Webhook.parse(rx.url)], backoff_s=0.01)
    assert deliveries[0].ok and deliveries[0].attempts == 3 and rx.hits == 3
    assert len(rx.received) == 1


def test_client_errors_are_not_retried_and_never_raise() -> None:
    warnings: list[str] = []
    with webhook_receiver() as rx:
        rx.answers[:] = [404]
        deliveries = send(
            SUMMARY, [Webhook.parse(rx.url + "/secret-path?token=abc")], warn=warnings.append, backoff_s=0.01
        )
    assert not deliveries[0].ok and deliveries[0].attempts == 1 and rx.hits == 1
    assert "HTTP 404" in deliveries[0].error
    assert len(warnings) == 1 and "secret-path" not in warnings[0] and "token" not in warnings[0]


def test_unreachable_webhook_fails_softly_and_others_still_get_it() -> None:
    warnings: list[str] = []
    dead = f"http://127.0.0.1:{closed_port()}/x"
    with webhook_receiver() as rx:
        deliveries = send(SUMMARY, [Webhook.parse(dead), Webhook.parse(rx.url)], warn=warnings.append, backoff_s=0.01)
    assert [d.ok for d in deliveries] == [False, True]
    assert deliveries[0].attempts == 3 and "ConnectError" in deliveries[0].error
    assert len(rx.received) == 1 and "not delivered after 3 attempts" in warnings[0]


def test_configured_merges_lists_and_environment_once_each() -> None:
    hooks = configured(
        ["http://a/1", "slack+https://b/2"],
        ("http://a/1",),
        environ={"ORCH_WEBHOOKS": "http://c/3, http://a/1\nhttp://d/4"},
    )
    assert [(h.url, h.slack) for h in hooks] == [
        ("http://a/1", False),
        ("https://b/2", True),
        ("http://c/3", False),
        ("http://d/4", False),
    ]
    assert configured([], environ={}) == []


@pytest.mark.parametrize("bad", ["ftp://x/y", "not a url", "slack+mailto:a@b", "http://"])
def test_bad_webhook_urls_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError) as exc:
        Webhook.parse(bad)
    assert exc.value.exit_code == 2


def test_shown_hides_path_and_query() -> None:
    assert shown("https://hooks.slack.com/services/T0/B0/XyZ") == "https://hooks.slack.com/…"
    assert shown("http://127.0.0.1:9000/") == "http://127.0.0.1:9000"
    assert shown("http://h:1?k=secret") == "http://h:1/…"


def test_summary_of_a_run_directory(tmp_path: Path) -> None:
    manifest, records = synthetic_run(replicates=1)  # trial 3 failed once, then completed on retry
    assert [r.trial for r in records if r.status == "failed"] == [3]
    last = records.pop()  # and the last planned trial failed for good (its own cell: the plan's)
    records.append(last.model_copy(update={"status": "failed", "metrics": {}}))
    run_dir = write_run(tmp_path / "reports" / manifest.run_id, manifest, records)
    s = summarize_run(run_dir, base_url="http://lab:8765/")
    assert (s.run_id, s.name, s.status) == (manifest.run_id, manifest.name, manifest.status)
    assert (s.planned, s.trials, s.failed) == (8, 8, 1)
    assert s.headline and s.link == f"http://lab:8765/{manifest.run_id}/index.html"
    local = summarize_run(run_dir, base_url="")
    assert local.link == (run_dir.resolve() / "index.html").as_uri()


def test_a_duplicated_line_is_refused_as_the_report_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report refused a journal holding a completed line twice (store.runtrials), and the
    webhook summarized it: `orch notify` now exits 2 naming the line, and posts nothing."""
    manifest, records = synthetic_run(replicates=1, failures=False)
    run_dir = write_run(tmp_path / manifest.run_id, manifest, [*records, records[0]])
    line = len(records) + 2  # after run_started and the records
    with pytest.raises(ConfigError) as refused:
        load_report(run_dir)
    assert refused.value.line == line
    with pytest.raises(ConfigError) as caught:
        summarize_run(run_dir, base_url="")
    assert str(caught.value) == str(refused.value)
    capsys.readouterr()
    with webhook_receiver() as rx:
        assert main(["notify", str(run_dir), "--webhook", rx.url + "/hook"]) == 2
    assert rx.received == []
    err = capsys.readouterr().err
    assert f"journal.jsonl:{line}: trial 0 attempt 1 finished twice" in err and "Traceback" not in err


def test_a_sweep_whose_journal_the_report_refuses_keeps_its_exit_code_and_says_why(tmp_path: Path) -> None:
    """`orch resume --webhook` of a journal holding a duplicated line runs (resume reads only each
    trial's status) and its report is refused; the webhook summary, refused the same way, turned
    the sweep's exit code into 2 and sent nothing. The webhook now says why there is no summary."""
    manifest, records = synthetic_run(replicates=1, failures=False)
    run_dir = write_run(tmp_path / manifest.run_id, manifest, [*records, records[0]])
    outcome = SweepOutcome(run_dir, manifest.run_id, "completed", 8, 0, 8, report_error="refused")
    with webhook_receiver() as rx:
        assert _finished(outcome, [Webhook.parse(rx.url + "/hook")]) == 0
    ((_, body),) = rx.received
    assert body["status"] == "error" and body["name"] == manifest.run_id  # type: ignore[index]
    assert "journal.jsonl:10: trial 0 attempt 1 finished twice" in body["headline"]  # type: ignore[index]


def test_a_trial_cut_off_during_its_retry_is_unfinished_as_for_resume_and_the_report(tmp_path: Path) -> None:
    """The last trial's attempt 1 failed and was journaled `retried`, then the controller was
    killed during attempt 2. Resume runs that trial again and the report counts it nowhere but
    among its failed attempts; the webhook counted it as a finished, failed trial (16/16 trials,
    1 failed). Its counts, headline and suspect reasons are the report's own now."""
    manifest, records = synthetic_run(replicates=2)  # trials 3 and 9 failed once, then completed
    *done, last = records
    cut = last.model_copy(update={"status": "failed", "retried": True, "metrics": {}, "failure": records[3].failure})
    run_dir = write_run(tmp_path / manifest.run_id, manifest.model_copy(update={"status": "interrupted"}), [*done, cut])
    s = summarize_run(run_dir, base_url="")
    report = load_report(run_dir)
    finished = trial_statuses(run_dir / "journal.jsonl").finished
    assert (s.trials, s.failed, s.planned) == (len(finished), 0, report.planned) == (15, 0, 16)
    assert s.trials - s.failed == report.completed
    assert s.headline == result_headline(report) and s.suspect == suspect_reasons(report)
    assert "3 trial attempts failed or were void" in s.suspect[0]  # trials 3 and 9 once each, and the cut-off attempt
    assert "15/16 trials, 0 failed" in s.text()
