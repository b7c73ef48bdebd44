"""bench/bench_yaml.py: a tiny run prints each input with both parsers and their ratio (no figure asserted)."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_output


@pytest.mark.process
def test_tiny_run_prints_each_input_with_both_parsers() -> None:
    out = bench_output("bench_yaml.py", "--factors", "5", "--repeat", "1", timeout=120)
    assert "load average" in out
    for name in ("matrices/overlap_ablation.yaml:", "inventory/local.yaml:", "generated, 5 factors:"):
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert "libyaml" in line and "PyYAML" in line and "ratio" in line
