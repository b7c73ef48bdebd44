"""A hunt's live status (status.json, `orch status`, `orch serve`) shows the trials done, never a
guessed total: the README promises it, and `orch status` showed "14/33 (42%)" for a hunt killed
after 14 trials and "35/36 (97%)" for one that had ended (the step source's estimate, from the
session budget, fed to the status file as the run's total)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.hunt_runs import hunt_run, small_hunt, truth_answer

from orchestrator.cli.main import main
from orchestrator.sweep.apitypes import Started
from orchestrator.sweep.hunt import HuntSource
from orchestrator.team.livestatus import LiveStatus


def test_a_hunts_status_counts_trials_done_with_no_total_percent_or_eta(tmp_path: Path, capsys) -> None:
    m = small_hunt(tmp_path)
    run = tmp_path / "reports" / "hunt"
    records = hunt_run(run, m, truth_answer(m), limit=14, status="running")
    (run / "journal.jsonl").unlink()  # the live run has just started: its trials are yet to come
    (run / "journal.jsonl.idx").unlink(missing_ok=True)
    live = LiveStatus(run)
    live.start(6, 0)  # what the runner passes: the plan's steps (the first wave)
    for record in records:
        live.trial_done(record)
        live.retotal(19)  # a total from anyone: ignored
    status = json.loads((run / "status.json").read_text())
    assert (status["done"], status["total"], status["eta_s"], status["current_cell"]) == (14, None, None, None)

    assert main(["status", "--reports", str(run.parent), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["runs"][0]
    assert (shown["done"], shown["total"], shown["percent"]) == (14, None, None)
    assert main(["status", "--reports", str(run.parent)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if " hunt " in line)
    progress = row.split("│")[3].strip()  # run, state, progress, ...
    assert progress == "14 done", row
    assert HuntSource.shrinks is False  # the runner asks the hunt for no estimate of what is left


def test_queueing_a_hunt_names_no_trial_total(tmp_path: Path, capsys) -> None:
    """`orch queue add` said "(6 trials on testbed ...)" of a hunt: its first wave."""
    m = small_hunt(tmp_path)
    inventory = Path(__file__).resolve().parents[2] / "inventory" / "local.yaml"
    assert main(["queue", "add", str(m.path), "-i", str(inventory), "--reports", str(tmp_path / "r")]) == 0
    assert "queued item 1: small_hunt (a hunt on testbed 'local-sim', priority 0)" in capsys.readouterr().out


def test_a_hunts_status_names_the_last_configuration_by_the_flags_that_set_it_apart(tmp_path: Path) -> None:
    """As the terminal does: the cell's id lists every suspect flag, and the one dropped is lost in it."""
    m = small_hunt(tmp_path)
    assert m.hunt is not None
    run = tmp_path / "reports" / "hunt"
    records = hunt_run(run, m, truth_answer(m), limit=3, status="running")
    started = Started(run.name, run, ("local-sim",), 0, 0, hunt=m.hunt)
    live = LiveStatus(run, cell_name=started.cell_name)
    live.start(6, 0)
    for record in records:
        live.trial_done(record)
    last = json.loads((run / "status.json").read_text())["last"]
    config = m.hunt.config_of(records[-1].levels)
    assert config is not None
    assert last.startswith(m.hunt.in_words(config) + ": corruption "), last
    assert records[-1].cell not in last
