"""A repro whose URL reaches a server orch did not start, on the bundled simulator (real processes,
loopback): a stray simulated decode worker answers the repro's every request, while every check of
orch's own processes passes (they are up, healthy, on their ports, never restarted). The matrix
lets the URL through (`repro.allow_urls`, as for a tunnel someone believed was theirs), so only the
run-time check can tell: orch's workers counted no request while the repro reported its sessions,
so no trial is data."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.netutil import free_ports, port_open
from helpers.procs import pid_running
from helpers.sim_sweep import ENV_FILES, make_inventory
from helpers.strangers import stranger_overlap_matrix

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan
from orchestrator.edges.connect import connect
from orchestrator.sweep.runner import Runner, RunOptions

pytestmark = pytest.mark.sim


def stray_matrix(stray_url: str) -> str:
    """The strangers' one-factor matrix with the stray's URL written out (and allowed), one trial
    a cell, never stopped early, server metrics on."""
    return (
        stranger_overlap_matrix("stray-url")
        .replace("{router_url}", stray_url)
        .replace("replicates: 2", "replicates: 1\nstop_after_repeated_failures: 0")
        .replace("  timeout: 60\n", f'  timeout: 60\n  allow_urls: ["{stray_url}"]\n')
    ) + "metrics: {gpu: false}\n"


def test_a_repro_served_by_a_stray_server_behind_a_literal_url_yields_no_data(tmp_path: Path) -> None:
    inv, ports = make_inventory(tmp_path)
    (stray_port,) = free_ports(1)
    stray_url = f"http://127.0.0.1:{stray_port}"
    (tmp_path / "m.yaml").write_text(stray_matrix(stray_url))
    originals = {n: (tmp_path / n).read_bytes() for n in ENV_FILES}
    stray_log = tmp_path / "stray.log"
    with stray_log.open("wb") as log:
        stray = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.sim.server", "--role", "decode", "--port", str(stray_port)],
            env={**os.environ, "SIM_WARMUP_S": "0"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 10
        while not port_open(stray_port):
            assert time.monotonic() < deadline and stray.poll() is None, stray_log.read_text()
            time.sleep(0.02)
        plan = make_plan(read_matrix(tmp_path / "m.yaml"), read_inventory(inv).testbed(None), seed=1)
        deployment = connect(plan.testbed)
        try:  # one attempt a trial: the retry would fail the same way, a second later
            result = Runner(plan, deployment, tmp_path / "run", RunOptions("s", infra_attempts=1)).execute()
        finally:
            deployment.close()
    finally:
        stray.terminate()
        stray.wait(timeout=10)
    assert not pid_running(stray.pid)
    assert (result.completed, result.failed, len(result.records)) == (0, 2, 2)  # no trial is data
    for record in result.records:
        assert record.failure is not None and record.failure.error == "ReproNotServed", record.failure
        assert "which reported 4 sessions" in record.failure.message and record.metrics == {}
        assert record.repro is not None and record.repro.exit_code == 0  # the repro itself went well
        assert "CORRUPTION sessions: 0/4" in (tmp_path / "run" / record.repro.stdout_path).read_text()
    assert not result.not_restored
    assert "decode req=" in stray_log.read_text()  # the stray served the repro
    for name, data in originals.items():
        assert (tmp_path / name).read_bytes() == data, name
    assert not any(port_open(p) for p in ports)
