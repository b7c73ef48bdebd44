"""A `collect:` pattern over a unit log longer than orch reads of it (the last 256 KB of what the
unit wrote during the trial), on the bundled simulator. Found by the red team: decode logging
~100 MB of ANOMALY lines in a trial was recorded as `anomalies = 1148` (the lines of the last
256 KB), a count the report compared between cells as if whole. A count over a cut log is no
measurement: the trial fails naming the collector and the cut, like a metric the repro did not
print; a log that fits is counted as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.netutil import port_open
from helpers.sim_sweep import ENV_FILES, make_inventory, overlap_matrix

from orchestrator.cli.main import main

pytestmark = pytest.mark.sim

MATRIX = overlap_matrix(
    "chatty",
    r"""{python} -c "import sys; open(sys.argv[1], 'a').write('FLOOD x\n' * int(sys.argv[2]))" LOG {trial}0000""",
    "collect:\n  floods: {role: decode, pattern: FLOOD}\n",
)


def test_a_count_over_a_cut_log_fails_the_trial_and_one_that_fits_is_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv, ports = make_inventory(tmp_path)
    log = tmp_path / "state" / "t-decode.log"
    (tmp_path / "m.yaml").write_text(MATRIX.replace("LOG", str(log)))
    originals = {n: (tmp_path / n).read_bytes() for n in ENV_FILES}
    reports = tmp_path / "reports"
    code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inv), "--out", str(reports), "--run-id", "c"])
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in (reports / "c" / "journal.jsonl").read_text().splitlines()]
    trials = {r["trial"]: r for r in lines if r.get("type") == "trial"}
    # trial 0 wrote no line (0 x 10,000 = 0); trial 1 wrote 10,000 lines, 100 KB: both fit
    assert trials[0]["status"] == "completed" and trials[0]["metrics"]["floods"]["value"] == 0, out + err
    assert trials[1]["status"] == "completed" and trials[1]["metrics"]["floods"]["value"] == 10_000, out + err
    for name, data in originals.items():
        assert (tmp_path / name).read_bytes() == data, name
    assert not any(port_open(p) for p in ports)

    big = tmp_path / "big"
    big.mkdir()
    inv, ports = make_inventory(big)
    log = big / "state" / "t-decode.log"
    (big / "m.yaml").write_text(MATRIX.replace("LOG", str(log)).replace("{trial}0000", "{trial}00000"))
    code = main(["run", str(big / "m.yaml"), "-i", str(inv), "--out", str(big / "reports"), "--run-id", "c"])
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in (big / "reports" / "c" / "journal.jsonl").read_text().splitlines()]
    trials = {r["trial"]: r for r in lines if r.get("type") == "trial"}
    assert code == 1 and trials[0]["status"] == "completed", out + err
    assert trials[1]["status"] == "failed" and "floods" not in (trials[1].get("metrics") or {}), trials[1]
    said = "collector 'floods': decode's log during the trial is longer than the 256 KB orch reads"
    assert said in out + err, out + err
    assert not any(port_open(p) for p in ports)
