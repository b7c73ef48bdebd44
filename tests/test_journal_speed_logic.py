"""The fast journal readers give exactly what the full parser gives (never asserts speed).

trial_statuses (resume), read_trial_rows + read_records_at (the report from disk), iter_records
and the end-of-file torn-tail check are each compared with a slow, obviously right reference:
read_journal's validated records, or the whole-file torn-tail rule the journal used before.
Tiny block and window sizes push every line across block and window edges.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.report_synth import ALL_OFF, synthetic_run, write_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.core.bounds import MAX_SESSIONS
from orchestrator.core.records import EventRecord, Failure, MetricValue, ReproOutcome, TrialRecord
from orchestrator.errors import ConfigError
from orchestrator.report.build import build_report, headline
from orchestrator.report.render import load_report
from orchestrator.store import journal as journal_mod
from orchestrator.store.journal import (
    Journal,
    JournalError,
    TrialRow,
    TrialStatuses,
    iter_records,
    load_trials,
    read_journal,
    read_records_at,
    read_trial_rows,
    repair_torn_tail,
    trial_statuses,
)
from orchestrator.store.manifest import load_manifest

SIZES = [pytest.param(None, id="default-sizes"), pytest.param((7, 5), id="tiny-blocks")]
_COUNTER = itertools.count()


@pytest.fixture(params=SIZES)
def sizes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read in 7-byte blocks and look for the torn tail in a 5-byte window first."""
    if request.param:
        block, tail = request.param
        monkeypatch.setattr(journal_mod, "_BLOCK", block)
        monkeypatch.setattr(journal_mod, "_TAIL", tail)


def _trial(trial: int, status: str = "completed", attempt: int = 1, **kw: object) -> TrialRecord:
    fields: dict[str, object] = dict(
        run_id="run-1",
        trial=trial,
        round=trial // 3,
        cell=f"overlap={'on' if trial % 2 else 'off'}",
        levels={"overlap": "on" if trial % 2 else "off"},
        testbed="sim",
        attempt=attempt,
        status=status,
        started="2026-05-09T07:00:00Z",
        ended="2026-05-09T07:00:02Z",
        duration_s=2.0,
        env={"decode": {"SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "1"}},
        repro=ReproOutcome(
            command="python repro.py",
            exit_code=0,
            duration_s=0.5,
            stdout_tail='{"status": "completed", "trial": 99}\n\\"quoted\\"',
        ),
        metrics={
            "corruption": MetricValue(kind="proportion", k=trial % 7, n=40),
            "wall": MetricValue(kind="number", value=1.5 + trial, unit="s"),
        },
    )
    if status != "completed":
        fields["failure"] = Failure(
            kind="interrupted" if status == "interrupted" else "workload", error="WorkloadError", message="m"
        )
    fields.update(kw)
    return TrialRecord.model_validate(fields)


def _event(kind: str = "run_started") -> EventRecord:
    return EventRecord(run_id="run-1", event=kind, at="2026-05-09T07:00:00Z", message="a\nb")


def _write(path: Path, records: list[TrialRecord | EventRecord], extra: bytes = b"") -> Path:
    with Journal(path) as journal:
        for record in records:
            journal.append(record)
    if extra:
        with open(path, "ab") as handle:
            handle.write(extra)
    return path


def _expected_statuses(path: Path) -> TrialStatuses:
    contents = read_journal(path)
    trials = [r for r in contents.records if isinstance(r, TrialRecord)]
    finished = {r.trial for r in trials if r.status in ("completed", "failed")}
    interrupted = {r.trial for r in trials if r.status == "interrupted"} - finished
    return TrialStatuses(frozenset(finished), frozenset(interrupted), contents.torn_tail)


def _line_positions(path: Path) -> list[tuple[int, int]]:
    """(line number, byte offset) of each non-blank line, counted the slow way."""
    positions, offset = [], 0
    for number, line in enumerate(path.read_bytes().split(b"\n"), start=1):
        if line.strip():
            positions.append((number, offset))
        offset += len(line) + 1
    return positions


# ------------------------------------------------------------------ random journals

statuses = st.sampled_from(["completed", "failed", "interrupted"])
trial_records = st.builds(_trial, trial=st.integers(0, 6), status=statuses, attempt=st.integers(1, 3))
journal_records = st.lists(st.one_of(trial_records, st.builds(_event)), max_size=12)
# what can follow the last appended record: nothing, blank lines, or a torn line of any kind
tails = st.sampled_from(
    [
        b"",
        b"\n",
        b"  \n\n",
        b'{"type": "trial", "tri',
        b"\0" * 40 + b"\n",
        b'{"type":"trial"}',
        b"garbage\n",
        b"\n\n{\n",
    ]
)


@pytest.mark.usefixtures("sizes")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=journal_records, tail=tails)
def test_fast_readers_agree_with_read_journal(
    tmp_path: Path, records: list[TrialRecord | EventRecord], tail: bytes
) -> None:
    path = _write(tmp_path / f"journal-{next(_COUNTER)}.jsonl", records, tail)
    contents = read_journal(path)

    assert trial_statuses(path) == _expected_statuses(path)
    assert list(iter_records(path)) == contents.records

    scan = read_trial_rows(path)
    trials = [
        (r, pos)
        for r, pos in zip(contents.records, _line_positions(path), strict=False)  # a torn tail has a line, no record
        if isinstance(r, TrialRecord)
    ]
    assert scan.torn_tail == contents.torn_tail
    assert scan.rows == [TrialRow.of(record, offset, number) for record, (number, offset) in trials]
    assert read_records_at(path, scan.rows[::-1]) == [record for record, _ in trials][::-1]


def test_statuses_of_retried_and_cut_off_trials(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "journal.jsonl",
        [
            _event(),
            _trial(0, "failed"),
            _trial(0, "completed", attempt=2),  # retried: finished
            _trial(1, "interrupted"),  # cut off by Ctrl-C: to run again
            _trial(2, "interrupted"),
            _event("run_resumed"),
            _trial(2, "completed"),  # resumed
            _trial(3, "failed"),  # failed for good: finished, not run again
        ],
        b'{"type":"trial","schema_version":1,"trial":4,"sta',
    )
    assert trial_statuses(path) == TrialStatuses(
        finished=frozenset({0, 2, 3}), interrupted=frozenset({1}), torn_tail=True
    )


def test_lines_the_fast_parser_refuses_go_through_the_full_parser(tmp_path: Path) -> None:
    """Keys in another order with spaces, and a metric named like a top-level field, read the same
    either way."""
    spaced = json.loads(_trial(6, metrics={"status": MetricValue(kind="number", value=2.0)}).model_dump_json())
    path = tmp_path / "journal.jsonl"
    lines = [_event().model_dump_json(), json.dumps(dict(reversed(spaced.items())), indent=None)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    records = read_journal(path).records
    assert len(records) == 2
    assert trial_statuses(path) == TrialStatuses(frozenset({6}), frozenset(), False)
    rows = read_trial_rows(path).rows
    assert rows == [
        TrialRow.of(r, pos[1], pos[0]) for r, pos in zip(records[1:], _line_positions(path)[1:], strict=True)
    ]
    assert read_records_at(path, rows) == records[1:]


def test_a_lone_surrogate_is_refused_at_its_line_by_the_fast_and_the_full_parser(tmp_path: Path) -> None:
    """A lone surrogate escape is valid JSON for json.loads but not for pydantic-core's parser: the
    full parser took it (and `orch report` crashed writing it on the page), the fast one sent the
    line to the full one. No line orch writes holds one (its serializer cannot), so both refuse it
    at its line, as a damaged line (core.jsontext)."""
    surrogate = json.loads(_trial(5, "failed").model_dump_json())
    surrogate["repro"]["stdout_tail"] = "\ud800"
    path = tmp_path / "journal.jsonl"
    lines = [_event().model_dump_json(), json.dumps(surrogate), _event().model_dump_json()]  # not the last: torn
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    refused = r"journal\.jsonl:2: invalid JSON: not Unicode text: .*\\ud800"
    for read in (read_journal, read_trial_rows):  # the fast parser refuses the line: the full one reads it
        with pytest.raises(ConfigError, match=refused):
            read(path)


# names a user may write: quotes, backslashes, braces, the journal's own key names and the very
# text the fast status reader looks for (inside a JSON string its quotes are escaped)
tricky_names = st.sampled_from(
    [
        "on",
        'say "hi"',
        "back\\slash",
        "}{",
        '},"is_baseline":true,"testbed":"x","attempt":1,"status":"interrupted"}',
        "status",
        "is_baseline",
        "é ✓",
        "\\",
    ]
)
tricky_trials = st.builds(
    lambda trial, status, factor, level, testbed: _trial(
        trial, status, cell=f"{factor}={level}", levels={"overlap": "on", factor: level}, testbed=testbed
    ),
    trial=st.integers(0, 6),
    status=statuses,
    factor=st.sampled_from(["status", "is_baseline", "attempt", "f"]),
    level=tricky_names,
    testbed=st.sampled_from(["sim", 'odd"bed']),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(st.one_of(tricky_trials, st.builds(_event)), max_size=8))
def test_statuses_of_lines_with_tricky_names_agree_with_read_journal(
    tmp_path: Path, records: list[TrialRecord | EventRecord]
) -> None:
    path = _write(tmp_path / f"journal-{next(_COUNTER)}.jsonl", records)
    assert trial_statuses(path) == _expected_statuses(path)


def test_resume_reads_only_the_head_of_a_line_orch_wrote(tmp_path: Path) -> None:
    """A deliberate limit, stated in trial_statuses' docstring: a line exactly as orch writes it
    is read by its head (number, status) and its closing brace; damage further inside it is
    not seen by resume, while read_journal (and the report) refuse the line with its number."""
    path = _write(tmp_path / "journal.jsonl", [_event(), _trial(0), _trial(1, "failed")])
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"duration_s":2.0', b'"duration_s":2.0.0')  # trial 0, mid-file
    path.write_bytes(b"\n".join(lines))
    assert trial_statuses(path) == TrialStatuses(frozenset({0, 1}), frozenset(), False)
    with pytest.raises(ConfigError) as info:
        read_journal(path)
    assert info.value.line == 2


# ------------------------------------------------------------------ errors


def _damaged(tmp_path: Path, how: str) -> Path:
    path = _write(tmp_path / "journal.jsonl", [_event(), _trial(0), _trial(1), _trial(2)])
    lines = path.read_bytes().split(b"\n")
    obj = json.loads(lines[2])
    if how == "invalid-json":
        lines[2] = lines[2][:50]
    elif how == "unknown-version":
        obj["schema_version"] = 99
        lines[2] = json.dumps(obj).encode()
    elif how == "version-as-text":
        obj["schema_version"] = "1"
        lines[2] = json.dumps(obj).encode()
    elif how == "bad-status":
        obj["status"] = "exploded"
        lines[2] = json.dumps(obj).encode()
    elif how == "missing-trial":
        del obj["trial"]
        lines[2] = json.dumps(obj).encode()
    elif how == "unknown-type":
        obj["type"] = "note"
        lines[2] = json.dumps(obj).encode()
    path.write_bytes(b"\n".join(lines))
    return path


@pytest.mark.parametrize(
    "how", ["invalid-json", "unknown-version", "version-as-text", "bad-status", "missing-trial", "unknown-type"]
)
def test_damaged_middle_line_fails_as_read_journal_does(tmp_path: Path, how: str) -> None:
    path = _damaged(tmp_path, how)
    with pytest.raises(ConfigError) as expected:
        read_journal(path)
    assert expected.value.line == 3
    for reader in (trial_statuses, read_trial_rows, lambda p: list(iter_records(p))):
        with pytest.raises(ConfigError) as info:
            reader(path)
        assert str(info.value) == str(expected.value)


# A metric a journal line may not hold: each reader refuses the line at file:line with the same
# words (the fast row reader falls back to the full parser), never an OverflowError or a
# statistics error later, and never a bogus row.
BAD_METRICS: dict[str, tuple[dict[str, object], str]] = {
    "k-above-n": ({"kind": "proportion", "k": 10, "n": 8}, "k=10 is more than n=8"),
    "k-negative": (
        {"kind": "proportion", "k": -1, "n": 40},
        "corruption.k: Input should be greater than or equal to 0",
    ),
    "n-negative": ({"kind": "proportion", "k": 0, "n": -1}, "corruption.n: Input should be greater than or equal to 0"),
    "k-of-no-sessions": ({"kind": "proportion", "k": 1, "n": 0}, "k=1 is more than n=0"),
    "n-huge": ({"kind": "proportion", "k": 1, "n": 10**30}, "corruption.n: Input should be less than or equal to"),
    "n-past-the-bound": ({"kind": "proportion", "k": 1, "n": MAX_SESSIONS + 1}, "corruption.n"),
    "k-without-n": ({"kind": "proportion", "k": 1}, "a proportion metric has k and n"),
    "proportion-with-value": ({"kind": "proportion", "k": 1, "n": 2, "value": 0.5}, "has k and n"),
    "number-with-counts": ({"kind": "number", "k": 1, "n": 2, "value": 1.0}, "a number metric has a value"),
    "number-infinite": ({"kind": "number", "value": float("inf")}, "corruption.value: Input should be a finite"),
    "number-nan": ({"kind": "number", "value": float("nan")}, "corruption.value: Input should be a finite"),
    "unknown-key": ({"kind": "number", "value": 1.0, "extra": 1}, "corruption.extra"),
}


@pytest.mark.parametrize("how", list(BAD_METRICS))
def test_a_metric_out_of_range_is_refused_at_its_line_by_every_reader(tmp_path: Path, how: str) -> None:
    metric, words = BAD_METRICS[how]
    path = _write(tmp_path / "journal.jsonl", [_event(), _trial(0), _trial(1), _trial(2)])
    lines = path.read_bytes().split(b"\n")
    obj = json.loads(lines[2])
    obj["metrics"]["corruption"] = metric
    lines[2] = json.dumps(obj).encode()  # inf and nan as JSON's Infinity and NaN, which Python reads
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(ConfigError) as expected:
        read_journal(path)
    assert expected.value.line == 3 and words in str(expected.value), str(expected.value)
    readers = (read_trial_rows, lambda p: list(iter_records(p)), lambda p: load_trials(p.parent))
    for reader in readers:
        with pytest.raises(ConfigError) as info:
            reader(path)
        assert str(info.value) == str(expected.value)


def test_a_number_too_large_for_a_float_is_refused(tmp_path: Path) -> None:
    """1e400 is valid JSON that Python reads as inf: refused like Infinity."""
    path = _write(tmp_path / "journal.jsonl", [_event(), _trial(0)])
    path.write_bytes(path.read_bytes().replace(b'"value":1.5', b'"value":1e400'))
    for reader in (read_journal, read_trial_rows):
        with pytest.raises(
            ConfigError, match=r":2: invalid record: trial\.metrics\.wall\.value: Input should be a finite"
        ):
            reader(path)


def test_metrics_at_their_bounds_read_fast_and_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the writer writes stays readable, through the fast path: k = 0, k = n = MAX_SESSIONS, 0 of 0,
    a number absent (a failed scrape: value null), negative or zero, and inf written as null."""
    metrics = {
        "none": MetricValue(kind="proportion", k=0, n=1),
        "no sessions": MetricValue(kind="proportion", k=0, n=0),  # no data: every reader skips it
        "all": MetricValue(kind="proportion", k=MAX_SESSIONS, n=MAX_SESSIONS),
        "missing": MetricValue(kind="number", value=None, unit="scrape failed"),
        "negative": MetricValue(kind="number", value=-3.5),
        "zero": MetricValue(kind="number", value=0.0),
    }
    path = _write(tmp_path / "journal.jsonl", [_trial(0, metrics=metrics)])  # no event: those take the full parser
    [expected] = read_journal(path).records
    monkeypatch.setattr(journal_mod, "_parse_line", None)  # the fast path must not need it
    [row] = read_trial_rows(path).rows
    assert row == TrialRow.of(expected, 0, 1)  # type: ignore[arg-type]
    assert [(p.k, p.n, p.value) for p in row.metrics] == [
        (0, 1, None),
        (0, 0, None),
        (MAX_SESSIONS, MAX_SESSIONS, None),
        (None, None, None),
        (None, None, -3.5),
        (None, None, 0.0),
    ]


def test_a_metric_value_out_of_range_cannot_be_made() -> None:
    """The writer cannot journal what the readers refuse (workload.py turns this ValueError into
    a failed trial naming the metric)."""
    for fields in [v[0] for v in BAD_METRICS.values() if "extra" not in v[0]]:
        with pytest.raises(ValueError):
            MetricValue.model_validate(fields)


DEEP = b'{"type":"event","schema_version":1,"x":' + b"[" * 200_000 + b"]" * 200_000 + b"}"


@pytest.mark.parametrize("last", [False, True], ids=["mid-file", "last-line"])
def test_a_line_nested_200000_deep_is_refused_at_its_line(tmp_path: Path, last: bool) -> None:
    """400 KB of brackets: json.loads raises RecursionError (no ValueError) and pydantic-core stops at
    its own depth limit; every reader says which line, none raises RecursionError. As the last
    line it is whole (not torn: repair leaves it), so it is refused the same way."""
    path = _write(tmp_path / "journal.jsonl", [_event(), _trial(0)])
    lines = path.read_bytes().split(b"\n")
    lines.insert(2 if last else 1, DEEP)
    path.write_bytes(b"\n".join(lines))
    line = 3 if last else 2
    # resume's reader reads an event line orch wrote by its head (trial_statuses' stated limit)
    assert trial_statuses(path) == TrialStatuses(frozenset({0}), frozenset(), False)
    readers = (
        read_journal,
        read_trial_rows,
        lambda p: list(iter_records(p)),
        lambda p: load_trials(p.parent),
    )
    for reader in readers:
        with pytest.raises(ConfigError) as info:
            reader(path)
        assert info.value.line == line and "nested too deeply" in str(info.value), str(info.value)
    assert repair_torn_tail(path) is False


def test_missing_journal_is_the_same_error(tmp_path: Path) -> None:
    for reader in (trial_statuses, read_trial_rows, lambda p: list(iter_records(p))):
        with pytest.raises(ConfigError, match="no journal here"):
            reader(tmp_path / "nope.jsonl")


def test_records_read_back_must_be_the_rows_records(tmp_path: Path) -> None:
    path = _write(tmp_path / "journal.jsonl", [_trial(0), _trial(1)])
    rows = read_trial_rows(path).rows
    path.write_bytes(b"".join(sorted(path.read_bytes().splitlines(keepends=True), reverse=True)))
    with pytest.raises(JournalError, match="changed while it was read"):
        read_records_at(path, rows)


# ------------------------------------------------------------------ torn tail from the end


def _reference_torn_start(data: bytes) -> int | None:
    """The whole-file rule the journal used before reading only its end."""
    if data and not data.endswith(b"\n"):
        return data.rfind(b"\n") + 1
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        line = data[start : end - 1]
        if line.strip():
            try:
                json.loads(line)
            except ValueError:
                return start
            return None
        end = start
    return None


line_pieces = st.sampled_from(
    [b'{"a": 1}', b"[1, 2]", b"", b"   ", b"\0\0\0", b"{oops", b'"x"', b'{"long": "' + b"y" * 70 + b'"}', b"\t"]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(line_pieces, max_size=8),
    newline_at_end=st.booleans(),
    window=st.sampled_from([1, 2, 5, 16, 1 << 16]),
)
def test_torn_tail_from_the_end_matches_the_whole_file_rule(
    tmp_path: Path, lines: list[bytes], newline_at_end: bool, window: int
) -> None:
    data = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    path = tmp_path / f"tail-{next(_COUNTER)}"
    path.write_bytes(data)
    original = journal_mod._TAIL
    journal_mod._TAIL = window  # not the monkeypatch fixture: it would span all examples
    try:
        with open(path, "rb", buffering=0) as handle:
            got = journal_mod._torn_tail_offset(handle, len(data))
    finally:
        journal_mod._TAIL = original
    assert got == _reference_torn_start(data)


@pytest.mark.usefixtures("sizes")
def test_repair_and_append_guard_with_a_last_line_longer_than_the_window(tmp_path: Path) -> None:
    path = _write(tmp_path / "journal.jsonl", [_event(), _trial(0)])
    good = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(_trial(1).model_dump_json().encode()[:-3])  # torn: no end, no newline
    with pytest.raises(JournalError, match="torn line"):
        Journal(path)
    assert repair_torn_tail(path) is True
    assert path.read_bytes() == good
    assert repair_torn_tail(path) is False
    Journal(path).close()


# ------------------------------------------------------------------ the report from disk


def _run_with_everything(tmp_path: Path) -> Path:
    manifest, records = synthetic_run(replicates=4, baseline=ALL_OFF)
    past_plan = len(manifest.plan)  # a hunt journals trials past its first wave (all plan.json holds)
    extra = [
        records[5].model_copy(
            update={
                "status": "interrupted",
                "attempt": 3,
                "failure": Failure(kind="interrupted", error="Interrupted", message="^C"),
            }
        ),
        records[6].model_copy(
            update={"trial": past_plan, "cell": "bf16_index_k=odd", "levels": {"bf16_index_k": "odd"}}
        ),
    ]
    manifest = manifest.model_copy(update={"hunt": True})
    run_dir = write_run(tmp_path / manifest.run_id, manifest, [*records, *extra])
    with open(run_dir / "journal.jsonl", "ab") as handle:
        handle.write(b'{"type": "trial", "tri')  # torn tail
    return run_dir


@pytest.mark.usefixtures("sizes")
@pytest.mark.parametrize("cap", [0, 5, 1000])
def test_report_from_disk_equals_report_from_records(tmp_path: Path, cap: int) -> None:
    run_dir = _run_with_everything(tmp_path)
    trials, torn = load_trials(run_dir)
    assert torn
    expected = build_report(load_manifest(run_dir), trials, torn_tail=torn, drilldown_cap=cap)
    assert load_report(run_dir, drilldown_cap=cap) == expected
    assert expected.failures and (cap == 0 or expected.trials)


def test_report_without_a_journal(tmp_path: Path) -> None:
    manifest, _ = synthetic_run(replicates=1)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(manifest.model_dump_json())
    report = load_report(run_dir)
    assert report == build_report(manifest, [])
    assert report.completed == 0 and report.trials == []


def test_headline_reads_failures_from_rows_or_records() -> None:
    manifest, records = synthetic_run(replicates=2, baseline=ALL_OFF)
    report = build_report(manifest, records)
    failed = [r for r in records if r.status != "completed"]
    rows = [TrialRow.of(r, i) for i, r in enumerate(failed)]
    assert headline(report, failed) == headline(report, rows) == report.headline
    assert "1 infrastructure, 1 workload" in report.headline[-1].text


# ------------------------------------------------------------------ the benchmarks still run


@pytest.mark.process
@pytest.mark.parametrize(
    "script, figures",
    [
        ("bench_journal.py", ["statuses:", "resume:"]),
        ("bench_report.py", ["in memory:", "from disk, write_report:"]),
    ],
)
def test_benchmark_prints_its_figures_in_a_tiny_run(repo: Path, script: str, figures: list[str]) -> None:
    """Tiny runs only check that the script works and its answers are right; no speed here."""
    out = subprocess.run(
        [sys.executable, str(repo / "bench" / script), "--trials", "40"],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    for figure in figures:
        line = next(line for line in out.splitlines() if figure in line)
        assert "WRONG" not in line and "peak RSS" in line
    assert "load average" in out


def test_gc_paused_restores_the_collector_as_it_was() -> None:
    import gc

    from orchestrator.store.journal import gc_paused

    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # someone else's choice is kept
    finally:
        gc.enable()


def test_fast_schema_follows_the_records_it_reads() -> None:
    """The fast readers restate a few types of records.py; they must not drift apart."""
    from typing import get_args

    assert get_args(journal_mod._FailureKind) == get_args(Failure.model_fields["kind"].annotation)
    assert TrialRecord.model_fields["attempt"].default == 1  # the fast readers' default
    read = set(journal_mod._RowFields.__annotations__) - {"type", "schema_version", "failure", "metrics"}
    assert read <= set(TrialRecord.model_fields)
    assert set(journal_mod._MetricFields.__annotations__) <= set(MetricValue.model_fields)


# ------------------------------------------------------------------ the status index (resume's cache)


def _only_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every journal line unreadable to trial_statuses: only the index can answer."""
    import re

    monkeypatch.setattr(journal_mod, "_TRIAL_START", re.compile(rb"(?!x)x"))

    def refuse(path: Path, number: int, line: bytes) -> None:
        raise AssertionError(f"line {number} was read, the index should have answered")

    monkeypatch.setattr(journal_mod, "_status_of", refuse)


def _mixed_records() -> list[TrialRecord | EventRecord]:
    return [
        _event(),
        _trial(0, "failed"),
        _trial(0, attempt=2),
        _trial(1, "interrupted"),
        _event("run_resumed"),
        _trial(2),
        _trial(3, "failed"),
    ]


def test_index_answers_without_reading_the_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "journal.jsonl", _mixed_records())
    expected = _expected_statuses(path)
    assert journal_mod.index_path(path).stat().st_size == 7 * journal_mod._INDEX_ENTRY.size
    _only_the_index(monkeypatch)
    assert trial_statuses(path) == expected == TrialStatuses(frozenset({0, 2, 3}), frozenset({1}), False)


def test_reopened_journal_keeps_its_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "journal.jsonl", _mixed_records()[:3])
    with Journal(path) as journal:  # what resume does
        for record in _mixed_records()[3:]:
            journal.append(record)
    expected = _expected_statuses(path)
    _only_the_index(monkeypatch)
    assert trial_statuses(path) == expected


def _set_mtimes(path: Path, index_newer: bool) -> None:
    index = journal_mod.index_path(path)
    j = path.stat().st_mtime_ns
    os.utime(index, ns=(j + 10**9, j + 10**9) if index_newer else (j - 10**9, j - 10**9))


@pytest.mark.parametrize(
    "case",
    [
        "kill-between-writes",
        "index-behind-but-newer",
        "index-ahead-of-journal",
        "entries-swapped",
        "index-torn",
        "index-garbage",
        "no-index",
    ],
)
def test_index_that_does_not_fit_the_journal_is_not_believed(tmp_path: Path, case: str) -> None:
    """Every way the cache can disagree with the journal: the answer stays read_journal's."""
    path = _write(tmp_path / "journal.jsonl", _mixed_records())
    index = journal_mod.index_path(path)
    size = journal_mod._INDEX_ENTRY.size
    entries = index.read_bytes()
    if case in ("kill-between-writes", "index-behind-but-newer"):  # a line the index never saw
        with open(path, "ab") as handle:
            handle.write((_trial(4, "failed").model_dump_json() + "\n").encode())
        _set_mtimes(path, index_newer=case == "index-behind-but-newer")
    elif case == "index-ahead-of-journal":  # the journal lost its last line (e.g. hand-edited)
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(b"\n".join(lines[:-2] + [b""]))
        _set_mtimes(path, index_newer=True)
    elif case == "entries-swapped":
        index.write_bytes(entries[size : 2 * size] + entries[:size] + entries[2 * size :])
        _set_mtimes(path, index_newer=True)
    elif case == "index-torn":
        index.write_bytes(entries[:-5])
        _set_mtimes(path, index_newer=True)
    elif case == "index-garbage":
        index.write_bytes(os.urandom(len(entries)))
        _set_mtimes(path, index_newer=True)
    else:
        index.unlink()
    assert trial_statuses(path) == _expected_statuses(path)


def _statuses_within(path: Path, seconds: float) -> TrialStatuses:
    """trial_statuses(path) in a thread: a FIFO as index blocked open() for ever (resume, orch
    status and every status page hung). A thread still blocked is released by opening the FIFO
    for writing, and the test fails."""
    import threading

    got: list[TrialStatuses] = []
    worker = threading.Thread(target=lambda: got.append(trial_statuses(path)), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        index = journal_mod.index_path(path)
        os.close(os.open(index, os.O_WRONLY | os.O_NONBLOCK))  # the reader's open() returns
        worker.join(seconds)
        raise AssertionError(f"trial_statuses blocked on {index.name} for {seconds} s")
    return got[0]


def test_an_index_that_is_a_fifo_or_huge_is_not_read_and_resume_reads_the_journal(tmp_path: Path) -> None:
    """The index is a cache in a folder users copy and edit: one that is not a regular file of a
    size the journal could need (a FIFO, 512 MiB) is ignored, never opened blocking or read whole."""
    import tracemalloc

    path = _write(tmp_path / "journal.jsonl", _mixed_records())
    expected = _expected_statuses(path)
    index = journal_mod.index_path(path)
    index.unlink()
    os.mkfifo(index)
    _set_mtimes(path, index_newer=True)
    assert _statuses_within(path, 5) == expected
    with Journal(path) as journal:  # resume's reopening rebuilds the index instead of blocking on it
        journal.append(_trial(4))
    assert index.is_file() and trial_statuses(path) == _expected_statuses(path)
    expected = _expected_statuses(path)
    index.unlink()
    with open(index, "wb") as f:
        f.truncate(512 << 20)  # sparse
    _set_mtimes(path, index_newer=True)
    tracemalloc.start()
    try:
        assert trial_statuses(path) == expected
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak:,} bytes allocated to read a journal of {path.stat().st_size:,} bytes"


def test_index_is_dropped_when_it_cannot_be_written_or_does_not_cover_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    with Journal(path) as journal:
        journal.append(_trial(0))
        os.close(journal._index)  # type: ignore[arg-type]  # the next index write fails
        journal.append(_trial(1, "failed"))
        assert journal._index is None
    assert not journal_mod.index_path(path).exists()
    assert trial_statuses(path) == TrialStatuses(frozenset({0, 1}), frozenset(), False)
    with Journal(path) as journal:  # resume: the index is rebuilt from the journal, then kept
        journal.append(_trial(2))
    assert journal_mod.index_path(path).stat().st_size == 3 * journal_mod._INDEX_ENTRY.size
    assert trial_statuses(path) == _expected_statuses(path)


def test_rebuilt_index_answers_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "journal.jsonl", _mixed_records())
    written = journal_mod.index_path(path).read_bytes()
    journal_mod.index_path(path).unlink()
    journal_mod.write_index(path)
    assert journal_mod.index_path(path).read_bytes() == written  # the same bytes append wrote
    expected = _expected_statuses(path)
    _only_the_index(monkeypatch)
    assert trial_statuses(path) == expected


def test_no_index_is_built_over_blank_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "journal.jsonl", _mixed_records()[:2], extra=b"\n")
    journal_mod.index_path(path).unlink()
    journal_mod.write_index(path)
    assert not journal_mod.index_path(path).exists()
    assert trial_statuses(path) == _expected_statuses(path)
