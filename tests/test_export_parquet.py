"""`orch export --format parquet` streams row groups: the tidy table of a big run is never held
whole (it was built in memory before it was written: 130 MB over CSV's peak for 100,000 trials,
bench/bench_memory.py). What reads back is what the whole-table writer wrote.
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.report import export
from orchestrator.store import journal
from orchestrator.store.journal import read_records_at
from orchestrator.store.manifest import load_manifest
from orchestrator.store.runtrials import read_run_rows, trial_rows


def _run(tmp_path: Path) -> Path:
    """16 trials; trial 9 ends failed (its retry's record dropped), so the failure column is empty
    in the first chunks and has a value later, and trial 3's retry completed."""
    manifest, records = synthetic_run(replicates=2)
    records = [r for r in records if not (r.trial == 9 and r.status == "completed")]
    return write_run(tmp_path / "run", manifest, records, plan_json=True)


def _old_parquet(run: Path) -> bytes:
    """The writer before row groups (d0e5505): every chunk's frame concatenated, then written."""
    manifest = load_manifest(run)
    chosen = trial_rows(read_run_rows(run, manifest).rows)
    frames = export._frames(manifest, run / "journal.jsonl", chosen)
    return export.export_bytes(pd.concat(list(frames), ignore_index=True), "parquet")


@pytest.mark.parametrize(("chunk", "group"), [(4, 1 << 16), (4, 10), (3, 7), (1000, 1)])
def test_the_parquet_export_reads_back_as_the_whole_table_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, group: int
) -> None:
    run = _run(tmp_path)
    monkeypatch.setattr(export, "EXPORT_CHUNK", chunk)
    old = _old_parquet(run)
    monkeypatch.setattr(export, "ROW_GROUP_ROWS", group, raising=False)
    new = export.export_run(run, "parquet").read_bytes()
    pd.testing.assert_frame_equal(pd.read_parquet(io.BytesIO(new)), pd.read_parquet(io.BytesIO(old)), check_exact=True)
    got, was = pq.read_table(io.BytesIO(new)), pq.read_table(io.BytesIO(old))
    assert got.to_pylist() == was.to_pylist()
    assert "failure" in got.column_names and got.column("failure").null_count == len(got) - 1
    # typed as the whole table in one frame is (the old writer's types changed with the chunking:
    # a text column empty in a chunk made it `string` instead of `large_string`)
    manifest = load_manifest(run)
    records = read_records_at(run / "journal.jsonl", trial_rows(read_run_rows(run, manifest).rows))
    assert got.schema.equals(pa.Schema.from_pandas(export.tidy(manifest, records), preserve_index=False))


def test_the_parquet_export_is_written_a_row_group_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes go out while the journal is still being read, in row groups of ROW_GROUP_ROWS rows."""
    run = _run(tmp_path)
    monkeypatch.setattr(export, "EXPORT_CHUNK", 2)
    monkeypatch.setattr(export, "ROW_GROUP_ROWS", 12, raising=False)
    events: list[str] = []
    original = journal.read_records_at  # export._frames imports it where it reads

    def reading(path: Path, rows):  # type: ignore[no-untyped-def]
        events.append("read")
        return original(path, rows)

    writing = export.write_chunks_atomic

    def written(target: Path, chunks, **kwargs):  # type: ignore[no-untyped-def]
        def noted():  # type: ignore[no-untyped-def]
            for chunk in chunks:
                events.append("write")
                yield chunk

        return writing(target, noted(), **kwargs)

    monkeypatch.setattr(journal, "read_records_at", reading)
    monkeypatch.setattr(export, "write_chunks_atomic", written)
    path = export.export_run(run, "parquet")
    assert events.index("write") < len(events) - 1 - events[::-1].index("read"), events
    meta = pq.ParquetFile(path).metadata
    # frames of 2 trials (6 rows; 4 with failed trial 9), written once 12 rows or more are held
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [12, 12, 16, 6]
