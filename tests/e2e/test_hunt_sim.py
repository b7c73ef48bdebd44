"""`orch hunt matrices/dsv4_hunt.yaml` end to end on a private simulator: 16 suspect flags, and
the hunt must name the three culprits (bf16 index-K AND CUDA graph AND multi-stream overlap),
with every host restored and the hunt page written.

The simulator's flag model (sim/culprits.py) is set in the private decode.env: the DSV4 AND at
16% of sessions, a decoy with a small effect of its own (+1%), 0.5% background and trial-to-trial
variation (ICC 0.03). Warm-up is cut to 0.05 s (helpers.shipped; the hunt runs ~30 trials). Then a controller
death after 24 trials is simulated (journal cut, run marked running) and `orch resume` must
finish the hunt the same way.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.netutil import port_open
from helpers.shipped import REPO, private_inventory

from orchestrator.cli.main import main
from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal

pytestmark = pytest.mark.sim

TRUTH = (
    'SIM_CULPRITS="bf16_index_k&cuda_graph&multi_stream_overlap:0.16"\n'
    'SIM_FLAG_EFFECTS="SGLANG_ENABLE_TORCH_COMPILE:0.01"\n'
    "SIM_BACKGROUND=0.005\nSIM_TRIAL_ICC=0.03\n"
)


def test_hunt_names_the_three_dsv4_culprits(tmp_path: Path, capsys) -> None:
    inventory, ports = private_inventory(tmp_path)
    # private_inventory cut the workers' warm-up to TEST_WARMUP_S (0.05 s) already
    assert all("SIM_WARMUP_S=0.05\n" in (tmp_path / "local" / f"{r}.env").read_text() for r in ("prefill", "decode"))
    decode = tmp_path / "local" / "decode.env"
    decode.write_text(decode.read_text() + TRUTH)
    before = {p.name: p.read_bytes() for p in (tmp_path / "local").glob("*.env")}
    code = main(
        ["hunt", str(REPO / "matrices" / "dsv4_hunt.yaml"), "-i", str(inventory), "--out", str(tmp_path / "r")]
        + ["--run-id", "hunt", "--seed", "3"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "hunt found:" in out, out
    culprit = re.search(r"culprit: (.+) \(posterior (?:> )?([0-9.]+)\)", out)  # "> 0.999": rounds to 1
    assert culprit, out
    assert culprit[1] == "bf16_index_k AND cuda_graph AND overlap", out
    assert float(culprit[2]) >= 0.95
    assert "overlap changes nothing unless bf16_index_k and cuda_graph are on" in out

    run_dir = tmp_path / "r" / "hunt"
    trials = [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]
    first = [t.levels for t in trials[:18]]
    assert all(v == "on" for v in first[0].values())  # the failing endpoint first
    assert sum(t.levels == first[0] for t in trials) >= 1
    assert len(trials) < 80  # one flag at a time would take 17 configurations x 4 trials of 20 sessions
    page = (run_dir / "hunt.html").read_text()
    assert "Minimal reproducer" in page and "Every configuration tried" in page
    assert 'href="hunt/hunt.html"' in (tmp_path / "r" / "index.html").read_text()  # the index leads to the hunt page
    assert {p.name: p.read_bytes() for p in (tmp_path / "local").glob("*.env")} == before
    assert not any(port_open(p) for p in ports)

    # The controller "dies" after 24 trials (the journal ends there, run.json says running):
    # `orch resume` replays the 24, carries on, and - the search and the trial seeds being
    # deterministic - reaches the same answer with the same trials.
    lines = (run_dir / "journal.jsonl").read_text().splitlines(keepends=True)
    cut = [i for i, line in enumerate(lines) if '"type":"trial"' in line.replace(" ", "")][23] + 1
    (run_dir / "journal.jsonl").write_text("".join(lines[:cut]))
    (run_dir / "journal.jsonl.idx").unlink(missing_ok=True)
    run_json = run_dir / "run.json"
    run_json.write_text(re.sub(r'"status":\s*"completed"', '"status": "running"', run_json.read_text()))
    assert main(["resume", str(run_dir)]) == 0
    again, said = capsys.readouterr()
    assert "resuming hunt: 24 trials done; hunt on " in said and "(its total is decided as it goes)" in said, said
    assert not re.search(r"-\d+ of \d+|of \d+ trials left", said), said  # no invented (or negative) total
    assert culprit[0] in again, again
    resumed = [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]
    assert [(t.trial, t.cell) for t in resumed] == [(t.trial, t.cell) for t in trials]
    assert {p.name: p.read_bytes() for p in (tmp_path / "local").glob("*.env")} == before
    assert not any(port_open(p) for p in ports)
