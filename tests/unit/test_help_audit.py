"""Every `orch ... --help` says what the command does with each option: its default (or that it
has none), the exit codes it ends with, and one wording for one option on every command (the
help audit: `orch resume --help` had no exit codes, its --webhook fewer words than run's)."""

from __future__ import annotations

import argparse

import pytest

from orchestrator.cli import main as cli
from orchestrator.cli.args import EXIT_CODES


def help_of(words: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main([*words, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def option(words: list[str], flag: str) -> argparse.Action:
    """The action of `flag` on the command `words` names, from the real parser."""
    parser: argparse.ArgumentParser = cli.build_parser()
    for word in words:
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = subs.choices[word]
    return next(a for a in parser._actions if flag in a.option_strings)


def test_resume_help_lists_the_exit_codes_of_a_run(capsys: pytest.CaptureFixture[str]) -> None:
    """A resume ends as the run it continues (SweepOutcome.exit_code: 1, 3, 130; a hunt's 1 with no
    culprit set), so a script wrapping `orch resume` reads the same codes as `orch run`'s."""
    assert " ".join(EXIT_CODES.split()) in help_of(["resume"], capsys)


def test_run_and_resume_describe_webhook_alike_and_name_orch_webhooks() -> None:
    """Both send at the sweep's end, take the option repeatedly, and add $ORCH_WEBHOOKS's URLs
    once one --webhook is given (cli.main._webhooks; README "Webhooks")."""
    run, resume = option(["run"], "--webhook"), option(["resume"], "--webhook")
    assert run.help == resume.help
    assert run.help is not None and "repeatable" in run.help and "slack+https://" in run.help
    assert "$ORCH_WEBHOOKS" in run.help and "when one --webhook is given" in run.help


# Options with no default, and why the help needs none: everything else states its default.
NO_DEFAULT = {
    "--webhook": "none: nothing is posted without one (the help says which env adds URLs)",
    "--resume": "none: without it `orch hunt` starts a new hunt",
    "--testbed": "`orch restore` only: none, RUN_DIR names the testbed instead",
    "--on-calendar": "one of --on-calendar and --on-active is required",
    "--on-active": "one of --on-calendar and --on-active is required",
    "--scheduled": "set by `orch schedule` alone",
}


def _parsers(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> list[tuple[str, argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found = [(" ".join(words), parser)]
    return found + [p for s in subs for name, sub in s.choices.items() for p in _parsers(sub, (*words, name))]


def test_every_option_that_takes_a_value_states_its_default() -> None:
    """The brief's "helpful --help, sane defaults": an option that takes a value and says no
    default leaves the user to guess what leaving it out does (--replicates, --until did)."""
    missing = []
    for words, parser in _parsers(cli.build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or action.nargs == 0 or action.help == argparse.SUPPRESS:
                continue  # positionals, flags (--dry-run: off unless given), hidden options
            said = formatter._get_help_string(action) or ""  # the help with the "(default: ...)" it adds
            name = action.option_strings[-1]
            if "default" not in said and not (name in NO_DEFAULT and (name != "--testbed" or words == "restore")):
                missing.append(f"orch {words} {name}")
    assert missing == []


@pytest.mark.parametrize("command", ["run", "plan", "hunt"])
def test_seed_help_says_it_seeds_the_repros_trial_seed(command: str) -> None:
    """--seed is the run's seed (plan.seed): the order and each trial's {seed}/{trial_seed} in
    the repro command (sweep.commands.command_values); run's and plan's help named the order alone,
    so a user reproducing a run's sessions did not know the flag reaches them."""
    said = option([command], "--seed").help or ""
    assert "trial" in said and "default: matrix seed or random" in said
    if command != "hunt":  # a hunt orders nothing at random
        assert "{trial_seed}" in said and "randomized order" in said


def test_restore_help_lists_its_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """`orch restore` is what a script runs after a crash: it must tell "every host back" (0) from
    "a host still changed" (1, sweep.apitypes.RestoreOutcome.exit_code), a lock another run holds
    (2, errors.LockError) and an interrupted restore (130); its help listed no code."""
    said = help_of(["restore"], capsys)
    assert "Exit codes: 0 every host put back; 1 a host not restored or a runtime fault; 2 bad input" in said
    assert "a testbed another run holds (nothing touched); 130 interrupted" in said


def test_the_reports_folder_is_one_option_with_two_names_on_every_command() -> None:
    """From a walk: `orch run --out R` wrote the run, then `orch status --out R` was refused
    ("unrecognized arguments: --out"): the folder a run writes and the one the team commands read
    is one folder, and each command takes it by either name."""
    parser = cli.build_parser()
    named = [
        (where, action)
        for where, sub in _parsers(parser)
        for action in sub._actions
        if {"--out", "--reports"} & set(action.option_strings)
    ]
    assert {w for w, _ in named} >= {"run", "hunt", "status", "serve", "queue add", "queue run"}, named
    for where, action in named:
        assert set(action.option_strings) == {"--out", "--reports"}, (where, action.option_strings)
    run = cli.build_parser().parse_args(["run", "m.yaml", "--reports", "elsewhere"])
    status = cli.build_parser().parse_args(["status", "--out", "elsewhere"])
    assert str(run.out) == str(status.reports) == "elsewhere"
