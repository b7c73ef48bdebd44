"""What the CLI says to a user who mistypes, dry-runs, validates a hunt, compares unlike runs,
resumes a finished run or runs from another folder: the defects a review found, pinned (no host
is touched by any of these; the resume runs on the fakes)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
from pathlib import Path

import pytest
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli import main as cli
from orchestrator.cli.args import DEFAULT_INVENTORY, EXIT_CODES, inventory_for
from orchestrator.sweep import api

REPO = Path(__file__).resolve().parents[1]
OVERLAP = REPO / "matrices" / "overlap_ablation.yaml"
HUNT = REPO / "matrices" / "dsv4_hunt.yaml"
INVENTORY = REPO / "inventory" / "local.yaml"


def orch(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse refusing
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, " ".join(captured.err.split())


# ------------------------------------------------------------------ 2: the dry run refuses what the run refuses
@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--run-id", "../../etc"], "invalid run id '../../etc'"),
        (["--webhook", "hooks.example.com/x"], "missing https:// at the start"),
        (["--retries", "-1"], "argument --retries: -1 is not between 0 and 10"),
    ],
)
def test_a_dry_run_refuses_every_argument_the_real_run_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    argv = ["run", str(OVERLAP), "-i", str(INVENTORY), "--out", str(tmp_path), *extra]
    dry = orch([*argv, "--dry-run"], capsys)
    assert dry[0] == 2 and said in dry[2] and "nothing was changed" not in dry[1], dry
    real = orch(argv, capsys)  # refused the same way, before any host is touched
    assert real[0] == 2 and said in real[2], real
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_refuses_a_run_id_that_is_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    code, _, err = orch(
        ["run", str(OVERLAP), "-i", str(INVENTORY), "--out", str(tmp_path), "--run-id", "taken", "--dry-run"], capsys
    )
    assert code == 2 and f"{tmp_path / 'taken'} already exists" in err


def test_resume_and_run_refuse_negative_retries_alike(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["run", str(OVERLAP), "--retries", "-1"], ["resume", "reports/x", "--retries", "-1"]):
        code, _, err = orch(argv, capsys)
        assert code == 2 and "argument --retries: -1 is not between 0 and 10" in err, err


# ------------------------------------------------------------------ 4: unknown flags
def test_an_unknown_flag_gets_the_commands_usage_and_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = orch(["run", str(OVERLAP), "--dry-rn"], capsys)
    assert code == 2
    assert err.startswith("usage: orch run ") and "--dry-run" in err.split("orch run: error:")[0]
    assert "orch run: error: unrecognized arguments: --dry-rn (did you mean --dry-run?)" in err


def test_an_abbreviated_flag_is_refused_not_guessed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = orch(["run", str(OVERLAP), "--replicate", "2", "--dry-run"], capsys)
    assert code == 2 and out == ""
    assert "unrecognized arguments: --replicate 2 (--replicate: did you mean --replicates?)" in err


def test_a_nested_command_reports_its_own_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = orch(["queue", "add", str(OVERLAP), "--priorty", "3"], capsys)
    assert code == 2 and err.startswith("usage: orch queue add ") and "did you mean --priority?" in err


def test_an_option_of_another_command_is_said_to_be_one(capsys: pytest.CaptureFixture[str]) -> None:
    """From a walk: `orch queue add M --replicates 1` answered "did you mean --reports?" (queue add
    takes --replicates now: tests/team/test_queue_options.py); `orch queue list` has --reports and
    no --replicates. Where the option is exactly another command's, that is said, not a near name
    of this one."""
    code, _, err = orch(["queue", "list", "--replicates", "1"], capsys)
    assert code == 2 and err.startswith("usage: orch queue list ")
    said = " ".join(err.split("orch queue list: error:")[1].split())
    hint = "--replicates is an option of orch run, orch plan, orch queue add, not of orch queue list"
    assert said == f"unrecognized arguments: --replicates 1 ({hint})", said
    code, _, err = orch(["run", str(OVERLAP), "--json"], capsys)  # `orch status --json`
    assert code == 2 and "(--json is an option of orch status, not of orch run)" in " ".join(err.split()), err
    code, _, err = orch(["run", str(OVERLAP), "--store", "q.db"], capsys)  # six commands take it
    said = " ".join(err.split())
    assert (
        "(--store is an option of orch queue add, orch queue list, orch queue remove and 3 more, not of orch run)"
        in said
    )


def test_no_parser_allows_abbreviations() -> None:
    def walk(parser):  # type: ignore[no-untyped-def]
        yield parser
        for action in parser._actions:
            for sub in getattr(action, "choices", None) or {}:
                if isinstance(action.choices, dict):
                    yield from walk(action.choices[sub])

    parsers = list(walk(cli.build_parser()))
    assert len(parsers) > 15 and all(p.allow_abbrev is False for p in parsers)


# ------------------------------------------------------------------ 5: validate a hunt
def test_validate_of_a_hunt_says_it_is_a_hunt(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = orch(["validate", str(HUNT), "-i", str(INVENTORY)], capsys)
    flat = " ".join(out.split())
    assert code == 0 and "a hunt over 16 suspect flags" in flat and "first wave 18 trials" in flat, flat
    assert "orch plan" in flat and "cells" not in flat


# ------------------------------------------------------------------ 6: compare unlike runs
def _runs(tmp_path: Path, **b: object) -> tuple[Path, Path]:
    a_m, a_r = synthetic_run(run_id="20260509-070000-a")
    b_m, b_r = synthetic_run(run_id="20260510-070000-b", seed=2)
    b_m = b_m.model_copy(update=b)
    reports = tmp_path / "reports"
    return write_run(reports / a_m.run_id, a_m, a_r), write_run(reports / b_m.run_id, b_m, b_r)


def test_compare_of_runs_of_different_matrices_warns_and_names_both(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    a, b = _runs(tmp_path, name="other_matrix", matrix_sha256="0" * 64)
    code, out, err = orch(["compare", str(a), str(b), "-o", str(tmp_path / "c.html")], capsys)
    assert code == 0, err
    assert "of matrix 'overlap_ablation', B = 20260510-070000-b of matrix 'other_matrix'" in err
    html = (tmp_path / "c.html").read_text()
    assert re.search(r"<h1>overlap_ablation vs other_matrix: ", html), html[:2000]


def test_compare_of_runs_with_no_cell_in_common_is_refused(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    a, b = _runs(tmp_path, name="other_matrix")
    # B ran other cells: rename every cell of its trials, and of its plan (a journal whose cells are
    # not its own plan's is damage, refused before any comparison: store.runtrials)
    for name in ("journal.jsonl", "run.json"):
        (b / name).write_text(re.sub(r'"cell": ?"', '"cell": "x-', (b / name).read_text()))
    code, _, err = orch(["compare", str(a), str(b), "-o", str(tmp_path / "c.html")], capsys)
    assert code == 2 and "nothing to compare: the runs have no cell in common" in err, err
    assert "of matrix 'other_matrix'" in err and not (tmp_path / "c.html").exists()


def test_compare_of_one_matrix_warns_nothing_new(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    a, b = _runs(tmp_path)
    code, _, err = orch(["compare", str(a), str(b), "-o", str(tmp_path / "c.html")], capsys)
    assert code == 0 and "of matrix" not in err and "changed between" not in err, err


# ------------------------------------------------------------------ 7: a no-op resume keeps status.json
MATRIX = fake_matrix("done", 1)


def test_resuming_a_finished_run_keeps_its_status_json(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    install(monkeypatch, Fleet({"prefill": "P=0\n", "decode": "D=0\n"}))
    m, i = write_files(tmp_path, MATRIX, ["A"])
    req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)
    assert api.run(req, cli._live_progress, warn=lambda message: None).status == "completed"
    status = tmp_path / "reports" / "r1" / "status.json"
    before = json.loads(status.read_text())
    assert before["last"] is not None, before
    again = api.resume(api.ResumeRequest(tmp_path / "reports" / "r1"), cli._live_progress, warn=lambda m: None)
    assert again.status == "completed" and json.loads(status.read_text()) == before
    assert "all 2 trials are already done" in capsys.readouterr().out


# ------------------------------------------------------------------ 8: the default inventory
def test_the_default_inventory_is_found_beside_the_matrix_from_another_folder(tmp_path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    assert inventory_for(OVERLAP, DEFAULT_INVENTORY) == INVENTORY
    code, out, err = orch(["validate", str(OVERLAP)], capsys)
    assert code == 0 and "ok" in out, err
    given = Path("inventory/local.yaml")  # the same text, but given: used as given, never guessed
    assert inventory_for(OVERLAP, given) is given
    code, _, err = orch(["validate", str(OVERLAP), "-i", "inventory/local.yaml"], capsys)
    assert code == 2 and "inventory inventory/local.yaml not found" in err
    os.makedirs("inventory")
    (tmp_path / "inventory" / "local.yaml").write_text("")  # one in the cwd wins
    assert inventory_for(OVERLAP, DEFAULT_INVENTORY) == DEFAULT_INVENTORY


# ------------------------------------------------------------------ 9: help texts
def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_the_help_texts_fill_the_gaps(capsys: pytest.CaptureFixture[str]) -> None:
    exit_codes = (
        "Exit codes: 0 ok; 1 trials failed, the sweep stopped early, hosts not restored, a runtime fault or a "
        "hunt named no culprit set; 2 bad input, usage or a testbed another run holds (nothing touched)"
    )
    assert exit_codes in help_of([], capsys) and "3 a gate of the matrix failed; 130 interrupted" in help_of([], capsys)
    assert exit_codes in help_of(["run"], capsys)
    plan = help_of(["plan"], capsys)
    assert "--replicates REPLICATES replicate rounds" in plan and "--seed SEED seed for the randomized order" in plan
    assert "(default: csv)" in help_of(["export"], capsys)
    hunt = help_of(["hunt"], capsys)
    assert "e.g. matrices/dsv4_hunt.yaml" in hunt and "overlap_ablation" not in hunt
    assert "--seed SEED seed of the run (trial seeds; default: matrix seed or random)" in hunt
    # a hunt's own codes: a script reads "found" from 0 (tests/unit/test_hunt_exit_code.py)
    assert "Exit codes: 0 a culprit set named; 1 none named (the failing configuration did not fail" in hunt
    assert "POST the run's summary here now" in help_of(["notify"], capsys)
    assert "beside the matrix's folder" in help_of(["validate"], capsys)
    assert "it has no login and no TLS" in help_of(["serve"], capsys)  # before anyone binds 0.0.0.0
    # a run folder deleted by hand stays on reports/index.html until the index is written again:
    # `orch report` of any run there does it, and said only that it re-renders the run's page
    assert "and the runs index beside it (reports/index.html)" in help_of(["report"], capsys)


def test_the_exit_codes_the_help_names_are_the_ones_returned() -> None:
    """Each code `orch --help` lists says every way a sweep ends with it: a sweep stopped early
    (repeated failures, an env file edited by someone else) exits 1 and a testbed another run
    holds exits 2, which the list left out."""
    from orchestrator.errors import ConfigError, Interrupted, LockError, OrchError, StaleLockError
    from orchestrator.sweep.apitypes import SweepOutcome

    said = dict(re.findall(r"(\d+) ([^;]+)", EXIT_CODES.split(": ", 1)[1]))

    def ended(**how: object) -> int:
        fields: dict[str, object] = dict(
            run_dir=Path("r"), run_id="r", status="completed", completed=4, failed=0, planned=4
        )
        return SweepOutcome(**{**fields, **how}).exit_code  # type: ignore[arg-type]

    ways = [
        (ended(), "ok"),
        (ended(failed=1), "trials failed"),
        (ended(stopped="3 trials in a row failed the same way"), "the sweep stopped early"),
        (ended(not_restored=("decode",)), "hosts not restored"),
        (OrchError("x").exit_code, "a runtime fault"),
        (ConfigError("x").exit_code, "bad input"),
        (LockError("x").exit_code, "a testbed another run holds"),
        (StaleLockError("x").exit_code, "a testbed another run holds"),
        (ended(gates_failed=("g @ c: over",)), "a gate of the matrix failed"),
        (ended(interrupted=True), "interrupted"),
        (Interrupted("x").exit_code, "interrupted"),
    ]
    for code, words in ways:
        assert words in said.get(str(code), ""), f"exit {code} ({words}): the help says {said}"


def test_export_writes_where_its_help_says(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`-o`'s default named RUN_DIR/<run-id>.<format> for junit and bencher too, which write
    <run-id>.junit.xml and <run-id>.bencher.json."""
    run, _ = _runs(tmp_path)
    export = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["export"]
    said = next(a.help for a in export._actions if "-o" in a.option_strings) or ""
    assert "(default: RUN_DIR/<run-id>.<format>" in said, said
    for fmt in ("csv", "json", "junit", "bencher"):
        code, out, err = orch(["export", str(run), "--format", fmt], capsys)
        assert code == 0, (out, err)
        written = Path(out.split("exported: ", 1)[1].strip())
        stated = m[1] if (m := re.search(rf"\b{fmt}: (<run-id>\.[\w.]+)", said)) else f"<run-id>.{fmt}"
        assert written == run / stated.replace("<run-id>", run.name), (fmt, written, said)


@pytest.mark.parametrize("words", [["validate"], ["plan"], ["run"], ["queue", "add"]])
def test_the_testbed_option_says_what_several_testbeds_mean_for_every_command(words, capsys) -> None:  # type: ignore[no-untyped-def]
    """`orch validate -t A,B` checks and `orch plan -t A,B` plans the sweep across several
    testbeds; their help said 'A,B or all runs the trials ... at once', as run's does."""
    text = help_of(words, capsys)
    assert "A,B or 'all': several testbeds at once (a sweep spreads its trials across them)" in text
    assert "runs the trials" not in text


def test_queue_add_takes_and_explains_matrix_arguments_as_run_does(capsys) -> None:  # type: ignore[no-untyped-def]
    """`queue add` reads -i and -t as `orch run` does (sweep_request: the inventory beside the
    matrix's folder, -t A,B or all); its help said only '(default: inventory/local.yaml)' and
    '(default: the first)'."""

    def options(words: list[str]) -> dict[str, str | None]:
        parser = cli.build_parser()
        for word in words:
            parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
        return {a.dest: a.help for a in parser._actions if a.dest in ("inventory", "testbed")}

    assert options(["queue", "add"]) == options(["run"])
    assert "beside the matrix's folder" in help_of(["queue", "add"], capsys)


def test_compare_writes_its_page_where_its_help_says(tmp_path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    a, b = _runs(tmp_path)
    monkeypatch.chdir(tmp_path / "reports" / a.name)  # not the folder the runs are in
    assert "(default: compare-A-vs-B.html in RUN_A's reports folder)" in help_of(["compare"], capsys)
    code, out, err = orch(["compare", str(a), str(b)], capsys)
    page = a.parent / f"compare-{a.name}-vs-{b.name}.html"
    assert code == 0 and page.is_file() and f"comparison: {page}" in " ".join(out.split()), (out, err)


def test_a_mistyped_inventory_path_is_named_as_given_not_hinted_at_with_its_own_option(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, _, err = orch(["validate", str(OVERLAP), "-i", str(tmp_path / "my-clustr.yaml")], capsys)
    assert code == 2 and f"inventory {tmp_path / 'my-clustr.yaml'} not found" in err, err
    assert "pass -i" not in err and "check the path given with -i" in err, err


# ------------------------------------------------------------------ 10: resume --dry-run
def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_resume_dry_run_lists_the_trials_left_and_touches_nothing(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    install(monkeypatch, Fleet({"prefill": "P=0\n", "decode": "D=0\n"}))
    m, i = write_files(tmp_path, MATRIX.replace("replicates: 1", "replicates: 2"), ["A"])
    req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)
    assert api.run(req, cli._live_progress, warn=lambda message: None).status == "completed"
    run_dir = tmp_path / "reports" / "r1"
    journal = run_dir / "journal.jsonl"  # as a kill -9 after the first trial left it
    journal.write_text("".join(journal.read_text().splitlines(keepends=True)[:2]))
    (run_dir / "journal.jsonl.idx").unlink()
    before = _files(run_dir)

    def no_host(*args: object) -> None:
        raise AssertionError("a dry run connected to a host")

    monkeypatch.setattr(api.session, "connect", no_host)
    capsys.readouterr()
    code, out, err = orch(["resume", str(run_dir), "--dry-run"], capsys)
    flat = " ".join(out.split())
    assert code == 0 and "resume r1 on testbed A: 1 of 4 trials done, 3 left" in flat, (out, err)
    listed = [line.split("\t")[0] for line in out.splitlines() if "\t" in line][1:]
    assert listed == ["1", "2", "3"] and "dry run: nothing was changed" in flat, out
    assert _files(run_dir) == before
    left: list[int] = []  # the resume itself runs what the dry run listed

    def progress(started: api.Started) -> object:
        left.append(started.left)
        return cli._live_progress(started)

    install(monkeypatch, Fleet({"prefill": "P=0\n", "decode": "D=0\n"}))
    assert api.resume(api.ResumeRequest(run_dir), progress, warn=lambda m: None).completed == 4  # type: ignore[arg-type]
    assert left == [3]


# ------------------------------------------------------------------ 11: every command shows examples that work
def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command that runs something (`queue add`, not `queue`), by its words after `orch`."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [words]
    return [c for name, sub in subs[0].choices.items() for c in _commands(sub, (*words, name))]


@pytest.mark.parametrize("words", _commands(cli.build_parser()), ids=" ".join)
def test_every_commands_help_ends_with_examples_that_parse(words: tuple[str, ...], capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit):
        cli.main([*words, "--help"])
    text = capsys.readouterr().out
    assert "\nexamples:\n" in text, f"orch {' '.join(words)} --help shows no example"
    examples = [line.strip() for line in text.split("\nexamples:\n", 1)[1].splitlines() if line.strip()]
    assert examples
    for example in examples:
        argv = shlex.split(example, comments=True)
        assert argv[: 1 + len(words)] == ["orch", *words], example
        args, unknown = cli.build_parser().parse_known_args(argv[1:])  # argparse exits 2 on a bad one
        assert unknown == [] and args.func is not None, example


def test_every_positional_argument_says_what_to_give(capsys) -> None:  # type: ignore[no-untyped-def]
    """`orch report --help` listed a bare RUN_DIR (which folder? the run's, or reports/?)."""
    bare = [
        f"orch {' '.join(words)} {action.metavar or action.dest}"
        for words in _commands(cli.build_parser())
        for action in _parser_of(words)._actions
        if not action.option_strings and not action.help
    ]
    assert bare == []


def _parser_of(words: tuple[str, ...]) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = cli.build_parser()
    for word in words:
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = subs.choices[word]
    return parser
