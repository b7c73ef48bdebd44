"""A SIGTERM or Ctrl-C landing in the queue's own bookkeeping, outside any sweep: the claim's
commit, and the record of how a finished sweep ended (bench_kill_points.py --command queue).

run_queue promises that whatever happens no item stays claimed by the process, and a finished
sweep's result is never dropped. The interrupt is played by the store doing what the signal
handler does (sweep/signals.py: raise_now_or_later) at that point: after the claim's transaction
committed, and in the record's transaction (rolled back, as _tx does for any exception)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.edges.interrupts import raise_now_or_later
from orchestrator.errors import Interrupted
from orchestrator.sweep import api
from orchestrator.team.queue import NewItem, Queue, QueueItem, run_queue

from .helpers import FakeSweeps, add, queue_sweep


class SignalledQueue(Queue):
    """A queue whose `at` operation is interrupted once: `claim` just after its commit, `finish` in
    its transaction (nothing written)."""

    def __init__(self, path: Path, at: str, signal: type[BaseException] = Interrupted) -> None:
        super().__init__(path)
        self.at, self.signal, self.fired = at, signal, False

    def _fire(self, where: str) -> None:
        if where == self.at and not self.fired:
            self.fired = True
            raise_now_or_later(self.signal("received SIGTERM") if self.signal is Interrupted else self.signal())

    def claim(self, *args, **kwargs) -> QueueItem | None:  # type: ignore[no-untyped-def]
        item = super().claim(*args, **kwargs)
        self._fire("claim")  # committed: the item is this process's
        return item

    def finish(self, item_id: int, state, message: str = "") -> QueueItem:  # type: ignore[no-untyped-def]
        with self._tx():  # the record's transaction: the signal rolls it back
            self._fire("finish")
            return super().finish(item_id, state, message)


@pytest.mark.parametrize("signal", [Interrupted, KeyboardInterrupt])
def test_a_signal_just_after_a_claim_commits_puts_the_item_back(tmp_path: Path, signal: type) -> None:
    q = SignalledQueue(tmp_path / "reports" / "queue.db", "claim", signal)
    a, b = add(q, "a"), add(q, "b")
    sweeps = FakeSweeps(tmp_path, {"a": ["completed"], "b": ["completed"]})
    with pytest.raises(signal):
        run_queue(q, sweeps)
    assert q.fired and sweeps.calls == []  # the sweep never started
    item = q.get(a.id)
    assert (item.state, item.claimed_by) == ("queued", None), item  # not left claimed by an exited runner
    assert q.get(b.id).state == "queued"


@pytest.mark.parametrize("signal", [Interrupted, KeyboardInterrupt])
def test_a_signal_in_the_record_of_a_finished_sweep_still_records_it(tmp_path: Path, signal: type) -> None:
    q = SignalledQueue(tmp_path / "reports" / "queue.db", "finish", signal)
    a, b = add(q, "a"), add(q, "b")
    sweeps = FakeSweeps(tmp_path, {"a": ["completed"], "b": ["completed"]})
    with pytest.raises(signal):
        run_queue(q, sweeps)
    assert q.fired and [c[0] for c in sweeps.calls] == ["a"]  # b never started
    item = q.get(a.id)
    # its sweep completed: recorded so, not left `running` (nor resumable: nothing is left to run)
    assert (item.state, item.claimed_by, item.message) == ("completed", None, "a completed"), item
    assert q.get(b.id).state == "queued"


def test_a_new_runs_folder_is_recorded_with_its_item_as_soon_as_it_exists(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A SIGKILL after the run's folder is made (its testbeds locked) but before the run is
    announced (the runs index written: ~0.4 s on the simulator) left the item naming no run: the
    next `queue run` took it back as `queued`, started a new run, and met the dead run's stale lock,
    refusing every item on that testbed night after night (bench_kill_points --command queue,
    index#1 at SIGKILL). The item now names its folder from the moment the folder exists."""
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("early", 1), ["A"])
    seen: list[str | None] = []
    with Queue(tmp_path / "reports" / "queue.db") as q:
        item = q.add_item(NewItem(m, i, "A"))

        def index_written(run_dir: Path) -> None:  # the runs index: where the SIGKILL landed
            seen.append(q.get(item.id).run_dir)

        monkeypatch.setattr(api, "_list_running", index_written)
        monkeypatch.setattr(
            api, "preflight_testbeds", lambda deployments, plan, inventory: []
        )  # the fakes' URLs resolve nowhere
        run_queue(q, queue_sweep(tmp_path / "reports", api))
        after = q.get(item.id)
    assert (after.state, after.message) == ("completed", "2/2 trials, 0 failed"), after
    assert seen == [after.run_dir], "the item named no run while the runs index was written"
