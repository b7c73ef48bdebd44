"""Tests of orchestrator.core.sequential: exact martingale checks, known decisions, and simulation.

The exact checks prove the construction (every component of the "different" mixture and every
equivalence bet has mean <= 1 under its null, for one round, by enumerating all outcomes); the
simulations check what a user relies on, seeded: under equal rates a false "different" stays
within alpha (plus Monte Carlo slack) however many rounds are looked at, "no_difference" is
rarely wrong when a difference of `effect` exists, the DSV4 rates are found different early, and
decisions agree with a fixed 80-session Fisher test on the same data.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from orchestrator.core import sequential as seq
from orchestrator.core.sequential import Decision, SequentialPolicy, decide, simulate
from orchestrator.core.stats import fisher_exact

POLICY = SequentialPolicy(max_rounds=8)


def slack(p: float, n: int) -> float:
    """Three Monte Carlo standard errors of a rate p estimated from n draws."""
    return 3 * math.sqrt(p * (1 - p) / n)


def rounds_of(*counts: int, n: int = 10) -> list[tuple[int, int]]:
    return [(k, n) for k in counts]


def binomial_pairs(pc: float, nc: int, pb: float, nb: int) -> list[tuple[int, int, float]]:
    """Every (kc, kb) of one round with its probability."""
    return [
        (kc, kb, float(sps.binom.pmf(kc, nc, pc) * sps.binom.pmf(kb, nb, pb)))
        for kc in range(nc + 1)
        for kb in range(nb + 1)
    ]


# ----------------------------------------------------------------------------- inputs


@pytest.mark.parametrize(
    "settings_, word",
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.0}, "alpha"),
        ({"power": 1.0}, "power"),
        ({"effect": 0.0}, "effect"),
        ({"min_rounds": 0}, "min_rounds"),
        ({"min_rounds": 5, "max_rounds": 4}, "max_rounds 4 < min_rounds 5"),
    ],
)
def test_policy_rejects_bad_settings(settings_: dict[str, float], word: str) -> None:
    arguments = {"max_rounds": 8, **settings_}
    with pytest.raises(ValueError, match=word):
        SequentialPolicy(**arguments)  # type: ignore[arg-type]


def test_policy_is_frozen_and_keyword_only() -> None:
    with pytest.raises(TypeError):
        SequentialPolicy(0.05)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        POLICY.alpha = 0.1  # type: ignore[misc]


def test_decide_rejects_unpaired_rounds_and_bad_counts() -> None:
    with pytest.raises(ValueError, match="2 cell rounds vs 1 baseline"):
        decide(POLICY, rounds_of(0, 0), rounds_of(1))
    with pytest.raises(ValueError, match="bad count 11/10"):
        decide(POLICY, rounds_of(11), rounds_of(1))
    with pytest.raises(ValueError, match="bad count -1/10"):
        decide(POLICY, rounds_of(0), rounds_of(-1))


# ----------------------------------------------------------------------------- exact checks


def test_round_ratio_is_fisher_noncentral_hypergeometric() -> None:
    log_psi, _ = seq._mixture(0.1)
    kc, nc, kb, nb = 2, 7, 5, 12
    ratio = seq._round_ratio(kc, nc, kb, nb, 0.1)
    law = sps.nchypergeom_fisher
    for i in np.flatnonzero(np.isfinite(log_psi)):
        psi = math.exp(log_psi[i])
        total, draws = nc + nb, kc + kb
        want = math.log(law.pmf(kc, total, nc, draws, psi) / law.pmf(kc, total, nc, draws, 1))
        assert ratio[i] == pytest.approx(want, abs=1e-9)
    # psi = 0 puts all mass on the smallest count the margins allow (0 here): kc=2 is impossible
    assert ratio[np.isneginf(log_psi)][0] == -np.inf
    forced = seq._round_ratio(0, 10, 3, 10, 0.1)[np.isneginf(log_psi)][0]
    assert forced == pytest.approx(-math.log(law.pmf(0, 20, 10, 3, 1)))


@pytest.mark.parametrize("p, nc, nb", [(0.02, 10, 10), (0.15, 10, 10), (0.5, 7, 12), (0.3, 12, 3), (0.9, 5, 5)])
def test_every_mixture_component_has_mean_one_under_equal_rates(p: float, nc: int, nb: int) -> None:
    """E0[LR(psi)] = 1 for each psi, whatever the common rate: the product over rounds is then a
    martingale for any drifting rate, and so is the mixture (the basis of the alpha guarantee)."""
    mean = np.zeros_like(seq._mixture(0.1)[0])
    for kc, kb, prob in binomial_pairs(p, nc, p, nb):
        if kc + kb:
            mean += prob * np.exp(seq._round_ratio(kc, nc, kb, nb, 0.1))
        else:
            mean += prob
    np.testing.assert_allclose(mean, 1.0, atol=1e-9)


@pytest.mark.parametrize("dispersion", [1.5, 3.0])
@pytest.mark.parametrize("p, n", [(0.02, 10), (0.15, 10), (0.5, 7)])
def test_tempered_mixture_stays_a_test_martingale_when_trials_vary(p: float, n: int, dispersion: float) -> None:
    """decide(dispersion=d) divides each component's log ratio by d. Under equal rates with
    beta-binomial trials whose variance is d times the binomial's (intra-trial correlation
    (d - 1) / (n - 1)), the tempered mixture's expectation over one round stays <= 1, while the
    untempered one exceeds 1 (the bias the tempering removes). Exact: enumerated, no sampling."""
    rho = (dispersion - 1) / (n - 1)
    a, b = p * (1 - rho) / rho, (1 - p) * (1 - rho) / rho
    law = sps.betabinom(n, a, b).pmf(np.arange(n + 1))
    tempered = untempered = 0.0
    for kc in range(n + 1):
        for kb in range(n + 1):
            prob = law[kc] * law[kb]
            ratio = seq.round_log_ratios(0.1, kc, n, kb, n)
            tempered += prob * float(sum(seq.mixture_e_values(0.1, ratio, dispersion)))
            untempered += prob * float(sum(seq.mixture_e_values(0.1, ratio, 1.0)))
    assert tempered <= 1.0 + 1e-9
    assert untempered > 1.0


@pytest.mark.parametrize(
    "pc, pb", [(0.1, 0.0), (0.25, 0.15), (0.55, 0.45), (0.4, 0.1), (0.0, 0.1), (0.15, 0.25), (0.1, 0.6)]
)
@pytest.mark.parametrize("nc, nb", [(10, 10), (4, 11), (11, 4)])
def test_equivalence_bets_have_mean_at_most_one_under_their_null(pc: float, pb: float, nc: int, nb: int) -> None:
    """Under "cell higher by >= effect" the H+ wealth cannot grow in expectation (equality at
    exactly +effect), likewise H- below; averaging over random pairings keeps this exact."""
    effect = 0.1
    histories = [(0, 0, 0, 0), (0, 30, 0, 30), (3, 40, 9, 40), (20, 20, 0, 20)]  # varied stakes
    for before in histories:
        mean_up = mean_down = 0.0
        for kc, kb, prob in binomial_pairs(pc, nc, pb, nb):
            up, down = seq._equivalence_round(effect, before, (kc, nc, kb, nb))
            mean_up += prob * math.exp(up)
            mean_down += prob * math.exp(down)
        if pc - pb >= effect - 1e-12:
            assert mean_up <= 1 + 1e-9
            if math.isclose(pc - pb, effect):
                assert mean_up == pytest.approx(1.0, abs=1e-9)
        if pb - pc >= effect - 1e-12:
            assert mean_down <= 1 + 1e-9


# ----------------------------------------------------------------------------- decisions


def test_clear_difference_stops_with_a_plain_reason() -> None:
    decision = decide(POLICY, rounds_of(0, 0, 0, 0), rounds_of(2, 1, 2, 2))
    assert decision.state == "different" and decision.rounds == 4
    assert decision.reason.startswith(
        "stopped after 4 rounds (40 sessions): cell 0/40 vs baseline 7/40 decided different (cell lower; e-value "
    )
    assert decision.reason.endswith(">= 20)")
    flipped = decide(POLICY, rounds_of(2, 1, 2, 2), rounds_of(0, 0, 0, 0))
    assert flipped.state == "different" and "cell higher" in flipped.reason


def test_six_clean_against_six_events_is_the_least_that_decides() -> None:
    """Even a fixed Fisher test needs 6 events against 0 at 0.05 (two-sided p 0.031 vs 0.063
    for 5): the sequential test pays nothing for its anytime guarantee here."""
    assert decide(POLICY, rounds_of(0, 0, 0), rounds_of(2, 2, 2)).state == "different"
    assert decide(POLICY, rounds_of(0, 0, 0), rounds_of(2, 2, 1)).state == "continue"


def test_clean_cell_against_clean_baseline_is_no_difference() -> None:
    early = decide(POLICY, rounds_of(0, 0), rounds_of(0, 0))
    assert early.state == "continue"
    decision = decide(POLICY, rounds_of(0, 0, 0), rounds_of(0, 0, 0))
    assert decision.state == "no_difference"
    assert (
        "cell 0/30 vs baseline 0/30 decided no difference (difference 0%; a difference of "
        "10% or more either way ruled out: e-values " in decision.reason
    )
    assert decision.reason.endswith(">= 5)")


def test_undecided_cells_continue_then_stop_at_max_rounds() -> None:
    decision = decide(POLICY, rounds_of(1, 1), rounds_of(2, 2))
    assert decision == Decision("continue", 2, decision.reason)
    assert decision.reason.startswith(
        "continue after 2 rounds (20 sessions): cell 2/20 vs baseline 4/20 undecided (difference -10%; e-value "
    )
    last = decide(POLICY, rounds_of(*[1] * 8), rounds_of(*[2] * 8))
    assert last.state == "max_rounds" and last.rounds == 8
    assert last.reason.startswith(
        "stopped at max rounds after 8 rounds (80 sessions): cell 8/80 vs baseline 16/80 undecided"
    )


def test_min_rounds_delays_every_stop() -> None:
    policy = SequentialPolicy(min_rounds=3, max_rounds=8)
    assert decide(POLICY, rounds_of(0), rounds_of(10)).state == "different"
    assert decide(policy, rounds_of(0), rounds_of(10)).state == "continue"
    assert decide(policy, rounds_of(0, 0), rounds_of(10, 10)).state == "continue"
    assert decide(policy, rounds_of(0, 0, 0), rounds_of(10, 10, 10)).state == "different"


def test_rounds_without_sessions_and_unequal_sizes() -> None:
    """A round with no cell sessions (e.g. a failed trial) carries no evidence either way."""
    cell, base = rounds_of(0, 0, 0), rounds_of(2, 2, 2)
    gap = [(0, 0)]
    assert seq.e_value(0.1, cell + gap, base + [(3, 10)]) == pytest.approx(seq.e_value(0.1, cell, base))
    assert decide(POLICY, [(0, 5), (0, 20)], [(1, 15), (4, 8)]).state in {"continue", "different"}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12), st.integers(0, 12)),
        min_size=0,
        max_size=6,
    ),
    st.floats(0.02, 0.5),
)
def test_decisions_are_symmetric_in_cell_and_baseline(rows: list[tuple[int, int, int, int]], effect: float) -> None:
    """Swapping cell and baseline swaps the sides of the evidence and keeps the decision."""
    cell = [(min(a, b), max(a, b)) for a, b, _, _ in rows]
    base = [(min(c, d), max(c, d)) for _, _, c, d in rows]
    lower, higher = seq.side_e_values(effect, cell, base)
    assert (lower, higher) == pytest.approx(seq.side_e_values(effect, base, cell)[::-1])
    up, down = seq.equivalence_e_values(effect, cell, base)
    assert (up, down) == pytest.approx(seq.equivalence_e_values(effect, base, cell)[::-1])
    assert min(lower, higher, up, down) >= 0.0
    policy = SequentialPolicy(effect=effect, max_rounds=6)
    assert decide(policy, cell, base).state == decide(policy, base, cell).state


def test_simulate_is_seeded_and_counts_cell_sessions() -> None:
    def run(seed: int) -> tuple[Decision, int]:
        return simulate(POLICY, 0.0, 0.15, 10, np.random.default_rng(seed))

    first = run(7)
    assert first == run(7)
    decision, sessions = first
    assert decision.state != "continue" and sessions == decision.rounds * 10 <= 80


# ----------------------------------------------------------------------------- simulation


@pytest.mark.parametrize("rate", [0.0, 0.02, 0.15])
@pytest.mark.parametrize("direction", ["both", "lower", "higher"])
def test_false_different_within_alpha_under_equal_rates(rate: float, direction: str) -> None:
    policy = SequentialPolicy(max_rounds=8, direction=direction)  # type: ignore[arg-type]
    rng = np.random.default_rng(int(rate * 1000) + ["both", "lower", "higher"].index(direction))
    cells = 1000
    states, _ = run_cells(policy, rate, rate, 10, cells, rng)
    false = list(states).count("different") / cells
    assert false <= policy.alpha + slack(policy.alpha, cells)
    print(f"\nA/A at {rate:.0%}, {direction}: false different {false:.2%} over {cells} cells")


@pytest.mark.parametrize("direction", ["both", "lower"])
def test_false_different_within_alpha_with_drift_unequal_sizes_and_many_looks(direction: str) -> None:
    """The rate moves every round (shared by both arms), the cell runs 5 sessions to the
    baseline's 15, and there are 30 looks: still within alpha (Ville holds at every look).

    1000 cells run round by round at once (first_states: sequential's own per-round pieces,
    vectorised); the first 40 are replayed through decide() at every look, which must agree."""
    policy = SequentialPolicy(max_rounds=30, direction=direction)  # type: ignore[arg-type]
    rng = np.random.default_rng(11 if direction == "both" else 12)
    cells, rounds = 1000, policy.max_rounds
    p = rng.uniform(0.02, 0.4, size=(cells, rounds))
    kc, kb = rng.binomial(5, p), rng.binomial(15, p)
    states, stopped = first_states(policy, kc, 5, kb, 15)
    for i in range(40):
        cell, base = [(int(k), 5) for k in kc[i]], [(int(k), 15) for k in kb[i]]
        for r in range(1, stopped[i] + 1):
            want = states[i] if r == stopped[i] else "continue"
            assert decide(policy, cell[:r], base[:r]).state == want, (i, r)
    false = float(np.mean(states == "different"))
    assert false <= policy.alpha + slack(policy.alpha, cells)
    print(f"\ndrift + unequal n + 30 looks: false different {false:.2%} over {cells} cells")


def first_states(
    policy: SequentialPolicy, kc: np.ndarray, nc: int, kb: np.ndarray, nb: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each cell's first state other than "continue" and its round, cells (rows) run at once
    through sequential's per-round functions (what decide() sums over the rounds)."""
    cells, rounds = kc.shape
    ratio = np.zeros((cells, seq.mixture_size(policy.effect)))
    log_up, log_down = np.zeros(cells), np.zeros(cells)
    state = np.full(cells, "continue", dtype=object)
    stopped = np.zeros(cells, dtype=int)
    for r in range(rounds):
        for c, b in {(int(x), int(y)) for x, y in zip(kc[:, r], kb[:, r], strict=True)}:
            ratio[(kc[:, r] == c) & (kb[:, r] == b)] += seq.round_log_ratios(policy.effect, c, nc, b, nb)
        hist = (kc[:, :r].sum(axis=1), np.full(cells, r * nc), kb[:, :r].sum(axis=1), np.full(cells, r * nb))
        now = (kc[:, r], np.full(cells, nc), kb[:, r], np.full(cells, nb))
        up, down = seq.equivalence_rounds_batch(policy.effect, hist, now)
        log_up += up
        log_down += down
        lower, higher = seq.mixture_e_values(policy.effect, ratio)
        evidence = {"both": lower + higher, "lower": 2.0 * lower, "higher": 2.0 * higher}[policy.direction]
        up_e, down_e = np.exp(np.minimum(log_up, 700.0)), np.exp(np.minimum(log_down, 700.0))
        ruled = {"both": np.minimum(up_e, down_e), "lower": down_e, "higher": up_e}[policy.direction]
        now = seq.stop_states(policy, r + 1, evidence, ruled)
        fresh = (state == "continue") & (now != "continue")
        state[fresh], stopped[fresh] = now[fresh], r + 1
    return state, stopped


def run_cells(
    policy: SequentialPolicy, pc: float, pb: float, n: int, cells: int, rng: np.random.Generator, replay: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """What sequential.simulate does for `cells` cells (each round n sessions a side until
    decided), all cells at once through first_states: (final states, cell sessions used). The
    first `replay` cells go through decide() at every look, which must agree."""
    kc = rng.binomial(n, pc, size=(cells, policy.max_rounds))
    kb = rng.binomial(n, pb, size=(cells, policy.max_rounds))
    states, stopped = first_states(policy, kc, n, kb, n)
    for i in range(replay):
        cell, base = [(int(k), n) for k in kc[i]], [(int(k), n) for k in kb[i]]
        for r in range(1, stopped[i] + 1):
            assert decide(policy, cell[:r], base[:r]).state == (states[i] if r == stopped[i] else "continue")
    return states, stopped * n


def test_vectorised_round_pieces_equal_the_scalar_ones() -> None:
    """equivalence_rounds(_batch) and stop_states (the simulations' versions) equal the scalar functions."""
    rng = np.random.default_rng(8)
    for _ in range(30):
        now = (int(rng.integers(0, 6)), 5, int(rng.integers(0, 16)), 15)
        counts = rng.integers(0, 10, size=(7, 2))
        before = (counts[:, 0], np.full(7, 10), counts[:, 1], np.full(7, 30))
        up, down = seq.equivalence_rounds(0.1, before, now)  # type: ignore[arg-type]
        for i in range(7):
            want = seq.equivalence_round(0.1, tuple(int(x[i]) for x in before), now)  # type: ignore[arg-type]
            assert (up[i], down[i]) == pytest.approx(want, rel=1e-12, abs=1e-12)
    sizes = rng.integers(0, 12, size=(200, 2))  # mixed rounds in one batch, some arms without sessions
    nows = (
        rng.integers(0, 13, 200) % (sizes[:, 0] + 1),
        sizes[:, 0],
        rng.integers(0, 13, 200) % (sizes[:, 1] + 1),
        sizes[:, 1],
    )
    hist = (rng.integers(0, 20, 200), np.full(200, 20), rng.integers(0, 20, 200), np.full(200, 20))
    up, down = seq.equivalence_rounds_batch(0.1, hist, nows)  # type: ignore[arg-type]
    for i in range(200):
        key = tuple(int(x[i]) for x in hist), tuple(int(x[i]) for x in nows)
        assert (up[i], down[i]) == pytest.approx(seq.equivalence_round(0.1, *key), rel=1e-12, abs=1e-12)  # type: ignore[arg-type]
    policy = SequentialPolicy(max_rounds=4, min_rounds=2)
    evidence, ruled = np.array([0.5, 25.0, 19.9, 6.0, 1.0]), np.array([0.5, 0.1, 5.0, 4.9, 1.0])
    for rounds in (1, 2, 4):
        want = [seq.stop_state(policy, rounds, float(e), float(w)) for e, w in zip(evidence, ruled, strict=True)]
        assert list(seq.stop_states(policy, rounds, evidence, ruled)) == want


@pytest.mark.parametrize(
    "pc, pb, n, rounds, direction",
    [
        (0.0, 0.1, 10, 30, "both"),
        (0.45, 0.55, 100, 20, "both"),
        (0.15, 0.05, 50, 20, "both"),
        (0.0, 0.1, 10, 30, "lower"),
        (0.05, 0.15, 50, 20, "lower"),  # "no drop" wrong: a drop of effect
    ],
)
def test_no_difference_rarely_wrong_at_a_difference_of_effect(
    pc: float, pb: float, n: int, rounds: int, direction: str
) -> None:
    policy = SequentialPolicy(max_rounds=rounds, direction=direction)  # type: ignore[arg-type]
    rng = np.random.default_rng(5 if direction == "both" else 6)
    cells = 300
    states, _ = run_cells(policy, pc, pb, n, cells, rng)
    wrong = list(states).count("no_difference") / cells
    beta = 1 - policy.power
    assert wrong <= beta + slack(beta, cells)
    print(f"\n{pc:.0%} vs {pb:.0%}: no_difference {wrong:.1%} (bound {beta:.0%})")


def test_equal_low_rates_reach_no_difference_early() -> None:
    rng = np.random.default_rng(2)
    states, used = run_cells(POLICY, 0.0, 0.0, 10, 50, rng)
    assert all(state == "no_difference" for state in states) and set(used) == {30}
    low, _ = run_cells(POLICY, 0.02, 0.02, 10, 300, rng)
    assert list(low).count("no_difference") / len(low) >= 0.75  # 85% measured


@pytest.mark.parametrize(
    "pc, pb, power, sessions",
    [
        (0.0, 0.15, 0.93, 52),  # overlap-off cells: 98% different, 45 sessions measured
        (0.15, 0.0, 0.93, 52),  # the same, the other way round
        (0.02, 0.15, 0.50, 68),  # fp8 cells: 59% different within 80 sessions, 61 measured
    ],
)
def test_dsv4_rates_are_found_different_early(pc: float, pb: float, power: float, sessions: float) -> None:
    rng = np.random.default_rng(3)
    states, used = run_cells(POLICY, pc, pb, 10, 500, rng)
    found = float(np.mean(states == "different"))
    mean_sessions = float(np.mean(used))
    assert found >= power and mean_sessions <= sessions
    print(f"\n{pc:.0%} vs {pb:.0%}: different {found:.0%}, mean sessions {mean_sessions:.0f}")


def test_decisions_agree_with_a_fixed_fisher_design_on_the_same_data() -> None:
    """Draw all 8 rounds, let the adaptive design see them one by one and the fixed design all
    80 sessions (Fisher at 0.05). Adaptive "different" is nearly always fixed-significant and in
    the observed direction; a clear fixed result (p < 0.001) is nearly always found adaptively."""
    rng = np.random.default_rng(4)
    adaptive_hits, confirmed, clear, found_clear = 0, 0, 0, 0
    fisher: dict[tuple[int, int], float] = {}  # each distinct table once
    for pc, pb in [(0.0, 0.15), (0.02, 0.15), (0.35, 0.15), (0.15, 0.02)]:
        cells, bases = rng.binomial(10, pc, (250, 8)), rng.binomial(10, pb, (250, 8))
        states, stopped = first_states(POLICY, cells, 10, bases, 10)  # all 250 cells at once
        for i, (c, b) in enumerate(zip(cells, bases, strict=True)):
            key = (int(c.sum()), int(b.sum()))
            p = fisher.setdefault(key, fisher_exact(key[0], 80, key[1], 80))
            if states[i] == "different":
                decision = decide(POLICY, rounds_of(*map(int, c[: stopped[i]])), rounds_of(*map(int, b[: stopped[i]])))
                assert decision.state == "different" and decision.rounds == stopped[i]
                adaptive_hits += 1
                lower = c[: decision.rounds].sum() < b[: decision.rounds].sum()
                assert ("cell lower" in decision.reason) == lower
                assert (c.sum() < b.sum()) == lower
                confirmed += p < 0.05
            if i < 10:  # and the first cells' every look, as the runner sees them
                assert stop(c, b).state == states[i]
            if p < 0.001:
                clear += 1
                found_clear += states[i] == "different"
    assert confirmed / adaptive_hits >= 0.95  # 98-100% measured
    assert found_clear / clear >= 0.95  # 99-100% measured
    print(
        f"\nadaptive different confirmed by fixed: {confirmed}/{adaptive_hits}; fixed p<0.001 "
        f"found adaptively: {found_clear}/{clear}"
    )


def stop(cell: np.ndarray, base: np.ndarray) -> Decision:
    for r in range(1, len(cell) + 1):
        decision = decide(POLICY, rounds_of(*map(int, cell[:r])), rounds_of(*map(int, base[:r])))
        if decision.state != "continue":
            return decision
    raise AssertionError("decide did not stop at max_rounds")


# ----------------------------------------------------------------------------- one-sided questions

LOWER = SequentialPolicy(max_rounds=8, direction="lower")
HIGHER = SequentialPolicy(max_rounds=8, direction="higher")


def test_policy_rejects_an_unknown_direction() -> None:
    with pytest.raises(ValueError, match="direction 'sideways' not one of both, lower, higher"):
        SequentialPolicy(max_rounds=8, direction="sideways")  # type: ignore[arg-type]


def test_one_sided_question_decides_with_one_event_fewer() -> None:
    """Five events against none: a two-sided test cannot tell yet (as a fixed Fisher test cannot:
    two-sided p 0.063), asking only "does the cell lower the rate?" can (one-sided p 0.031)."""
    cell, base = rounds_of(0, 0, 0), rounds_of(2, 2, 1)
    assert decide(POLICY, cell, base).state == "continue"
    decision = decide(LOWER, cell, base)
    assert decision.state == "different" and "(cell lower; e-value " in decision.reason
    assert decide(LOWER, cell, rounds_of(2, 1, 1)).state == "continue"  # four are not enough
    assert decide(HIGHER, base, cell).state == "different"


def test_one_sided_question_never_calls_the_other_direction_different() -> None:
    """A cell far above the baseline does not lower the rate: "lower" rules a drop out and
    says so in its own words, instead of "different"."""
    decision = decide(LOWER, rounds_of(6, 5, 7), rounds_of(0, 0, 0))
    assert decision.state == "no_difference"
    assert "decided no drop (difference +60%; a drop of 10% or more ruled out: e-value " in decision.reason
    assert decide(HIGHER, rounds_of(0, 0, 0), rounds_of(6, 5, 7)).reason.count("no rise") == 1
    assert decide(POLICY, rounds_of(6, 5, 7), rounds_of(0, 0, 0)).state == "different"


def test_issue_rates_need_under_half_the_sessions_when_asking_lower() -> None:
    """15% vs 0%, 10 sessions a round, at most 8: found lower in >= 95% of cells with under
    40 of the fixed design's 80 sessions on average (37 measured; two-sided: 43)."""
    rng = np.random.default_rng(3)
    states, used = run_cells(LOWER, 0.0, 0.15, 10, 500, rng)
    found, mean_sessions = float(np.mean(states == "different")), float(np.mean(used))
    assert found >= 0.95 and mean_sessions < 40
    print(f"\n0% vs 15%, lower: different {found:.0%}, mean sessions {mean_sessions:.1f}")
