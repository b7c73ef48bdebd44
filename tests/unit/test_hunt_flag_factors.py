"""A hunt's suspects may be anything a factor can set: an env variable, or one command-line flag
edited inside an args variable (`kind: flag`), two flags of one variable composing. Each
configuration of the hunt is a cell whose edits keep every other token of the variable."""

from __future__ import annotations

from pathlib import Path

from orchestrator.core.argsvar import resolve
from orchestrator.core.config import read_matrix
from orchestrator.core.huntplan import first_wave
from orchestrator.core.matrix import hunt_cell

MATRIX = """\
name: flag_hunt
factors:
  cuda_graph:
    kind: flag
    flag: --disable-cuda-graph
    env: {decode: SGLANG_EXTRA_ARGS}
    levels: {on: absent, off: present}
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
  max_bs:
    kind: flag
    flag: --cuda-graph-max-bs
    env: {decode: SGLANG_EXTRA_ARGS}
    levels: {"64": "64", default: absent}
hunt:
  metric: corruption
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 10 --seed {trial_seed}"
  timeout: 60
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""
LIVE = {"SGLANG_EXTRA_ARGS": "--tp 8 --cuda-graph-max-bs 8"}  # what decode.env holds before the hunt


def test_flag_factors_are_suspects_and_each_configuration_edits_only_its_flags(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(MATRIX)
    m = read_matrix(tmp_path / "m.yaml")
    assert m.hunt is not None and m.hunt.flags == ("cuda_graph", "overlap", "max_bs")
    written = {}
    for config in first_wave(m.hunt):
        cell = hunt_cell(m, config)
        written[cell.id] = resolve(dict(cell.env["decode"]), LIVE)
    assert written == {
        "cuda_graph=on,overlap=on,max_bs=64": {
            "SGLANG_EXTRA_ARGS": "--tp 8 --cuda-graph-max-bs 64",
            "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "1",
        },
        "cuda_graph=off,overlap=off,max_bs=default": {
            "SGLANG_EXTRA_ARGS": "--tp 8 --disable-cuda-graph",
            "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "0",
        },
        "cuda_graph=off,overlap=on,max_bs=64": {
            "SGLANG_EXTRA_ARGS": "--tp 8 --cuda-graph-max-bs 64 --disable-cuda-graph",
            "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "1",
        },
        "cuda_graph=on,overlap=off,max_bs=64": {
            "SGLANG_EXTRA_ARGS": "--tp 8 --cuda-graph-max-bs 64",
            "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "0",
        },
        "cuda_graph=on,overlap=on,max_bs=default": {
            "SGLANG_EXTRA_ARGS": "--tp 8",
            "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "1",
        },
    }
