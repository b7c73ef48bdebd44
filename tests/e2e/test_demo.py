"""The README's demo, as a test: the shipped overlap ablation on the bundled simulator.

Runs matrices/overlap_ablation.yaml unchanged against a private copy of inventory/local.yaml
(free ports, so it can run beside anything), then reads the report the way a user would: the
all-on cell shows corruption >= 10% and every overlap-off cell <= 3%, with 95% intervals, and the
headline says that corruption needs all three flags.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from orchestrator.cli.main import main
from orchestrator.core.records import TrialRecord
from orchestrator.core.stats import wilson_interval
from orchestrator.store.journal import read_journal

from .test_run_sim import free_ports, port_open

pytestmark = pytest.mark.sim
REPO = Path(__file__).resolve().parents[2]


def private_inventory(tmp_path: Path) -> tuple[Path, list[int]]:
    shutil.copytree(REPO / "inventory" / "local", tmp_path / "local")
    text = (REPO / "inventory" / "local.yaml").read_text()
    ports = free_ports(3)
    for old, new in zip(("30000", "30001", "30002"), ports):
        text = text.replace(old, str(new))
    path = tmp_path / "local.yaml"
    path.write_text(text)
    assert yaml.safe_load(text)["testbeds"]["local-sim"]["hosts"]["router"]["after"] == ["prefill", "decode"]
    return path, ports


def run_shipped(tmp_path: Path, capsys, matrix: str, run_id: str, seed: int) -> tuple[Path, str, Callable[[], None]]:
    """`orch run matrices/<matrix>` on a private simulator; returns the run folder, the output,
    and a check that the env files are byte-identical and nothing listens afterwards."""
    inventory, ports = private_inventory(tmp_path)
    before = {p.name: p.read_bytes() for p in (tmp_path / "local").glob("*.env")}
    code = main(
        [
            "run",
            str(REPO / "matrices" / matrix),
            "-i",
            str(inventory),
            "--out",
            str(tmp_path / "reports"),
            "--run-id",
            run_id,
            "--seed",
            str(seed),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    run_dir = tmp_path / "reports" / run_id
    assert f"report: {run_dir / 'index.html'}" in out

    def assert_clean() -> None:
        assert {p.name: p.read_bytes() for p in (tmp_path / "local").glob("*.env")} == before
        assert not any(port_open(p) for p in ports)

    return run_dir, out, assert_clean


def test_shipped_ablation_finds_the_three_way_interaction(tmp_path, capsys):
    run_dir, out, assert_clean = run_shipped(tmp_path, capsys, "overlap_ablation.yaml", "demo", 2026)

    trials = [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]
    pooled: dict[str, list[int]] = {}
    for t in trials:
        assert t.status == "completed"
        pooled.setdefault(t.cell, [0, 0])
        pooled[t.cell][0] += t.metrics["corruption"].k
        pooled[t.cell][1] += t.metrics["corruption"].n
    html = (run_dir / "index.html").read_text()
    all_on = "bf16_index_k=on,cuda_graph=on,overlap=on"
    k, n = pooled[all_on]
    assert n == 80 and k / n >= 0.10, (k, n)
    low, high = wilson_interval(k, n)
    assert f"{100 * k / n:.1f}% [{100 * low:.1f}-{100 * high:.1f}]" in html.replace("–", "-")
    for cell, (k, n) in pooled.items():
        if "overlap=off" in cell:
            assert k / n <= 0.03, (cell, k, n)
            assert f"{k}/{n}" in html
    text = re.sub(r"<[^>]+>", " ", html)
    assert re.search(r"It needs [^.]*bf16_index_k=on[^.]*together", " ".join(text.split())), (
        "headline misses the interaction"
    )

    assert_clean()  # env files byte-identical, nothing listening on the sim ports
