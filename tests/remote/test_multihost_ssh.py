"""Roles of several hosts on real systemd + sshd hosts (issue 14): prefill as two instances (on
the prefill and gpu2 machines) and decode as one instance over two nodes (decode is rank 0, gpu2
rank 1). Every host of a role gets the cell's env (each its own file), each live process holds
it, every host of a changed role restarts in the same trial, every instance is awaited and only
rank 0 of the decode instance, and every file is restored byte for byte with no backup left on
any host. The matrix mixes an env factor (on both roles) and a flag factor that edits decode's
SGLANG_EXTRA_ARGS."""

import json
import time
from pathlib import Path

import pytest
from helpers.ssh_sweep import trials_of
from testbed.fixture import Testbed

from orchestrator.cli.main import main

pytestmark = pytest.mark.testbed

PREFILL, DECODE = "sglang-dsv4-prefill", "sglang-dsv4-decode"


def live(unit: str, line: str) -> str:
    """A collector command: 1 if the unit's live process holds exactly `line`, else 0 (summed
    over every host of the role)."""
    pid = f"$(systemctl show -p MainPID --value {unit})"
    return f"tr '\\0' '\\n' < /proc/{pid}/environ | grep -cx '{line}' || true"


MATRIX = f"""\
name: several-hosts
factors:
  demo:
    levels:
      default: {{}}
      x: {{prefill: {{DEMO_VALUE: x}}, decode: {{DEMO_VALUE: x}}}}
  cuda_graph:
    kind: flag
    flag: --disable-cuda-graph
    env: {{decode: SGLANG_EXTRA_ARGS}}
    levels: {{on: absent, off: present}}
zips: [[demo, cuda_graph]]
order: sequential
health_timeouts: {{prefill: 30, decode: 30, router: 30}}
repro:
  command: "{{python}} -m orchestrator.sim.repro --router {{router_url}} --sessions 4 --rounds 1 --seed {{trial_seed}}"
  timeout: 60
  metrics:
    corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}}
collect:
  prefill_demo: {{role: prefill, command: {json.dumps(live(PREFILL, "DEMO_VALUE=x"))}}}
  decode_demo: {{role: decode, command: {json.dumps(live(DECODE, "DEMO_VALUE=x"))}}}
  decode_flag: {{role: decode, command: {json.dumps(live(DECODE, "SGLANG_EXTRA_ARGS=--disable-cuda-graph"))}}}
"""
FILES = {  # (machine, path) -> contents, read with the OpenSSH client
    ("prefill", "/etc/sglang/prefill.env"),
    ("gpu2", "/etc/sglang/prefill.env"),
    ("decode", "/etc/sglang/decode.env"),
    ("gpu2", "/etc/sglang/decode.env"),
}
HOSTS = ("prefill.0", "prefill.1", "decode.n0", "decode.n1")


def files(tb: Testbed) -> dict[tuple[str, str], str]:
    return {(host, path): tb.ssh(host, f"base64 -w0 {path}").stdout for host, path in FILES}


def test_every_host_of_a_role_is_edited_verified_restarted_and_restored(
    testbed: Testbed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files(testbed)
    (tmp_path / "m.yaml").write_text(MATRIX)
    run_id = f"several-{time.monotonic_ns()}"
    out_dir = tmp_path / "reports"
    args = ["run", str(tmp_path / "m.yaml"), "-i", str(testbed.inventory), "-t", "dsv4-pd-several"]
    code = main([*args, "--out", str(out_dir), "--run-id", run_id, "--seed", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    trials = trials_of(out_dir / run_id)
    assert [t.cell for t in trials] == ["demo=default,cuda_graph=on", "demo=x,cuda_graph=off"]
    assert all(t.status == "completed" for t in trials), [t.failure for t in trials]
    values = [{k: t.metrics[k].value for k in ("prefill_demo", "decode_demo", "decode_flag")} for t in trials]
    assert values[0] == {"prefill_demo": 0, "decode_demo": 0, "decode_flag": 0}
    assert values[1] == {"prefill_demo": 2, "decode_demo": 2, "decode_flag": 2}  # on both hosts of each role
    restarted = set(trials[1].restarted)
    assert {f"prefill.{i}:{PREFILL}" for i in (0, 1)} | {f"decode.n{i}:{DECODE}" for i in (0, 1)} <= restarted
    waited = set(trials[1].health_wait_s)
    assert {"prefill.0", "prefill.1", "decode.n0", "router"} <= waited and "decode.n1" not in waited
    assert (out_dir / run_id / "backup" / "decode.n1.env").exists()
    assert files(testbed) == before  # every host's file restored byte for byte
    for host in ("prefill", "decode", "gpu2"):
        left = testbed.ssh(host, "ls /etc/sglang").stdout.split()
        assert not [f for f in left if "orch-" in f], (host, left)
    for host, unit in (("gpu2", PREFILL), ("gpu2", DECODE), ("decode", DECODE)):  # back on the originals
        pid = testbed.ssh(host, f"systemctl show -p MainPID --value {unit}").stdout.strip()
        env = testbed.ssh(host, f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout
        assert "DEMO_VALUE" not in env and "--disable-cuda-graph" not in env, (host, unit)
