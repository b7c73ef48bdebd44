"""Adaptive stopping in a running sweep: hand out a cell's next trial only while its comparison
with the baseline is undecided (the decision itself is pure: orchestrator.core.sequential).

Decisions are taken at round boundaries, in order: "before round r" every undecided cell is
tested on the rounds before r in which both it and the baseline completed (anytime-valid, so
looking before every round costs no error). A decided cell runs no more trials; the baseline
runs as long as any cell is open. The decision is journaled (event "cell_decided") and the
report marks the cell.

A boundary is decided only once every trial handed out in the rounds before it has been
recorded: parallel testbeds share this source and finish in any order, and a decision taken on
part of a round (or a trial-to-trial spread taken from part of one) would depend on that order,
and differ from what the journal rebuilds. Until then a testbed that is free takes the next
trial as if its cell were still open; if the boundary then stops the cell, that trial stays in
the journal but counts for no decision (one testbed never runs such a trial: its rounds are
always complete when it asks). So the decisions are those of one testbed running the same
trials in plan order, and a resume, which replays the boundaries from the journal's records,
reaches them again; the decisions the journal already holds are adopted as they are, so a
decided cell never runs again.

The trial is the unit of replication: sessions of one trial share a restart and vary together.
So a cell is decided only once it has two paired rounds (one trial cannot be told from a
trial-level shock), and the sessions are weighed by the variance inflation of
orchestrator.core.clustered, estimated from the trial-to-trial spread of every cell's trials in
the rounds before (pooled over the sweep, as the report does).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, Sequence

from orchestrator.core.model import Matrix
from orchestrator.core.records import EventRecord, TrialRecord
from orchestrator.core.steps import Step
from orchestrator.sweep.sources import OnDecision, StepSource

if TYPE_CHECKING:  # core.sequential loads scipy (~0.5 s): only adaptive runs import it, when they start
    from orchestrator.core.sequential import Decision, State

Pair = tuple[tuple[int, int], tuple[int, int]]  # one round's (k, n) of the cell and of the baseline


class AdaptiveSource(StepSource):
    def __init__(
        self,
        steps: Sequence[Step],
        done: set[int],
        matrix: Matrix,
        prior: Iterable[TrialRecord] = (),  # iterated once: resume streams it from the journal
        on_decision: OnDecision | None = None,
        decided: Sequence[EventRecord] = (),
    ) -> None:
        from orchestrator.core.sequential import SequentialPolicy

        super().__init__(list(steps), done, fewest_restarts=matrix.order == "min-restarts")
        a = matrix.adaptive
        assert a is not None
        self.policy = SequentialPolicy(
            alpha=a.alpha,
            power=a.power,
            effect=a.effect,
            min_rounds=a.min_rounds,
            max_rounds=matrix.replicates,
            direction=a.direction,
        )
        self.metric = a.metric
        self.on_decision = on_decision
        self.counts: dict[tuple[str, int], list[int]] = {}  # (cell, round) -> [k, n]
        self.trials: dict[int, tuple[str, int, int, int]] = {}  # trial -> (cell, round, k, n): the spread
        self.closed: dict[str, Decision] = {}  # decided cells (journaled): they run no more trials
        self.stopped_at: dict[str, int] = {}  # cell -> the boundary its rule stopped it at, on these counts
        self._running: dict[int, int] = {}  # trial handed out, not recorded yet -> its round
        self._boundary = 0  # the next boundary to decide: "before round _boundary"
        self._last_round = max((s.trial.round for s in self._left), default=-1)
        self._ended = False  # close(): the rounds it cut short are never complete, nothing more is decided
        self.cells = {s.trial.cell.id for s in steps if not s.trial.is_baseline}
        self.baseline = next((s.trial.cell.id for s in steps if s.trial.is_baseline), None)
        for record in prior:
            self._count(record)
        for event in decided:
            self._adopt(event)

    shrinks = True

    def _front(self) -> bool:
        """Moves `_next` to the first trial not handed out whose cell is open, deciding each boundary
        as its round comes up (the trials of stopped cells on the way are skipped). Called by next()
        under the lock, which also takes the trial: no other testbed can hand out a later round while
        this one's round is not yet counted as running. Several testbeds then take, from that round,
        the open cells they ran least (StepSource._balanced), so a testbed difference is not one cell's."""
        while super()._front():
            step = self._left[self._next]
            self._advance(step.trial.round)
            if self._usable(step):
                return True
            self._taken[self._next] = True
        return False

    def _usable(self, step: Step) -> bool:
        return self._may_run(step, step.trial.is_baseline and self._any_open())

    def _take(self, at: int, testbed: str) -> Step:
        step = super()._take(at, testbed)
        self._running[step.trial.index] = step.trial.round
        return step

    def close(self) -> None:
        with self._lock:
            self._ended = True
        super().close()

    def record(self, record: TrialRecord) -> None:
        with self._lock:
            self._running.pop(record.trial, None)
            self._count(record)
            self._advance(self._horizon())

    def remaining(self) -> int:
        """Trials not handed out yet whose cell is still open (the baseline's while any is)."""
        with self._lock:
            self._advance(self._horizon())  # decide now what the next call to next() would decide anyway
            any_open = self._any_open()
            left, taken = self._left, self._taken
            return sum(1 for i in range(self._next, len(left)) if not taken[i] and self._may_run(left[i], any_open))

    def _may_run(self, step: Step, any_open: bool) -> bool:
        """any_open: whether any cell is open (the baseline runs while one is), asked once by the caller."""
        if step.trial.is_baseline:
            return any_open or not self.cells
        return self._is_open(step.trial.cell.id)

    def _any_open(self) -> bool:
        return any(self._is_open(c) for c in self.cells)

    def _is_open(self, cell: str) -> bool:
        """Open as far as is known: a boundary not decided yet keeps its cells open."""
        return cell not in self.closed and cell not in self.stopped_at

    def _horizon(self) -> int:
        """The round of the next trial to hand out: the last boundary worth deciding now."""
        return self._left[self._next].trial.round if super()._front() else self._last_round

    def _count(self, record: TrialRecord) -> None:
        m = record.metrics.get(self.metric)
        if record.status != "completed" or m is None or m.n is None:
            return
        kn = self.counts.setdefault((record.cell, record.round), [0, 0])
        kn[0] += m.k or 0
        kn[1] += m.n
        self.trials[record.trial] = (record.cell, record.round, m.k or 0, m.n)

    def _adopt(self, event: EventRecord) -> None:
        """A decision the journal holds (a resume): its cell stays decided as journaled, even
        where these counts would now say otherwise (a journal of an older orch)."""
        from orchestrator.core.sequential import Decision

        cell = event.cell
        if event.event != "cell_decided" or cell is None or cell not in self.cells or cell in self.closed:
            return
        rounds = re.search(r"after (\d+) rounds?\b", event.message)  # the reason's own words (core.sequential)
        state: State = "no_difference" if event.state == "no_difference" else "different"
        self.closed[cell] = Decision(state, int(rounds.group(1)) if rounds else 0, event.message)

    def _advance(self, upto: int) -> None:
        """Decide the boundaries up to `upto` in turn, each once the rounds before it are
        complete: no trial of theirs is still running (every earlier trial was handed out)."""
        if self._ended:
            return
        complete = min(self._running.values(), default=upto)  # rounds before this one are whole
        while self._boundary <= min(upto, complete):
            self._decide(self._boundary)
            self._boundary += 1

    def _decide(self, boundary: int) -> None:
        """Test every cell its rule has not stopped on the rounds before `boundary`. A cell the
        journal decided is tested too, only to learn at which boundary its trials stop counting."""
        if self.baseline is None:  # a plan without a baseline trial: nothing to compare with, stays open
            return
        from orchestrator.core.sequential import decide

        inflation: float | None = None  # the same for every cell at a boundary; computed when first needed
        for cell in sorted(self.cells - self.stopped_at.keys()):
            pairs = self._pairs(cell, boundary)
            if len(pairs) < 2:  # one trial cannot be told from a trial-level shock
                continue
            if inflation is None:
                inflation = self._inflation(boundary)
            decision = decide(self.policy, [c for c, _ in pairs], [b for _, b in pairs], dispersion=inflation)
            if decision.state != "continue":
                self._stop(cell, boundary, decision)

    def _pairs(self, cell: str, boundary: int) -> list[Pair]:
        assert self.baseline is not None
        pairs: list[Pair] = []
        for r in range(boundary):
            c, b = self.counts.get((cell, r)), self.counts.get((self.baseline, r))
            if c is not None and b is not None:
                pairs.append(((c[0], c[1]), (b[0], b[1])))
        return pairs

    def _stop(self, cell: str, boundary: int, decision: Decision) -> None:
        """max_rounds (a plan of more rounds than the matrix's replicates) stops the cell unsaid,
        as the report's fixed analysis has the last word; a journaled decision is not said again."""
        self.stopped_at[cell] = boundary
        if decision.state == "max_rounds" or cell in self.closed:
            return
        self.closed[cell] = decision
        if self.on_decision is not None:
            self.on_decision(cell, decision)

    def _inflation(self, before_round: int) -> float:
        """The variance inflation from the trials of the rounds before that count (1 when they
        show no spread to measure: e.g. every trial so far saw no event). A trial counts unless
        its cell was stopped at or before its round (a parallel testbed ran it meanwhile). In
        trial order, so the pooled estimate never depends on the order testbeds finished in."""
        by_cell: dict[str, list[tuple[int, int]]] = {}
        for _, (cell, rnd, k, n) in sorted(self.trials.items()):
            if rnd < before_round and self.stopped_at.get(cell, before_round) > rnd:
                by_cell.setdefault(cell, []).append((k, n))
        from orchestrator.core.clustered import dispersion  # scipy.stats: loaded by adaptive runs only

        return dispersion(list(by_cell.values())).inflation()
