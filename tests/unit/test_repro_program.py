"""A repro run on the controller whose program this machine lacks is refused before any host is
touched (found by the new-user walk: `/opt/nothere/repro.sh` passed validate and the dry run, and
`orch run` restarted each cell's units only to fail every trial). `orch run`, its dry run and `orch
hunt` refuse it at the command's line, exit 2; `orch validate` does not (it may run elsewhere)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.cli import main as cli
from orchestrator.sweep.prepare import _program


def _orch(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, " ".join((captured.out + captured.err).split())


def _matrix(command: str, warmup: str | None = None) -> str:
    """fake_matrix's sweep with its repro run here, on the controller."""
    text = fake_matrix("prog", 1).replace("  on: prefill\n", "")
    text = text.replace('command: "fake-repro --trial {trial}"', f"command: {command!r}")
    return text.replace("repro:\n", f"repro:\n  warmup: {warmup!r}\n") if warmup else text


@pytest.mark.parametrize(
    ("command", "warmup", "program", "key"),
    [
        ("/opt/nothere/repro.sh --sessions 8", None, "/opt/nothere/repro.sh", "repro.command"),
        ("FOO=1 nothere-bench-xyz --x", None, "nothere-bench-xyz", "repro.command"),
        ("{python} -c pass", "/opt/nothere/warm.sh", "/opt/nothere/warm.sh", "repro.warmup"),
    ],
)
def test_a_repro_program_this_machine_lacks_is_refused_before_any_host_is_touched(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    warmup: str | None,
    program: str,
    key: str,
) -> None:
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, _matrix(command, warmup), ["A"])
    line = next(
        n for n, text in enumerate(m.read_text().splitlines(), 1) if text.lstrip().startswith(key.split(".")[1])
    )
    argv = ["run", str(m), "-i", str(i), "--out", str(tmp_path / "reports")]
    for args in ([*argv, "--dry-run"], argv):
        code, said = _orch(args, capsys)
        assert code == 2, said
        assert f"m.yaml:{line}: {key}: {program}: no such program on this machine" in said
        assert "nothing was changed" not in said
    assert not (tmp_path / "reports").exists()
    assert all(t.calls == [] for t in fleet.transports.values())  # no host was touched
    code, said = _orch(["validate", str(m), "-i", str(i)], capsys)
    assert code == 0, said  # validate may run on another machine than the one that runs the sweep


def test_a_file_that_is_no_program_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install(monkeypatch, Fleet({"prefill": "P=0\n", "decode": "D=0\n"}))
    notes = tmp_path / "notes.txt"
    notes.write_text("not a program\n")
    notes.chmod(0o644)
    m, i = write_files(tmp_path, _matrix(f"{notes} --x"), ["A"])
    code, said = _orch(["run", str(m), "-i", str(i), "--out", str(tmp_path / "r"), "--dry-run"], capsys)
    assert code == 2 and f"{notes}: no such program on this machine" in said, said


def test_a_program_this_machine_has_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install(monkeypatch, Fleet({"prefill": "P=0\n", "decode": "D=0\n"}))
    for command in ("{python} -c pass", "sh -c true", "cd /tmp && ./nothere.sh", "$HOME/bench.sh"):
        m, i = write_files(tmp_path, _matrix(command), ["A"])
        code, said = _orch(["run", str(m), "-i", str(i), "--out", str(tmp_path / "r"), "--dry-run"], capsys)
        assert code == 0 and "nothing was changed" in said, (command, said)


@pytest.mark.parametrize(
    ("command", "program"),
    [
        ("/opt/x/run.sh --a 1", "/opt/x/run.sh"),
        ("A=1 B='x y' bench --n 3", "bench"),
        ('"/opt/with space/run" -v', "/opt/with space/run"),
        ("cd /tmp && ./x", None),  # a builtin first: the shell decides
        ("exec /opt/x", None),
        ("./run.sh", None),  # relative to the run folder the repro runs in
        ("$HOME/run.sh", None),
        ("(cd /x; run)", None),
        ("unbalanced 'quote", None),
        ("A=1", None),
    ],
)
def test_the_program_of_a_command(command: str, program: str | None) -> None:
    assert _program(command) == program
