"""`orch run` with a matrix gate that the data cannot meet: the sweep completes, hosts are
restored, the terminal names the failed gate, the exit code is 3 (CI fails the job), and the
JUnit export shows the failing case. On the bundled simulator (real processes, loopback)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers.netutil import port_open
from helpers.sim_sweep import ENV_FILES, make_inventory

from orchestrator.cli.main import main

pytestmark = pytest.mark.sim

MATRIX = """\
name: gated
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
replicates: 1
order: sequential
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 4 --rounds 1 --seed {trial_seed}"
  timeout: 120
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
gates:
  # 4 sessions can never show an upper 95% bound under 1%: this gate must fail in every cell
  - {name: corruption under 1%, metric: corruption, upper: 0.01}
  # ... while a bound of 100% always holds where there is data
  - {name: sanity, metric: corruption, upper: 1.0, cells: {overlap: off}}
"""


def test_a_failed_gate_fails_the_run_with_exit_3_and_a_failing_junit_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv, ports = make_inventory(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    originals = {n: (tmp_path / n).read_bytes() for n in ENV_FILES}
    reports = tmp_path / "reports"
    code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inv), "--out", str(reports), "--run-id", "gated"])
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert "2 trials completed, 0 failed" in out
    assert err.count("gate failed:") == 2 and "corruption under 1% @ overlap=on" in err
    summary = json.loads((reports / "gated" / "summary.json").read_text())
    assert summary["gates"] == 3 and len(summary["gates_failed"]) == 2
    assert main(["export", str(reports / "gated"), "--format", "junit", "-o", str(tmp_path / "j.xml")]) == 0
    suite = ET.parse(tmp_path / "j.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("3", "2")
    for name, data in originals.items():
        assert (tmp_path / name).read_bytes() == data, name
    assert not any(port_open(p) for p in ports)
