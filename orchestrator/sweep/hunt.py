"""The hunt's step source: hands every free testbed the configuration the search (core/hunt.py)
picks next, and feeds it each finished trial. A hunt is otherwise a run like any other: the
runner journals, restores and locks as for `orch run`, and N testbeds share this source.
A trial that gave no data (failed, void) is never evidence, but the search counts it: once as
many as the budget pays for gave none, it stops (core.huntplan.observe, core.hunt.Hunt.propose),
since `stop_after_repeated_failures: 0` leaves the runner no other brake.

Resume: the search is deterministic, and its state is the trials' k/n, so a resumed hunt
replays the journal's finished trials (the records store.runtrials picks, which the hunt's report
replays too) and carries on; trial numbers continue after the last one the journal holds
(`next_index`: an unfinished trial's number is not given to another configuration). The trials
running when a controller died are simply asked for again if the search still wants them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from orchestrator.core.model import Matrix
from orchestrator.core.records import TrialRecord
from orchestrator.core.steps import Step
from orchestrator.sweep.sources import StepSource

if TYPE_CHECKING:  # the search (numpy, scipy: ~0.4 s) loads when a hunt starts, not with every `orch` command
    from orchestrator.core.hunt import HuntResult

OnStop = Callable[["HuntResult"], None]


class HuntSource(StepSource):
    shrinks = True  # the progress bar's total follows the search's estimate

    def __init__(
        self,
        matrix: Matrix,
        prior: Iterable[TrialRecord] = (),
        next_index: int | None = None,
        on_stop: OnStop | None = None,
    ) -> None:
        from orchestrator.core.huntplan import replay

        super().__init__([], set())
        self.matrix, self.on_stop = matrix, on_stop
        self.pending: dict[int, int] = {}  # trial index -> configuration, handed out and not back yet
        self.rounds: dict[int, int] = {}  # configuration -> trials handed out (a trial's "round")
        self.index = 0
        self.hunt = replay(matrix, map(self._noted, prior))  # one pass: resume streams prior from the journal
        self.index = next_index if next_index is not None else self.index
        self.closed = False
        self.stopped = False

    def _noted(self, record: TrialRecord) -> TrialRecord:
        """A replayed trial's round and number: the next trial of its configuration, and the next
        trial number, come after it."""
        config = self.matrix.hunt.config_of(record.levels) if self.matrix.hunt else None
        if config is not None:
            self.rounds[config] = max(self.rounds.get(config, 0), record.round + 1)
        self.index = max(self.index, record.trial + 1)
        return record

    def next(self) -> Step | None:
        from orchestrator.core.huntplan import hunt_step  # loaded by __init__ (replay) already

        with self._lock:
            if self.closed:
                return None
            config = self.hunt.propose(list(self.pending.values()))
            if config is None:
                self._stopped()
                return None
            step = hunt_step(self.matrix, self.index, self.rounds.get(config, 0), config)
            self.pending[self.index] = config
            self.rounds[config] = self.rounds.get(config, 0) + 1
            self.index += 1
            return step

    def record(self, record: TrialRecord) -> None:
        from orchestrator.core.huntplan import observe

        with self._lock:
            self.pending.pop(record.trial, None)
            observe(self.hunt, self.matrix, record)

    def close(self) -> None:
        with self._lock:
            self.closed = True

    def remaining(self) -> int:
        """A guess for the progress bar: trials until the session budget's typical use."""
        from orchestrator.core.huntplan import expected_sessions

        with self._lock:
            spec = self.matrix.hunt
            assert spec is not None
            median, _ = expected_sessions(spec)
            per_trial = max(1, self.hunt.sessions // max(self.hunt.trials, 1) or spec.sessions_per_trial)
            return max(1, (median - self.hunt.sessions) // per_trial) if not self.stopped else 0

    def _stopped(self) -> None:
        if not self.stopped:
            self.stopped = True
            if self.on_stop is not None:
                self.on_stop(self.hunt.result())
