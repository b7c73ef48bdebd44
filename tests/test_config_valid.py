"""`repro.valid` and `stop_after_repeated_failures` in a matrix: good shapes parse into rules,
bad ones exit 2 with file:line and the key path, before any host is touched (issue 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.core.config import read_matrix
from orchestrator.core.model import ValidRule

GOOD = """\
name: demo
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
repro:
  command: "{python} -m orchestrator.sim.repro --router {decode_url} --sessions 4"
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
    wall: {regex: 'wall=(?P<value>[0-9.]+)s'}
"""
VALID_LINE = 12  # the first rule's line when GOOD is followed by "  valid:\n"

INVENTORY = """\
testbeds:
  local:
    hosts:
      decode:
        env_file: d.env
        units: [{name: d, command: ["true"]}]
"""


def validate(tmp_path: Path, text: str) -> int:
    (tmp_path / "m.yaml").write_text(text)
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    return main(["validate", str(tmp_path / "m.yaml"), "-i", str(tmp_path / "inv.yaml")])


def with_rules(*rules: str) -> str:
    return GOOD + "  valid:\n" + "".join(f"    - {rule}\n" for rule in rules)


def test_good_rules_parse_into_the_matrix(tmp_path: Path) -> None:
    text = with_rules(
        r"{regex: 'error=(?P<value>\d+)', max: 0}",
        "{metric: corruption, min_n: 40}",
        r"{absent: 'HTTP 5\d\d'}",
        "{metric: wall, min: 0.5, max: 600}",
    )
    (tmp_path / "m.yaml").write_text(text + "stop_after_repeated_failures: 5\n")
    matrix = read_matrix(tmp_path / "m.yaml")
    assert matrix.repro.valid == (
        ValidRule("repro.valid[0]", "regex", r"error=(?P<value>\d+)", max=0),
        ValidRule("repro.valid[1]", "metric", "corruption", min_n=40),
        ValidRule("repro.valid[2]", "absent", r"HTTP 5\d\d"),
        ValidRule("repro.valid[3]", "metric", "wall", min=0.5, max=600),
    )
    assert matrix.stop_after_repeated_failures == 5
    assert read_matrix(_write(tmp_path, GOOD)).stop_after_repeated_failures == 3  # the default
    assert validate(tmp_path, text) == 0


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plain.yaml"
    path.write_text(text)
    return path


# (id, rule, expected substrings, line offset from VALID_LINE)
BAD_RULES = [
    ("no check", "{max: 0}", ["repro.valid[0]", "exactly one of `regex:`, `metric:` or `absent:`"]),
    ("two checks", "{regex: 'a(\\d)', absent: b, max: 0}", ["repro.valid[0]", "exactly one of"]),
    ("unknown key", "{regex: 'a(\\d)', maximum: 0}", ["repro.valid[0]", "maximum"]),
    ("bad regex", "{regex: 'a(', max: 0}", ["repro.valid[0].regex", "invalid regular expression"]),
    ("bad absent regex", "{absent: '[z'}", ["repro.valid[0].absent", "invalid regular expression"]),
    ("regex without group", "{regex: 'error=0', max: 0}", ["repro.valid[0].regex", "(?P<value>...) group"]),
    ("regex without bounds", "{regex: 'e=(\\d+)'}", ["repro.valid[0]", "takes `min:` and/or `max:`"]),
    ("regex with min_n", "{regex: 'e=(\\d+)', min_n: 3}", ["repro.valid[0]", "min_n is for proportion"]),
    ("absent with bounds", "{absent: 'x', max: 1}", ["repro.valid[0]", "`absent:` takes no min"]),
    ("unknown metric", "{metric: corupt, min_n: 4}", ["repro.valid[0].metric", "no metric 'corupt'", "corruption"]),
    ("proportion without bounds", "{metric: corruption}", ["repro.valid[0]", "give `min_n:`"]),
    ("number with min_n", "{metric: wall, min_n: 4}", ["repro.valid[0]", "number metric 'wall'"]),
    ("min above max", "{metric: wall, min: 5, max: 1}", ["repro.valid[0].min", "min 5 is above max 1"]),
    ("min_n zero", "{metric: corruption, min_n: 0}", ["repro.valid[0].min_n"]),
    ("min_n not a number", "{metric: corruption, min_n: many}", ["repro.valid[0].min_n"]),
    ("max not a number", "{metric: wall, max: .nan}", ["repro.valid[0].max"]),
    ("rule not a mapping", "error=0", ["repro.valid[0]"]),
    ("long regex", "{absent: '" + "a" * 1001 + "'}", ["repro.valid[0].absent", "longer than 1000"]),
]


@pytest.mark.parametrize(("name", "rule", "expected"), BAD_RULES, ids=[c[0] for c in BAD_RULES])
def test_bad_rules_exit_2_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, rule: str, expected: list[str]
) -> None:
    code = validate(tmp_path, with_rules(rule))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert f"m.yaml:{VALID_LINE}" in err, err
    flat = " ".join(err.split())
    for part in expected:
        assert part in flat, f"{part!r} not in {err!r}"


def test_valid_must_be_a_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert validate(tmp_path, GOOD + "  valid: {regex: 'e=(\\d)', max: 0}\n") == 2
    assert "m.yaml:11" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "1001", "lots", "2.5"])
def test_bad_stop_after_repeated_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    assert validate(tmp_path, GOOD + f"stop_after_repeated_failures: {value}\n") == 2
    err = capsys.readouterr().err
    assert "m.yaml:11" in err and "stop_after_repeated_failures" in err and "Traceback" not in err


def test_the_shipped_matrices_void_error_sessions(repo: Path) -> None:
    for path in sorted((repo / "matrices").glob("*.yaml")):
        rules = read_matrix(path).repro.valid
        assert any(r.check == "regex" and r.target.startswith("error=") and r.max == 0 for r in rules), path
