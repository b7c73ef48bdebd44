"""Provenance of a real (simulated) run: run.json names the controller and, per host, the GPUs
("not available" here), the command line and the env file's sha256 as orch found it; every trial
record says what served it on each host (server version and info digest, command line, env file
sha256 after the cell's edit), and the report groups the trials by it."""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import orchestrator
from orchestrator.core.redact import Redactor
from orchestrator.edges.provenance import orch_commit
from orchestrator.report.build import build_report
from orchestrator.store.manifest import load_manifest

from .helpers import SimBed, assert_clean, by_trial, matrix_yaml, run_cli

pytestmark = pytest.mark.sim


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_run_json_journal_and_report_say_what_ran_where(bed: SimBed, capsys) -> None:
    bed.write_matrix(matrix_yaml(replicates=1, extra="exclude:\n  - {cuda_graph: off}\n"))
    done = run_cli(bed.run_args("prov"), capsys)
    assert done.code == 0, done.output
    run_dir = bed.run_dir("prov")
    manifest = load_manifest(run_dir)

    c = manifest.controller
    assert c is not None and c.command == Redactor().text(shlex.join(sys.argv)) and c.user and c.host
    checkout = Path(orchestrator.__file__).resolve().parents[1]
    assert c.python and "pydantic" in c.packages
    if (checkout / ".git").exists():  # a commit of this checkout (HEAD then: it may have moved since)
        assert re.fullmatch(r"[0-9a-f]{40}", c.orch_commit)
        git = ["git", "-C", str(checkout), "cat-file", "-e", f"{c.orch_commit}^{{commit}}"]
        assert subprocess.run(git, check=False).returncode == 0
    else:  # an installed orch has no commit to name
        assert c.orch_commit == orch_commit()[0] == ""
    for role, host in manifest.hosts.items():
        assert host["env_sha256_before"] == sha(bed.originals[role])
        assert "orchestrator.sim.server" in host["exec_start"] and host["server_version"] == "sim-0.1"
        if shutil.which("nvidia-smi") is None:
            assert (host["gpu_model"], host["gpu_driver"], host["cuda"]) == ("not available",) * 3

    trials = by_trial(run_dir)
    assert len(trials) == 2 and all(set(t.provenance) == {"prefill", "decode", "router"} for t in trials.values())
    assert {t.provenance["prefill"].env_sha256 for t in trials.values()} == {sha(bed.originals["prefill"])}
    by_overlap: dict[str, set[str]] = {}
    for t in trials.values():
        by_overlap.setdefault(t.levels["overlap"], set()).add(t.provenance["decode"].server_info_sha)
    assert len(by_overlap["on"]) == len(by_overlap["off"]) == 1 and by_overlap["on"] != by_overlap["off"]
    texts = [t.provenance["decode"].server_info for t in trials.values() if t.provenance["decode"].server_info]
    assert len(texts) == 2 and '"multi_stream_overlap": false' in " ".join(texts)  # each text once
    assert len({t.provenance["decode"].env_sha256 for t in trials.values()}) == 2

    assert sum(g.count for g in manifest.served) == 2 * 3  # run.json: every trial, on every host
    off = next(iter(by_overlap["off"]))
    assert '"multi_stream_overlap": false' in manifest.served_texts[off]
    assert any(g.host == "decode" and g.server_info_sha == off and g.count == 1 for g in manifest.served)
    report = build_report(manifest, list(trials.values()))
    assert sum(g.count for g in report.provenance.served) == 2 * 3
    page = (run_dir / "index.html").read_text()
    assert "What served each trial" in page and off in page and c.orch_commit in page

    again = run_cli(["resume", str(run_dir)], capsys)  # nothing left to run: the resume is still recorded
    assert again.code == 0, again.output
    resumed = load_manifest(run_dir)
    assert resumed.controller == c and [r.command for r in resumed.resumed_by] == [c.command]
    assert "resume 1" in (run_dir / "index.html").read_text()
    assert_clean(bed)
