"""run.json records what a session's hosts run as soon as they are first described, not only at
the run's end. Found by a walk: a run killed with -9 (then `orch restore`d) had no host facts at
all, so `orch compare` against it said every role's env file, command line and server version
"differed: not recorded in A", and a resume compared its hosts with nothing (a server upgraded
between the kill and the resume went unsaid). What survives a kill -9 is what is on disk at that
moment: each test reads run.json from inside a later trial's repro. Unit tier, on the fakes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.parallel_fakes import fake_matrix, fleet, run, write_files

from orchestrator.store.manifest import load_manifest, save_manifest
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress


def on_disk(tmp_path: Path) -> dict[str, object]:
    return json.loads((tmp_path / "reports" / "r1" / "run.json").read_text())


def test_the_facts_are_on_disk_by_the_first_repro(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = fleet(monkeypatch, A=("H100", "550.54"))
    m, i = write_files(tmp_path, fake_matrix("early", 2), ["A"])
    seen: list[dict[str, object]] = []
    f.repro_hook = lambda testbed, command: seen.append(on_disk(tmp_path)) or None  # type: ignore[func-returns-value]
    outcome = run(tmp_path, m, i, ["A"])
    assert outcome.status == "completed" and len(seen) == 4
    final = load_manifest(outcome.run_dir).model_dump(mode="json")["hosts"]
    assert "exec_start" in final["decode"] and "gpu_model" in final["decode"], final  # what the end records
    assert seen[0]["hosts"] == final  # a controller killed in its first repro would have kept all of it
    assert seen[0]["status"] == "running"  # the rest of run.json as it was: only the facts were added


def test_each_parallel_testbeds_facts_are_on_disk_before_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = fleet(monkeypatch, A=("H100", "550.54"), B=("H200", "560.35"))
    m, i = write_files(tmp_path, fake_matrix("early", 3), ["A", "B"])
    seen: list[dict[str, object]] = []
    f.repro_hook = lambda testbed, command: seen.append(on_disk(tmp_path)) or None  # type: ignore[func-returns-value]
    outcome = run(tmp_path, m, i, ["A", "B"])
    assert outcome.status == "completed"
    final = load_manifest(outcome.run_dir).model_dump(mode="json")
    assert {tb: final["testbed_hosts"][tb]["decode"]["gpu_model"] for tb in "AB"} == {
        "A": "2 x H100",
        "B": "2 x H200",
    }, final["testbed_hosts"]
    assert seen[-1]["testbed_hosts"] == final["testbed_hosts"]  # both testbeds', while the last trial ran


def test_orch_restore_of_a_killed_run_records_what_served_its_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run.json's `served` (what served each trial, from the journal) was written at the run's end
    only: a run killed with -9 and then restored had none, and `orch compare` left its server
    versions and command lines unchecked. `orch restore`, which ends such a run, records it."""
    fleet(monkeypatch, A=("H100", "550.54"))
    m, i = write_files(tmp_path, fake_matrix("served", 2), ["A"])
    outcome = run(tmp_path, m, i, ["A"])
    ended = load_manifest(outcome.run_dir)
    assert ended.served and ended.served_texts
    killed = ended.model_copy(update={"status": "running", "ended": None, "served": [], "served_texts": {}})
    save_manifest(outcome.run_dir, killed)  # what a controller killed with -9 leaves
    api.restore(api.RestoreRequest(outcome.run_dir), QuietProgress(), warn=lambda message: None)
    restored = load_manifest(outcome.run_dir)
    assert restored.status == "interrupted"
    assert (restored.served, restored.served_texts) == (ended.served, ended.served_texts)


def _killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A finished run made to look killed with -9 before its end: run.json says running and the
    journal ends at its last trial (no `restored` event)."""
    fleet(monkeypatch, A=("H100", "550.54"))
    m, i = write_files(tmp_path, fake_matrix("killed", 2), ["A"])
    run_dir = run(tmp_path, m, i, ["A"]).run_dir
    journal = run_dir / "journal.jsonl"
    lines = [line for line in journal.read_text().splitlines() if '"event":"restored"' not in line.replace(" ", "")]
    journal.write_text("".join(line + "\n" for line in lines))
    (run_dir / "journal.jsonl.idx").unlink(missing_ok=True)
    ended = load_manifest(run_dir)
    save_manifest(run_dir, ended.model_copy(update={"status": "running", "ended": None}))
    return run_dir


def test_orch_restore_of_a_killed_run_journals_the_restore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal, the run's crash-safe record, ended at the last trial of a run killed with -9 and
    then restored: its `restored` event was written only by a run's own end."""
    run_dir = _killed(tmp_path, monkeypatch)
    api.restore(api.RestoreRequest(run_dir), QuietProgress(), warn=lambda message: None)
    last = json.loads((run_dir / "journal.jsonl").read_text().splitlines()[-1])
    assert (last["type"], last["event"], last["message"]) == ("event", "restored", "all hosts restored"), last


def test_a_torn_journal_is_left_to_the_resume_that_repairs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A journal cut mid-line by the kill is not appended to (the line would be buried mid-file):
    the hosts are restored all the same, and the journal is as the kill left it."""
    run_dir = _killed(tmp_path, monkeypatch)
    journal = run_dir / "journal.jsonl"
    with journal.open("a") as f:
        f.write('{"type":"trial","run_id":')  # torn
    before = journal.read_bytes()
    restored = api.restore(api.RestoreRequest(run_dir), QuietProgress(), warn=lambda message: None)
    assert all(not tb.not_restored for tb in restored.testbeds) and journal.read_bytes() == before
    assert load_manifest(run_dir).status == "interrupted"
