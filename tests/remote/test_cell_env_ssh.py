"""Issue 12 on real systemd hosts over SSH: a baseline trial that follows an `x` trial runs on
exactly the baseline's env (the original file, no DEMO_VALUE in the live process), and the
report's baseline rate comes from those clean trials only."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers.ssh_sweep import ENV_FILES, no_leftovers, snapshot, trials_of
from testbed.fixture import Testbed

from orchestrator.cli.main import main
from orchestrator.report.render import load_report

pytestmark = pytest.mark.testbed

UNIT = "sglang-dsv4-decode"
# read on the decode host during each trial (a command collector runs there after the repro):
# does the live server process hold DEMO_VALUE?
MAIN_PID = f"$(systemctl show -p MainPID --value {UNIT})"
LIVE_DEMO = f"tr '\\0' '\\n' < /proc/{MAIN_PID}/environ | grep -c '^DEMO_VALUE=' || true"
COLLECT = json.dumps(LIVE_DEMO)  # a JSON string is a YAML double-quoted scalar
MATRIX = f"""\
name: cell-env
factors:
  demo:
    levels:
      default: {{}}
      x: {{decode: {{DEMO_VALUE: x}}}}
order: sequential
replicates: 3
health_timeouts: {{prefill: 30, decode: 30, router: 30}}
repro:
  command: "{{python}} -m orchestrator.sim.repro --router {{router_url}} --sessions 8 --rounds 2 --seed {{trial_seed}}"
  timeout: 60
  metrics:
    corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}}
collect:
  live_demo: {{role: decode, command: {COLLECT}}}
"""


def live_env(tb: Testbed, host: str, unit: str) -> dict[str, str]:
    import base64

    pid = tb.ssh(host, f"systemctl show -p MainPID --value {unit}").stdout.strip()
    raw = tb.ssh(host, f"cat /proc/{pid}/environ | base64 -w0").stdout
    return dict(p.split("=", 1) for p in base64.b64decode(raw).decode().split("\0") if "=" in p)


def test_a_baseline_after_an_x_trial_runs_on_the_baseline_env(testbed: Testbed, tmp_path: Path, capsys) -> None:
    files = {**ENV_FILES, "decode": "/etc/sglang/decode.env"}
    before = snapshot(testbed, files)
    assert "DEMO_VALUE" not in live_env(testbed, "decode", UNIT)
    (tmp_path / "m.yaml").write_text(MATRIX)
    run_id = f"cell-env-{time.monotonic_ns()}"
    args = ["run", str(tmp_path / "m.yaml"), "-i", str(testbed.inventory), "-t", "dsv4-pd"]
    code = main([*args, "--out", str(tmp_path / "reports"), "--run-id", run_id, "--retries", "0"])
    assert code == 0, capsys.readouterr().err
    run_dir = tmp_path / "reports" / run_id
    trials = trials_of(run_dir)
    assert [(t.cell, t.status) for t in trials] == [("demo=default", "completed"), ("demo=x", "completed")] * 3
    # every baseline but the first follows an x trial: its live process has no DEMO_VALUE
    assert [t.metrics["live_demo"].value for t in trials] == [0.0, 1.0] * 3
    assert [t.restarted for t in trials[1:]] == [[f"decode:{UNIT}"]] * 5  # back to the baseline restarts
    assert all(t.env == {} for t in trials if t.is_baseline)  # the journal shows the cell's own assignments
    # the report's baseline rate is pooled over exactly those clean baseline trials
    report = load_report(run_dir)
    base = next(c for c in report.cells if c.is_baseline)
    clean = [t.metrics["corruption"] for t in trials if t.is_baseline]
    rate = base.proportions["corruption"].rate
    assert (base.completed, base.failed) == (3, 0)
    assert (rate.k, rate.n) == (sum(m.k or 0 for m in clean), sum(m.n or 0 for m in clean))
    # restored: byte-identical files, and the live process has no DEMO_VALUE
    assert snapshot(testbed, files) == before
    assert "DEMO_VALUE" not in live_env(testbed, "decode", UNIT)
    no_leftovers(testbed)
