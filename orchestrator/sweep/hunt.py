"""The hunt's step source: hands every free testbed the configuration the search (core/hunt.py)
picks next, and feeds it each finished trial. A hunt is otherwise a run like any other: the
runner journals, restores and locks as for `orch run`, and N testbeds share this source.
A trial that gave no data (failed, void) is never evidence, but the search counts it: once as
many as the budget pays for gave none, it stops (core.huntreplay.observe, core.hunt.Hunt.propose),
since `stop_after_repeated_failures: 0` leaves the runner no other brake.

Trial numbers: plan.json holds the first wave (core.huntplan.first_wave) as trials 0..N, and
`orch hunt --dry-run` prints them so; store.runtrials refuses a journal whose trial n is not the
plan's trial n. So a configuration of the first wave runs under its planned number the first
time it is handed out, and every other trial - the failing configuration asked again until it
shows its failures, a configuration asked again after its trial failed, the search's own -
takes the next number past the wave. Why: trials were numbered in the order they were handed
out, and a failing configuration that showed 1 failure in its first trial (~15% of DSV4 hunts
at 20 sessions a trial) or any failed trial of the wave put a configuration in another's
planned place: the report was refused as a damaged journal.

Resume: the search is deterministic, and its state is the trials' k/n, so a resumed hunt
replays the journal's finished trials and carries on; new numbers continue after the last one
the journal holds. The trials running when a controller died are simply asked for again if the
search still wants them (a planned one under its planned number).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from orchestrator.core.model import Matrix
from orchestrator.core.records import TrialRecord
from orchestrator.core.steps import Step
from orchestrator.sweep.sources import StepSource

if TYPE_CHECKING:  # the search (numpy, scipy: ~0.4 s) loads when a hunt starts, not with every `orch` command
    from orchestrator.core.hunt import HuntResult

OnStop = Callable[["HuntResult"], None]


class HuntSource(StepSource):
    shrinks = False  # no total to shrink: the search decides its trials as it goes, never guessed

    def __init__(
        self,
        matrix: Matrix,
        prior: Sequence[TrialRecord] = (),
        next_index: int | None = None,
        on_stop: OnStop | None = None,
    ) -> None:
        from orchestrator.core.huntplan import first_wave
        from orchestrator.core.huntreplay import replay

        super().__init__([], set())
        self.matrix, self.on_stop = matrix, on_stop
        self.hunt = replay(matrix, prior)
        self.pending: dict[int, int] = {}  # trial index -> configuration, handed out and not back yet
        self.rounds: dict[int, int] = {}  # configuration -> trials handed out (a trial's "round")
        for record in prior:
            config = matrix.hunt.config_of(record.levels) if matrix.hunt else None
            if config is not None:
                self.rounds[config] = max(self.rounds.get(config, 0), record.round + 1)
        # configuration -> its planned trial numbers of the first wave not yet used (in plan order)
        assert matrix.hunt is not None
        wave = first_wave(matrix.hunt)
        ran = {r.trial for r in prior}
        self.planned: dict[int, list[int]] = {}
        for number, config in enumerate(wave):
            if number not in ran:
                self.planned.setdefault(config, []).append(number)
        last = max((r.trial for r in prior), default=-1)
        self.index = next_index if next_index is not None else max(last + 1, len(wave))  # the next new number
        self.closed = False
        self.stopped = False

    def next(self) -> Step | None:
        from orchestrator.core.huntplan import hunt_step  # loaded by __init__ (first_wave) already

        with self._lock:
            if self.closed:
                return None
            config = self.hunt.propose(list(self.pending.values()))
            if config is None:
                self._stopped()
                return None
            step = hunt_step(self.matrix, self._number(config), self.rounds.get(config, 0), config)
            self.pending[step.trial.index] = config
            self.rounds[config] = self.rounds.get(config, 0) + 1
            return step

    def _number(self, config: int) -> int:
        """The trial number of this hand-out: the configuration's planned one while it has one
        left (the first wave), else the next new number (see the module's docstring)."""
        planned = self.planned.get(config)
        if planned:
            return planned.pop(0)
        self.index += 1
        return self.index - 1

    def record(self, record: TrialRecord) -> None:
        from orchestrator.core.huntreplay import observe

        with self._lock:
            self.pending.pop(record.trial, None)
            observe(self.hunt, self.matrix, record)

    def close(self) -> None:
        with self._lock:
            self.closed = True

    def _stopped(self) -> None:
        if not self.stopped:
            self.stopped = True
            if self.on_stop is not None:
                self.on_stop(self.hunt.result())
