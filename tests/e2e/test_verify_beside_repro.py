"""The live-env check of restarted units runs beside the repro, and still voids a bad trial.

On the bundled simulator with real processes: the first trial verifies before its repro (it may
have to fix a stale unit); later trials verify while the repro runs. A restarted unit whose live
environment does not hold the cell's value must fail its trial (VerificationError, no metrics),
even though the repro already ran, and the hosts must come back as they were.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.sim_sweep import ENV_FILES, make_inventory

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan
from orchestrator.edges.connect import connect
from orchestrator.sweep.runner import Runner, RunOptions

pytestmark = pytest.mark.sim

MATRIX = """\
name: verify
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
replicates: 1
order: sequential
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 4 --rounds 1 --seed {trial_seed}"
  timeout: 60
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""


def run(tmp_path: Path, lie_after: int | None):
    """A 2-trial sweep; from the (lie_after+1)-th environ call on, decode's live env claims
    overlap=1 whatever the file says (a unit that did not pick up its env file)."""
    inv, _ = make_inventory(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    matrix = read_matrix(tmp_path / "m.yaml")
    plan = make_plan(matrix, read_inventory(inv).testbed(None), seed=1)
    deployment = connect(plan.testbed)
    services = deployment.hosts["decode"].services
    real, calls = services.environ, []

    def environ(unit: str) -> dict[str, str] | None:
        live = real(unit)
        if unit == "t-decode":
            calls.append(unit)
            if lie_after is not None and len(calls) > lie_after and live is not None:
                live = {**live, "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "1"}
        return live

    services.environ = environ  # type: ignore[method-assign]
    try:
        runner = Runner(plan, deployment, tmp_path / "run", RunOptions("verify", infra_attempts=1))
        result = runner.execute()
    finally:
        deployment.close()
    return result, calls, runner


def test_a_restarted_unit_with_the_wrong_env_fails_its_trial_after_the_repro(tmp_path: Path) -> None:
    originals = {n: (tmp_path / n) for n in ENV_FILES}
    result, calls, _ = run(tmp_path, lie_after=1)
    first, second = sorted(result.records, key=lambda r: r.trial)
    assert first.status == "completed" and first.levels == {"overlap": "on"}
    assert second.status == "failed" and second.levels == {"overlap": "off"}
    assert second.failure is not None and second.failure.error == "VerificationError"
    assert "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP is '1' in the live process, expected '0'" in second.failure.message
    assert second.repro is not None and second.repro.exit_code == 0  # it ran beside the check
    assert second.metrics == {}  # a void trial reports nothing
    assert len(calls) == 2 and not result.not_restored
    assert all(p.read_bytes() == ENV_FILES[n].encode() for n, p in originals.items())  # restored


def test_honest_units_pass_with_the_check_beside_the_repro(tmp_path: Path) -> None:
    result, calls, runner = run(tmp_path, lie_after=None)
    assert [r.status for r in result.records] == ["completed", "completed"]
    assert len(calls) == 2  # trial 0 before its repro, trial 1 beside it
    # the poller learns each role's ready time only from waits that followed its restart:
    # trial 0 started all three, trial 1 restarted decode (and the router waits on decode)
    assert {role: len(w) for role, w in runner.ready_waits.items()} == {"prefill": 1, "decode": 2, "router": 2}
