"""The shipped flag-factor matrix on the bundled simulator (issue 14): --disable-cuda-graph and
--cuda-graph-max-bs are separate factors of one sweep, both edited inside decode's
SGLANG_EXTRA_ARGS; every trial is verified (the composed variable in decode's live process, and
what decode reports in /server_info) and completes; the client factor (concurrency) restarts
nothing; decode's own start line shows the flags it parsed from the variable."""

from __future__ import annotations

import re

import pytest
from helpers.shipped import run_shipped

from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal

pytestmark = pytest.mark.sim


def test_two_flag_factors_of_one_variable_run_and_verify_on_the_sim(tmp_path, capsys):
    run_dir, out, assert_clean = run_shipped(tmp_path, capsys, "cuda_graph_flags.yaml", "flags", 14)
    trials = [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]
    assert len(trials) == 8 and all(t.status == "completed" for t in trials), [t.failure for t in trials]
    started = 0
    for t in trials:
        want_graph = t.levels["cuda_graph"] == "on"
        want_bs = 64 if t.levels["max_bs"] == "64" else 8
        args = t.env["decode"]["SGLANG_EXTRA_ARGS"]
        assert ("+--disable-cuda-graph" in args) == (not want_graph), args
        assert ("+--cuda-graph-max-bs 64" in args) == (want_bs == 64), args
        assert t.metrics["corruption"].n == int(t.levels["concurrency"])  # the client factor reached the repro
        log = t.logs.get("decode:sim-decode")
        text = (run_dir / log).read_text() if log else ""
        line = re.search(r"decode listening on \S+ pid=\d+ .*", text)
        if "decode:sim-decode" in t.restarted:
            assert line is not None, text
            started += 1
            assert f"cuda_graph={want_graph}" in line.group() and f"cuda_graph_max_bs={want_bs}" in line.group()
    assert started >= 3  # every server setting after the first one restarted decode
    # concurrency never restarts anything: cells that differ only by it run back to back (min-restarts)
    pairs = 0
    for before, after in zip(trials, trials[1:], strict=False):
        if {k: v for k, v in before.levels.items() if k != "concurrency"} == {
            k: v for k, v in after.levels.items() if k != "concurrency"
        }:
            pairs += 1
            assert after.restarted == [], (before.cell, after.cell, after.restarted)
    assert pairs == 4  # each server setting ran both concurrencies back to back
    assert_clean()
