"""One drawn random sweep end to end on the real hosts: what systemd 252's EnvironmentFile= and
bash's `set -a; . FILE` hand the live processes is the model's (tests/helpers/realsweep.py), where
the fakes derive a unit's env with orch's own reader. Seed 1993 (bench_real_sweep's stream) has
the hardest values: decode in the shell dialect with `export` lines, `$HOME`, a tab, quotes and a
duplicate key, a flag factor in its args variable and removed keys on both hosts, `x#y` and
`k=v` values, a commented-out assignment."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import realsweep
from testbed.fixture import Testbed

pytestmark = pytest.mark.testbed

SEED = 1993


def test_a_drawn_sweep_runs_every_trial_on_the_models_env(testbed: Testbed, tmp_path: Path) -> None:
    real = realsweep.draw(SEED)
    assert real.testbed == "dsv4-pd-shell" and len(real.sc.cells()) == 4  # the draw this test pins
    try:
        realsweep.check(testbed, real, tmp_path)
    finally:
        realsweep.restore_testbed(testbed)  # the next test finds the hosts as booted
    assert real.trials == 4
    assert not real.problems, "\n".join(real.problems)
