"""`orch validate`'s host list for local hosts (the bundled simulator's inventory): each says
`local` where an SSH host says how orch logs in (the seventh mutation round: every host list
tested was of SSH hosts, so a local host's line could crash or read 'None' unseen)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def test_validate_lists_local_hosts_as_local(capsys: pytest.CaptureFixture[str]) -> None:
    inventory = REPO / "inventory/local.yaml"
    assert main(["validate", str(REPO / "matrices/overlap_ablation.yaml"), "-i", str(inventory)]) == 0
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert lines[1].endswith("inventory/local.yaml:8): 3 hosts"), lines
    local = inventory.parent / "local"
    assert lines[2:] == [
        f"prefill prefill local env {local / 'prefill.env'} unit sim-prefill health http://127.0.0.1:30000/health",
        f"decode decode local env {local / 'decode.env'} unit sim-decode health http://127.0.0.1:30002/health",
        f"router router local env {local / 'router.env'} unit sglang-router health http://127.0.0.1:30001/readiness",
    ], lines
