"""The generic webhook's JSON body is bounded whatever the run folder holds: Slack's text was
escaped and capped, the JSON body was the summary whole (a 1 MB matrix name and 5,000 flagged
cells: 1.7 MB posted). Each free text is cut with an ellipsis, each list keeps its first items and
counts the rest; the report link and the restore command are never cut."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.core.clip import clip, clip_list
from orchestrator.store.liveness import MAX_RESTORE_CHARS, StatusFile, read_status
from orchestrator.store.rundir import RunDir
from orchestrator.team.notify import (
    BODY_MAX_BYTES,
    ITEMS_SHOWN,
    Summary,
    Webhook,
    json_bytes,
    send,
    summarize_run,
)

from .helpers import webhook_receiver

LINK = "http://orch.lab:8765/20260509-070000-x/index.html"
RESTORE = "orch restore /srv/reports/20260509-070000-x"


def _huge(name: str, cells: int = 5000) -> Summary:
    """A summary of a 1 MB `name` whose nightly check flagged `cells` cells, with every list full."""
    return Summary(
        run_id="20260509-070000-x",
        name=name,
        status="completed",
        headline="H" * 1_000_000,
        link=LINK,
        trials=cells * 3,
        failed=0,
        planned=cells * 3,
        suspect=[f"corruption overdispersed in cell {i} " + "s" * 2000 for i in range(cells)],
        changes=[f"corruption in overlap=on,cell={i}: 1.0% -> 9.0% now (p=0.001)" for i in range(cells)],
        not_restored=[f"testbed{i}/decode" for i in range(cells)],
        restore_with=RESTORE,
    )


def test_a_1mb_name_and_5000_cells_post_a_body_under_64_kib_with_the_cuts_shown() -> None:
    summary = _huge("N" * 1_000_000)
    whole = len(json_bytes(summary.__dict__))
    body = Webhook.parse("http://127.0.0.1:9/hook").body(summary)
    sent = len(json_bytes(body))
    assert whole > 3_000_000 and sent <= BODY_MAX_BYTES, (whole, sent)
    assert set(body) == set(summary.__dict__)  # the same fields, the same types
    assert str(body["name"]).endswith("…") and str(body["headline"]).endswith("…")
    for key in ("suspect", "changes", "not_restored"):
        shown = body[key]
        assert isinstance(shown, list) and len(shown) == ITEMS_SHOWN + 1
        assert shown[-1] == f"… and {5000 - ITEMS_SHOWN:,} more", shown[-1]
    assert body["changes"][0] == summary.changes[0]  # type: ignore[index]  # short items whole
    assert body["link"] == LINK and body["restore_with"] == RESTORE  # never cut
    assert (body["trials"], body["failed"], body["planned"]) == (15000, 0, 15000)


def test_a_small_summary_is_posted_unchanged() -> None:
    small = Summary("r1", "overlap", "completed", "15% with X", LINK, 8, 1, 8, ["1 failed"], ["c"], ["decode"], RESTORE)
    assert small.json_body() == small.__dict__


def test_control_characters_encoded_six_bytes_each_still_fit() -> None:
    """Each \\x01 becomes `\\u0001` in JSON: at the first caps the body is 6 x ~18,000 characters;
    the caps shrink until it fits, and the link and restore command are still whole."""
    summary = _huge("\x01" * 1_000_000)
    summary = Summary(**{**summary.__dict__, "suspect": ["\x01" * 5000] * 5000, "changes": ["\x02" * 5000] * 5000})
    body = summary.json_body()
    assert len(json_bytes(body)) <= BODY_MAX_BYTES
    assert body["link"] == LINK and body["restore_with"] == RESTORE


def test_a_real_run_of_a_1mb_name_reaches_the_receiver_bounded(tmp_path: Path) -> None:
    manifest, records = synthetic_run(replicates=1)
    run_dir = write_run(tmp_path / manifest.run_id, manifest.model_copy(update={"name": "n" * 1_000_000}), records)
    summary = summarize_run(run_dir, base_url="http://lab:8765")
    with webhook_receiver() as rx:
        send(summary, [Webhook.parse(rx.url + "/json")])
    ((_, body),) = rx.received
    assert len(json_bytes(body)) <= BODY_MAX_BYTES and body["name"] == clip("n" * 1_000_000, 300)  # type: ignore[index]
    assert body["link"] == f"http://lab:8765/{manifest.run_id}/index.html"  # type: ignore[index]


def _unrestored(tmp_path: Path, roles: list[str], restore_with: str) -> Path:
    manifest, records = synthetic_run(replicates=1, failures=False)
    run_dir = write_run(tmp_path / manifest.run_id, manifest, records)
    status = StatusFile(
        run_id=manifest.run_id, name=manifest.name, testbed="local", host="h", pid=1, pid_start=1,
        state="finished", started=manifest.started, updated=manifest.started, done=8, total=8, failed=0,
        not_restored=tuple(roles), restore_with=restore_with,
    )  # fmt: skip
    RunDir(run_dir).status_json.write_text(status.model_dump_json())
    return run_dir


def test_a_restore_command_longer_than_orch_writes_is_replaced_by_orchs_own(tmp_path: Path) -> None:
    """status.json may hold up to a MiB; the summary never cuts the restore command, so one longer
    than any orch writes is not taken: orch's own for the run's folder is sent."""
    run_dir = _unrestored(tmp_path, ["decode"], "orch restore " + "x" * 500_000)
    status = read_status(run_dir)
    assert status is not None and len(status.restore_with) > MAX_RESTORE_CHARS  # read back whole
    summary = summarize_run(run_dir, base_url="")
    assert summary.restore_with == f"orch restore {run_dir.absolute()}"
    written = _unrestored(tmp_path / "b", ["decode"], "orch restore /elsewhere/run")
    assert summarize_run(written, base_url="").restore_with == "orch restore /elsewhere/run"


def test_slack_cuts_a_long_list_of_roles_but_never_the_restore_command(tmp_path: Path) -> None:
    """The Slack line capped `NOT restored: ROLES; finish with: COMMAND` as one text at 1,000
    characters: 300 roles cut the command off, so the message said what to run without saying it."""
    run_dir = _unrestored(tmp_path, [f"tb{i}/decode" for i in range(300)], "")
    text = summarize_run(run_dir, base_url="").chat_text()
    assert f"; finish with: orch restore {run_dir.absolute()} - " in text, text[-400:]
    assert "tb0/decode, tb1/decode" in text and "tb299/decode" not in text


def test_clip_and_clip_list_show_the_cut() -> None:
    assert clip("abcdef", 4) == "abc…" and clip("abcd", 4) == "abcd"
    assert clip_list(["a", "bbbbbb", "c", "d"], 2, 3) == ["a", "bb…", "… and 2 more"]
    assert clip_list(["a", "b"], 2, 3) == ["a", "b"]


def _sized(headline: int, suspect: int) -> Summary:
    return Summary(
        run_id="r1", name="n", status="completed", headline="H" * headline, link=LINK, trials=8, failed=0,
        planned=8, suspect=["S" * suspect],
    )  # fmt: skip


def test_each_text_is_cut_at_its_stated_cap_not_a_character_later() -> None:
    """The headline's 2,000 characters and a suspect reason's 600 (JSON_CAPS): a text of the cap is
    sent whole, one character more is cut with an ellipsis."""
    whole = _sized(2000, 600).json_body()
    assert whole["headline"] == "H" * 2000 and whole["suspect"] == ["S" * 600]
    cut = _sized(2001, 601).json_body()
    assert cut["headline"] == "H" * 1999 + "…" and cut["suspect"] == ["S" * 599 + "…"]


def test_a_summary_without_planned_trials_says_no_counts() -> None:
    """An item that could not run (queue's error summary): no `0/0 trials` in its text."""
    from orchestrator.team.notify import error_summary

    summary = error_summary("m", "decode.env not found")
    assert summary.planned == 0 and "trials" not in summary.text()


def test_send_closes_the_client_it_made(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    from orchestrator.team import notify

    made: list[httpx.Client] = []
    real = httpx.Client

    def client(**kwargs: Any) -> httpx.Client:
        made.append(real(**kwargs))
        return made[-1]

    monkeypatch.setattr(notify.httpx, "Client", client)
    with webhook_receiver() as rx:
        (delivery,) = send(_sized(10, 10), [Webhook.parse(rx.url)])
    assert delivery.ok and len(made) == 1 and made[0].is_closed


def test_plain_http_is_said_for_another_machine_only() -> None:
    from orchestrator.team.notify import plain_http

    hooks = [Webhook.parse(u) for u in ("http://hooks.example/T/x", "http://127.0.0.1:9/x", "https://hooks.example/y")]
    said = plain_http(hooks)
    assert len(said) == 1 and said[0].startswith("webhook 'http://hooks.example/") and "plain http" in said[0]
