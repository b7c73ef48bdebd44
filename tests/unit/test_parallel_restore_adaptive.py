"""Parallel testbeds after a controller died, and adaptive stopping shared by parallel testbeds.

`orch restore` of a parallel run restores each testbed on its own: one that cannot be reached
is reported as not restored (with why), the others are put back. Adaptive decisions of a
parallel sweep are those its journal rebuilds, whatever order the testbeds finish in, and a
resume never runs a cell its journal says was decided. On the fakes (helpers.parallel_bed) and
on a simulated clock: no process, no socket."""

from __future__ import annotations

import heapq
import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fakes import Reply
from helpers.adaptive_runs import plan_of, record
from helpers.parallel_bed import Fleet, install, restore, resume, run
from helpers.parallel_fakes import fake_matrix, write_files

from orchestrator.core.model import Matrix
from orchestrator.core.records import EventRecord, TrialRecord
from orchestrator.core.steps import Plan, Step
from orchestrator.edges.lock import TestbedLock
from orchestrator.errors import TransportError
from orchestrator.store.journal import read_journal
from orchestrator.sweep import api
from orchestrator.sweep.adaptive import AdaptiveSource
from orchestrator.sweep.hosts import HostGuard

ENV = {"prefill": "P=0\n", "decode": "D=0\n"}
MATRIX = fake_matrix("par", 3)
ADAPTIVE = MATRIX.replace('levels: ["1", "2"]', 'levels: ["1", "2", "3"]').replace(
    "replicates: 3", "replicates: 6\nadaptive: {metric: events, effect: 0.10}"
)


class Killed(BaseException):
    """Stands for kill -9 of the controller: nothing after it runs (no restore, no lock release)."""


def kill_mid_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    names: tuple[str, ...] = ("A", "B"),
    matrix: str = MATRIX,
    after_trials: int = 3,
) -> Path:
    """A run whose controller dies once `after_trials` repros ran: the hosts keep a cell's env
    files and the locks stay. Returns the run folder."""
    m, i = write_files(tmp_path, matrix, names)
    seen: list[str] = []
    # every testbed has a cell's files before the kill: each one's first repro waits for the others'
    # (a testbed slow to start could otherwise find the kill before its first trial)
    everyone_in, started = threading.Barrier(len(names)), set[str]()
    assert after_trials >= len(names)

    def hook(tb: str, text: str) -> Reply | None:
        seen.append(tb)
        if tb not in started:
            started.add(tb)
            everyone_in.wait(30)
        if len(seen) > after_trials:
            raise Killed()
        return None

    fleet.repro_hook = hook
    with monkeypatch.context() as mp:
        mp.setattr(HostGuard, "restore", lambda self, run_dir: [])
        mp.setattr(TestbedLock, "release", lambda self: None)
        with pytest.raises(Killed):
            run(tmp_path, m, i, names)
    fleet.repro_hook = None
    for tb in names:
        assert fleet.file(tb, "decode") != ENV["decode"].encode(), "the kill left every testbed changed"
    return tmp_path / "reports" / "r1"


def journal_of(run_dir: Path) -> list[TrialRecord | EventRecord]:
    return read_journal(run_dir / "journal.jsonl").records


# ---------------------------------------------------------------------------- restore
def test_restore_of_a_parallel_run_puts_back_the_reachable_testbed_when_another_is_down(tmp_path, monkeypatch):
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    run_dir = kill_mid_run(tmp_path, monkeypatch, fleet)
    fleet.down.add("A")  # the run's first testbed: before, its error ended the restore there
    outcome = restore(run_dir)
    for role in ENV:
        assert fleet.file("B", role) == ENV[role].encode() and fleet.extra_files("B", role) == []
    a, b = outcome.testbeds
    assert (a.testbed, a.not_restored) == ("A", ("prefill", "decode"))
    assert a.error is not None and "No route to host" in a.error
    assert (b.testbed, b.not_restored, b.error) == ("B", (), None)
    assert outcome.exit_code == 1

    fleet.down.clear()  # A is back: `orch restore` again finishes the job
    assert restore(run_dir).exit_code == 0
    for tb in "AB":
        for role in ENV:
            assert fleet.file(tb, role) == ENV[role].encode() and fleet.extra_files(tb, role) == []


def test_orch_restore_names_the_testbed_it_could_not_reach_and_exits_1(tmp_path, monkeypatch, capsys):
    from orchestrator.cli.main import main

    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    run_dir = kill_mid_run(tmp_path, monkeypatch, fleet)
    capsys.readouterr()
    fleet.down.add("A")
    code = main(["restore", str(run_dir)])
    said = capsys.readouterr()
    assert code == 1
    assert re.search(r"error: testbed A: .*No route to host", said.err), said.err
    assert f"not restored: prefill, decode; run `orch restore {run_dir}` again to finish" in said.err
    assert "restored: prefill, decode (env files byte-identical, units back)" in said.out  # testbed B

    fleet.down.clear()  # every testbed up: A is restored now, B was restored by the first call
    assert main(["restore", str(run_dir)]) == 0
    said = capsys.readouterr()
    assert said.out.count("restored: prefill, decode (env files byte-identical, units back)") == 1
    assert said.out.count("restored already, nothing to do: prefill, decode") == 1
    assert "error" not in said.err and "not restored" not in said.err


def test_restore_of_a_one_testbed_run_still_ends_on_its_error(tmp_path, monkeypatch):
    """One testbed: its error is the command's own (message and exit code as before)."""
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    run_dir = kill_mid_run(tmp_path, monkeypatch, fleet, names=("A",))
    fleet.down.add("A")
    with pytest.raises(TransportError, match="No route to host"):
        restore(run_dir)


# ---------------------------------------------------------------------------- adaptive: simulated clock
Journal = list[TrialRecord | tuple[str, object]]  # records, and ("decided", cell) where a decision was journaled


def k_of(step: Step, ks: dict[int, int], rng: random.Random) -> int:
    """The baseline and overlap=on cells at 20%, overlap=off cells at 0% (10 sessions a trial);
    drawn once per trial, so a trial run again after a kill gives the same count."""
    if step.trial.index not in ks:
        p = 0.0 if "overlap=off" in step.trial.cell.id else 0.2
        ks[step.trial.index] = sum(rng.random() < p for _ in range(10))
    return ks[step.trial.index]


def on_clock(source: AdaptiveSource, journal: Journal, k: Callable[[Step], int], rng: random.Random) -> None:
    """Two testbeds on a simulated clock, as the runner drives them: a free testbed calls next(),
    one whose trial ended calls record() then remaining(). Trials take 0.5-2 s."""
    clock, busy = 0.0, []
    for tb in range(2):
        if (s := source.next()) is not None:
            heapq.heappush(busy, (clock + rng.uniform(0.5, 2), tb, s))
    while busy:
        clock, tb, s = heapq.heappop(busy)
        journal.append(record(s, k(s)))
        source.record(journal[-1])
        source.remaining()
        if (n := source.next()) is not None:
            heapq.heappush(busy, (clock + rng.uniform(0.5, 2), tb, n))


def parallel_run(m: Matrix, plan: Plan, seed: int) -> tuple[Journal, dict[str, str], dict[int, int]]:
    """(journal, the decision journaled per cell: its reason, every trial's count)."""
    rng, ks = random.Random(seed), {}
    journal: Journal = []
    decided: dict[str, str] = {}

    def journaled(cell: str, decision: object) -> None:
        decided.setdefault(cell, decision.reason)  # type: ignore[attr-defined]
        journal.append(("decided", cell))

    on_clock(AdaptiveSource(plan.steps, set(), m, on_decision=journaled), journal, lambda s: k_of(s, ks, rng), rng)
    return journal, decided, ks


def replayed(m: Matrix, plan: Plan, journal: Journal) -> dict[str, str]:
    """The decisions one testbed reaches running the journal's trials in plan order."""
    rebuilt: dict[str, str] = {}
    again = AdaptiveSource(plan.steps, set(), m, on_decision=lambda c, d: rebuilt.setdefault(c, d.reason))
    by_trial = {r.trial: r for r in journal if isinstance(r, TrialRecord)}
    while (s := again.next()) is not None:
        if s.trial.index in by_trial:
            again.record(by_trial[s.trial.index])
    return rebuilt


def test_a_parallel_adaptive_decision_is_the_one_its_journal_gives(tmp_path):
    """Before, a cell was decided on rounds still running on the other testbed, with a spread
    taken from part of a round: 45 of 100 runs journaled decisions their journal does not give."""
    m, plan = plan_of(tmp_path)
    mismatched = []
    for seed in range(60):
        journal, decided, _ = parallel_run(m, plan, seed)
        if decided != replayed(m, plan, journal):
            mismatched.append(seed)
    assert not mismatched, f"{len(mismatched)}/60 parallel runs journaled decisions their journal does not give"


def test_a_resumed_parallel_adaptive_run_never_runs_a_cell_the_journal_says_was_decided(tmp_path):
    """kill -9 during the last trial (its record never reached the journal), resumed from the
    trial records alone: the resume reaches the journal's decisions again instead of re-deciding
    them on later rounds (before, seed 83 ran cells the journal had stopped)."""
    m, plan = plan_of(tmp_path)
    journal, decided, ks = parallel_run(m, plan, seed=83)
    assert decided
    prior = [r for r in journal if isinstance(r, TrialRecord)][:-1]
    again = AdaptiveSource(plan.steps, {r.trial for r in prior}, m, prior=prior)
    rng = random.Random(0)
    handed = []
    while (s := again.next()) is not None:
        handed.append(s)
        again.record(record(s, k_of(s, ks, rng)))
    assert not [s.trial.index for s in handed if s.trial.cell.id in decided]


@pytest.mark.parametrize("seed", range(12))
def test_a_parallel_adaptive_run_killed_anywhere_resumes_to_the_same_decisions(tmp_path, seed):
    """Killed after any record, with whatever was running lost, and resumed on two testbeds
    from the journal's records and decisions (as api._resume_locked reads them): no decided cell
    runs again, and the run ends with the decisions of the uninterrupted run."""
    m, plan = plan_of(tmp_path)
    whole, decided, ks = parallel_run(m, plan, seed)
    cut = random.Random(seed).randrange(1, len(whole))
    before = whole[:cut]
    prior = [r for r in before if isinstance(r, TrialRecord)]
    events = [decision_event(c, decided[c]) for kind, c in (e for e in before if isinstance(e, tuple))]
    resumed: dict[str, str] = {}
    again = AdaptiveSource(
        plan.steps, {r.trial for r in prior}, m, prior, lambda c, d: resumed.setdefault(c, d.reason), events
    )
    after: Journal = []
    on_clock(again, after, lambda s: ks[s.trial.index] if s.trial.index in ks else 0, random.Random(seed + 1))
    journaled = {e.cell for e in events}
    assert not [r.trial for r in after if isinstance(r, TrialRecord) and r.cell in journaled]
    assert not journaled & set(resumed), "a journaled decision is not journaled again"
    assert {e.cell: e.message for e in events} | resumed == decided


def decision_event(cell: str, reason: str, state: str = "different", run_id: str = "r") -> EventRecord:
    return EventRecord(run_id=run_id, event="cell_decided", at="t", cell=cell, state=state, message=reason)


def test_a_journaled_decision_is_kept_where_the_counts_would_not_decide_it(tmp_path):
    """A journal written by an older orch (decided on part of a round): the resume keeps its
    decision, runs no trial of that cell and does not journal it again."""
    m, plan = plan_of(tmp_path)
    cell = "overlap=on,cuda_graph=off"
    reason = "stopped after 2 rounds (20 sessions): cell 4/20 vs baseline 8/40 decided no difference (...)"
    said: list[str] = []
    source = AdaptiveSource(
        plan.steps,
        set(),
        m,
        on_decision=lambda c, d: said.append(c),
        decided=[decision_event(cell, reason, "no_difference")],
    )
    ran = []
    while (s := source.next()) is not None:
        ran.append(s.trial.cell.id)
        source.record(record(s, 2))  # every cell at the baseline's rate: nothing else is decided early
    assert cell not in ran and ran.count("overlap=off,cuda_graph=on") == 8
    assert (source.closed[cell].state, source.closed[cell].rounds, source.closed[cell].reason) == (
        "no_difference",
        2,
        reason,
    )
    assert cell not in said


# ---------------------------------------------------------------------------- adaptive: the sweep API
def test_orch_resume_of_a_parallel_adaptive_run_keeps_the_decisions_of_its_journal(tmp_path, monkeypatch):
    """A parallel adaptive run killed early; its journal holds a decision on d=3 (journaled by an
    older orch, on part of a round, which these counts would not reach). `orch resume` reads the
    journal's decisions first: d=3 runs no more trials and its decision is not journaled again."""
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    run_dir = kill_mid_run(tmp_path, monkeypatch, fleet, matrix=ADAPTIVE, after_trials=4)
    reason = "stopped after 2 rounds (20 sessions): cell 6/20 vs baseline 6/20 decided no difference (...)"
    with (run_dir / "journal.jsonl").open("a") as journal:
        journal.write(decision_event("d=3", reason, "no_difference", "r1").model_dump_json() + "\n")
    ran_before = {r.trial for r in journal_of(run_dir) if isinstance(r, TrialRecord)}
    outcome = resume(run_dir)
    assert outcome.status == "completed", outcome
    records = journal_of(run_dir)
    new = [r for r in records if isinstance(r, TrialRecord) and r.trial not in ran_before]
    assert new and not [r.trial for r in new if r.cell == "d=3"]
    assert [e.cell for e in records if isinstance(e, EventRecord) and e.event == "cell_decided"] == ["d=3"]
    for tb in "AB":
        for role in ENV:
            assert fleet.file(tb, role) == ENV[role].encode() and fleet.extra_files(tb, role) == []


def test_a_parallel_adaptive_sweep_journals_what_its_journal_rebuilds(tmp_path, monkeypatch):
    """Two real runner threads on the fakes: d=2 is clean against a baseline at 30%, d=3 at the
    baseline's rate. The decisions journaled are those the journal's trials give, replayed in plan
    order on one testbed, whichever testbed finished first."""
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, ADAPTIVE, ("A", "B"))
    plan = api.prepare(api.SweepRequest(m, i, testbeds=("A", "B"), seed=1)).plan

    def hook(tb: str, text: str) -> Reply:
        trial = int(text.split("--trial")[1].split()[0])
        cell = plan.steps[trial].trial.cell.id
        p = 0.0 if cell == "d=2" else 0.3
        rng = random.Random(trial)
        time.sleep(rng.uniform(0, 0.03))  # trials of uneven length: the testbeds finish out of order
        return Reply(0, f"events={sum(rng.random() < p for _ in range(10))}/10\n")

    fleet.repro_hook = hook
    assert run(tmp_path, m, i, ("A", "B")).status == "completed"
    records = journal_of(tmp_path / "reports" / "r1")
    journaled = {e.cell: e.message for e in records if isinstance(e, EventRecord) and e.event == "cell_decided"}
    assert "d=2" in journaled
    rebuilt: dict[str, str] = {}
    again = AdaptiveSource(plan.steps, set(), plan.matrix, on_decision=lambda c, d: rebuilt.setdefault(c, d.reason))
    by_trial = {r.trial: r for r in records if isinstance(r, TrialRecord)}
    while (s := again.next()) is not None:
        again.record(by_trial[s.trial.index])
    assert journaled == rebuilt
