"""bench/bench_status.py: a tiny run serves /status and /api/status from two trees (HEAD as
before) over loopback and prints both views of each side by side (no figure asserted)."""

from __future__ import annotations

import json

import pytest
from helpers.benchrun import bench_module, bench_output

bs = bench_module("bench_status.py")


def test_answers_compare_on_the_fields_before_had() -> None:
    """A field added since `--before` (unreadable_file, 2026-12-06) is no difference: the default
    run once stopped at its first /api/status with "after answers otherwise than before"."""
    before = {"runs": [{"directory": "r1", "state": "finished", "unreadable": "x"}]}
    after = {"runs": [{"directory": "r1", "state": "finished", "unreadable": "y", "unreadable_file": ""}]}
    assert bs.same_answers(json.dumps(after), json.dumps(before))
    changed = {"runs": [{"directory": "r1", "state": "running", "unreadable_file": ""}]}
    assert not bs.same_answers(json.dumps(changed), json.dumps(before))
    fewer = {"runs": []}
    assert not bs.same_answers(json.dumps(fewer), json.dumps(before))


@pytest.mark.process
def test_tiny_run_prints_both_views_before_and_after() -> None:
    out = bench_output("bench_status.py", "--runs", "3", "--before", "HEAD", timeout=300)
    assert "load average" in out and "before: HEAD, after: this checkout" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["3"]]
    assert [r[1] for r in rows] == ["/status", "/api/status"]
    for r in rows:
        assert all(float(x) > 0 for x in r[2:6]) and r[6].endswith("x"), r
