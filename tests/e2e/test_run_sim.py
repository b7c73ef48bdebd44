"""End to end on the bundled simulator: `orch run` over real local processes and HTTP.

Checks the whole chain: env files edited and restored byte for byte, units restarted only on
change, health waited on, the repro's metrics extracted, journal and report agreeing (numbers in
the report recomputed from the journal), and nothing left listening afterwards.
"""

from __future__ import annotations

import contextlib
import html as htmllib
import io
import json
import re
from pathlib import Path

import pytest
from helpers.netutil import port_open
from helpers.sim_sweep import ENV_FILES, make_inventory

from orchestrator.cli.main import main
from orchestrator.core.clustered import dispersion, rate_interval
from orchestrator.core.records import TrialRecord
from orchestrator.core.stats import wilson_interval
from orchestrator.store.journal import read_journal

# one worker runs this module (pytest-xdist), so its one sweep serves both tests there too
pytestmark = [pytest.mark.sim, pytest.mark.xdist_group("e2e-run-sim")]


MATRIX = """\
name: e2e
factors:
  cuda_graph:
    levels:
      on: {decode: {SGLANG_EXTRA_ARGS: ""}}
      off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
replicates: 2
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 30 --rounds 3 --seed {trial_seed}"
  timeout: 120
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
    wall: {regex: 'wall=(?P<value>[0-9.]+)s', unit: s}
collect:
  anomalies: {role: decode, pattern: ANOMALY}
"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, dict[str, bytes], list[int], str]:
    """One sweep for both tests here (~10 s on the simulator): they only read what it left."""
    tmp_path = tmp_path_factory.mktemp("e2e")
    inv, ports = make_inventory(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    originals = {n: (tmp_path / n).read_bytes() for n in ENV_FILES}
    out = io.StringIO()  # capsys is per test; orch's console writes to sys.stdout
    with contextlib.redirect_stdout(out):
        code = main(
            [
                "run",
                str(tmp_path / "m.yaml"),
                "-i",
                str(inv),
                "--out",
                str(tmp_path / "reports"),
                "--run-id",
                "e2e",
                "--seed",
                "11",
            ]
        )
    return tmp_path, code, originals, ports, out.getvalue()


def test_sweep_on_the_simulator(sweep):
    tmp_path, code, originals, ports, out = sweep
    assert code == 0, out
    run_dir = tmp_path / "reports" / "e2e"
    assert f"report: {run_dir / 'index.html'}" in out

    # hosts are back: env files byte-identical (CRLF, missing final newline), nothing listening
    for name, data in originals.items():
        assert (tmp_path / name).read_bytes() == data, name
    assert not any(port_open(p) for p in ports)
    assert not list((tmp_path).glob("*.orch-backup-*"))
    assert not list((tmp_path).glob("*.orch-units-*"))  # the units' states recorded beside them (sweep.hostunits)

    trials = [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]
    assert len(trials) == 8 and all(t.status == "completed" for t in trials)
    assert sorted(t.trial for t in trials) == list(range(8))
    for t in trials:
        assert t.metrics["corruption"].n == 30
        assert t.metrics["anomalies"].value > 0
        assert t.env["decode"]["SGLANG_OPT_USE_MULTI_STREAM_OVERLAP"] == ("1" if t.levels["overlap"] == "on" else "0")
        assert "router" in t.health_wait_s
        # prefill's env never changes in this matrix: it is started once and never restarted
    restarts = [u for t in trials for u in t.restarted]
    assert restarts.count("prefill:t-prefill") == 1
    assert restarts.count("decode:t-decode") >= 4


def test_report_numbers_match_the_journal(sweep):
    tmp_path, code, _, _, _ = sweep
    assert code == 0
    run_dir = tmp_path / "reports" / "e2e"
    html = (run_dir / "index.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "report loads something external"
    trials = [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]
    per_trial: dict[str, list[tuple[int, int]]] = {}
    for t in trials:
        per_trial.setdefault(t.cell, []).append((t.metrics["corruption"].k, t.metrics["corruption"].n))
    disp = dispersion(list(per_trial.values()))  # the method the report names: trials vary, pooled over cells
    text = htmllib.unescape(re.sub(r"<[^>]+>", " ", html))
    for cell, counts in per_trial.items():
        k, n = sum(c[0] for c in counts), sum(c[1] for c in counts)
        low, high = rate_interval(k, n, disp) if disp.estimable else wilson_interval(k, n)
        shown = f"[{_pct(low)}-{_pct(high)}] ({k}/{n})"
        assert shown in text, (cell, shown)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "completed" and manifest["seed"] == 11
    for role in ("prefill", "decode", "router"):  # provenance: what ran, as the server reports it
        assert "orchestrator.sim.server" in manifest["hosts"][role]["exec_start"]
        assert json.loads(manifest["hosts"][role]["server_info"])["version"] == "sim-0.1"
        assert manifest["hosts"][role]["exec_start"] in html
    assert (tmp_path / "reports" / "index.html").exists()


def _pct(rate: float) -> str:
    """As the report prints a rate: one decimal of a percent, two significant digits below 0.05%."""
    points = rate * 100
    return f"{points:.2g}" if 0 < abs(points) < 0.05 else f"{points:.1f}"
