"""Hostile input the config corpus (tests/test_config.py) does not cover: path traversal in run
ids and run directories, an output path full of shell metacharacters, and env values with shell
metacharacters, which must reach the live process verbatim (both env-file dialects) and never
be executed anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.core.records import RUN_ID
from orchestrator.store.manifest import new_run_id

from .helpers import (
    REPRO,
    SimBed,
    assert_clean,
    assert_no_traceback,
    by_trial,
    error_lines,
    make_simbed,
    matrix_yaml,
    run_cli,
)

pytestmark = pytest.mark.sim

NASTY = "a b;$(touch PWNED) `touch PWNED` \"dq\" 'sq' \\back $HOME #hash && | * ~ % {x}"
NOTE = f"""\
  note:
    levels:
      plain: {{decode: {{SIM_NOTE: plain}}}}
      nasty: {{decode: {{SIM_NOTE: {json.dumps(NASTY)}}}}}
"""
SHELL_DECODE = '# decode flags, sourced by a wrapper\nSIM_WARMUP_S=0.1\nexport SIM_SEED=7\nSGLANG_EXTRA_ARGS=""\n'


@pytest.mark.parametrize("dialect", ["systemd", "shell"])
def test_metacharacter_values_and_out_path_are_taken_verbatim(tmp_path: Path, dialect: str, capsys) -> None:
    bed = make_simbed(
        tmp_path / "bed", env_files={"decode": SHELL_DECODE} if dialect == "shell" else None, decode_dialect=dialect
    )
    # the placeholders are shell-quoted: the repro finds its folders whatever their names
    command = REPRO + " && test -d {trial_dir} && test -f {run_dir}/run.json"
    bed.write_matrix(
        matrix_yaml(replicates=1, extra_factor=NOTE, command=command, extra="exclude:\n  - {cuda_graph: off}\n")
    )
    out = bed.root / "re ports;$(touch PWNED)'\"`touch PWNED`"
    done = run_cli(["run", str(bed.matrix), "-i", str(bed.inventory), "--out", str(out), "--run-id", "m"], capsys)
    assert done.code == 0, done.output
    trials = by_trial(out / "m")
    assert len(trials) == 4
    # completed = the live decode process was verified to hold exactly the cell's value
    assert all(t.status == "completed" for t in trials.values()), [t.failure for t in trials.values()]
    assert {t.env["decode"]["SIM_NOTE"] for t in trials.values()} == {"plain", NASTY}
    pwned = [p for p in (bed.root.rglob("PWNED*"))] + [p for p in (Path.cwd() / "PWNED",) if p.exists()]
    assert not pwned, f"a value or path was executed: {pwned}"
    assert_clean(bed)


@pytest.mark.parametrize(
    "run_id", ["../escape", "a/b", "..", ".hidden", "-rf", "x;touch PWNED", "a b", "a\nb", "x" * 101, "", "réport"]
)
def test_unsafe_run_ids_are_refused_before_anything(bed: SimBed, run_id: str, capsys) -> None:
    done = run_cli(
        ["run", str(bed.matrix), "-i", str(bed.inventory), "--out", str(bed.reports), f"--run-id={run_id}"], capsys
    )
    assert done.code == 2, done.output
    assert_no_traceback(done.output)
    [line] = error_lines(done.output)
    assert "invalid run id" in line
    assert not bed.reports.exists() and not (bed.root / "escape").exists()
    assert_clean(bed)


@pytest.mark.parametrize("command", ["resume", "restore", "report"])
@pytest.mark.parametrize("where", ["../..", "/etc", "{root}", "{root}/m.yaml", "{root}/missing"])
def test_commands_on_a_path_that_is_not_a_run_directory(bed: SimBed, command: str, where: str, capsys) -> None:
    done = run_cli([command, where.format(root=bed.root)], capsys)
    assert done.code == 2, done.output
    assert_no_traceback(done.output)
    [line] = error_lines(done.output)
    assert "not a run directory" in line
    assert_clean(bed)


@pytest.mark.parametrize("name", ["../../etc/evil", "..", "/abs/path", "a b;$(x)", "-", "....", "\u202ertl"])
def test_default_run_ids_from_hostile_matrix_names_stay_inside_the_reports_folder(tmp_path: Path, name: str) -> None:
    run_id = new_run_id(name, tmp_path)
    assert RUN_ID.fullmatch(run_id) and ".." not in run_id
    assert (tmp_path / run_id).resolve().parent == tmp_path.resolve()
