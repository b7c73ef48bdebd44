"""Server metrics on the bundled simulator (real processes, loopback): each trial's journal record
carries the workers' per-trial `sglang:*` numbers scraped from their real /metrics (the measured
repro's requests only: not the warm-up's), the report shows them per cell, the export has them,
`verify:` passes against what decode reports, and this GPU-less machine says so once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.netutil import port_open
from helpers.sim_sweep import ENV_FILES, make_inventory

from orchestrator.cli.main import main

pytestmark = pytest.mark.sim

SESSIONS = 6
MATRIX = f"""\
name: server-metrics
factors:
  cuda_graph:
    levels:
      on:  {{decode: {{SGLANG_EXTRA_ARGS: ""}}}}
      off: {{decode: {{SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}}}
replicates: 1
order: sequential
repro:
  command: >-
    {{python}} -m orchestrator.sim.repro --router {{router_url}} --sessions {SESSIONS} --rounds 1
    --seed {{trial_seed}}
  warmup: "{{python}} -m orchestrator.sim.repro --router {{router_url}} --sessions 3 --rounds 1 --seed 1"
  timeout: 120
  metrics:
    corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}}
metrics:
  sample_interval: 0.1
verify:
  - {{when: {{cuda_graph: "off"}}, role: decode, expect: {{disable_cuda_graph: true}}}}
  - {{when: {{cuda_graph: "on"}}, role: decode, expect: {{disable_cuda_graph: false}}}}
"""
TTFT = "server.decode.sglang:time_to_first_token_seconds"


def test_server_metrics_per_trial_in_journal_report_and_export(tmp_path: Path) -> None:
    inv, ports = make_inventory(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    originals = {n: (tmp_path / n).read_bytes() for n in ENV_FILES}
    reports = tmp_path / "reports"
    code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inv), "--out", str(reports), "--run-id", "srv"])
    assert code == 0
    run = reports / "srv"
    records = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    trials = [r for r in records if r["type"] == "trial"]
    assert [t["status"] for t in trials] == ["completed", "completed"]
    for t in trials:
        m = {name: v.get("value") for name, v in t["metrics"].items()}
        # the repro's requests only: the warm-up's 3 sessions ran before the first scrape
        assert m["server.decode.sglang:num_requests_total.delta"] == SESSIONS
        assert m["server.prefill.sglang:num_requests_total.delta"] == SESSIONS
        assert m[f"{TTFT}.count"] == SESSIONS
        assert 0 < m[f"{TTFT}.p50"] <= m[f"{TTFT}.p90"] <= m[f"{TTFT}.p99"]
        assert m["server.decode.sglang:num_running_reqs.max"] >= 0  # sampled during the repro
        assert "server.decode.sglang:num_queue_reqs.mean" in m
        assert "server.decode.missing" not in m and "server.router.missing" not in m  # the router is not scraped
        assert t["warmup"]["exit_code"] == 0 and "--sessions 3" in t["warmup"]["command"]
        assert "/3" in (run / t["warmup"]["stdout_path"]).read_text()  # the warm-up's own output, kept apart
    page = (run / "index.html").read_text()
    assert "Server metrics" in page and f"{TTFT}.p90" in page and "sglang:num_queue_reqs" in page
    manifest = json.loads((run / "run.json").read_text())
    gpu_lines = [h.get("gpu") for h in manifest["hosts"].values() if h.get("gpu")]
    assert gpu_lines == ["no nvidia-smi on this host: no GPU telemetry"]  # three local roles, one machine: once
    assert main(["export", str(run), "--format", "csv", "-o", str(tmp_path / "x.csv")]) == 0
    assert f"{TTFT}.p90" in (tmp_path / "x.csv").read_text()
    for name, data in originals.items():
        assert (tmp_path / name).read_bytes() == data, name
    assert not any(port_open(p) for p in ports)
