"""Adaptive stopping in a running sweep: hand out a cell's next trial only while its comparison
with the baseline is undecided (the decision itself is pure: orchestrator.core.sequential).

Before a cell's trial of round r starts, the rounds before r in which both the cell and the
baseline completed are tested (anytime-valid, so looking before every round costs no error). A
decided cell runs no more trials; the baseline runs as long as any cell is open. The decision
is journaled (event "cell_decided") and the report marks the cell. Resume rebuilds the counts
from the journal, so it reaches the same decisions.

The trial is the unit of replication: sessions of one trial share a restart and vary together.
So a cell is decided only once it has two paired rounds (one trial cannot be told from a
trial-level shock), and the sessions are weighed by the variance inflation of
orchestrator.core.clustered, estimated from the trial-to-trial spread of every cell's trials in
the rounds before (pooled over the sweep, as the report does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from orchestrator.core.model import Matrix
from orchestrator.core.records import TrialRecord
from orchestrator.core.steps import Step
from orchestrator.sweep.sources import OnDecision, StepSource

if TYPE_CHECKING:  # core.sequential loads scipy (~0.5 s): only adaptive runs import it, when they start
    from orchestrator.core.sequential import Decision


class AdaptiveSource(StepSource):
    def __init__(
        self,
        steps: Sequence[Step],
        done: set[int],
        matrix: Matrix,
        prior: Sequence[TrialRecord] = (),
        on_decision: OnDecision | None = None,
    ) -> None:
        from orchestrator.core.sequential import SequentialPolicy

        super().__init__(list(steps), done)
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
        self._seen = 0  # records counted so far: the inflation is recomputed only when data came in
        self._inflations: dict[int, tuple[int, float]] = {}  # before_round -> (records seen, inflation)
        self.closed: dict[str, Decision] = {}
        self.cells = {s.trial.cell.id for s in steps if not s.trial.is_baseline}
        self.baseline = next((s.trial.cell.id for s in steps if s.trial.is_baseline), None)
        self.skipped: list[Step] = []
        for record in prior:
            self._count(record)

    def next(self) -> Step | None:
        while True:
            step = super().next()
            if step is None:
                return None
            with self._lock:
                admitted = self._admit(step)
                if not admitted:
                    self.skipped.append(step)
            if admitted:
                return step

    shrinks = True

    def record(self, record: TrialRecord) -> None:
        with self._lock:
            self._count(record)

    def remaining(self) -> int:
        """Trials not handed out yet whose cell is still open (the baseline's while any is)."""
        with self._lock:
            upcoming = self._left[self._next :]
            if upcoming:  # decide now what the next call to next() would decide anyway
                for cell in sorted(self.cells - set(self.closed)):
                    self._open(cell, upcoming[0].trial.round)
            open_cells = self.cells - set(self.closed)

            def may_run(step: Step) -> bool:
                if step.trial.is_baseline:
                    return bool(open_cells) or not self.cells
                return step.trial.cell.id in open_cells

            return sum(1 for s in upcoming if may_run(s))

    def _count(self, record: TrialRecord) -> None:
        m = record.metrics.get(self.metric)
        if record.status != "completed" or m is None or m.n is None:
            return
        kn = self.counts.setdefault((record.cell, record.round), [0, 0])
        kn[0] += m.k or 0
        kn[1] += m.n
        self.trials[record.trial] = (record.cell, record.round, m.k or 0, m.n)
        self._seen += 1

    def _admit(self, step: Step) -> bool:
        cell, rnd = step.trial.cell.id, step.trial.round
        if step.trial.is_baseline:
            return any(self._open(c, rnd) for c in self.cells) or not self.cells
        return self._open(cell, rnd)

    def _open(self, cell: str, before_round: int) -> bool:
        if cell in self.closed:
            return False
        if self.baseline is None:  # a plan without a baseline trial: nothing to compare with, stays open
            return True
        pairs = [
            (tuple(self.counts[(cell, r)]), tuple(self.counts[(self.baseline, r)]))
            for r in range(before_round)
            if (cell, r) in self.counts and (self.baseline, r) in self.counts
        ]
        if len(pairs) < 2:  # one trial cannot be told from a trial-level shock
            return True
        from orchestrator.core.sequential import decide

        decision = decide(
            self.policy,
            [p[0] for p in pairs],  # type: ignore[misc]
            [p[1] for p in pairs],  # type: ignore[misc]
            dispersion=self._inflation(before_round),
        )
        if decision.state in ("continue", "max_rounds"):
            return decision.state == "continue"
        self.closed[cell] = decision
        if self.on_decision is not None:
            self.on_decision(cell, decision)
        return False

    def _inflation(self, before_round: int) -> float:
        """The variance inflation from every cell's trials of the rounds before (1 when the
        trials show no spread to measure: e.g. every trial so far saw no event). Cached until the
        next record: every open cell asks before each round, and the answer is the same for all."""
        cached = self._inflations.get(before_round)
        if cached is not None and cached[0] == self._seen:
            return cached[1]
        by_cell: dict[str, list[tuple[int, int]]] = {}
        for cell, rnd, k, n in self.trials.values():
            if rnd < before_round:
                by_cell.setdefault(cell, []).append((k, n))
        from orchestrator.core.clustered import dispersion  # scipy.stats: loaded by adaptive runs only

        value = dispersion(list(by_cell.values())).inflation()
        self._inflations[before_round] = (self._seen, value)
        return value
