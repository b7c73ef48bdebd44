"""bench/bench_fuzz_inputs.py's fixed-seed sample, in-process (the unit tier: no fork, no process):
one mutant of every mutation kind (seeds 0-21: the kind is seed % 22) through `orch validate`,
`plan` and `run --dry-run`, or `orch report` and `orch status`. Every one must end with exit 0, or
exit 2 naming its file and line, no traceback, no host touched. The time limit is the bench's own
(a forked child's wall time and RSS); here only the words and the exit codes are held, with a
generous clock so a busy machine cannot fail it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.benchrun import bench_module
from pytest import CaptureFixture

fuzz = bench_module("bench_fuzz_inputs.py")


def test_a_fixed_seed_sample_of_mutants_is_refused_clearly(capsys: CaptureFixture[str]) -> None:
    argv = ["--n", "22", "--in-process", "--max-seconds", "60", "--targets", "matrix,inventory,run"]
    tally = fuzz.run(fuzz.parse(argv))
    out = capsys.readouterr().out
    assert set(tally) == set(fuzz.KINDS), out
    assert all(sum(t.values()) == 1 for t in tally.values()), out
    assert sum(t["BAD"] for t in tally.values()) == 0, out
    assert sum(t["ok2"] for t in tally.values()) >= 11, out  # most mutants are refused, not waved through
    assert "0 distinct BAD causes" in out, out


def test_a_seed_makes_the_same_mutant(tmp_path: Path) -> None:
    """--only SEED replays what the run found: a mutant depends on its seed alone."""
    bases = fuzz.base_texts(fuzz.make_bases(tmp_path))
    for seed in (3, 17, 400):
        first, again = fuzz.draw(seed, bases), fuzz.draw(seed, bases)
        assert first is not None and first == again
        assert first.kind == list(fuzz.KINDS)[seed % len(fuzz.KINDS)]
    old = fuzz.OLD_FAMILIES  # the targets before serve, the queue and the hunt: a seed draws what it drew
    assert [fuzz.draw(s, bases, old) for s in range(44)] == [
        fuzz.draw(s, {t: x for t, x in bases.items() if t.split(":")[0] in old}) for s in range(44)
    ]


# One seed per target family the bench reached later, each a cause it found (README's fuzz section):
# the seed's mutant fails on the code before its fix. In-process, as above.
NEW = "folder,hunt,queue,queuedb,serve"  # the families the seeds below were found among (--targets)
NEW_TARGETS = [
    ("serve", "serve", 7, "a run folder named in bytes that are not UTF-8: /api/status's traceback"),
    ("queuedb", NEW, 24, "a queue.db whose items table has no orch column: exit 1"),
    ("folder", NEW, 176, "plan.json's columns cut: exit 2 without its line"),
    ("hunt", NEW, 467, "a journal's round of 10**400: OverflowError in report and compare"),
    ("queue", NEW, 3, "a mutated matrix queued, then listed (no cause found: a sample)"),
]


@pytest.mark.parametrize(("family", "targets", "seed", "found"), NEW_TARGETS, ids=[t[0] for t in NEW_TARGETS])
def test_a_seed_of_each_new_target_is_answered_clearly(
    capsys: CaptureFixture[str], family: str, targets: str, seed: int, found: str
) -> None:
    argv = ["--only", str(seed), "--targets", targets, "--in-process", "--max-seconds", "60", "--quiet"]
    tally = fuzz.run(fuzz.parse(argv))
    out = capsys.readouterr().out
    assert f"by target: {family} 1 (0 BAD)" in out, out
    assert sum(t["BAD"] for t in tally.values()) == 0 and sum(sum(t.values()) for t in tally.values()) == 1, out
