"""Bounds on what the team views read and compute, found in review: the nightly regression check
(index, `orch serve /`, `orch compare`, `orch notify`) answers at any session count; a hostile
summary.json is rebuilt from its journal instead of reaching the statistics; a huge status.json
is refused, not loaded, by `orch status`, /status and /api/status.

The process tests run orch under an address-space limit (a MemoryError shows as a traceback, not
as a machine swapping) and a generous timeout that only guards against a hang."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from helpers.report_synth import T0, synthetic_run, write_run
from scipy import stats as sps

from orchestrator.core.stats import fisher_exact
from orchestrator.errors import ConfigError
from orchestrator.report.render import fresh_summary, write_report_and_summary
from orchestrator.report.series import MAX_TRIALS, SeriesPoint, run_series
from orchestrator.report.site import _cached_summary, run_entries
from orchestrator.store.journal import read_trial_rows
from orchestrator.store.manifest import save_manifest
from orchestrator.team.livestatus import StatusFile, live_runs
from orchestrator.team.queue import Claimer

REPO = Path(__file__).resolve().parents[2]
HANG_S = 120  # a guard against a hang only: each of these takes seconds


def _run_python(code: str, *args: str, gib: float = 2.0, timeout: float = HANG_S) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter limited to `gib` GiB of address space, importing this
    checkout's orchestrator (sys.argv[1:] are `args`)."""
    limit = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({int(gib * (1 << 30))},) * 2)\n"
    try:
        return subprocess.run(
            [sys.executable, "-c", limit + code, *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(REPO), "ORCH_WEBHOOKS": "", "COLUMNS": "200"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout:.0f} s (a hang)")


def _orch(*args: str, gib: float = 2.0) -> subprocess.CompletedProcess[str]:
    return _run_python("import runpy; runpy.run_module('orchestrator.cli.main', run_name='__main__')", *args, gib=gib)


def _two_runs(reports: Path, **kw: int) -> list[Path]:
    """Two finished runs of one matrix + inventory, B a day after A, reports and summaries written."""
    dirs = []
    for i, run_id in enumerate(("20260509-070000-a", "20260510-070000-b")):
        manifest, records = synthetic_run(run_id=run_id, seed=i + 1, **kw)
        started = (T0 + timedelta(days=i)).isoformat().replace("+00:00", "Z")
        run = write_run(reports / run_id, manifest.model_copy(update={"started": started}), records)
        write_report_and_summary(run)
        dirs.append(run)
    return dirs


# ------------------------------------------------------------- the check at any session count
@pytest.mark.process
def test_nightly_check_of_100000_session_trials_answers(tmp_path: Path) -> None:
    """8 cells x 4 trials x 100,000 sessions a night: the old exact tail convolved full pmfs
    (quadratic in sessions) and `orch compare` ran for more than 5 minutes."""
    a, b = _two_runs(tmp_path, sessions=100_000, replicates=4)
    r = _orch("compare", str(a), str(b), "-o", str(tmp_path / "cmp.html"))
    assert r.returncode == 0, r.stderr[-3000:]
    code = (
        "import json, sys; from pathlib import Path\n"
        "from orchestrator.report.render import fresh_summary\n"
        "from orchestrator.report.site import regression_changes\n"
        "print(json.dumps([c.method for c in regression_changes(Path(sys.argv[1]), fresh_summary)]))\n"
    )
    r = _run_python(code, str(b))
    assert r.returncode == 0, r.stderr[-3000:]
    methods = json.loads(r.stdout)
    assert methods and any("moment-matched beta" in m for m in methods)  # the Change says which tail


@pytest.mark.process
def test_trials_of_a_million_and_a_billion_sessions_are_answered() -> None:
    """4 trials of 10^6 sessions tonight (beta tail), one of 10^9 with a rare count (exact tail,
    cut at the count), and pooled counts past Fisher's size (its binomial form). The p-values
    are large: at 10^6 sessions a trial, restart-to-restart variation dwarfs the binomial's."""
    code = (
        "import json\n"
        "from orchestrator.core.regression import RateHistory, rate_change\n"
        "big = tuple((20_000 + 300 * i, 10**6) for i in range(4))\n"
        "past = (tuple((19_000 + 500 * i, 10**6) for i in range(4)),) * 2\n"
        "rare = (((3, 10**9),), ((5, 10**9),))\n"
        "out = [rate_change(RateHistory('c', 'm', past, big))]\n"
        "out.append(rate_change(RateHistory('c', 'm', rare, ((40, 10**9),))))\n"
        "print(json.dumps([[c.p, c.method] for c in out]))\n"
    )
    r = _run_python(code)
    assert r.returncode == 0, r.stderr[-3000:]
    (p_big, big), (p_rare, rare) = json.loads(r.stdout)
    assert 0 <= p_big <= 1 and "moment-matched beta" in big and "binomial test" in big
    assert 0 <= p_rare <= 1 and "exact tail" in rare and "binomial test" in rare


def _full_exact(k: int, sizes: list[int], rate: float, rho: float) -> float:
    """The tail as it was computed before: the whole pmf of the sum (small sizes only)."""
    a, b = rate * (1 - rho) / rho, (1 - rate) * (1 - rho) / rho
    pmf = np.ones(1)
    for m in sizes:
        pmf = np.convolve(pmf, sps.betabinom.pmf(np.arange(m + 1), m, a, b))
    return min(1.0, 2 * min(float(pmf[: k + 1].sum()), float(pmf[k:].sum())))


@pytest.mark.parametrize("sizes", [[40, 40], [300, 200, 100], [1000]])
def test_exact_tail_cut_at_the_count_is_the_full_convolution(sizes: list[int]) -> None:
    """The same p to float rounding: the far tail is now 1 minus the near one, so it is exact to
    about 1e-11 absolute (far below any alpha after Holm), not to a relative 1e-16."""
    from orchestrator.core.regression import _betabinom_exact

    n = sum(sizes)
    for rate, rho in ((0.02, 0.005), (0.3, 0.1), (0.9, 0.4)):
        for k in sorted({0, 1, 3, n // 10, n // 3, n // 2, n - 5, n}):
            full = _full_exact(k, sizes, rate, rho)
            assert _betabinom_exact(k, sizes, rate, rho) == pytest.approx(full, rel=1e-6, abs=1e-10)


def test_beta_tail_agrees_with_the_exact_tail_near_the_switch() -> None:
    """At 10,000 and 20,000 sessions (the exact path's limit), 2 and 4 trials, rates 2-50%,
    intra-trial correlation 0.005-0.05, counts at the mean and 1-3 sd either side: the beta tail
    is within 0.015 of the exact p, and within 20% of it where the exact p is 0.001-0.1 (measured:
    0.0093 and 10%). The normal tail of the same variance is off 100-fold at rare rates."""
    from orchestrator.core.regression import _betabinom_beta, _betabinom_exact, _trial_var

    for n in (10_000, 20_000):
        for trials in (2, 4):
            sizes = [n // trials] * trials
            for rate in (0.02, 0.15, 0.5):
                for rho in (0.005, 0.02, 0.05):
                    sd = math.sqrt(sum(_trial_var(m, rate, rho) for m in sizes))
                    for z in (-3, -2, -1, 0, 1, 2, 3):
                        k = round(n * rate + z * sd)
                        if not 0 <= k <= n:
                            continue
                        exact, beta = _betabinom_exact(k, sizes, rate, rho), _betabinom_beta(k, sizes, rate, rho)
                        where = f"k={k} of {sizes}, rate {rate}, rho {rho}: exact {exact:.4g}, beta {beta:.4g}"
                        assert abs(beta - exact) <= 0.015, where
                        if 1e-3 <= exact <= 0.1:
                            assert 0.8 <= beta / exact <= 1.25, where


def test_exact_tail_up_to_20000_sessions_and_the_beta_beyond() -> None:
    from orchestrator.core.regression import _betabinom_p

    assert _betabinom_p(10_000, [5_000] * 4, 0.45, 0.01)[1] == "exact tail"
    assert _betabinom_p(10_000, [312] * 64, 0.45, 0.01)[1] == "exact tail"
    assert _betabinom_p(20_000, [10_000] * 4, 0.45, 0.01)[1] == "tail of a moment-matched beta"
    assert _betabinom_p(12, [10**9] * 64, 1e-8, 0.01)[1] == "exact tail"  # rare: cut at the count


def test_binomial_form_of_fisher_agrees_with_fisher_at_its_switch() -> None:
    from orchestrator.core.regression import _pooled_p
    from orchestrator.core.stats import FISHER_SESSIONS

    for k, n, big_k in ((3, 10**6, 20), (300, 10**6, 2_000), (40, 2 * 10**6, 90)):
        big_n = FISHER_SESSIONS + 1 - n  # just past the switch
        p, method = _pooled_p(k, n, big_k, big_n)
        assert method.startswith("binomial test")
        exact = fisher_exact(k, n, big_k, big_n)
        assert exact <= p <= exact * 1.01  # no finite-population correction: a hair larger (0.3% here)
    assert _pooled_p(3, 10**6, 20, 10**6)[1] == "Fisher exact on pooled nights"


# ------------------------------------------------------------------- a hostile summary.json
def _hostile(summary: Path, trials: list[list[int]]) -> None:
    """Every proportion point of summary.json given `trials`, the file dated after its journal."""
    data = json.loads(summary.read_text())
    for point in data["series"]:
        if point["kind"] == "proportion":
            point["trials"] = trials
    summary.write_text(json.dumps(data))
    future = time.time() + 60
    os.utime(summary, (future, future))


@pytest.mark.process
def test_hostile_summary_json_session_count_is_no_memory_error(tmp_path: Path) -> None:
    """A trial of 10^10 sessions in a summary.json newer than its journal (so trusted) made the
    exact tail allocate 74.5 GiB: `orch compare` died with a MemoryError traceback."""
    a, b = _two_runs(tmp_path)
    _hostile(b / "summary.json", [[1, 10**10]])
    r = _orch("compare", str(a), str(b), "-o", str(tmp_path / "cmp.html"))
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize(
    "trials",
    [[[1, 10**10]], [[-1, 40]], [[41, 40]], [[1, 40]] * (MAX_TRIALS + 1)],
    ids=["10^10 sessions", "negative k", "k > n", "too many trials"],
)
def test_invalid_summary_json_is_rebuilt_from_the_journal(tmp_path: Path, trials: list[list[int]]) -> None:
    _, b = _two_runs(tmp_path)
    _hostile(b / "summary.json", trials)
    assert _cached_summary(b) is None
    entry = next(e for e in run_entries(tmp_path, fresh_summary) if e.directory == b.name)
    assert not entry.error and entry.series
    assert {n for p in entry.series for _, n in p.trials} == {40}  # the journal's sessions


def test_series_point_bounds() -> None:
    def point(**kw: object) -> SeriesPoint:
        return SeriesPoint.model_validate({"cell": "c", "levels": {}, "metric": "m", "kind": "proportion", **kw})

    assert point(trials=[[0, 0], [10**9, 10**9]] + [[1, 2]] * (MAX_TRIALS - 2)).rate == (10**9 + 62, 10**9 + 124)
    for bad in ({"trials": [[1, 10**9 + 1]]}, {"trials": [[-1, 4]]}, {"trials": [[5, 4]]}, {"values": [1.0] * 65}):
        with pytest.raises(ValueError):
            point(**bad)


def test_run_series_leaves_out_a_journal_trial_past_the_session_bound(tmp_path: Path) -> None:
    """The summary is rebuilt from the journal, so building it must never fail validation. Such
    a line no longer reaches it (the journal's readers refuse a count past MAX_SESSIONS at its
    line, as MetricValue does); run_series still leaves out a row past the bound it is given."""
    manifest, records = synthetic_run(replicates=1, failures=False)
    first = records[0]
    huge = first.metrics["corruption"].model_copy(update={"n": 2 * 10**9})  # model_copy: not validated
    records[0] = first.model_copy(update={"metrics": {**first.metrics, "corruption": huge}})
    run = write_run(tmp_path / manifest.run_id, manifest, records)
    with pytest.raises(ConfigError, match=r"journal\.jsonl:2: invalid record: trial\.metrics\.corruption\.n"):
        read_trial_rows(run / "journal.jsonl")
    rows = read_trial_rows(
        write_run(tmp_path / "good", *synthetic_run(replicates=1, failures=False)) / "journal.jsonl"
    ).rows
    past = tuple(p._replace(n=2 * 10**9) if p.name == "corruption" else p for p in rows[0].metrics)
    series = run_series([rows[0]._replace(metrics=past), *rows[1:]])
    sessions = {n for p in series for _, n in p.trials}
    assert sessions == {40} and len([p for p in series if p.kind == "proportion" and p.trials]) >= 1


# ------------------------------------------------------------------------ a huge status.json
def _status(run_id: str) -> str:
    me = Claimer.current()
    return StatusFile(
        run_id=run_id,
        name="n",
        testbed="t",
        host=me.host,
        pid=me.pid,
        pid_start=me.start,
        state="running",
        started="2026-01-01T00:00:00+00:00",
        updated="2026-01-01T00:00:00+00:00",
        done=1,
        total=2,
        failed=0,
    ).model_dump_json()


def _status_runs(reports: Path) -> tuple[Path, Path]:
    """Two running runs with status files (plan.json beside run.json, as `orch run` writes it)."""
    runs = []
    for run_id in ("20260509-070000-a", "20260509-080000-b"):
        manifest, _ = synthetic_run(replicates=1, failures=False, run_id=run_id)
        run = reports / run_id
        run.mkdir(parents=True)
        save_manifest(run, manifest.model_copy(update={"status": "running", "ended": None}))
        (run / "status.json").write_text(_status(run_id))
        runs.append(run)
    return runs[0], runs[1]


@pytest.mark.process
def test_huge_status_json_is_refused_not_loaded(tmp_path: Path) -> None:
    """A 3 GiB (sparse) status.json: `orch status` died with a MemoryError traceback."""
    a, b = _status_runs(tmp_path)
    with open(b / "status.json", "wb") as f:
        f.truncate(3 << 30)
    r = _orch("status", "--reports", str(tmp_path), gib=1.5)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0, r.stderr[-3000:]
    assert a.name in r.stdout  # the others still show
    assert f"{b.name}: status unreadable: over 1 MiB" in r.stdout  # and it is listed as such, not left out


def test_live_runs_read_status_json_bounded_and_without_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every poll of /status reads every run's status.json: bounded (never read whole), and the
    manifest without its plan (only its status is used)."""
    a, b = _status_runs(tmp_path)
    with open(b / "status.json", "wb") as f:  # sparse, over the 1 MiB cap
        f.truncate(64 << 20)
    read_bytes = Path.read_bytes

    def whole(self: Path) -> bytes:
        assert self.name != "status.json", f"{self} read whole"
        return read_bytes(self)

    def no_plan(*args: object, **kw: object) -> object:
        raise AssertionError("the plan was loaded")

    monkeypatch.setattr(Path, "read_bytes", whole)
    monkeypatch.setattr("orchestrator.store.manifest.load_plan", no_plan)
    assert (a / "plan.json").is_file()
    shown = [(r.directory, r.state, r.unreadable) for r in live_runs(tmp_path)]
    assert shown == [(b.name, "unreadable", "over 1 MiB"), (a.name, "running", "")]
