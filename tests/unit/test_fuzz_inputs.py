"""What bench/bench_fuzz_inputs.py found: each cause of a BAD mutant as its minimal input, and a
small fixed-seed sample of the fuzzer itself, in-process (the unit tier starts no process), so a
new cause among those seeds fails here. Each case: `orch validate` (or `orch report`) must end with
exit 2 and an error naming the file and the line, no traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
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


def test_a_run_json_field_of_the_wrong_shape_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """run.json's `gates` a number, not a list (seed 6 of the fuzzer): its line, not only its key."""
    from helpers.report_synth import synthetic_run, write_run

    manifest, records = synthetic_run(replicates=1, run_id="r1")
    run_dir = write_run(tmp_path / "r1", manifest, records, plan_json=True)
    text = (run_dir / "run.json").read_text()
    assert text.count('"gates": []') == 1
    (run_dir / "run.json").write_text(text.replace('"gates": []', '"gates": 0'))
    line = text[: text.index('"gates"')].count("\n") + 1
    refused(["report", str(run_dir)], capsys, rf"run\.json:{line}: gates: invalid run manifest")


@pytest.mark.parametrize(
    ("loc", "line"),
    [
        (("plan", 1, "x"), 6),  # a list's second item's key, its value on the next line
        (("a",), 8),  # a key given twice: the last, the one json.loads keeps
        (("plan", 5), None),  # past the list's end
        (("nope",), None),
        (("a", "b"), None),  # a list where a map is asked for
    ],
)
def test_json_line_finds_the_line_of_a_path(loc: tuple[int | str, ...], line: int | None) -> None:
    from orchestrator.core.filewords import json_line

    text = '{\n  "a": 1,\n  "plan": [\n    {"x": 1},\n    {"x":\n  2}\n  ],\n  "a": [1]\n}'
    assert json_line(text, loc) == line


def test_json_line_of_a_torn_or_too_deep_text_is_none() -> None:
    from orchestrator.core.filewords import json_line

    assert json_line('{"a": [1, 2', ("a", 3)) is None
    assert json_line('{"b": ' + "[" * 100_000 + "]" * 100_000 + ', "a": 1}', ("a",)) is None


def test_a_metric_regex_repeating_too_much_is_refused_before_it_is_compiled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`x{1000000}` in a metric pattern (seed 745 had x{99999999}: past 1 GB in 0.7 s, killed): the
    engine unrolls the count, ~300 bytes an item; refused at its line, nothing compiled."""
    inventory, _ = private_inventory(tmp_path)
    text = (REPO / "matrices" / "cuda_graph_flags.yaml").read_text()
    old = r"regex: 'error=(?P<value>\d+)'"
    assert text.count(old) == 1
    matrix = tmp_path / "m.yaml"
    matrix.write_text(text.replace(old, r"regex: '(?P<value>\d+)x{1000000}'"))
    line = text[: text.index(old)].count("\n") + 1
    refused(["validate", str(matrix), "-i", str(inventory)], capsys, rf"m\.yaml:{line}: ", "repeats")


@pytest.mark.parametrize(
    ("pattern", "items"),
    [
        (r"CORRUPTION sessions: (?P<k>\d+)/(?P<n>\d+)", 32),  # the shipped metric: a few dozen
        (r"x{99999999}", 99_999_999),
        (r"(?:x{1000}){1000}", 1_001_000),  # nested counts multiply
        (r"x{0,1000000}", 1),  # nothing mandatory: nothing unrolled
        (r"x{,99999}", 9),  # not a count in `regex`'s syntax: literal characters
        (r"a\{99999\}", 8),  # escaped braces: literal characters
        (r"[]{}]{5}", 5),  # a class holding brackets and braces, repeated 5 times
        (r"(a|b){3}", 6),  # alternatives summed: an over-estimate
    ],
)
def test_unrolled_size_counts_what_the_engine_unrolls(pattern: str, items: int) -> None:
    from orchestrator.core.regexsize import unrolled_size

    assert unrolled_size(pattern) == items


def test_a_field_missing_from_run_json_names_the_object_it_is_missing_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """run.json without its `testbed` line (seed 528): the fault has no line of its own; the
    object's (the file's first line for a top-level field) is named."""
    from helpers.report_synth import synthetic_run, write_run

    manifest, records = synthetic_run(replicates=1, run_id="r1")
    run_dir = write_run(tmp_path / "r1", manifest, records, plan_json=True)
    text = (run_dir / "run.json").read_text()
    kept = [line for line in text.splitlines(keepends=True) if not line.startswith('  "testbed": ')]
    assert len(kept) == text.count("\n") - 1
    (run_dir / "run.json").write_text("".join(kept))
    refused(["report", str(run_dir)], capsys, r"run\.json:1: testbed: invalid run manifest: Field required")


def test_an_error_at_line_100_keeps_its_line_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """'m.yaml:100: ...' printed through rich read 'm.yaml💯 ...' (seed 1108): ':100:' is an emoji
    code, and the consoles replaced it, so the error lost its line (':1234:' too)."""
    inventory, _ = private_inventory(tmp_path)
    matrix = tmp_path / "m.yaml"
    matrix.write_text("# a comment\n" * 99 + "name: x\x16\n")
    refused(["validate", str(matrix), "-i", str(inventory)], capsys, r"m\.yaml:100: invalid YAML")


@pytest.mark.parametrize("ending", ["\r\n", "\r", "\u2028"])
def test_a_byte_that_is_not_utf8_is_named_with_its_yaml_line_whatever_the_line_ending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ending: str
) -> None:
    """YAML breaks a line at CR LF, a bare CR, LF, NEL, LS and PS (PyYAML's scanner); counting LF only
    named line 1 of a CR file and lines past the end of an LS one. The byte sits on line 4 here."""
    inventory, _ = private_inventory(tmp_path)
    matrix = tmp_path / "m.yaml"
    text = ending.join(["name: x", "factors:", "  a:", "    levels: [on, o\udcffff]", ""])
    matrix.write_bytes(text.encode("utf-8", "surrogateescape"))
    refused(["validate", str(matrix), "-i", str(inventory)], capsys, r"m\.yaml:4: not UTF-8 text")


def test_the_line_of_a_bad_byte_counts_cr_lf_once() -> None:
    """A CR LF pair is one break, a bare CR another (the pure count, without the CLI)."""
    from orchestrator.core.bounded import line_of_offset

    assert line_of_offset(b"a\r\nb\rc\nd\xff", 9) == 4
    assert line_of_offset(b"a\r\n\r\nb", 6) == 3
    assert line_of_offset(b"\xff", 0) == 1


ODD = os.fsdecode(b"20260509-070001-odd \xff\x01")  # a folder name that is not UTF-8 (os.scandir: surrogates)


def test_a_run_folder_named_in_bytes_that_are_not_utf8_takes_no_view_down(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One folder in reports/ named in bytes that are not UTF-8 (a copy renamed by hand) made `orch
    status --json`, `orch report` of any run (the runs index) and serve's /, /status, /api/status and
    /api/runs fail with a traceback (UnicodeEncodeError: the name quoted into a link): seed 7 of
    bench_fuzz_inputs.py's serve targets. Such a folder is not listed; the others are."""
    from helpers.report_synth import synthetic_run, write_run

    from orchestrator.store.atomic import write_json_atomic
    from orchestrator.store.liveness import StatusFile
    from orchestrator.team.livestatus import snapshot
    from orchestrator.team.queue import Claimer
    from orchestrator.team.serve import status_json

    reports = tmp_path / "reports"
    manifest, records = synthetic_run(replicates=1, run_id="20260509-070000-good")
    good = write_run(reports / "20260509-070000-good", manifest, records, plan_json=True)
    me = Claimer.current()
    status = dict(run_id=manifest.run_id, name=manifest.name, testbed="local", host=me.host, pid=me.pid,
                  pid_start=me.start, state="finished", started=manifest.started, updated=manifest.ended, done=8,
                  total=8, failed=0)  # fmt: skip
    write_json_atomic(good / "status.json", StatusFile.model_validate(status))
    shutil.copytree(good, reports / ODD)
    assert main(["status", "--json", "--reports", str(reports)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["directory"] for r in listed["runs"]] == [good.name]
    assert main(["report", str(good)]) == 0, capsys.readouterr()
    index = (reports / "index.html").read_text()
    assert good.name in index and "odd" not in index
    assert [r["directory"] for r in status_json(snapshot(reports))["runs"]] == [good.name]
    from orchestrator.report.render import fresh_summary
    from orchestrator.report.site import EntryCache, run_entries

    for entries in (run_entries(reports, fresh_summary), EntryCache().entries(reports, fresh_summary)):
        assert [e.directory for e in entries] == [good.name]  # what /api/runs pages through


def _other_schema(path: Path, columns: str = "id TEXT PRIMARY KEY, what BLOB") -> None:
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE items ({columns})")
    db.close()


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(b"garbage, not SQLite\n" * 50), id="garbage"),
        pytest.param(lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200), id="bad-header"),
        pytest.param(_other_schema, id="another-schema"),
        pytest.param(lambda p: _other_schema(p, "x"), id="no-orch-column"),  # seeds 24, 241: a syntax error
    ],
)
def test_a_queue_file_that_is_no_orch_queue_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Callable[[Path], None]
) -> None:
    """`orch queue list` over a queue.db that is garbage, a damaged SQLite file or another program's
    schema: exit 2 naming the file, what bad input gets, where it was exit 1, a runtime fault
    (bench_fuzz_inputs.py's queuedb targets, seeds 109, 184, 186)."""
    reports = tmp_path / "reports"
    reports.mkdir()
    damage(reports / "queue.db")
    refused(["queue", "list", "--reports", str(reports)], capsys, r"queue\.db: cannot read the queue", "orch queue?")


@pytest.mark.parametrize(("column", "edit"), [("round", lambda c: c[:-1]), ("cell", lambda c: [*c[:-1], 99])])
def test_a_plan_whose_columns_do_not_line_up_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, edit: Callable[[list[int]], list[int]]
) -> None:
    """plan.json's column one trial short, or a trial's cell index past the cells: refused naming the
    column's line (the out-of-range index's own), where the error named the file alone (seed 176 of
    bench_fuzz_inputs.py's folder targets: a line deleted from plan.json, `orch export`)."""
    from helpers.report_synth import synthetic_run, write_run

    manifest, records = synthetic_run(replicates=1, run_id="20260509-070000-plan")
    run = write_run(tmp_path / "20260509-070000-plan", manifest, records, plan_json=True)
    plan = json.loads((run / "plan.json").read_text())
    plan[column] = edit(plan[column])
    text = json.dumps(plan, indent=2)
    (run / "plan.json").write_text(text)
    lines = text.splitlines()
    if column == "round":
        line = lines.index('  "round": [') + 1
    else:
        line = next(i for i, x in enumerate(lines) if x.strip() == "99") + 1
    refused(["report", str(run)], capsys, rf"plan\.json:{line}: invalid plan: its columns do not line up")


@pytest.mark.parametrize("field", ["trial", "round"])
@pytest.mark.parametrize("value", [10**400, 2**63, -1], ids=["10**400", "2**63", "-1"])
def test_a_trial_number_past_int64_in_a_journal_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: int
) -> None:
    """A journal trial's `trial` or `round` of 10**400 (or 2**63) made `orch report` and `orch compare`
    fail with OverflowError building the int64 metric table (seed 467 of bench_fuzz_inputs.py's hunt
    targets); a negative one is no plan position either. Now bad input at its line."""
    from helpers.report_synth import synthetic_run, write_run

    manifest, records = synthetic_run(replicates=1, run_id="20260509-070000-big")
    run = write_run(tmp_path / "20260509-070000-big", manifest, records, plan_json=True)
    lines = (run / "journal.jsonl").read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"type":"trial"' in line and '"status":"completed"' in line)
    record = json.loads(lines[at])
    record[field] = value
    lines[at] = json.dumps(record) + "\n"
    (run / "journal.jsonl").write_text("".join(lines))
    refused(["report", str(run)], capsys, rf"journal\.jsonl:{at + 1}: ")


@pytest.mark.parametrize("document", ["[]\n", "\n\n0\n", "null"])
def test_a_plan_json_that_is_no_object_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: str
) -> None:
    """plan.json that is JSON but no object (a list, a number): refused naming the line its value
    starts on, where the error named the file alone (seed 681 of bench_fuzz_inputs.py's hunt targets)."""
    from helpers.report_synth import synthetic_run, write_run

    manifest, records = synthetic_run(replicates=1, run_id="20260509-070000-plan")
    run = write_run(tmp_path / "20260509-070000-plan", manifest, records, plan_json=True)
    (run / "plan.json").write_text(document)
    line = len(document) - len(document.lstrip("\n")) + 1
    refused(["report", str(run)], capsys, rf"plan\.json:{line}: invalid plan: Input should be an object")


@pytest.mark.parametrize(
    "surrogate",
    [b"\xed\xa0\x80", b"\\ud800"],  # the bytes of an encoded lone surrogate; its JSON escape
    ids=["encoded", "escaped"],
)
@pytest.mark.parametrize("field", ["server_info", "server_version"])
def test_a_lone_surrogate_in_a_journal_line_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], surrogate: bytes, field: str
) -> None:
    """json.loads takes bytes through 'surrogatepass' and keeps a lone surrogate escape: a trial's
    server info holding one passed the journal's reader and crashed `orch report` writing the page
    (UnicodeEncodeError, seed 98 of bench_fuzz_inputs.py's run targets). Now bad input at its line."""
    from helpers.report_synth import synthetic_run, write_run

    manifest, records = synthetic_run(replicates=1, run_id="20260509-070000-u")
    run = write_run(tmp_path / "20260509-070000-u", manifest, records, plan_json=True)
    lines = (run / "journal.jsonl").read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if b'"type":"trial"' in line and b'"status":"completed"' in line)
    record = json.loads(lines[at])
    record["provenance"] = {"decode": {"server_version": "1", "server_info_sha": "s", "server_info": "{}"}}
    record["provenance"]["decode"][field] = "MARK"
    lines[at] = json.dumps(record).encode().replace(b"MARK", b"x" + surrogate) + b"\n"
    (run / "journal.jsonl").write_bytes(b"".join(lines))
    refused(["report", str(run)], capsys, rf"journal\.jsonl:{at + 1}: ")
