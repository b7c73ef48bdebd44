"""What a webhook says of a run against what the runs index and `orch status` say of it: no
caution of theirs is dropped from the message (a chat reader sees nothing else)."""

from __future__ import annotations

from pathlib import Path

from helpers.report_synth import cell_id, synthetic_run, write_run

from orchestrator.report.render import fresh_summary
from orchestrator.report.site import index_page, run_entries
from orchestrator.team.livestatus import RestoreStatus
from orchestrator.team.notify import Webhook, chat_safe, send, summarize_run

from .helpers import unrestored_run, webhook_receiver


def test_a_run_that_left_its_hosts_changed_says_so_in_the_webhook_as_the_index_does(tmp_path: Path) -> None:
    """The index, /api/runs and `orch status` say `NOT restored: decode` (status.json) first; the
    webhook said only `completed`, so a teammate reading the chat took the testbed as clean."""
    run_dir = unrestored_run(tmp_path / "reports")
    (entry,) = run_entries(tmp_path / "reports", fresh_summary)
    assert entry.not_restored == ("decode",) and entry.status == "completed"
    command = f"orch restore {run_dir.absolute()}"
    summary = summarize_run(run_dir, base_url="")
    with webhook_receiver() as rx:
        send(summary, [Webhook.parse("slack+" + rx.url + "/slack"), Webhook.parse(rx.url + "/json")])
    (_, slack), (_, body) = rx.received
    text = slack["text"]  # type: ignore[index]
    assert f": completed - NOT restored: decode; finish with: {command} - 8/8 trials" in text, text
    assert body["not_restored"] == ["decode"] and body["restore_with"] == command  # type: ignore[index]


def test_once_orch_restore_put_the_hosts_back_the_webhook_no_longer_says_not_restored(tmp_path: Path) -> None:
    run_dir = unrestored_run(tmp_path / "reports")
    RestoreStatus(run_dir).restore_ended([])  # `orch restore` put decode back
    summary = summarize_run(run_dir, base_url="")
    assert (summary.not_restored, summary.restore_with) == ([], "")
    assert "NOT restored" not in summary.text() and "orch restore" not in summary.text()


HOSTILE_LEVEL = "<!channel> & <https://evil.example|the report>"  # a valid level: no `,`, `=` or control


def _hostile_run(folder: Path) -> Path:
    """A run whose cuda_graph=off level is HOSTILE_LEVEL (its result names that cell) and
    whose run.json name is 1 MB opening with a Slack mention and a line break."""
    manifest, records = synthetic_run(replicates=2)

    def renamed(levels: dict[str, str]) -> dict[str, str]:
        return {f: HOSTILE_LEVEL if (f, v) == ("cuda_graph", "off") else v for f, v in levels.items()}

    def moved(levels: dict[str, str]) -> dict[str, object]:
        return {"levels": renamed(levels), "cell": cell_id(renamed(levels))}

    plan = [p.model_copy(update=moved(p.levels)) for p in manifest.plan]
    records = [r.model_copy(update=moved(r.levels)) for r in records]
    factors = {**manifest.factors, "cuda_graph": ["on", HOSTILE_LEVEL]}
    name = "<!channel>\nhttps://evil.example " + "x" * 1_000_000
    update = {"plan": plan, "factors": factors, "baseline": renamed(manifest.baseline), "name": name}
    return write_run(folder / manifest.run_id, manifest.model_copy(update=update), records)


def test_a_hostile_run_name_and_level_reach_slack_escaped_on_one_line_and_bounded(tmp_path: Path) -> None:
    """Slack reads `<!channel>` as a mention of everyone and `<url|text>` as a disguised link; the
    text went out raw, 1 MB long (the whole name) with the name's line break in it."""
    summary = summarize_run(_hostile_run(tmp_path), base_url="")
    assert HOSTILE_LEVEL in summary.headline  # the report's result names the closest cell
    with webhook_receiver() as rx:
        send(summary, [Webhook.parse("slack+" + rx.url + "/slack")])
    ((_, slack),) = rx.received
    text = slack["text"]  # type: ignore[index]
    assert "<" not in text and ">" not in text and "\n" not in text, text[:300]
    assert "&lt;!channel&gt; &amp; &lt;https://evil.example|the report&gt;" in text
    assert len(text) <= 5000 + len(summary.link) and text.endswith(" - " + summary.link), len(text)
    assert "SUSPECT DATA: 2 trial attempts failed or were void" in text  # the cap cut no caution away


def test_chat_safe_never_cuts_inside_an_escape() -> None:
    assert chat_safe("a&b", 3) == "a…" and chat_safe("<" * 10, 8) == "&lt;…"
    assert chat_safe("p < 0.05 &\tq", None) == "p &lt; 0.05 &amp; q"


def _nights_then(reports: Path, status: str) -> Path:
    """Three finished nights of the matrix, then a fourth (`status`; interrupted: after 8 of its 16
    trials) where every cell fails 60%."""
    for night in range(3):
        m, r = synthetic_run(replicates=2, failures=False, seed=night + 1, run_id=f"night{night}")
        write_run(reports / m.run_id, m.model_copy(update={"started": f"2026-05-0{night + 1}T00:00:00Z"}), r)
    m, r = synthetic_run(replicates=2, failures=False, seed=9, run_id="tonight", rate=lambda levels: 0.6)
    m = m.model_copy(update={"started": "2026-05-09T00:00:00Z", "status": status})
    if status == "completed":
        return write_run(reports / m.run_id, m, r)
    return write_run(reports / m.run_id, m, r[:8], end_events=("run_interrupted",))


def test_an_interrupted_run_is_not_called_changed_vs_earlier_runs_as_the_index_never_checks_it(tmp_path: Path) -> None:
    """The index's nightly check compares the newest finished run only; the webhook of an
    interrupted run (8 of 16 trials) posted 8 `CHANGED vs earlier runs` lines the index never showed."""
    tonight = _nights_then(tmp_path / "interrupted", "interrupted")
    assert "changed vs earlier runs:" not in index_page(tmp_path / "interrupted", fresh_summary)
    summary = summarize_run(tonight, base_url="")
    assert summary.changes == [] and "CHANGED" not in summary.text()
    finished = _nights_then(tmp_path / "completed", "completed")  # the same night, finished: both flag it
    assert "changed vs earlier runs:" in index_page(tmp_path / "completed", fresh_summary)
    changes = summarize_run(finished, base_url="").changes
    assert changes and all(c.startswith("corruption in ") for c in changes), changes
