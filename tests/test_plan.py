"""Plan: per-trial env, restarts only where env changes, dependency order, min-restarts order."""

from __future__ import annotations

import hashlib
from itertools import pairwise
from pathlib import Path

import pytest

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan
from orchestrator.core.startorder import dependants, restart_order

REPO = Path(__file__).resolve().parent.parent


def merged_env(m, cell):
    """A cell's env recomputed the plain way: every level's assignments, merged per role."""
    env: dict[str, dict[str, str | None]] = {}
    for factor, level in cell.levels:
        for role, assignments in m.factor(factor).level(level).env.items():
            env.setdefault(role, {}).update(assignments)
    return env


@pytest.fixture
def ablation():
    m = read_matrix(REPO / "matrices/overlap_ablation.yaml")
    tb = read_inventory(REPO / "inventory/local.yaml").testbed(None)
    return m, tb


def test_only_roles_whose_env_changes_restart(ablation):
    m, tb = ablation
    plan = make_plan(m, tb, seed=4)
    for prev, step in pairwise(plan.steps):
        changed = {r for r in step.env if step.env[r] != prev.env.get(r)}
        assert set(step.changed_roles) == changed
        assert {r for r, _ in step.restart_units} == changed
        assert "router" not in changed  # no factor touches the router
        if changed:
            assert "router" in step.wait_roles  # its readiness depends on restarted workers


def test_decode_only_change_never_restarts_prefill(ablation):
    m, tb = ablation
    plan = make_plan(m, tb, seed=4)
    for prev, step in pairwise(plan.steps):
        same_index_k = prev.trial.cell.as_dict()["bf16_index_k"] == step.trial.cell.as_dict()["bf16_index_k"]
        if same_index_k:
            assert ("prefill", "sim-prefill") not in step.restart_units


def test_router_restarts_after_its_workers(ablation):
    _, tb = ablation
    assert restart_order(tb, {"router", "decode", "prefill"}) == ["prefill", "decode", "router"]
    assert dependants(tb, {"decode"}) == {"decode", "router"}


@pytest.mark.parametrize("seed", [1, 2, 3, 7])
def test_min_restarts_needs_no_more_restarts_than_other_orders(ablation, seed):
    m, tb = ablation
    counts = {o: make_plan(m, tb, seed, order=o).restart_count for o in ("randomized", "sequential", "min-restarts")}
    assert counts["min-restarts"] <= counts["sequential"] and counts["min-restarts"] <= counts["randomized"]
    plan = make_plan(m, tb, seed, replicates=3, order="min-restarts")
    for r in range(3):  # still every cell once per round
        assert sorted(s.trial.cell for s in plan.steps if s.trial.round == r) == sorted(plan.cells)


def test_min_restarts_is_strictly_better_on_the_ablation(ablation):
    m, tb = ablation
    assert (
        make_plan(m, tb, 1, order="min-restarts").restart_count < make_plan(m, tb, 1, order="randomized").restart_count
    )


def test_estimate_uses_startup_and_repro_estimates(ablation):
    m, tb = ablation
    plan = make_plan(m, tb, seed=1)
    first = plan.steps[0]
    assert first.estimate_s == pytest.approx(1.2 + 1)  # the prefill startup_estimate + the shipped expected_duration
    assert plan.estimated_duration_s == pytest.approx(sum(s.estimate_s for s in plan.steps))


# --------------------------------------------------------------------------- the order is pinned
# A resumed run rebuilds its plan and goes on only if it is the same, so the order a seed gives
# must never change between orch versions. These fingerprints were taken from the order before
# make_plan was made faster (and random.shuffle spelled out): change them only knowingly, with
# a note that runs started before the change cannot be resumed.
PINNED_MATRICES = {
    "ablation": """
name: ablation
factors:
  bf16_index_k: {env: {prefill: SGLANG_DSV4_BF16_INDEX_K, decode: SGLANG_DSV4_BF16_INDEX_K}, levels: [on, off]}
  cuda_graph:
    levels:
      on: {decode: {SGLANG_EXTRA_ARGS: ""}}
      off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}
  overlap: {env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}, levels: [on, off]}
replicates: 3
repro: {command: "true", metrics: {corruption: {kind: proportion, regex: '(?P<k>\\d+)/(?P<n>\\d+)'}}}
""",
    "adaptive": """
name: adaptive
factors:
  overlap: {env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}, levels: [on, off]}
  cuda_graph:
    levels:
      on: {decode: {SGLANG_EXTRA_ARGS: ""}}
      off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}
  bf16: {env: {prefill: BF16, decode: BF16}, levels: [on, off, auto]}
replicates: 4
adaptive: {metric: corruption, effect: 0.10, baseline_runs: 2}
repro: {command: "true", metrics: {corruption: {kind: proportion, regex: '(?P<k>\\d+)/(?P<n>\\d+)'}}}
""",
}
PINNED = {  # (matrix, order, seed) -> sha256[:16] of "index round cell is_baseline" lines
    ("ablation", "randomized", 1): "c1dd65db78dd55bd",
    ("adaptive", "randomized", 1): "ace314070a82a1d4",
    ("ablation", "randomized", 7): "bc5ca8ff6cc48cb6",
    ("adaptive", "randomized", 7): "8fd2170bf1c18b85",
    ("ablation", "randomized", 123456789): "4444975e4fe2f8a9",
    ("adaptive", "randomized", 123456789): "a67ff349e55776df",
    ("ablation", "sequential", 7): "bc37f270cc51bde3",
    ("adaptive", "sequential", 7): "d2e2dd09fce2cfa0",
    ("ablation", "min-restarts", 7): "84db9fbfe4c457c6",
    ("adaptive", "min-restarts", 7): "2c7809140c3e5392",
}


@pytest.mark.parametrize("name,order,seed", sorted(PINNED))
def test_the_order_of_a_seed_never_changes(tmp_path, name, order, seed):
    path = tmp_path / f"{name}.yaml"
    path.write_text(PINNED_MATRICES[name])
    tb = read_inventory(REPO / "inventory/local.yaml").testbed(None)
    plan = make_plan(read_matrix(path), tb, seed, order=order)
    lines = "".join(
        f"{s.trial.index} {s.trial.round} {s.trial.cell.id} {int(s.trial.is_baseline)}\n" for s in plan.steps
    )
    assert hashlib.sha256(lines.encode()).hexdigest()[:16] == PINNED[(name, order, seed)]


FIRST_ROUND_SEED_4 = [
    "bf16_index_k=on,cuda_graph=off,overlap=off",
    "bf16_index_k=on,cuda_graph=off,overlap=on",
    "bf16_index_k=off,cuda_graph=off,overlap=off",
    "bf16_index_k=off,cuda_graph=on,overlap=off",
    "bf16_index_k=on,cuda_graph=on,overlap=on",
    "bf16_index_k=off,cuda_graph=off,overlap=on",
    "bf16_index_k=off,cuda_graph=on,overlap=on",
    "bf16_index_k=on,cuda_graph=on,overlap=off",
]


def test_first_round_of_seed_4_in_full(ablation):
    """The same pin, readable: round 0 of the ablation with seed 4."""
    m, tb = ablation
    plan = make_plan(m, tb, seed=4)
    assert [s.trial.cell.id for s in plan.steps[:8]] == FIRST_ROUND_SEED_4
    assert [s.trial.is_baseline for s in plan.steps[:8]] == [
        c == "bf16_index_k=on,cuda_graph=on,overlap=on" for c in FIRST_ROUND_SEED_4
    ]


def test_steps_match_a_plain_recomputation(ablation):
    """The cached restart waves are what each step's env change calls for, step by step."""
    m, tb = ablation
    for order in ("randomized", "sequential", "min-restarts"):
        plan = make_plan(m, tb, 3, replicates=4, order=order)
        previous = None
        for i, step in enumerate(plan.steps):
            assert step.trial.index == i and step.env == merged_env(m, step.trial.cell)
            changed = {r for r in step.env if previous is None or step.env[r] != previous.get(r)}
            assert set(step.changed_roles) == changed
            assert step.restart_units == tuple(
                (r, u.name) for r in restart_order(tb, changed) for u in tb.hosts[r].units
            )
            assert step.wait_roles == tuple(restart_order(tb, dependants(tb, changed)))
            previous = step.env


def test_steps_and_trials_are_immutable(ablation):
    m, tb = ablation
    step = make_plan(m, tb, seed=1).steps[0]
    with pytest.raises(AttributeError):
        step.trial.index = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        step.estimate_s = 0.0  # type: ignore[misc]


def test_restart_cost_counts_the_units_of_roles_whose_env_changes(ablation):
    from orchestrator.core.plan import _restart_cost

    m, tb = ablation
    plan = make_plan(m, tb, seed=1)
    envs = {c: merged_env(m, c) for c in plan.cells}
    cost = _restart_cost(m, tb)
    for a in plan.cells:
        for b in plan.cells:
            expected = sum(len(tb.hosts[r].units) for r in envs[b] if envs[a].get(r) != envs[b][r])
            assert cost(a, b) == expected


DEMO_MATRIX = """
name: demo
factors:
  demo:
    levels:
      default: {}
      x: {decode: {DEMO_VALUE: x}}
  k: {env: {prefill: K}, levels: ["1", "2"]}
order: sequential
replicates: 2
repro: {command: "true", metrics: {corruption: {kind: proportion, regex: '(?P<k>\\d+)/(?P<n>\\d+)'}}}
"""


@pytest.fixture
def demo(tmp_path):
    path = tmp_path / "demo.yaml"
    path.write_text(DEMO_MATRIX)
    return read_matrix(path), read_inventory(REPO / "inventory/local.yaml").testbed(None)


def test_every_cell_owns_every_variable_the_matrix_mentions(demo):
    """Issue 12: a cell that does not mention DEMO_VALUE runs with the original file's, so going
    from x back to default changes decode (it restarts) although default assigns nothing."""
    m, tb = demo
    plan = make_plan(m, tb, seed=1)
    assert plan.matrix.mentioned == {"decode": frozenset({"DEMO_VALUE"}), "prefill": frozenset({"K"})}
    got = [(s.trial.cell.id, s.changed_roles) for s in plan.steps[:5]]
    assert got == [
        ("demo=default,k=1", ("prefill",)),  # the first trial changes what its cell sets
        ("demo=default,k=2", ("prefill",)),
        ("demo=x,k=1", ("prefill", "decode")),
        ("demo=x,k=2", ("prefill",)),
        ("demo=default,k=1", ("prefill", "decode")),  # DEMO_VALUE goes back to the original
    ]
    assert ("decode", "sim-decode") in plan.steps[4].restart_units
    assert dict(plan.steps[4].env) == {"prefill": {"K": "1"}}  # the journal shows the cell's own


def test_restart_cost_counts_a_role_going_back_to_the_original(demo):
    from orchestrator.core.plan import _restart_cost

    m, tb = demo
    plan = make_plan(m, tb, seed=1)
    cells = {c.id: c for c in plan.cells}
    cost = _restart_cost(m, tb)
    decode, prefill = len(tb.hosts["decode"].units), len(tb.hosts["prefill"].units)
    assert cost(cells["demo=x,k=1"], cells["demo=default,k=1"]) == decode
    assert cost(cells["demo=default,k=1"], cells["demo=x,k=1"]) == decode
    assert cost(cells["demo=x,k=1"], cells["demo=default,k=2"]) == decode + prefill
    assert cost(cells["demo=default,k=1"], cells["demo=default,k=1"]) == 0
    # min-restarts counts those restarts too: its plan restarts no more than the others
    counts = {o: make_plan(m, tb, 1, order=o).restart_count for o in ("randomized", "sequential", "min-restarts")}
    assert counts["min-restarts"] <= min(counts.values())


def test_expected_env_fills_the_cells_gaps_from_the_original():
    from orchestrator.core.matrix import expected_env

    keys = frozenset({"A", "B", "C"})
    assert expected_env({"A": "1"}, keys, {"B": "orig", "OTHER": "x"}) == {"A": "1", "B": "orig", "C": None}
    assert expected_env({"A": None}, keys, {"A": "orig"}) == {"A": None, "B": None, "C": None}


def _reference_order(tb, roles):  # type: ignore[no-untyped-def]
    """The definition, spelled the slow plain way (a list lookup, a fixpoint over hosts)."""
    ordered: list[str] = []

    def visit(key: str) -> None:
        if key in ordered:
            return
        for dep in tb.hosts[key].after:
            for other in tb.roles.get(dep, ()):
                if other in roles:
                    visit(other)
        ordered.append(key)

    for key in tb.hosts:
        if key in roles:
            visit(key)
    return ordered


def _reference_dependants(tb, roles):  # type: ignore[no-untyped-def]
    out = set(roles)
    changed = True
    while changed:
        changed = False
        for key, host in tb.hosts.items():
            if key not in out and any(tb.hosts[k].role in host.after for k in out):
                out.add(key)
                changed = True
    return out


@pytest.mark.parametrize("seed", range(20))
def test_start_order_and_dependants_match_their_definition_on_random_graphs(seed: int) -> None:
    """The set-based restart_order and role-level dependants give what the plain definitions give
    (they were quadratic: 32,768 hosts took 41 s to validate). Random acyclic `after:` graphs over
    roles with one to three hosts each."""
    import dataclasses
    import random

    rng = random.Random(seed)
    tb = read_inventory(REPO / "inventory/local.yaml").testbed(None)
    template = next(iter(tb.hosts.values()))
    roles = [f"r{i}" for i in range(rng.randint(2, 7))]
    hosts = {}
    for i, role in enumerate(roles):
        after = tuple(r for r in roles[:i] if rng.random() < 0.4)
        for j in range(rng.randint(1, 3)):
            key = f"{role}.{j}"
            hosts[key] = dataclasses.replace(template, role=role, member=key, after=after)
    bed = dataclasses.replace(tb, hosts=hosts)
    for _ in range(5):
        subset = {k for k in hosts if rng.random() < 0.5}
        assert restart_order(bed, subset) == _reference_order(bed, subset)
        assert dependants(bed, subset) == _reference_dependants(bed, subset)


@pytest.mark.parametrize("seed", [1, 7])
def test_restart_count_without_steps_is_the_plans_own(ablation, demo, seed):
    """`orch plan` weighs every order by plan.restart_count's figure without building the other
    plans' steps: the two agree for every order, replicate count and matrix."""
    from orchestrator.core.plan import restart_count

    for m, tb in (ablation, demo):
        for order in ("randomized", "sequential", "min-restarts"):
            for reps in (1, 3):
                plan = make_plan(m, tb, seed, reps, order=order)
                assert restart_count(m, tb, seed, reps, order) == plan.restart_count > 0


def test_a_plan_of_many_cells_and_trials_prints_one_plain_line_per_row(tmp_path, capsys):
    """Over RICH_ROWS rows a table is printed as tab-separated lines (laying out 800,000 trial
    rows took minutes): every cell and every trial still appears, once, in order."""
    from orchestrator.cli.main import main
    from orchestrator.cli.planview import RICH_ROWS

    factors = "".join(f"  f{i}: {{env: {{decode: V{i}}}, levels: [a, b]}}\n" for i in range(10))
    path = tmp_path / "wide.yaml"
    path.write_text(DEMO_MATRIX.replace("factors:\n", "factors:\n" + factors).replace("replicates: 2", "replicates: 1"))
    assert main(["plan", str(path), "-i", str(REPO / "inventory/local.yaml"), "--trials", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    cells, trials = 2**10 * 4, 2**10 * 4
    assert cells > RICH_ROWS and "┃" not in out
    assert f"cells (env changes vs the baseline, per host): {cells:,} rows, one per line" in out
    assert f"trials in run order: {trials:,} rows, one per line" in out
    lines = out.splitlines()
    start = lines.index("\t".join(["#", *(f"f{i}" for i in range(10)), "demo", "k", "env vs baseline"]))
    rows = [line.split("\t") for line in lines[start + 1 : start + 1 + cells]]
    assert [int(r[0]) for r in rows] == list(range(cells))
    assert len({tuple(r[1:13]) for r in rows}) == cells  # every cell once
    start = lines.index("trial\tround\tcell\trestarts\twaits on")
    assert [int(line.split("\t")[0]) for line in lines[start + 1 : start + 1 + trials]] == list(range(trials))
