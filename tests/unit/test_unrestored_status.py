"""A run that left hosts changed says so in status.json, and every team view shows it first.

The terminal says "NOT restored: ROLES; finish with: orch restore RUN_DIR" once; before, the
status file (and so `orch status`, its --json, `orch serve`'s pages and the runs index) called
the run plain finished. Here on the fakes (helpers.parallel_bed): the whole CLI path runs, one
testbed and two, and `orch restore` finishing the job clears it. No process, no socket."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.page_text import parsed
from helpers.parallel_bed import Fleet, install
from helpers.parallel_fakes import fake_matrix, write_files

from orchestrator.cli.main import main
from orchestrator.errors import OrchError, TransportError
from orchestrator.report.render import fresh_summary
from orchestrator.report.site import index_page
from orchestrator.sweep.hosts import HostGuard
from orchestrator.team.livestatus import RestoreStatus, live_runs
from orchestrator.team.serve import runs_json

ENV = {"prefill": "P=0\n", "decode": "D=0\n"}
MATRIX = fake_matrix("left", 1)


@pytest.fixture
def fleet(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    """The fleet, and its decode hosts unreachable while `broken` names them (mid-restore)."""
    f = Fleet(ENV)
    install(monkeypatch, f)
    f.broken = set()  # type: ignore[attr-defined]
    real = HostGuard._restore_host

    def restore_host(self: HostGuard, role: str) -> None:
        if (self.deployment.testbed.name, role) in f.broken:  # type: ignore[attr-defined]
            raise TransportError(role, "ssh: connect to host: No route to host")
        real(self, role)

    monkeypatch.setattr(HostGuard, "_restore_host", restore_host)
    yield f


def orch(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    got = capsys.readouterr()
    return code, got.out, got.err


def run_leaving_decode(tmp_path: Path, fleet: Fleet, capsys: pytest.CaptureFixture[str], *names: str) -> Path:
    m, i = write_files(tmp_path, MATRIX, names)
    fleet.broken = {(names[-1], "decode")}  # type: ignore[attr-defined]
    code, out, err = orch(
        capsys, "run", str(m), "-i", str(i), "--testbed", ",".join(names),
        "--out", str(tmp_path / "reports"), "--run-id", "r1", "--seed", "1", "--skip-preflight",
    )  # fmt: skip
    assert code == 1, out + err
    assert (out + err).count("NOT restored:") == 1, "the terminal says it once"
    return tmp_path / "reports" / "r1"


def test_status_json_names_the_run_folder_whole_when_the_run_was_given_a_relative_out(
    tmp_path: Path, fleet: Fleet, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """status.json is read by the team's pages and `orch status` from any folder: its way back named
    the run as the controller had it ("orch restore reports/r1"), which fails from anywhere else."""
    monkeypatch.chdir(tmp_path)
    m, i = write_files(tmp_path, MATRIX, ("A",))
    fleet.broken = {("A", "decode")}  # type: ignore[attr-defined]
    code, out, err = orch(
        capsys, "run", str(m), "-i", str(i), "--testbed", "A",
        "--out", "reports", "--run-id", "r1", "--seed", "1", "--skip-preflight",
    )  # fmt: skip
    assert code == 1, out + err
    status = json.loads((tmp_path / "reports" / "r1" / "status.json").read_text())
    whole = tmp_path / "reports" / "r1"
    assert status["restore_with"] == f"orch restore {whole}"
    assert status["note"] == f"NOT restored: decode; finish with: orch restore {whole}"


def test_a_run_that_left_a_host_changed_says_so_in_every_view(
    tmp_path: Path, fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = run_leaving_decode(tmp_path, fleet, capsys, "A")
    assert fleet.file("A", "decode") != ENV["decode"].encode(), "the host really is left changed"
    status = json.loads((run_dir / "status.json").read_text())
    assert status["not_restored"] == ["decode"]
    assert status["restore_with"] == f"orch restore {run_dir}"
    assert status["note"] == f"NOT restored: decode; finish with: orch restore {run_dir}"

    reports = tmp_path / "reports"
    code, out, _ = orch(capsys, "status", "--reports", str(reports), "--json")
    (shown,) = json.loads(out)["runs"]
    assert shown["not_restored"] == ["decode"] and shown["restore_with"] == f"orch restore {run_dir}"
    code, out, _ = orch(capsys, "status", "--reports", str(reports))
    first = out.splitlines()[0]
    assert first == f"r1: NOT restored: decode; finish with: orch restore {run_dir}", out
    assert "NOT restored" in out.split("sweeps", 1)[1], "the table's state says it too"

    (entry,) = runs_json(reports)
    assert entry["not_restored"] == ("decode",) and entry["restore_with"] == f"orch restore {run_dir}"
    page = index_page(reports, fresh_summary)
    assert 'id="unrestored"' in page and "NOT restored: decode" in page
    assert 'id="unrestored"' in (reports / "index.html").read_text(), "the index written at the run's end"

    fleet.broken = set()  # type: ignore[attr-defined]  # the host answers again: `orch restore` finishes
    code, out, err = orch(capsys, "restore", str(run_dir))
    assert code == 0, out + err
    assert fleet.file("A", "decode") == ENV["decode"].encode()
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["not_restored"], status["restore_with"]) == ([], "")
    assert status["note"] == "restored since by orch restore: decode"
    code, out, _ = orch(capsys, "status", "--reports", str(reports))
    assert "NOT restored" not in out
    assert 'id="unrestored"' not in (reports / "index.html").read_text(), "the index rewritten by the restore"


def test_a_parallel_run_names_the_testbed_and_a_partial_restore_keeps_what_is_left(
    tmp_path: Path, fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = run_leaving_decode(tmp_path, fleet, capsys, "A", "B")
    assert json.loads((run_dir / "status.json").read_text())["not_restored"] == ["B/decode"]

    code, _, _ = orch(capsys, "restore", str(run_dir))  # B's decode still down: nothing changes
    assert code == 1
    status = json.loads((run_dir / "status.json").read_text())
    assert status["not_restored"] == ["B/decode"] and "NOT restored: B/decode" in status["note"]


def test_runs_that_left_hosts_changed_are_listed_first_however_old(tmp_path: Path) -> None:
    """`orch status` lists 5 finished runs: one that left a testbed changed is never crowded out."""
    from helpers.report_synth import synthetic_run

    from orchestrator.store.liveness import StatusFile
    from orchestrator.store.manifest import save_manifest

    reports = tmp_path / "reports"
    for n in range(8):
        manifest, _ = synthetic_run(replicates=1, failures=False, run_id=f"r{n}")
        run_dir = reports / f"r{n}"
        run_dir.mkdir(parents=True)
        save_manifest(run_dir, manifest)
        status = StatusFile(
            run_id=f"r{n}", name="m", testbed="t", host="h", pid=1, pid_start=1, state="finished",
            started=f"2026-01-0{n + 1}", updated=f"2026-01-0{n + 1}", done=1, total=1, failed=0,
            not_restored=("decode",) if n == 0 else (),
        )  # fmt: skip
        (run_dir / "status.json").write_text(status.model_dump_json())
    shown = [r.directory for r in live_runs(reports)]
    assert shown[0] == "r0" and len(shown) == 6


def test_restore_status_writes_nothing_without_a_status_file(tmp_path: Path) -> None:
    sink = RestoreStatus(tmp_path)
    sink.restore_ended(["decode"])
    assert not (tmp_path / "status.json").exists() and sink.error == ""


def test_a_restore_that_changes_nothing_leaves_the_status_file_as_the_sweep_left_it(tmp_path: Path) -> None:
    """A resume of a finished run restores nothing new: its status.json (the sweep's end, `updated`
    included) stays byte for byte (test_cli_ux's no-op resume failed whenever it crossed a second)."""
    from orchestrator.store.atomic import write_json_atomic
    from orchestrator.store.liveness import StatusFile

    status = StatusFile(
        run_id="r", name="m", testbed="t", host="h", pid=1, pid_start=1, state="finished",
        started="2026-01-01T00:00:00+00:00", updated="2026-01-01T00:01:00+00:00", done=1, total=1, failed=0,
    )  # fmt: skip
    write_json_atomic(tmp_path / "status.json", status)  # as the sweep wrote it
    before = (tmp_path / "status.json").read_bytes()
    sink = RestoreStatus(tmp_path, clock=lambda: 1_900_000_000.0)
    sink.restore_ended([])
    assert (tmp_path / "status.json").read_bytes() == before and sink.error == ""
    sink.restore_ended(["decode"])  # a restore that left a host changed says so, and when
    after = json.loads((tmp_path / "status.json").read_text())
    assert after["not_restored"] == ["decode"] and after["updated"].startswith("2030-03-17"), after


def test_a_resume_with_no_trial_left_that_restores_the_hosts_clears_it(
    tmp_path: Path, fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = run_leaving_decode(tmp_path, fleet, capsys, "A")
    fleet.broken = set()  # type: ignore[attr-defined]
    code, out, err = orch(capsys, "resume", str(run_dir))
    assert code == 0, out + err
    assert fleet.file("A", "decode") == ENV["decode"].encode()
    status = json.loads((run_dir / "status.json").read_text())
    assert status["not_restored"] == [] and status["done"] == 2, "as the run left it, but for its restore"
    assert status["note"] == "restored since by orch resume: decode"  # which command put it back


def test_the_status_page_shows_it_above_the_table(
    tmp_path: Path, fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.report.page import environment
    from orchestrator.team.livestatus import snapshot
    from orchestrator.team.serve import STATUS_TEMPLATE

    run_leaving_decode(tmp_path, fleet, capsys, "A")
    page = environment().get_template(STATUS_TEMPLATE).render(s=snapshot(tmp_path / "reports"), refresh=5, csp="")
    banner, table = page.split('<table id="live">')
    assert 'id="unrestored"' in banner and "NOT restored: decode; finish with: orch restore" in banner
    assert "NOT restored: decode" in table


# ----------------------------------------------------------------------------- the run's own page


def page_block(run_dir: Path) -> str | None:
    """The text of the run page's block naming the hosts left changed (None: no block)."""
    return parsed((run_dir / "index.html").read_text()).unrestored


def summary_left(run_dir: Path) -> list[str]:
    return list(json.loads((run_dir / "summary.json").read_text())["not_restored"])


def test_the_run_page_says_it_until_orch_restore_puts_the_hosts_back(
    tmp_path: Path, fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = run_leaving_decode(tmp_path, fleet, capsys, "A")
    block = page_block(run_dir)
    assert block is not None and f"NOT restored: decode; finish with: orch restore {run_dir}" in block
    assert summary_left(run_dir) == ["decode"]

    fleet.broken = set()  # type: ignore[attr-defined]
    code, out, err = orch(capsys, "restore", str(run_dir))
    assert code == 0, out + err
    assert page_block(run_dir) is None, "the page written again once every host is back"
    assert "NOT restored" not in (run_dir / "index.html").read_text()
    assert summary_left(run_dir) == [] and json.loads((run_dir / "summary.json").read_text())["restore_with"] == ""


def test_a_partial_restore_leaves_the_page_naming_what_is_still_changed(
    tmp_path: Path, fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    m, i = write_files(tmp_path, MATRIX, ("A", "B"))
    fleet.broken = {("A", "decode"), ("B", "decode")}  # type: ignore[attr-defined]
    code, out, err = orch(
        capsys, "run", str(m), "-i", str(i), "--testbed", "A,B",
        "--out", str(tmp_path / "reports"), "--run-id", "r1", "--seed", "1", "--skip-preflight",
    )  # fmt: skip
    assert code == 1, out + err
    run_dir = tmp_path / "reports" / "r1"
    assert summary_left(run_dir) == ["A/decode", "B/decode"]
    assert "NOT restored: A/decode, B/decode;" in str(page_block(run_dir))

    fleet.broken = {("B", "decode")}  # type: ignore[attr-defined]  # A answers again, B does not
    code, out, err = orch(capsys, "restore", str(run_dir))
    assert code == 1, out + err
    assert fleet.file("A", "decode") == ENV["decode"].encode() != fleet.file("B", "decode")
    assert summary_left(run_dir) == ["B/decode"]
    assert f"NOT restored: B/decode; finish with: orch restore {run_dir}" in str(page_block(run_dir))


@pytest.mark.parametrize("failure", [OrchError("disk full"), RuntimeError("a bug")], ids=["orch-error", "bug"])
def test_a_page_that_cannot_be_written_again_is_a_warning_not_the_restores_error(
    tmp_path: Path,
    fleet: Fleet,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    failure: Exception,
) -> None:
    from orchestrator.report import render

    run_dir = run_leaving_decode(tmp_path, fleet, capsys, "A")
    fleet.broken = set()  # type: ignore[attr-defined]

    def cannot(path: Path) -> None:
        raise failure

    monkeypatch.setattr(render, "write_report_and_summary", cannot)
    code, out, err = orch(capsys, "restore", str(run_dir))
    assert code == 0, out + err
    assert fleet.file("A", "decode") == ENV["decode"].encode()
    assert json.loads((run_dir / "status.json").read_text())["not_restored"] == []
    said = " ".join((out + err).split())
    why = "disk full" if isinstance(failure, OrchError) else "RuntimeError: a bug (a bug in orch: please report it)"
    assert f"index.html: not written again after the restore: {why}" in said
    assert f"orch report {run_dir}" in said


def test_restore_of_a_run_that_had_no_page_writes_it_as_the_runs_end_would(
    tmp_path: Path, fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run killed before its end has trials journaled and no page: the restore ends it as
    `orch run` would (sweep.api._write_report), with no block once the hosts are back."""
    run_dir = run_leaving_decode(tmp_path, fleet, capsys, "A")
    (run_dir / "index.html").unlink()
    (run_dir / "summary.json").unlink()
    fleet.broken = set()  # type: ignore[attr-defined]
    code, out, err = orch(capsys, "restore", str(run_dir))
    assert code == 0, out + err
    assert (run_dir / "index.html").is_file() and page_block(run_dir) is None
    assert summary_left(run_dir) == []
