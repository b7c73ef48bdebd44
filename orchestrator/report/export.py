"""`orch export RUN --format csv|parquet|json`: a tidy table of a run, one row per trial and metric.

Tidy (one observation per row) so a team can load it into pandas, a notebook or a spreadsheet and
pool runs without reading orch's journal format. Failed trials appear once, with no metric, so
they are never mistaken for data and never silently dropped either; a server or GPU reading lost in
a completed trial is its `<prefix>.missing` row, with no value and why in `failure`.

Factor levels are columns of their own namespace, `factor.<name>`: a factor may be called
`value`, `metric` or `status`, and must neither overwrite a fixed column (CSV) nor duplicate
one (parquet and JSON refuse duplicate columns). Failure messages are masked like the report.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from orchestrator.core.records import RunManifest, TrialRecord, lost_reading
from orchestrator.errors import JournalError, UsageError
from orchestrator.store.atomic import is_stdout, write_bytes_atomic, write_chunks_atomic
from orchestrator.store.rundir import RunDir

if TYPE_CHECKING:
    from orchestrator.store.journal import TrialRow

Format = Literal["csv", "parquet", "json"]
COLUMNS = [
    "run_id",
    "trial",
    "round",
    "cell",
    "is_baseline",
    "testbed",
    "status",
    "attempt",
    "started",
    "duration_s",
    "metric",
    "kind",
    "k",
    "n",
    "value",
    "unit",
    "failure",
]


FACTOR_PREFIX = "factor."
NO_TRIALS = "the run has no finished trial"


def factor_column(name: str) -> str:
    """The export column of a factor's level (its own namespace: see the module doc)."""
    return FACTOR_PREFIX + name


def tidy(manifest: RunManifest, trials: Sequence[TrialRecord]) -> pd.DataFrame:
    """PURE: the run as rows; factor levels as one column per factor, `factor.<name>`."""
    factors = list(manifest.factors)
    columns = [factor_column(f) for f in factors]
    redact_text = manifest.redactor.text
    rows = []
    for t in trials:
        base = {
            "run_id": t.run_id,
            "trial": t.trial,
            "round": t.round,
            "cell": t.cell,
            "is_baseline": t.is_baseline,
            "testbed": t.testbed,
            "status": t.status,
            "attempt": t.attempt,
            "started": t.started,
            "duration_s": t.duration_s,
            "failure": redact_text(t.failure.message) if t.failure else None,
            **{c: t.levels.get(f) for c, f in zip(columns, factors, strict=True)},
        }
        if t.status != "completed" or not t.metrics:
            rows.append({**base, "metric": None, "kind": None, "k": None, "n": None, "value": None, "unit": None})
            continue
        for name, m in t.metrics.items():
            value = m.rate if m.kind == "proportion" else m.value
            # a lost reading's reason (core.records.lost_reading) goes to `failure`, masked like a
            # failure: in `unit` it read as the metric's unit ("GET http://...: connection refused")
            unit, why = (None, redact_text(m.unit)) if lost_reading(name) else (m.unit, base["failure"])
            row = {**base, "metric": name, "kind": m.kind, "k": m.k, "n": m.n, "value": value, "unit": unit}
            rows.append({**row, "failure": why})
    frame = pd.DataFrame(rows, columns=[*COLUMNS[:4], *columns, *COLUMNS[4:]])
    return frame.astype({"k": "Int64", "n": "Int64", "value": "Float64"})


def write_export(frame: pd.DataFrame, path: Path, fmt: Format) -> Path:
    """Write the table all or nothing (a spreadsheet or a notebook may be reading the old one)."""
    return write_bytes_atomic(path, export_bytes(frame, fmt), what="cannot write the export", user_path=True)


def export_bytes(frame: pd.DataFrame, fmt: Format) -> bytes:
    if fmt == "csv":
        return frame.to_csv(index=False).encode("utf-8")
    if fmt == "json":
        return frame.to_json(orient="records", lines=False, indent=1).encode("utf-8")
    _pyarrow()
    data: bytes = frame.to_parquet(index=False)
    return data


def check_output(out: Path) -> None:
    """A user's --output is checked before any work: `-` (stdout); an existing FIFO or device
    that can be opened for writing; or a file (a symlink's real file) in an existing writable
    folder, not a folder itself. Each mistake is a usage error (exit 2) that says how to fix it."""
    if is_stdout(out):
        return
    if out.is_dir():
        raise UsageError(f"--output {out}: is a folder", hint=f"name a file, e.g. {out / 'run.csv'}")
    if out.exists() and not out.is_file():
        _check_special(out)
        return
    real = Path(os.path.realpath(out))  # a symlink: its real file is replaced, the link stays
    named = f"{out} (a link to {real})" if out.is_symlink() else str(out)
    parent = real.parent
    if not parent.exists():
        raise UsageError(f"--output {named}: folder {parent} does not exist", hint=f"create it: mkdir -p {parent}")
    if not parent.is_dir():
        raise UsageError(f"--output {named}: {parent} is not a folder", hint="name a file inside a folder")
    if not os.access(parent, os.W_OK | os.X_OK) or (real.exists() and not os.access(real, os.W_OK)):
        raise UsageError(f"--output {named}: not writable", hint="pick a folder you can write to")


def _check_special(out: Path) -> None:
    """An existing non-regular target is written in place (never replaced): it must take writes."""
    if out.is_socket():
        raise UsageError(f"--output {out}: is a socket, not a file", hint="name a file, or - for stdout")
    if not os.access(out, os.W_OK):
        raise UsageError(f"--output {out}: not writable", hint="name a file you can write, or - for stdout")


def check_stdout_format(out: Path | None, fmt: str) -> None:
    """Binary parquet is refused on a terminal (it would fill the screen with bytes)."""
    if out is not None and fmt == "parquet" and is_stdout(out) and sys.stdout.isatty():
        raise UsageError("--output -: parquet is binary, not for a terminal", hint="pipe it, or name a file")


EXPORT_CHUNK = 1000  # trials whose full records are held at once (a few MB), however long the run


# run.json says `running` until the sweep's end is recorded, after its last trial and restore
# (sweep.api._finish); `stale`: its controller died (store.liveness)
NOT_ENDED = frozenset({"running", "stale"})


def not_ended(status: str) -> str | None:
    """The warning for an export of a run that has not ended (its controller running, or dead and
    not restored): every export says it, as a table of part of a run reads as the whole run."""
    if status not in NOT_ENDED:
        return None
    return f"the run has not ended (status {status}): the file holds its trials so far"


def export_run(run_dir: Path, fmt: Format, out: Path | None = None, warn: Callable[[str], None] | None = None) -> Path:
    """Export the run: each trial's record as store.runtrials chooses it (the report's choice),
    read as compact rows, the full records fetched EXPORT_CHUNK trials at a time and written as
    they come (parquet: a row group every ROW_GROUP_ROWS rows). A damaged journal is refused
    (exit 2) before anything is written. `warn` hears of a run with no trial: its file has no row,
    and the terminal said only 'exported: ...', exit 0, as if it held the run's data."""
    from orchestrator.store.manifest import load_manifest
    from orchestrator.store.runtrials import read_run_rows, trial_rows

    if out is not None:
        check_output(out)
        check_stdout_format(out, fmt)
    manifest = load_manifest(run_dir)
    chosen = trial_rows(read_run_rows(run_dir, manifest).rows)
    if warn is not None and (said := not_ended(manifest.status)):
        warn(said)
    if not chosen and warn is not None:
        warn(f"{NO_TRIALS}: the {fmt} file has no row")
    frames = _frames(manifest, RunDir(run_dir).journal, chosen)
    target = RunDir(run_dir).export(manifest.run_id, fmt) if out is None else out
    chunks = _parquet(frames, _filled(manifest, chosen)) if fmt == "parquet" else _encoded(frames, fmt)
    try:
        return write_chunks_atomic(target, chunks, what="cannot write the export", user_path=out is not None)
    except _SourceError as exc:  # the journal, not the output, failed (changed while it was read)
        raise exc.error from None
    except JournalError as exc:
        if out is None:
            raise
        # a user's path that passed the checks and still failed (/proc, full disk)
        raise UsageError(f"--output {exc.message}") from None


class _SourceError(Exception):
    """A JournalError from reading the run while the export is written (not the output's)."""

    def __init__(self, error: JournalError) -> None:
        super().__init__(error.message)
        self.error = error


def _frames(manifest: RunManifest, journal: Path, chosen: Sequence[TrialRow]) -> Iterator[pd.DataFrame]:
    """The tidy table EXPORT_CHUNK trials at a time (always at least one frame: the header)."""
    from orchestrator.store.journal import read_records_at

    if not chosen:
        yield tidy(manifest, [])
    for start in range(0, len(chosen), EXPORT_CHUNK):
        try:
            records = read_records_at(journal, chosen[start : start + EXPORT_CHUNK])
        except JournalError as exc:
            raise _SourceError(exc) from None
        yield tidy(manifest, records)


def _encoded(frames: Iterator[pd.DataFrame], fmt: Format) -> Iterator[bytes]:
    """export_bytes of the frames' concatenation, byte for byte, without holding it (CSV, JSON)."""
    first = True
    for frame in frames:
        if fmt == "csv":
            yield frame.to_csv(index=False, header=first).encode("utf-8")
            first = False
        elif len(frame):  # JSON: '[\n' + each chunk's records, joined by ',\n' + '\n]'
            body = frame.to_json(orient="records", lines=False, indent=1)[2:-2]
            yield ("[\n" if first else ",\n").encode("utf-8") + body.encode("utf-8")
            first = False
    if fmt == "json":
        yield b"[\n\n]" if first else b"\n]"


# Rows of the tidy table held for one parquet row group: 100,000 trials of three metrics make 19.
# Measured on that run, the export's peak over CSV's: 66 MB at 65,536 rows, 30 at 16,384, 35 at
# 4,096 (the file within 2% of one row group's size). A table of fewer rows is one row group: the
# file export_bytes writes.
ROW_GROUP_ROWS = 1 << 14


def _parquet(frames: Iterator[pd.DataFrame], filled: frozenset[str]) -> Iterator[bytes]:
    """The tidy table as parquet, a row group at a time (the whole table was built in memory
    before it was written: 130 MB more than CSV for 100,000 trials, growing with the run). Its
    schema is the one export_bytes gives the whole table, fixed before the first row group from
    the first frame and `filled` (the text columns with a value in some row: see _filled)."""
    pa, pq = _pyarrow()
    sink = _Sink()
    writer, held, rows = None, [], 0
    for frame in frames:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if writer is None:
            schema = _schema(pa, frame, filled)
            writer = pq.ParquetWriter(sink, schema, compression="snappy")
        held.append(table.cast(schema))
        rows += len(table)
        if rows >= ROW_GROUP_ROWS:
            writer.write_table(pa.concat_tables(held).combine_chunks(), row_group_size=rows)
            held, rows = [], 0
            yield sink.drain()
    if writer is None:  # _frames yields at least one frame; kept for the type checker
        return
    if held:
        writer.write_table(pa.concat_tables(held).combine_chunks(), row_group_size=max(rows, 1))
    writer.close()
    yield sink.drain()


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("parquet export needs pyarrow", hint="pip install 'orch[parquet]'") from None
    return pa, pq


def _schema(pa: Any, frame: pd.DataFrame, filled: frozenset[str]) -> Any:
    """The arrow schema (with pandas' metadata) of the whole table from its first frame: a text
    column is typed by pandas from its values, as text where any row has one and as null where
    none has, so a column empty in the first frame only is still text (and null where empty)."""
    if frame.empty:  # no trial: the whole table is this frame
        return pa.Schema.from_pandas(frame, preserve_index=False)
    probe = frame.head(1).copy()
    text = pd.Series(["x"]).dtype  # what pandas makes of a column of text (str, or object before pandas 3)
    for column in probe.columns:
        if probe[column].dtype == object or probe[column].dtype == text:
            probe[column] = pd.Series(["x"] if column in filled else [None], dtype=text if column in filled else object)
    return pa.Schema.from_pandas(probe, preserve_index=False)


def _filled(manifest: RunManifest, chosen: Sequence[TrialRow]) -> frozenset[str]:
    """The text columns of the tidy table with a value in some row, from the compact rows (tidy
    fills the fixed text columns in every row; a factor column where the trial has the factor,
    the metric columns for a completed trial's metrics, failure where it failed or lost a reading)."""
    if not chosen:
        return frozenset()
    filled = {"run_id", "cell", "testbed", "status", "started"}
    filled |= {factor_column(f) for f in manifest.factors if any(f in r.levels for r in chosen)}
    if any(r.status == "completed" and r.metrics for r in chosen):
        filled |= {"metric", "kind", "unit"}
    lost = any(r.status == "completed" and any(lost_reading(m.name) for m in r.metrics) for r in chosen)
    if lost or any(r.failure_kind is not None for r in chosen):
        filled.add("failure")
    return frozenset(filled)


class _Sink:
    """A write-only file for pyarrow's ParquetWriter whose bytes are taken away as they come."""

    closed = False

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._at = 0

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        self._at += len(data)
        return len(data)

    def tell(self) -> int:
        return self._at

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def drain(self) -> bytes:
        data = b"".join(self._parts)
        self._parts.clear()
        return data
