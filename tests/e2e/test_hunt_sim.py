"""`orch hunt matrices/dsv4_hunt.yaml` end to end on a private simulator: 16 suspect flags, and
the hunt must name the three culprits (bf16 index-K AND CUDA graph AND multi-stream overlap),
with every host restored and the hunt page written.

The simulator's flag model (sim/culprits.py) is set in the private decode.env: the DSV4 AND at
16% of sessions, a decoy with a small effect of its own (+1%), 0.5% background and trial-to-trial
variation (ICC 0.03). Warm-up is cut to 0.05 s so the ~40 trials take well under a minute.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.shipped import REPO, private_inventory
from helpers.netutil import port_open

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
    for env in (tmp_path / "local").glob("*.env"):
        env.write_text(env.read_text().replace("SIM_WARMUP_S=1.0", "SIM_WARMUP_S=0.05"))
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
    culprit = re.search(r"culprit: (.+) \(posterior ([0-9.]+)\)", out)
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
    assert {p.name: p.read_bytes() for p in (tmp_path / "local").glob("*.env")} == before
    assert not any(port_open(p) for p in ports)
