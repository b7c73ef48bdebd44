"""`orch export/compare -o TARGET` respects what TARGET already is.

The one atomic writer used to rename a temp file over any user-given name: `-o /dev/stdout`
replaced the machine's /dev/stdout link with a regular file, `-o -` made a file named `-`, and a
symlink was swapped for a file while its target kept the old data. Devices are never named here:
a FIFO and symlinks made under tmp_path stand in for them, and `-` is checked through capsys.
"""

from __future__ import annotations

import io
import os
import stat
import threading
from pathlib import Path

import pandas as pd
import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli.main import main
from orchestrator.errors import JournalError
from orchestrator.store.atomic import write_bytes_atomic


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    manifest, records = synthetic_run(replicates=1)
    return write_run(tmp_path / "reports" / manifest.run_id, manifest, records)


@pytest.fixture
def other_run(tmp_path: Path) -> Path:
    """A second run of the same matrix: what `orch compare` sets run_dir against (a run compared
    with itself is refused)."""
    manifest, records = synthetic_run(replicates=1, seed=2, run_id="20260510-070000-overlap_ablation")
    return write_run(tmp_path / "reports" / manifest.run_id, manifest, records)


def expected_csv(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["export", str(run_dir), "--format", "csv"]) == 0
    capsys.readouterr()
    return next(run_dir.glob("*.csv")).read_text()


def test_dash_is_stdout_for_export(run_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    want = expected_csv(run_dir, capsys)
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(run_dir), "--format", "csv", "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out == want  # the data alone: the "exported:" line went to stderr
    assert "exported: stdout" in captured.err
    assert not (tmp_path / "-").exists()
    assert len(pd.read_csv(io.StringIO(captured.out))) > 0


@pytest.mark.parametrize(("fmt", "start"), [("json", "["), ("junit", "<?xml"), ("bencher", "{")])
def test_dash_is_stdout_for_every_format(run_dir: Path, fmt: str, start: str, capsys) -> None:
    assert main(["export", str(run_dir), "--format", fmt, "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(start) and "exported:" not in captured.out
    assert not Path("-").exists()


def test_dot_slash_dash_is_a_file_named_dash(run_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    want = expected_csv(run_dir, capsys)
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(run_dir), "--format", "csv", "-o", "./-"]) == 0
    assert capsys.readouterr().out.startswith("exported: ")
    assert (tmp_path / "-").read_text() == want


def test_dash_is_stdout_for_compare(run_dir: Path, other_run: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["compare", str(run_dir), str(other_run), "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out.lstrip().lower().startswith("<!doctype html") and captured.out.rstrip().endswith("</html>")
    assert "comparison: stdout" in captured.err
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("command", ["export", "compare"])
def test_a_symlink_is_followed_and_stays_a_link(
    run_dir: Path, other_run: Path, tmp_path: Path, capsys, command: str
) -> None:
    real_dir = tmp_path / "elsewhere"
    real_dir.mkdir()
    suffix = ".csv" if command == "export" else ".html"  # an output replaces only a file named as one
    real = real_dir / f"real{suffix}"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / f"link{suffix}"
    link.symlink_to(real)
    argv = (
        ["export", str(run_dir), "--format", "csv"]
        if command == "export"
        else ["compare", str(run_dir), str(other_run)]
    )
    assert main([*argv, "-o", str(link)]) == 0, capsys.readouterr().err
    assert link.is_symlink() and os.readlink(link) == str(real)
    text = real.read_text()
    assert text != "old\n" and (text.startswith("run_id,") if command == "export" else "</html>" in text)
    assert [p.name for p in real_dir.iterdir()] == [real.name]  # no temp file left beside it
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_dangling_symlink_creates_its_target(run_dir: Path, tmp_path: Path, capsys) -> None:
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "made.csv")
    assert main(["export", str(run_dir), "--format", "csv", "-o", str(link)]) == 0, capsys.readouterr().err
    assert link.is_symlink() and (tmp_path / "made.csv").read_text().startswith("run_id,")


def read_fifo(fifo: Path, got: list[bytes]) -> threading.Thread:
    def reader() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(30)
def test_a_fifo_is_written_in_place(run_dir: Path, tmp_path: Path, capsys) -> None:
    want = expected_csv(run_dir, capsys)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "stdout"  # a /dev/stdout-like link to the FIFO: neither may be replaced
    link.symlink_to(fifo)
    for target in (fifo, link):
        got: list[bytes] = []
        thread = read_fifo(fifo, got)
        assert main(["export", str(run_dir), "--format", "csv", "-o", str(target)]) == 0, capsys.readouterr().err
        thread.join(10)
        assert got == [want.encode()]
        assert stat.S_ISFIFO(os.stat(fifo).st_mode) and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "reports", "stdout"]


@pytest.mark.parametrize("command", ["export", "compare"])
def test_a_folder_is_refused(run_dir: Path, other_run: Path, tmp_path: Path, capsys, command: str) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    link = tmp_path / "to-folder"
    link.symlink_to(folder)
    argv = ["export", str(run_dir)] if command == "export" else ["compare", str(run_dir), str(other_run)]
    for target in (folder, link):
        code = main([*argv, "-o", str(target)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert f"--output {target}: is a folder" in " ".join(err.split())
        assert "Traceback" not in err
        assert list(folder.iterdir()) == [] and link.is_symlink()


def test_the_writer_never_replaces_a_special_file_a_user_named(tmp_path: Path) -> None:
    """The store layer itself: a folder raises, a FIFO a user named is written in place."""
    with pytest.raises(JournalError, match="this path is a directory"):
        write_bytes_atomic(tmp_path, b"x", user_path=True)
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    got: list[bytes] = []
    thread = read_fifo(fifo, got)
    write_bytes_atomic(fifo, b"data\n", user_path=True)
    thread.join(10)
    assert got == [b"data\n"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_orchs_own_files_are_replaced_by_name_never_followed_or_waited_on(tmp_path: Path) -> None:
    """A FIFO or a symlink planted where orch keeps its own file (a run folder): replaced by a
    regular file, so no write waits on a reader nor lands outside the folder."""
    fifo, outside, link = tmp_path / "status.json", tmp_path / "outside.txt", tmp_path / "run.json"
    os.mkfifo(fifo)
    outside.write_text("kept")
    link.symlink_to(outside)
    write_bytes_atomic(fifo, b"{}")
    write_bytes_atomic(link, b"{}")
    assert fifo.read_bytes() == b"{}" and not stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert not link.is_symlink() and link.read_bytes() == b"{}" and outside.read_text() == "kept"


@pytest.mark.parametrize(
    ("name", "argv", "ask"),
    [("t.parquet", [], "parquet"), ("t.csv", ["--format", "json"], "csv"), ("j.xml", ["--format", "bencher"], "junit")],
)
def test_an_output_named_for_another_format_is_refused(
    run_dir: Path, tmp_path: Path, capsys, name: str, argv: list[str], ask: str
) -> None:
    """`orch export RUN -o t.parquet` wrote CSV (the default format) under a parquet name, exit 0."""
    assert main(["export", str(run_dir), *argv, "-o", str(tmp_path / name)]) == 2
    assert f"(add --format {ask}, or name the file for" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / name).exists()
    assert main(["export", str(run_dir), "--format", "bencher", "-o", str(tmp_path / "b.json")]) == 0


class _ClosedPipe(io.StringIO):
    """A stdout whose reader went away (`orch export R -o - | head`): every byte write fails."""

    class _Buffer(io.BytesIO):
        def write(self, data: object) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    def __init__(self) -> None:
        super().__init__()
        self.buffer = self._Buffer()


@pytest.mark.parametrize("fmt", ["csv", "json", "junit"])
def test_export_to_a_closed_pipe_ends_quietly_with_141(run_dir: Path, fmt: str, monkeypatch, capsys) -> None:
    """README's exit codes: 141 when the output's reader went away, quietly. `-o - | head` ended
    with exit 2 and "error: --output -: cannot write the export: Broken pipe" (bad input)."""
    import orchestrator.cli.console as console

    monkeypatch.setattr(console, "stdout_closed", lambda: console.EXIT_PIPE_CLOSED)  # no dup2 under pytest
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    assert main(["export", str(run_dir), "--format", fmt, "-o", "-"]) == 141
    assert "error" not in capsys.readouterr().err
