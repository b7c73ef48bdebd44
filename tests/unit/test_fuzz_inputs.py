"""What bench/bench_fuzz_inputs.py found: each cause of a BAD mutant as its minimal input, and a
small fixed-seed sample of the fuzzer itself, in-process (the unit tier starts no process), so a
new cause among those seeds fails here. Each case: `orch validate` (or `orch report`) must end with
exit 2 and an error naming the file and the line, no traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.shipped import REPO, private_inventory

from orchestrator.cli.main import main

TRACEBACK = "Traceback (most recent call last)"


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], where: str, *fragments: str) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    output = " ".join((captured.out + captured.err).split())  # rich wraps long lines
    assert code == 2, output
    assert TRACEBACK not in output, output
    assert re.search(where, output), f"{where!r} not in {output!r}"
    for fragment in fragments:
        assert fragment in output, output
    return output


def test_a_byte_that_is_not_utf8_is_named_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory, _ = private_inventory(tmp_path)
    matrix = tmp_path / "m.yaml"
    matrix.write_bytes((REPO / "matrices" / "overlap_hunt.yaml").read_bytes().replace(b"factors:", b"fact\xffors:", 1))
    line = matrix.read_bytes().split(b"\n").index(b"fact\xffors:") + 1
    refused(["validate", str(matrix), "-i", str(inventory)], capsys, rf"m\.yaml:{line}: not UTF-8 text")
