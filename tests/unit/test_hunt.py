"""The culprit hunt's posterior and search on a simulated oracle (core/hunt.py), its matrix
section (core/huntconfig.py), its step source and resume (sweep/hunt.py) and the simulator's
flag model (sim/culprits.py). Fast: 6-8 flags, no processes."""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path

import pytest

from orchestrator.core.config import read_matrix
from orchestrator.core.hunt import REST_TRIALS, Hunt, HuntResult, HuntSettings, drive
from orchestrator.core.hunt_model import ModelSettings, enumerate_hypotheses
from orchestrator.core.records import MetricValue, TrialRecord
from orchestrator.errors import ConfigError
from orchestrator.sim.culprits import Cause, CulpritModel, CulpritSpecError, model_from_env
from orchestrator.sweep.hunt import HuntSource

REPO = Path(__file__).resolve().parents[2]
FLAGS = tuple(f"f{i}" for i in range(7))


def oracle(model: CulpritModel, seed: int, sessions: int = 5, testbeds: int = 1, flags=FLAGS) -> Hunt:
    rng = random.Random(seed)
    hunt = Hunt(HuntSettings(flags, sessions_per_trial=sessions, max_sessions=3000))

    def run_trial(x: int) -> tuple[int, int]:
        p = model.trial_rate(frozenset(flags[i] for i in range(len(flags)) if x >> i & 1), rng)
        return sum(rng.random() < p for _ in range(sessions)), sessions

    drive(hunt, run_trial, testbeds)
    return hunt


def primed(full: tuple[int, int], clean: int, noops: tuple[int, ...], noop: tuple[int, int]) -> Hunt:
    """A hunt after its endpoints (the failing one k of n, the clean one clean over `clean`
    sessions) and the drops of the no-op flags `noops` (k of n each)."""
    hunt = Hunt(HuntSettings(FLAGS))
    hunt.observe((1 << len(FLAGS)) - 1, *full)
    hunt.observe(0, 0, clean)
    for i in noops:
        hunt.observe((1 << len(FLAGS)) - 1 ^ (1 << i), *noop)
    return hunt


def test_hypothesis_space_of_16_flags_is_ands_to_3_and_ors_to_4() -> None:
    hyps = enumerate_hypotheses(16, ModelSettings())
    assert len(hyps) == 697 + 120 + 1680 + 7280 + 5460
    assert abs(float(__import__("numpy").exp(hyps.log_prior).sum()) - 1.0) < 1e-9
    assert len(enumerate_hypotheses(16, ModelSettings(max_or=0))) == 697


AND3 = CulpritModel((Cause(frozenset({"f1", "f3", "f4"}), 0.15),), (), 0.005, 0.03)


@lru_cache(maxsize=None)
def and3_hunt(seed: int) -> Hunt:
    return oracle(AND3, seed)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noisy_three_flag_and_is_found_with_its_drops_checked(seed: int) -> None:
    result = and3_hunt(seed).result()
    assert result.state == "found", result.reason
    assert result.best.sets == (("f1", "f3", "f4"),)
    assert result.best.probability >= 0.95 and result.unchecked == ()
    verdicts = {c.config: c.verdict for c in result.configs}
    full = (1 << len(FLAGS)) - 1
    assert verdicts[full] == "fails" and verdicts[0] == "passes"
    assert all(verdicts[full ^ (1 << i)] == "passes" for i in (1, 3, 4))


def test_the_answer_that_the_flags_do_not_explain_it_cites_no_reproducer() -> None:
    """Every configuration fails alike (the flags do not explain it): the hunt found that, and its
    stop reason said "the clean endpoint and the minimal reproducer confirmed, every single-flag
    drop checked", of an answer that has neither a reproducer nor drops; it says what it rests on."""
    result = oracle(CulpritModel((), (), 0.3, 0.0), 0).result()
    assert result.state == "found" and result.best.sets == (), result.reason
    assert "reproducer" not in result.reason and "drop" not in result.reason, result.reason
    assert "the clean endpoint fails too" in result.reason, result.reason


def test_the_hunt_costs_less_than_one_flag_at_a_time() -> None:
    sessions = sorted(and3_hunt(seed).sessions for seed in (0, 1, 2))
    assert sessions[1] < (len(FLAGS) + 1) * 80  # the median hunt: under one flag at a time (8 x 80 sessions)


def test_a_second_cause_or_is_found_where_leave_one_out_sees_nothing() -> None:
    # every single drop still fails (the other cause is on): leave-one-out alone sees nothing.
    # A hunt can be unlucky (seed 4: the drop of f5 showed 0/10 at a true 30%), so 2 of 3.
    model = CulpritModel((Cause(frozenset({"f0", "f2"}), 0.3), Cause(frozenset({"f5"}), 0.3)), (), 0.0, 0.0)
    found = [sorted(oracle(model, seed).result().best.sets) for seed in (0, 1, 2)]
    assert sum(f == [("f0", "f2"), ("f5",)] for f in found) >= 2, found


def test_the_same_observations_give_the_same_proposals() -> None:
    model = CulpritModel((Cause(frozenset({"f2"}), 0.2),), (), 0.01, 0.03)
    a, b = oracle(model, 9), oracle(model, 9)
    assert list(a.stats.items()) == list(b.stats.items())
    assert a.result().best.sets == (("f2",),)


def test_flags_that_do_not_matter_and_a_failing_configuration_that_does_not_fail() -> None:
    everywhere = CulpritModel((Cause(frozenset(), 0.3),), (), 0.0, 0.0)  # every configuration fails
    result = oracle(everywhere, 1).result()
    assert result.state == "found" and result.best.sets == ()
    assert "does not need them" in result.best.describe()
    nothing = CulpritModel((), (), 0.0, 0.0)
    hunt = Hunt(HuntSettings(FLAGS, endpoint_sessions=40))
    while (x := hunt.propose()) is not None:
        hunt.observe(x, 0, 10)
        assert nothing.session_rate(frozenset()) == 0.0
    assert hunt.state == "not_failing" and "did not show 2 failures in 40 sessions (0/40)" in hunt.reason


def test_free_testbeds_get_the_leave_one_out_wave_at_once() -> None:
    hunt = Hunt(HuntSettings(FLAGS))
    full = (1 << len(FLAGS)) - 1
    batch: list[int] = []
    for _ in range(4):
        batch.append(hunt.propose(batch))  # type: ignore[arg-type]
    assert batch == [full, 0, full ^ 1, full ^ 2]  # endpoints, then drops, none twice


def test_four_testbeds_need_far_fewer_rounds_than_one() -> None:
    model = CulpritModel((Cause(frozenset({"f1", "f3"}), 0.2),), (), 0.005, 0.0)
    one = oracle(model, 3)
    rng_rounds = 0
    hunt = Hunt(HuntSettings(FLAGS, sessions_per_trial=5))
    rng = random.Random(3)
    while True:
        batch: list[int] = []
        for _ in range(4):
            x = hunt.propose(batch)
            if x is None:
                break
            batch.append(x)
        if not batch:
            break
        rng_rounds += 1
        for x in batch:
            p = model.session_rate(frozenset(FLAGS[i] for i in range(7) if x >> i & 1))
            hunt.observe(x, sum(rng.random() < p for _ in range(5)), 5)
    assert hunt.result().best.sets == (("f1", "f3"),)
    assert rng_rounds <= one.trials / 1.8  # 7 flags: a short first wave (the bench measures 16 flags)


# ---------------------------------------------------------------- the matrix section
def _matrix(tmp_path: Path, hunt: str, extra_factor: str = "") -> Path:
    text = (REPO / "matrices" / "dsv4_hunt.yaml").read_text()
    head, _, tail = text.partition("\nhunt:\n")
    body = tail[tail.index("\nseed:") :]
    if extra_factor:
        head = head.replace("factors:", "factors:\n" + extra_factor, 1)
    path = tmp_path / "m.yaml"
    path.write_text(head + "\nhunt:\n" + hunt + body)
    return path


def test_the_shipped_hunt_matrix_reads_as_16_suspects() -> None:
    spec = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml").hunt
    assert spec is not None and len(spec.flags) == 16
    assert spec.failing["cuda_graph"] == "on" and spec.clean["cuda_graph"] == "off"
    assert spec.config_of(dict(spec.levels(5))) == 5


@pytest.mark.parametrize(
    ("hunt", "extra", "message"),
    [
        ("  metric: wall\n", "", "'wall' is not a proportion metric"),
        ("  metric: corruption\n  failing: {nope: on}\n", "", "'nope' is not a factor"),
        ("  metric: corruption\n  clean: {overlap: maybe}\n", "", "'maybe' is not a level of 'overlap'"),
        ("  metric: corruption\n  clean: {overlap: on}\n", "", "its clean level is its failing level"),
        (
            "  metric: corruption\n",
            "  batch:\n    env: {decode: SIM_BATCH}\n    levels: [a, b, c]\n",
            "has 3 levels: which one is clean?",
        ),
        ("  metric: corruption\n  posterior: 1.5\n", "", "hunt.posterior"),
        ("  metric: corruption\n  confidence: 95\n", "", "got '95' (a share, not a percentage: write 0.95)"),
    ],
)
def test_bad_hunt_sections_are_refused_at_their_line(tmp_path: Path, hunt: str, extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        read_matrix(_matrix(tmp_path, hunt, extra))
    assert message in str(err.value)
    assert "m.yaml:" in str(err.value)


def test_a_share_over_1_that_is_no_percentage_gets_no_percentage_hint(tmp_path: Path) -> None:
    """`confidence: 95` is told to write 0.95; `posterior: 1.5` is not told to write 0.015."""
    with pytest.raises(ConfigError) as err:
        read_matrix(_matrix(tmp_path, "  metric: corruption\n  posterior: 1.5\n"))
    assert "must be < 1.0, got '1.5'" in str(err.value) and err.value.hint is None


def test_a_hunt_sections_defaults_are_those_readme_states(tmp_path: Path) -> None:
    """README: min_failures (2), icc (0.03), sessions_per_trial (10), max_sessions (3000), max_or (4)."""
    spec = read_matrix(_matrix(tmp_path, "  metric: corruption\n")).hunt
    assert spec is not None
    got = (spec.min_failures, spec.icc, spec.sessions_per_trial, spec.max_sessions, spec.max_or)
    assert got == (2, 0.03, 10, 3000, 4) and (spec.posterior, spec.confidence) == (0.95, 0.99)


@pytest.mark.parametrize(
    ("key", "most"),
    [("min_failures", 100), ("sessions_per_trial", 100_000), ("max_sessions", 10_000_000), ("max_or", 4)],
)
def test_a_hunt_fields_bound_is_taken_and_one_past_it_refused_at_its_line(tmp_path: Path, key: str, most: int) -> None:
    spec = read_matrix(_matrix(tmp_path, f"  metric: corruption\n  {key}: {most}\n")).hunt
    assert spec is not None and getattr(spec, key) == most
    with pytest.raises(ConfigError, match=rf"m.yaml:\d+.*hunt.{key}") as err:
        read_matrix(_matrix(tmp_path, f"  metric: corruption\n  {key}: {most + 1}\n"))
    assert f"must be <= {most}, got '{most + 1}'" in str(err.value)


def test_a_hunt_metric_that_is_no_proportion_is_told_which_are(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"m.yaml:\d+.*'nope' is not a proportion metric") as err:
        read_matrix(_matrix(tmp_path, "  metric: nope\n"))
    assert err.value.hint == "proportion metrics: corruption"


def _decoys(count: int) -> str:
    return "".join(f"  decoy{i}:\n    env: {{decode: SIM_DECOY_{i}}}\n    levels: [a, b]\n" for i in range(count))


def test_a_hunt_takes_at_most_20_suspects(tmp_path: Path) -> None:
    """16 in dsv4_hunt.yaml: 4 more are taken, 5 more refused at the factors (2^21 configurations)."""
    spec = read_matrix(_matrix(tmp_path, "  metric: corruption\n", _decoys(4))).hunt
    assert spec is not None and len(spec.flags) == 20
    with pytest.raises(ConfigError, match=r"m.yaml:\d+.*a hunt takes at most 20 suspect flags, got 21"):
        read_matrix(_matrix(tmp_path, "  metric: corruption\n", _decoys(5)))


@pytest.mark.parametrize("key", ["exclude", "include", "zips"])
def test_a_hunt_refuses_design_keys_it_would_ignore(tmp_path: Path, key: str) -> None:
    """A hunt picks its own configurations: an `exclude:` of the all-failing configuration was
    planned as its first trial, silently."""
    path = _matrix(tmp_path, "  metric: corruption\n")
    value = "[[bf16_index_k, overlap]]" if key == "zips" else "[{bf16_index_k: on, overlap: on}]"
    path.write_text(path.read_text() + f"{key}: {value}\n")
    with pytest.raises(ConfigError) as err:
        read_matrix(path)
    assert f"`{key}:` does not apply to a hunt" in str(err.value) and "m.yaml:" in str(err.value)


# ---------------------------------------------------------------- the step source and resume
def _record(trial: int, levels: dict[str, str], k: int, n: int, round_: int = 0) -> TrialRecord:
    return TrialRecord(
        run_id="r",
        trial=trial,
        round=round_,
        cell=",".join(f"{f}={v}" for f, v in levels.items()),
        levels=levels,
        testbed="t",
        status="completed",
        started="2026-01-01T00:00:00Z",
        ended="2026-01-01T00:00:01Z",
        duration_s=1.0,
        metrics={"corruption": MetricValue(kind="proportion", k=k, n=n)},
    )


def _answer_all(source: HuntSource, limit: int, seed: int = 5) -> list[TrialRecord]:
    """Hand out and answer up to `limit` trials (the DSV4 AND at 16% of 20, background 0.5%)."""
    spec = source.matrix.hunt
    assert spec is not None
    rng, records = random.Random(seed), []
    while len(records) < limit and (step := source.next()) is not None:
        levels = dict(step.trial.cell.levels)
        bad = all(levels[f] == spec.failing[f] for f in ("bf16_index_k", "cuda_graph", "overlap"))
        records.append(
            _record(
                step.trial.index,
                levels,
                sum(rng.random() < (0.16 if bad else 0.005) for _ in range(20)),
                20,
                step.trial.round,
            )
        )
        source.record(records[-1])
    return records


def test_a_resumed_hunt_replays_its_journal_and_asks_what_the_first_would_have() -> None:
    matrix = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml")
    first = _answer_all(HuntSource(matrix), 30)
    killed_after = 22  # the controller died here (kill -9): the journal holds 22 trials
    resumed = HuntSource(matrix, first[:killed_after])
    assert resumed.index == killed_after
    original = HuntSource(matrix, first[:killed_after])
    assert [resumed.next().trial.cell for _ in range(3)] == [original.next().trial.cell for _ in range(3)]  # type: ignore[union-attr]
    assert resumed.hunt.sessions == sum(r.metrics["corruption"].n or 0 for r in first[:killed_after])


def _rounds_in_order(records: list[TrialRecord]) -> bool:
    """Each configuration's trials carry rounds 0, 1, 2, ... in the order they were handed out."""
    seen: dict[str, int] = {}
    for r in records:
        if r.round != seen.get(r.cell, 0):
            return False
        seen[r.cell] = r.round + 1
    return True


def test_a_configurations_trials_are_its_rounds_in_order_and_a_resume_goes_on_counting() -> None:
    """A trial's round is the repro's `{round}` and the export's and drift check's round: the nth
    trial of a configuration is round n-1, also past a resume (never a round it already ran)."""
    matrix = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml")
    first = _answer_all(HuntSource(matrix), 40)
    asked_again = [r for r in first if r.round > 0]
    assert asked_again and _rounds_in_order(first)  # the failing configuration is asked again
    journaled = first[:25]
    resumed = HuntSource(matrix, journaled)
    assert _rounds_in_order(journaled + _answer_all(resumed, 15, seed=6))


def test_the_search_says_once_how_it_ended_and_hands_out_nothing_after() -> None:
    """on_stop carries the search's end to run.json and the terminal (sweep.api._hunt_end)."""
    matrix = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml")
    ended: list[HuntResult] = []
    source = HuntSource(matrix, on_stop=ended.append)
    records = _answer_all(source, 10_000)
    assert len(ended) == 1 and ended[0].state == "found" and ended[0].trials == len(records)
    assert ended[0].top[0].sets == (("bf16_index_k", "cuda_graph", "overlap"),)
    assert source.next() is None and source.next() is None and len(ended) == 1
    closed = HuntSource(matrix, on_stop=ended.append)
    assert closed.next() is not None
    closed.close()  # the runner's stop (an interrupt, a fault): nothing more, mid-search
    assert closed.next() is None and len(ended) == 1
    quiet = HuntSource(matrix)  # no on_stop given: the search ends all the same
    assert len(_answer_all(quiet, 10_000)) == len(records) and quiet.next() is None


def test_failed_trials_are_no_evidence_and_other_matrices_are_not_hunts() -> None:
    matrix = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml")
    source = HuntSource(matrix)
    step = source.next()
    assert step is not None and step.trial.is_baseline  # the all-failing configuration first
    failed = _record(0, dict(step.trial.cell.levels), 3, 20).model_copy(update={"status": "failed"})
    source.record(failed)
    assert source.hunt.trials == 0 and source.pending == {}
    assert read_matrix(REPO / "matrices" / "overlap_hunt.yaml").hunt is None


# ---------------------------------------------------------------- the simulator's flag model
def test_simulator_flag_model_from_env() -> None:
    model = model_from_env(
        {
            "SIM_CULPRITS": "bf16_index_k&cuda_graph&multi_stream_overlap:0.16|SGLANG_X:0.1",
            "SIM_FLAG_EFFECTS": "SGLANG_Y:0.01",
            "SIM_BACKGROUND": "0",
            "SIM_TRIAL_ICC": "0.05",
        }
    )
    assert model is not None and model.icc == 0.05
    dsv4 = frozenset({"bf16_index_k", "cuda_graph", "multi_stream_overlap"})
    assert model.session_rate(dsv4) == pytest.approx(0.16)
    assert model.session_rate(dsv4 - {"cuda_graph"}) == 0.0
    assert model.session_rate(dsv4 | {"SGLANG_X"}) == pytest.approx(1 - 0.84 * 0.9)
    assert model.session_rate(frozenset({"SGLANG_Y"})) == pytest.approx(0.01)
    rates = [model.trial_rate(dsv4, random.Random(i)) for i in range(400)]
    assert 0.13 < sum(rates) / len(rates) < 0.19 and max(rates) - min(rates) > 0.1  # varies per trial
    assert model_from_env({}) is None
    for bad in ({"SIM_CULPRITS": "a&b"}, {"SIM_CULPRITS": "a:2"}, {"SIM_CULPRITS": "a b:0.1"}):
        with pytest.raises(CulpritSpecError):
            model_from_env(bad)


# ---------------------------------------------------------------- the command line (nothing touched)
def test_plan_and_dry_run_show_the_first_wave_and_the_expected_cost(capsys) -> None:
    from orchestrator.cli.main import main

    matrix, inventory = str(REPO / "matrices" / "dsv4_hunt.yaml"), str(REPO / "inventory" / "local.yaml")
    assert main(["plan", matrix, "-i", inventory]) == 0
    out = capsys.readouterr().out
    assert "hunt over 16 suspect flags" in out and "first wave: 18 trials" in out
    assert "trial 2: all failing but bf16_index_k clean" in out
    assert "expected: ~675 sessions (p90 852)" in out and "one flag at a time: 1,360 sessions" in out
    assert main(["hunt", matrix, "-i", inventory, "--dry-run"]) == 0
    assert "dry run: nothing was changed" in capsys.readouterr().out
    assert main(["hunt", str(REPO / "matrices" / "overlap_hunt.yaml"), "-i", inventory, "--dry-run"]) == 2
    assert "no hunt: section" in capsys.readouterr().err


def test_orch_run_refuses_a_hunt_matrix_at_its_hunt_line(tmp_path: Path, capsys) -> None:
    from orchestrator.cli.main import main

    matrix = REPO / "matrices" / "dsv4_hunt.yaml"
    line = 1 + matrix.read_text().splitlines().index("hunt:")
    for extra in ([], ["--dry-run"]):
        code = main(
            ["run", str(matrix), "-i", str(REPO / "inventory" / "local.yaml"), "--out", str(tmp_path / "r")] + extra
        )
        assert code == 2
        said = capsys.readouterr().err
        assert f"dsv4_hunt.yaml:{line}: this matrix declares a hunt; run `orch hunt " in said, said
    assert not (tmp_path / "r").exists()  # nothing touched, no run directory


def test_hunt_progress_shows_trials_done_and_never_a_total() -> None:
    import io

    from rich.console import Console

    from orchestrator.sweep.progress import RichProgress

    sink = io.StringIO()
    progress = RichProgress(Console(file=sink, width=200), open_ended=True)
    progress.start(18, 24)  # a resumed hunt: 24 done, more than its first wave of 18
    progress.retotal(-6)  # a guess from the search: ignored
    progress.trial_done(_record(24, {"overlap": "on"}, 1, 20))
    assert sink.getvalue().startswith("[25 done] ") and "/" not in sink.getvalue().split("]")[0]


def test_a_hunt_configuration_is_named_by_the_flags_that_set_it_apart() -> None:
    spec = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml").hunt
    assert spec is not None
    full, index = (1 << len(spec.flags)) - 1, {f: i for i, f in enumerate(spec.flags)}
    culprits = (1 << index["bf16_index_k"]) | (1 << index["cuda_graph"]) | (1 << index["overlap"])
    assert spec.in_words(full) == "all flags at their failing level"
    assert spec.in_words(0) == "all flags at their clean level"
    assert spec.in_words(full ^ 1 << index["fp8_kv_cache"]) == "all failing but fp8_kv_cache clean"
    assert spec.in_words(culprits) == "only bf16_index_k, cuda_graph, overlap failing"
    assert spec.in_words(full ^ culprits) == "all failing but bf16_index_k, cuda_graph, overlap clean"


def test_a_hunts_progress_line_names_the_configuration_not_its_16_flag_id(tmp_path: Path) -> None:
    """Seen in a run: every line listed all 16 flags (300+ characters), the dropped one lost in them."""
    import io

    from rich.console import Console

    from orchestrator.sweep.apitypes import Started
    from orchestrator.sweep.progress import RichProgress

    spec = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml").hunt
    assert spec is not None
    started = Started("r", tmp_path, ("t",), 0, 0, hunt=spec)
    assert started.open_ended
    only = {f: spec.failing[f] if f in ("cuda_graph", "overlap") else spec.clean[f] for f in spec.flags}
    sink = io.StringIO()
    progress = RichProgress(Console(file=sink, width=200), open_ended=True, cell_name=started.cell_name)
    progress.start(0, 0)
    progress.trial_done(_record(0, only, 3, 20))
    line = sink.getvalue()
    assert "— only cuda_graph, overlap failing: corruption 3/20 (15%)" in line, line
    assert "bf16_index_k" not in line
    outside = _record(1, {"other": "x"}, 0, 20)  # not a configuration of the hunt: its id, as before
    assert started.cell_name(outside) == "other=x"
    assert Started("r", tmp_path, ("t",), 1, 1).cell_name(_record(0, only, 3, 20)) == _record(0, only, 3, 20).cell


def test_a_drop_passes_only_on_a_clean_streak_long_enough_for_a_low_affected_rate() -> None:
    from orchestrator.core.hunt import _p_affected

    hunt = Hunt(HuntSettings(FLAGS))
    full = (1 << len(FLAGS)) - 1
    hunt.observe(0, 0, 40)  # the clean endpoint
    for x in [full] + [full ^ (1 << i) for i in range(1, len(FLAGS))]:
        hunt.observe(x, 1, 5)  # f0 looks like the culprit: every other drop fails at ~20%
    drop = full ^ 1
    at_mean = at_low = 0
    for trial in range(1, 30):
        hunt.observe(drop, 0, 5)
        p1, p0, low = hunt._verdict_rates()
        assert p0 < low < p1
        ke, ne = hunt._effective(drop)
        at_mean = at_mean or (trial if _p_affected(ke, ne, p1, p0) <= 0.01 else 0)
        at_low = at_low or (trial if hunt.own_verdict(drop) == "passes" else 0)
    assert 0 < at_mean < at_low  # "passes" waits for more clean trials than the pooled mean rate asks


def test_the_clean_endpoint_is_confirmed_as_a_premise_sooner_than_a_drop_and_not_when_it_fails() -> None:
    # the clean endpoint is unaffected under every culprit set: it is confirmed at the posterior
    # target against the pooled rate (like the failing endpoint's few failures), a drop at
    # `confidence` against a low affected rate (the drop decides the culprit set)
    full = (1 << len(FLAGS)) - 1
    hunt = Hunt(HuntSettings(FLAGS))
    for x in [full] + [full ^ (1 << i) for i in range(1, len(FLAGS))]:
        hunt.observe(x, 1, 5)  # f0 looks like the culprit: every other drop fails at ~20%
    clean_at = drop_at = 0
    for trial in range(1, 30):
        hunt.observe(0, 0, 5)
        hunt.observe(full ^ 1, 0, 5)
        clean_at = clean_at or (trial if hunt.own_verdict(0) == "passes" else 0)
        drop_at = drop_at or (trial if hunt.own_verdict(full ^ 1) == "passes" else 0)
    assert 0 < clean_at < drop_at, (clean_at, drop_at)
    failing = Hunt(HuntSettings(FLAGS))
    for x in [full] + [full ^ (1 << i) for i in range(1, len(FLAGS))]:
        failing.observe(x, 1, 5)
    for _ in range(30):
        failing.observe(0, 1, 5)  # the clean endpoint fails as often as the failing ones
        assert failing.own_verdict(0) != "passes"


def _pair_drops_offered(hunt: Hunt) -> set[tuple[str, ...]]:
    """The pair drops (two flags off the failing configuration) the search would score next."""
    full = (1 << len(FLAGS)) - 1
    probs, _ = hunt._posterior()
    _, w, hyps = hunt._held(probs)
    cands = hunt._candidates(w, hyps)
    return {hunt.flags_of(full ^ x) for x in cands if bin(full ^ x).count("1") == 2}


def test_pair_drops_are_offered_only_while_an_or_of_two_causes_is_plausible() -> None:
    # under an AND, a pair drop holding a culprit stays clean whatever the other flag is: once
    # the ORs are all but ruled out the search scores no pair of uncertain flags
    full = (1 << len(FLAGS)) - 1
    and_like = Hunt(HuntSettings(FLAGS))
    and_like.observe(full, 2, 10)
    and_like.observe(0, 0, 20)
    for i in range(len(FLAGS)):
        and_like.observe(full ^ (1 << i), 0 if i in (1, 3, 4, 5) else 2, 5)
    for _ in range(7):  # f1 and f3 are culprits; the third is f4 or f5 (or none)
        and_like.observe(full ^ 0b10, 0, 5)
        and_like.observe(full ^ 0b1000, 0, 5)
    probs, _ = and_like._posterior()
    _, w, hyps = and_like._held(probs)
    marginal = {f: float(w[(hyps.a | hyps.b) >> i & 1 == 1].sum()) for i, f in enumerate(FLAGS)}
    assert 0.2 < marginal["f4"] < 0.8 and 0.2 < marginal["f5"] < 0.8  # both uncertain
    assert float(w[hyps.b != 0].sum()) < 0.05
    assert _pair_drops_offered(and_like) == set()
    # every flag's drop still fails: an OR of two causes is likely, and pair drops tell it
    or_like = Hunt(HuntSettings(FLAGS))
    or_like.observe(full, 2, 10)
    or_like.observe(0, 0, 20)
    for i in range(len(FLAGS)):
        or_like.observe(full ^ (1 << i), 1, 5)
    assert len(_pair_drops_offered(or_like)) >= 10


def test_a_drop_check_that_needs_several_clean_trials_gets_as_many_free_testbeds_at_once() -> None:
    # f1 AND f3 AND f4 is the likeliest answer; f1's drop is checked, f3's and f4's need more
    # clean trials: the free testbeds go to f3's drop as many times as its streak needs, then to f4's
    full = (1 << len(FLAGS)) - 1
    hunt = Hunt(HuntSettings(FLAGS, target=0.9))  # the checks, not the posterior, are what is left
    hunt.observe(full, 3, 15)
    hunt.observe(0, 0, 40)
    for i in (0, 2, 5, 6):
        hunt.observe(full ^ (1 << i), 2, 5)
    for trial in range(12):
        hunt.observe(full ^ 0b10, 0, 5)
        if trial < 3:
            hunt.observe(full ^ 0b1000, 0, 5)
            hunt.observe(full ^ 0b10000, 0, 5)
    for _ in range(REST_TRIALS):  # f3 AND f4 without f1: f1's drop is checked
        hunt.observe(0b11000, 0, 5)
    result = hunt.result()
    assert result.best.sets == (("f1", "f3", "f4"),) and result.best.probability >= 0.9
    assert result.unchecked == ("f3", "f4")
    drop3, drop4 = full ^ 0b1000, full ^ 0b10000
    need3, need4 = hunt._clean_trials_to_pass(drop3), hunt._clean_trials_to_pass(drop4)
    assert need3 >= 2 and need4 >= 2
    batch: list[int] = []
    for _ in range(need3 + need4):
        batch.append(hunt.propose(batch) or -1)
    assert batch == [drop3] * need3 + [drop4] * need4, [hunt.flags_of(full ^ x) for x in batch]
    for x in batch:  # as many clean trials as they were given: both drops pass, the hunt ends
        hunt.observe(x, 0, 5)
    assert hunt.own_verdict(drop3) == hunt.own_verdict(drop4) == "passes"
    rests: list[int] = []  # then the set without f3, and without f4, REST_TRIALS trials each
    for _ in range(2 * REST_TRIALS):
        rests.append(hunt.propose(rests) or -1)
    assert rests == [0b10010] * REST_TRIALS + [0b1010] * REST_TRIALS, [hunt.flags_of(x) for x in rests]
    for x in rests:
        hunt.observe(x, 0, 5)
    assert hunt.propose() == 0b11010  # last, the minimal reproducer: it must fail on its own trials
    hunt.observe(0b11010, 3, 5)
    assert hunt.propose() == 0b11010  # ... in REPRO_TRIALS of them
    hunt.observe(0b11010, 1, 5)
    assert hunt.propose() is None and hunt.state == "found"


def test_the_next_trial_refutes_a_rival_that_explains_a_long_clean_streak_with_a_low_rate_of_its_own() -> None:
    # f1 AND f4 (or f3 AND f4, ...) call f3's long clean drop "affected" at a low rate of their
    # own: a further clean trial of a drop hardly moves them; a trial at the affected rate does
    full = (1 << len(FLAGS)) - 1
    hunt = primed((2, 15), 20, (0, 2, 5, 6), (1, 5))
    for _ in range(12):
        hunt.observe(full ^ 0b10, 0, 5)
        hunt.observe(full ^ 0b10000, 0, 5)
    for trial in range(40):
        hunt.observe(full ^ 0b1000, int(trial == 0), 5)
    probs, _ = hunt._posterior()
    proposal = hunt._most_informative(probs, [])
    best = hunt.result().best
    assert best.sets == (("f1", "f3", "f4"),)
    assert set(best.flags) <= set(hunt.flags_of(proposal)), hunt.flags_of(proposal)  # affected under the best set


def test_a_superset_crowned_by_a_lucky_clean_streak_waits_for_its_reproducer_without_each_flag() -> None:
    # truth: f1 alone. f2's drop stayed clean by chance, so "f1 AND f2" explains every trial and
    # both drops pass on their own trials. Checking a drop also runs the answer's set without the
    # flag, every other flag clean: f1 alone, where the real culprit is still on and fails
    full = (1 << len(FLAGS)) - 1
    hunt = primed((3, 15), 40, (0, 3, 4, 5, 6), (2, 10))
    for _ in range(10):
        hunt.observe(full ^ 0b10, 0, 5)
        hunt.observe(full ^ 0b100, 0, 5)
    result = hunt.result()
    assert result.best.sets == (("f1", "f2"),) and result.best.probability >= 0.95
    assert hunt.own_verdict(full ^ 0b10) == hunt.own_verdict(full ^ 0b100) == "passes"
    assert set(result.unchecked) == {"f1", "f2"}  # neither set without one of its flags has run
    batch: list[int] = []
    for _ in range(2 * REST_TRIALS):
        batch.append(hunt.propose(batch) or -1)
    assert sorted(batch) == [0b10] * REST_TRIALS + [0b100] * REST_TRIALS, [hunt.flags_of(x) for x in batch]
    for _ in range(REST_TRIALS):
        hunt.observe(0b100, 0, 5)  # f2 alone: clean, as both answers say
    hunt.observe(0b10, 2, 5)  # f1 alone fails: f2 is not needed
    assert "f2" in hunt.result().unchecked  # the set without f2 failed: f2's drop stays unchecked
    assert hunt.propose() is not None and hunt.state == "running"
    rng = random.Random(7)  # the truth goes on answering: f1 alone at 15%, background 0.5%
    drive(hunt, lambda x: (sum(rng.random() < (0.15 if x & 0b10 else 0.005) for _ in range(5)), 5))
    assert hunt.state == "found" and hunt.result().best.sets == (("f1",),)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_found_and_ran_its_set_without_each_flag_and_none_of_them_failed(seed: int) -> None:
    result = and3_hunt(seed).result()
    assert result.state == "found" and result.best.sets == (("f1", "f3", "f4"),)
    ran = {c.config: c for c in result.configs}
    for flag in (1, 3, 4):
        rest = 0b11010 & ~(1 << flag)
        assert rest in ran and ran[rest].trials >= REST_TRIALS and ran[rest].verdict != "fails", flag


def f3_f4_explains_every_trial() -> Hunt:
    """Truth f1 AND f3 AND f4, but f1's drop picked up failures of its own (a decoy, the
    background), so "f3 AND f4" explains every trial and each of its drops is checked."""
    full = (1 << len(FLAGS)) - 1
    hunt = primed((3, 15), 40, (0, 2, 5, 6), (2, 10))
    hunt.observe(full ^ 0b10, 2, 20)
    for _ in range(10):
        hunt.observe(full ^ 0b1000, 0, 5)
        hunt.observe(full ^ 0b10000, 0, 5)
    for _ in range(REST_TRIALS):  # each set without one of its flags ran, clean
        hunt.observe(0b10000, 0, 5)
        hunt.observe(0b1000, 0, 5)
    return hunt


def test_a_set_missing_a_culprit_waits_for_its_minimal_reproducer_to_fail() -> None:
    # truth: f1 AND f3 AND f4; "f3 AND f4" explains every trial. Under the truth its minimal
    # reproducer, f3 and f4 alone, passes: the hunt may not stop before it failed
    hunt = f3_f4_explains_every_trial()
    result = hunt.result()
    assert result.best.sets == (("f3", "f4"),) and result.best.probability >= 0.95 and result.unchecked == ()
    assert hunt.propose() == 0b11000  # not "found": the reproducer has not run
    rng = random.Random(3)
    drive(hunt, lambda x: (sum(rng.random() < (0.15 if x & 0b11010 == 0b11010 else 0.005) for _ in range(5)), 5))
    assert hunt.state == "found" and hunt.result().best.sets == (("f1", "f3", "f4"),)
    assert hunt.own_verdict(0b11010) == "fails"


def test_a_minimal_reproducer_whose_failures_all_came_in_one_trial_does_not_confirm_the_answer() -> None:
    # as above, "f3 AND f4" explains every trial; its reproducer, f3 and f4 alone, then shows a
    # burst of 3 failures in one trial (trials vary: ICC 0.30 at a 0.5% background). The trial is
    # the unit of replication: one bursting trial is not a reproducer that fails (bench_hunt.py,
    # and3-icc30: 5 of 6 wrong answers in 300 hunts had all the reproducer's failures in one trial)
    hunt = f3_f4_explains_every_trial()
    hunt.observe(0b11000, 3, 5)  # the burst
    assert hunt.own_verdict(0b11000) == "fails" and hunt.result().best.sets == (("f3", "f4"),)
    assert hunt.propose() == 0b11000 and hunt.state == "running"  # not "found": one trial failed
    hunt.observe(0b11000, 1, 5)  # a second trial with a failure of its own
    assert hunt.propose() is None and hunt.state == "found", hunt.reason


# ---------------------------------------------------------------- the budget, the give-up, trials that give no data
def test_the_session_budget_bounds_the_first_wave_and_the_plan_says_when_it_caps_the_cost(
    tmp_path: Path, capsys
) -> None:
    # 7 flags at 20 sessions a trial: the first wave alone is 9 trials, 180 sessions. It ran in
    # full before the budget of 100 was first looked at, and `orch plan` expected 540 sessions
    def run_trial(x: int) -> tuple[int, int]:
        return (3 if x == (1 << len(FLAGS)) - 1 else 0), 20

    for testbeds in (1, 4):
        hunt = Hunt(HuntSettings(FLAGS, sessions_per_trial=20, max_sessions=100))
        drive(hunt, run_trial, testbeds)
        assert hunt.state == "budget" and hunt.sessions <= 100 + 20, (testbeds, hunt.sessions)
        assert "spent before the first wave finished" in hunt.reason and "nothing was searched" in hunt.reason
    from orchestrator.cli.main import main
    from orchestrator.core.huntplan import budget_note, expected_sessions

    path = _matrix(tmp_path, "  metric: corruption\n  sessions_per_trial: 20\n  max_sessions: 300\n")
    spec = read_matrix(path).hunt
    assert spec is not None and expected_sessions(spec) == (300, 300)
    shipped = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml").hunt
    assert shipped is not None and budget_note(shipped) is None  # 3,000 sessions: the model's p90 is 840
    assert main(["plan", str(path), "-i", str(REPO / "inventory" / "local.yaml")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "expected: ~300 sessions (p90 300)" in said
    assert "capped by max_sessions 300: it does not pay for the first wave (18 trials of 20 sessions = 360)" in said


def test_a_failing_configuration_is_given_the_sessions_its_min_failures_need(tmp_path: Path) -> None:
    # min_failures: 100 is accepted, but the failing configuration gave up after a fixed 400
    # sessions: at 15% it showed ~60 failures and the hunt ended "did not fail: 61/400"
    from orchestrator.core.huntreplay import settings_of

    spec = read_matrix(_matrix(tmp_path, "  metric: corruption\n  min_failures: 100\n  sessions_per_trial: 20\n")).hunt
    assert spec is not None
    hunt = Hunt(settings_of(spec))  # the matrix's 16 flags
    full = hunt.settings.full
    hunt.observe(0, 0, 20)
    for i in range(len(spec.flags)):
        hunt.observe(full ^ (1 << i), 0, 20)
    for _ in range(20):
        hunt.observe(full, 3, 20)  # 60/400: failing at 15%, 40 failures short
    assert hunt.propose() == full and hunt.state == "running"
    silent = Hunt(HuntSettings(FLAGS, min_failures=100, sessions_per_trial=20))
    while (x := silent.propose()) is not None:
        silent.observe(x, 0, 20)
    assert silent.state == "not_failing"
    assert "did not show 100 failures in 2000 sessions (0/2000)" in silent.reason, silent.reason
    assert settings_of(spec).endpoint_limit == 2000  # 100 failures at 5%, for the matrix's hunt too
    assert HuntSettings(FLAGS, min_failures=100, max_sessions=1500).endpoint_limit == 1500  # never past the budget
    assert HuntSettings(FLAGS).endpoint_limit == 400  # the default min_failures: as before


def test_a_hunt_whose_trials_give_no_data_ends_after_the_trials_its_budget_pays_for() -> None:
    # failed and void trials add no sessions: neither the budget nor the failing configuration's
    # give-up was reached, and the source asked for the failing configuration forever
    from orchestrator.core.records import Failure

    matrix = read_matrix(REPO / "matrices" / "dsv4_hunt.yaml")
    spec = matrix.hunt
    assert spec is not None
    paid = spec.max_sessions // spec.sessions_per_trial  # 150 trials
    source = HuntSource(matrix)
    records: list[TrialRecord] = []
    failure = Failure(kind="infrastructure", error="HealthTimeout", message="decode not healthy after 900 s")
    while (step := source.next()) is not None and len(records) <= 2 * paid:
        levels = dict(step.trial.cell.levels)
        record = _record(step.trial.index, levels, 0, 20).model_copy(
            update={"status": "failed", "metrics": {}, "failure": failure}
        )
        if len(records) == 10:  # one trial with data: evidence, and no trial of no data
            record = _record(step.trial.index, levels, 0, 20)
        records.append(record)
        source.record(record)
    assert len(records) == paid + 1 and source.hunt.trials == 1 and source.hunt.sessions == 20
    reason = source.hunt.reason
    assert source.hunt.state == "budget" and f"stopped: {paid} trials gave no data" in reason, reason
    assert "HealthTimeout: decode not healthy after 900 s" in reason and f"the last {paid - 10} in a row" in reason
    resumed = HuntSource(matrix, records)  # the journal replayed (resume, the report) stops there too
    assert resumed.next() is None and resumed.hunt.reason == reason
    interrupted = HuntSource(matrix, [r.model_copy(update={"status": "interrupted"}) for r in records[:paid]])
    assert interrupted.hunt.empty == 0 and interrupted.next() is not None  # cut short by Ctrl-C: not counted
