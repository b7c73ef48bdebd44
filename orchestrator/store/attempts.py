"""Each attempt at a trial gets a folder of its own, in every session of the controller.

Why: RunDir.trial names a trial's folder by its attempt number (trials/NNNN, NNNN-attempt2, ...),
and each session (`orch run`, each `orch resume`) numbered its attempts from 1. A trial run again
after a resume (its attempt cut off by kill -9 or Ctrl-C, or failed with `retried: true` and the
controller killed during the retry) therefore wrote into the folder of the attempt before it:
the repro output of an attempt cut off was truncated, and the logs a journaled failure links
were replaced by the new attempt's, under the old record.

So an attempt claims its folder: the first number, from the one the runner asks for, whose
folder does not exist yet, created exclusively (a mkdir that fails when the name is taken), and
that number is the attempt's in its record. What is on disk is what every session shares however
the last one ended: nothing to read from the journal, no index to keep, and an attempt killed
before its record still keeps its number (its folder is the evidence). A first session's
attempts find their numbers free: one mkdir each, as before. Journals written before this
numbered each session's attempts from 1 again; readers accept both (store.runtrials).
"""

from __future__ import annotations

from orchestrator.errors import JournalError
from orchestrator.store.atomic import run_file_error
from orchestrator.store.rundir import RunDir, TrialDir

# Attempt folders one trial may hold: far past any --retries times resumes, and a bound on the
# names tried when something else fills trials/ with NNNN-attemptK entries.
MAX_ATTEMPTS = 10_000


def claim_attempt(run: RunDir, index: int, attempt: int = 1) -> tuple[TrialDir, int]:
    """The folder of trial `index`'s next attempt, created (with its logs/ folder), and the
    attempt's number: `attempt`, or the first one after it whose folder is free."""
    for number in range(attempt, attempt + MAX_ATTEMPTS):
        trial = run.trial(index, number)
        try:
            trial.path.mkdir(parents=True)
        except FileExistsError:  # an earlier attempt's (or anything else there: never written into)
            continue
        except OSError as exc:
            raise run_file_error(trial.path, "cannot create the trial folder", exc) from exc
        try:
            trial.logs.mkdir()
        except OSError as exc:
            raise run_file_error(trial.logs, "cannot create the trial folder", exc) from exc
        return trial, number
    raise JournalError(
        f"{run.trials}: trial {index} has no free attempt folder among {MAX_ATTEMPTS:,} from attempt {attempt} "
        "(the run folder was filled by something else; move those folders away, then resume)"
    )
