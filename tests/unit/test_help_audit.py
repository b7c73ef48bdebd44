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
