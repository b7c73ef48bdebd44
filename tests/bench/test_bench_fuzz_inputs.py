"""bench/bench_fuzz_inputs.py's fixed-seed sample, in-process (the unit tier: no fork, no process):
one mutant of every mutation kind (seeds 0-21: the kind is seed % 22) through `orch validate`,
`plan` and `run --dry-run`, or `orch report` and `orch status`. Every one must end with exit 0, or
exit 2 naming its file and line, no traceback, no host touched. The time limit is the bench's own
(a forked child's wall time and RSS); here only the words and the exit codes are held, with a
generous clock so a busy machine cannot fail it."""

from __future__ import annotations

from pathlib import Path

from helpers.benchrun import bench_module
from pytest import CaptureFixture

fuzz = bench_module("bench_fuzz_inputs.py")


def test_a_fixed_seed_sample_of_mutants_is_refused_clearly(capsys: CaptureFixture[str]) -> None:
    tally = fuzz.run(fuzz.parse(["--n", "22", "--in-process", "--max-seconds", "60"]))
    out = capsys.readouterr().out
    assert set(tally) == set(fuzz.KINDS), out
    assert all(sum(t.values()) == 1 for t in tally.values()), out
    assert sum(t["BAD"] for t in tally.values()) == 0, out
    assert sum(t["ok2"] for t in tally.values()) >= 11, out  # most mutants are refused, not waved through
    assert "0 distinct BAD causes" in out, out


def test_a_seed_makes_the_same_mutant(tmp_path: Path) -> None:
    """--only SEED replays what the run found: a mutant depends on its seed alone."""
    bases = fuzz.base_texts(fuzz.make_run(tmp_path))
    for seed in (3, 17, 400):
        first, again = fuzz.draw(seed, bases), fuzz.draw(seed, bases)
        assert first == again
        assert first.kind == list(fuzz.KINDS)[seed % len(fuzz.KINDS)]
