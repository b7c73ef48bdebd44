"""What a trial's record says when its warm-up fails, pinned where mutation testing found no test
(bench/README.md, "Fifth round"): a warm-up that exited non-zero and one that timed out are told
apart in the failure's words (the trial is void either way). On the fakes (tests/fakes.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakes import FakeUnit, Reply, Role, flag, make_bed, make_plan, remote_repro, runner_for


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (Reply(exit_code=3, stderr="model not loaded\n"), "repro.warmup exited with code 3 (the trial is void)"),
        (Reply(timeout=True), "repro.warmup timed out (the trial is void)"),
    ],
    ids=["exit-code", "timeout"],
)
def test_a_failed_warmup_says_how_it_failed(tmp_path: Path, reply: Reply, said: str) -> None:
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    bed.transports["decode"].script(re.compile(r"^fake-warmup\b"), reply)
    repro = {**remote_repro("decode"), "warmup": "fake-warmup"}
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1, repro=repro)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1, stop_after_repeated_failures=0).execute()
    assert (result.completed, result.failed) == (0, 2)
    for record in result.records:
        assert record.failure is not None and record.failure.error == "WarmupFailed"
        assert record.failure.message == said
