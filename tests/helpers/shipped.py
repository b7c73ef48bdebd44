"""The shipped demo on a private simulator (tests/e2e): `orch run matrices/<matrix>` against a
copy of inventory/local.yaml on free loopback ports.

One thing differs from the shipped files besides the ports: the simulated model load
(SIM_WARMUP_S) takes 0.05 s instead of 1.0 s. Readiness still has to wait for it (the workers
answer 503 until it is over); the tests check what the sweep finds, not how long a load takes,
and the shipped matrices restart the workers at nearly every trial (at 0.2 s, the README demo's
64 trials spent ~10 s more in warm-ups)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import yaml

from helpers.netutil import free_ports, port_open
from orchestrator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
TEST_WARMUP_S = 0.05  # the shipped env files say 1.0


def private_inventory(tmp_path: Path) -> tuple[Path, list[int]]:
    shutil.copytree(REPO / "inventory" / "local", tmp_path / "local")
    for env in (tmp_path / "local").glob("*.env"):
        env.write_text(re.sub(r"(?m)^SIM_WARMUP_S=.*$", f"SIM_WARMUP_S={TEST_WARMUP_S}", env.read_text()))
    text = (REPO / "inventory" / "local.yaml").read_text()
    ports = free_ports(5)  # prefill, router, decode, prefill's bootstrap port, the router's metrics port
    for old, new in zip(("30000", "30001", "30002", "30003", "30004"), ports, strict=True):
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
