"""`orch queue add` takes `orch run`'s --replicates, --seed, --retries and --fail-fast, keeps them
with the item and `orch queue run` runs the sweep with them. It refused them ("an option of orch
run, orch plan"), so a queued sweep ran its matrix as written: a night's 4 replicates meant
editing the matrix. What was validated is what runs: the plan `queue add` prints counts them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import main
from orchestrator.sweep.apitypes import ResumeRequest, SweepOutcome, SweepRequest
from orchestrator.team.queue import NewItem, Queue, QueueItem, run_queue
from orchestrator.team.queuestore import RunChoices

from .helpers import make_site, matrix_text, queue_sweep


class RecordingSweeps:
    """sweep.api as far as a queue item reaches it: the request it was handed, nothing run."""

    def __init__(self) -> None:
        self.requests: list[SweepRequest | ResumeRequest] = []

    def prepare(self, request: SweepRequest, *, warn: Any = None) -> Any:
        self.requests.append(request)
        return _Prepared()

    def run(self, request: SweepRequest, progress: Any, *, warn: Any, prepared: Any = None) -> SweepOutcome:
        self.requests.append(request)
        return SweepOutcome(request.reports_dir / str(request.run_id), str(request.run_id), "completed", 2, 0, 2)

    def resume(self, request: ResumeRequest, progress: Any, *, warn: Any) -> SweepOutcome:
        self.requests.append(request)
        return SweepOutcome(request.run_dir, request.run_dir.name, "completed", 2, 0, 2)


class _Prepared:
    class plan:  # noqa: N801 - the attribute path a prepared sweep has
        class matrix:  # noqa: N801
            name = "m"


def queue_add(tmp_path: Path, *options: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    site = tmp_path / "site"
    if not site.exists():
        make_site(site)
    matrix = tmp_path / "m.yaml"
    matrix.write_text(matrix_text("opts"))  # 2 cells, replicates: 1
    args = ["queue", "add", str(matrix), "-i", str(site / "inventory.yaml"), "--reports", str(tmp_path / "r")]
    code = main([*args, *options])
    return code, capsys.readouterr().out


def test_queue_add_keeps_run_options_and_plans_with_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, said = queue_add(tmp_path, "--replicates", "3", "--seed", "7", "--retries", "2", "--fail-fast", capsys=capsys)
    assert code == 0, said
    assert (
        "queued item 1: opts (6 trials on testbed 'sim', priority 0, --replicates 3 --seed 7 --retries 2 --fail-fast)"
        in said
    )
    with Queue.in_reports(tmp_path / "r") as q:
        item = q.get(1)
    assert item.choices == RunChoices(replicates=3, seed=7, retries=2, fail_fast=True) and not item.defect
    assert main(["queue", "list", "--reports", str(tmp_path / "r")]) == 0
    assert "m.yaml --replicates 3 --seed 7 --retries 2 --fail-fast" in capsys.readouterr().out


def test_queue_run_hands_the_items_options_to_the_sweep(tmp_path: Path) -> None:
    choices = RunChoices(replicates=4, seed=11, retries=0, fail_fast=True)
    with Queue(tmp_path / "q.db") as q:
        q.add_item(NewItem(tmp_path / "m.yaml", tmp_path / "i.yaml", None, matrix_text="m", choices=choices))
        q.add_item(NewItem(tmp_path / "plain.yaml", tmp_path / "i.yaml", None, matrix_text="p"))
        sweeps = RecordingSweeps()
        run_queue(q, queue_sweep(tmp_path / "reports", sweeps))
    runs = [r for r in sweeps.requests if isinstance(r, SweepRequest) and r.run_id is not None]
    assert [(r.replicates, r.seed, r.retries, r.fail_fast) for r in runs] == [(4, 11, 0, True), (None, None, 1, False)]


def test_a_resumed_item_keeps_fail_fast_and_the_runs_own_retries(tmp_path: Path) -> None:
    run_dir = tmp_path / "reports" / "earlier"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text("{}")
    with Queue(tmp_path / "q.db") as q:
        item = q.add_item(
            NewItem(tmp_path / "m.yaml", tmp_path / "i.yaml", None, matrix_text="m", choices=RunChoices(fail_fast=True))
        )
        q.set_run_dir(item.id, run_dir)
        sweeps = RecordingSweeps()
        run_queue(q, queue_sweep(tmp_path / "reports", sweeps))
    (resumed,) = sweeps.requests
    assert isinstance(resumed, ResumeRequest) and resumed.fail_fast and resumed.retries is None


def test_the_same_sweep_with_other_options_is_not_called_a_repeat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert queue_add(tmp_path, "--replicates", "2", capsys=capsys)[0] == 0
    code, said = queue_add(tmp_path, "--replicates", "8", capsys=capsys)
    assert code == 0 and "queues the same sweep" not in said, said
    code, said = queue_add(tmp_path, "--replicates", "8", capsys=capsys)
    assert code == 0 and "item 2 not yet finished queues the same sweep" in said, said


def test_options_out_of_bounds_are_refused_before_anything_is_queued(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        queue_add(tmp_path, "--replicates", "0", capsys=capsys)
    assert exc.value.code == 2
    assert not (tmp_path / "r" / "queue.db").exists()


@pytest.mark.parametrize(
    "stored",
    ['{"replicates": "3"}', '{"replicates": true}', '{"copies": 2}', "[1]", "{", '{"fail_fast": 1}'],
)
def test_a_stored_value_that_is_not_run_options_fails_its_item_only(tmp_path: Path, stored: str) -> None:
    with Queue(tmp_path / "q.db") as q:
        bad = q.add_item(NewItem(tmp_path / "m.yaml", tmp_path / "i.yaml", None, matrix_text="m"))
        q._db.execute("UPDATE items SET options = ? WHERE id = ?", (stored, bad.id))
        item: QueueItem = q.get(bad.id)
        assert item.choices == RunChoices() and "its stored options" in item.defect and "re-add the item" in item.defect
        assert [i.id for i in q.items()] == [bad.id]  # listed, as an item with unreadable webhooks is


def test_options_round_trip_and_only_what_differs_is_stored(tmp_path: Path) -> None:
    assert RunChoices().encode() == "" and RunChoices.decode("") == (RunChoices(), "")
    full = RunChoices(replicates=2, seed=0, retries=3, fail_fast=True)
    assert RunChoices.decode(full.encode()) == (full, "")
    assert RunChoices(seed=0).encode() == '{"seed": 0}'  # seed 0 is a seed, not "none"
    with Queue(tmp_path / "q.db") as q:
        item = q.add_item(NewItem(tmp_path / "m.yaml", tmp_path / "i.yaml", None, choices=full))
        stored = q._db.execute("SELECT options FROM items WHERE id = ?", (item.id,)).fetchone()[0]
    assert stored == '{"fail_fast": true, "replicates": 2, "retries": 3, "seed": 0}'
    with sqlite3.connect(tmp_path / "q.db") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3
