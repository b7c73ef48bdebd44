"""A hunt refuses the design keys it would ignore, and its replay holds the live search's state."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.hunt_runs import hunt_trial

from orchestrator.core.config import read_matrix
from orchestrator.core.records import TrialRecord
from orchestrator.errors import ConfigError
from orchestrator.sweep.hunt import HuntSource

REPO = Path(__file__).resolve().parents[2]
HUNT = REPO / "matrices" / "dsv4_hunt.yaml"


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("replicates", "replicates: 5\n"),
        ("order", "order: sequential\n"),
        ("adaptive", "adaptive: {metric: corruption, effect: 0.1, direction: lower}\n"),
    ],
)
def test_a_hunt_refuses_replicates_order_and_adaptive_at_their_line(tmp_path: Path, key: str, text: str) -> None:
    """A hunt sizes its trials, orders them and stops by its own rule: these keys were accepted
    and then silently ignored (api picks the hunt's source before any adaptive one)."""
    path = tmp_path / "m.yaml"
    path.write_text(HUNT.read_text() + text)
    with pytest.raises(ConfigError) as err:
        read_matrix(path)
    line = len(HUNT.read_text().splitlines()) + 1
    assert f"m.yaml:{line}: {key}: `{key}:` does not apply to a hunt" in str(err.value)


def test_a_resumed_hunt_holds_the_live_hunts_state_from_the_same_journal() -> None:
    """The live search read its posterior between trials, and each read dropped hypotheses below
    1e-10 for good; a resume (and the report) replays the journal and read it once. A journal whose
    evidence reverses (one flag's drop clean for 15 trials, then failing) gave the live hunt one
    answer and its replay another, and different next configurations."""
    m = read_matrix(HUNT)
    full = (1 << 16) - 1
    first = [(full, 5)] * 6 + [(0, 0)] * 10 + [(full ^ 1, 0)] * 15 + [(full ^ (1 << i), 5) for i in range(1, 16)]
    then = [(full ^ 1, 5)] * 30  # bf16_index_k's drop fails after all
    live = HuntSource(m)
    records: list[TrialRecord] = []
    for x, k in first:
        records.append(hunt_trial(dict(m.hunt.levels(x)), len(records), k))
        live.record(records[-1])
    live.hunt.propose()  # what the live source does between trials
    for x, k in then:
        records.append(hunt_trial(dict(m.hunt.levels(x)), len(records), k))
        live.record(records[-1])
    resumed = HuntSource(m, records)
    a, b = live.hunt.result(), resumed.hunt.result()
    assert (a.best.describe(), round(a.best.probability, 6)) == (b.best.describe(), round(b.best.probability, 6))
    assert live.hunt.propose() == resumed.hunt.propose()


def test_a_resumed_hunt_re_estimates_the_trial_variation_the_live_one_tempered_by() -> None:
    """The icc is re-estimated after every trial and re-tempers the trials seen (core.huntspread):
    a resume and the report, replaying the journal, reach the live hunt's estimate, posterior and
    next configuration, though the estimate moved while the live hunt ran."""
    m = read_matrix(HUNT)
    full = (1 << 16) - 1
    trials = [(full, k) for k in (20, 0, 0, 18, 0, 20, 0)] + [(0, 0)] * 6
    trials += [(full ^ (1 << i), 0 if i < 3 else 12) for i in range(16)] + [(full ^ 1, 0)] * 4
    live = HuntSource(m)
    records: list[TrialRecord] = []
    for x, k in trials:
        records.append(hunt_trial(dict(m.hunt.levels(x)), len(records), k))
        live.record(records[-1])
        live.hunt.propose()
    resumed = HuntSource(m, records)
    assert live.hunt.icc.estimated and live.hunt.icc == resumed.hunt.icc
    a, b = live.hunt.result(), resumed.hunt.result()
    assert (a.best.describe(), a.best.probability) == (b.best.describe(), b.best.probability)
    assert live.hunt.propose() == resumed.hunt.propose()
