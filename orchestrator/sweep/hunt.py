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
replays the journal's finished trials (the records store.runtrials picks, in the order the live
search saw them, which the hunt's report replays too) and carries on; new numbers continue after
the last one the journal holds (`next_index`: an unfinished trial's number is not given to another
configuration), skipping the planned numbers still unused. The trials running when a controller
died are simply asked for again if the search still wants them (a planned one under its planned
number: its configuration is the plan's).

Each configuration is noted in the run folder (hunt-handed.json, atomic) before its first trial is
handed out, so before that trial writes an env file. Why: the trial a killed controller was
running is in no journal, and past the first wave its configuration is in no plan either; the
resume and `orch restore` that followed took its env file for someone else's edit (the resume
refused the hunt, exit 2; the restore set the file aside). They read this list
(runner.journaled_envs) beside the journal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.core.model import Matrix
from orchestrator.core.records import TrialRecord
from orchestrator.core.steps import Step
from orchestrator.store.hunthanded import handed_levels, write_handed
from orchestrator.store.rundir import RunDir
from orchestrator.sweep.sources import StepSource

if TYPE_CHECKING:  # the search (numpy, scipy: ~0.4 s) loads when a hunt starts, not with every `orch` command
    from orchestrator.core.hunt import HuntResult

OnStop = Callable[["HuntResult"], None]


class HuntSource(StepSource):
    shrinks = False  # no total to shrink: the search decides its trials as it goes, never guessed

    def __init__(
        self,
        matrix: Matrix,
        prior: Iterable[TrialRecord] = (),
        next_index: int | None = None,
        on_stop: OnStop | None = None,
        run_dir: Path | None = None,
    ) -> None:
        from orchestrator.core.huntplan import first_wave
        from orchestrator.core.huntreplay import replay

        super().__init__([], set())
        self.matrix, self.on_stop = matrix, on_stop
        self.pending: dict[int, int] = {}  # trial index -> configuration, handed out and not back yet
        self.rounds: dict[int, int] = {}  # configuration -> trials handed out (a trial's "round")
        assert matrix.hunt is not None
        self.index = 0  # one past every trial number handed out or journaled
        ran: set[int] = set()  # the finished trials' numbers: a planned one is not handed out again
        self.hunt = replay(matrix, self._noted(prior, ran))  # one pass: resume streams prior from the journal
        self.index = next_index if next_index is not None else self.index
        # configuration -> its planned trial numbers of the first wave not yet used (in plan order),
        # and those numbers, which no other trial may take
        self.planned: dict[int, list[int]] = {}
        for number, config in enumerate(first_wave(matrix.hunt)):
            if number not in ran:
                self.planned.setdefault(config, []).append(number)
        self.reserved = {number for numbers in self.planned.values() for number in numbers}
        self.closed = False
        self.stopped = False
        # the configurations handed out so far, this process's and the killed ones' (see the doc)
        self.handed_file = RunDir.of(run_dir).hunt_handed if run_dir is not None else None
        self.handed = {c for c in map(matrix.hunt.config_of, handed_levels(run_dir)) if c is not None}

    def _noted(self, prior: Iterable[TrialRecord], ran: set[int]) -> Iterator[TrialRecord]:
        """The replayed trials, each noted as it passes: the next trial of its configuration, and
        the next trial number, come after it; its number is used (`ran`)."""
        for record in prior:
            config = self.matrix.hunt.config_of(record.levels) if self.matrix.hunt else None
            if config is not None:
                self.rounds[config] = max(self.rounds.get(config, 0), record.round + 1)
            self.index = max(self.index, record.trial + 1)
            ran.add(record.trial)
            yield record

    def next(self, testbed: str = "") -> Step | None:
        from orchestrator.core.huntplan import hunt_step  # loaded by __init__ (first_wave) already

        with self._lock:
            if self.closed:
                return None
            config = self.hunt.propose(list(self.pending.values()))
            if config is None:
                self._stopped()
                return None
            self._note_handed(config)
            step = hunt_step(self.matrix, self._number(config), self.rounds.get(config, 0), config)
            self.pending[step.trial.index] = config
            self.rounds[config] = self.rounds.get(config, 0) + 1
            return step

    def _number(self, config: int) -> int:
        """The trial number of this hand-out: the configuration's planned one while it has one
        left (the first wave), else the next new number: past every number handed out or
        journaled, and none a first-wave configuration still waits for (see the module's doc)."""
        planned = self.planned.get(config)
        if planned:
            number = planned.pop(0)
            self.reserved.discard(number)
        else:
            number = self.index
            while number in self.reserved:
                number += 1
        self.index = max(self.index, number + 1)
        return number

    def _note_handed(self, config: int) -> None:
        """Write the configuration to hunt-handed.json before its first trial is handed out."""
        if self.handed_file is None or config in self.handed:
            return
        from orchestrator.core.matrix import hunt_cell

        self.handed.add(config)
        write_handed(self.handed_file, [dict(hunt_cell(self.matrix, c).levels) for c in sorted(self.handed)])

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
