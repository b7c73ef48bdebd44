"""What every command module shares: default paths, a subcommand maker, the matrix arguments
and the request they name. A module of its own so command modules (team, reports) need not
import cli.main, which imports them; it builds requests only (sweep.apitypes), so it stays
below the sweep machinery. It imports only the standard library at the top: every `orch` start
builds the parser with it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.sweep.apitypes import SweepRequest

DEFAULT_INVENTORY = Path("inventory/local.yaml")  # `args.inventory is DEFAULT_INVENTORY`: no -i given
DEFAULT_REPORTS = Path("reports")
# `--out` and `--reports` name one folder on every command (the team commands read what run writes)
REPORTS_HELP = "reports folder, where the run's folder is made (default: reports/)"
EXIT_CODES = (
    "Exit codes: 0 ok; 1 trials failed, the sweep stopped early, hosts not restored, a runtime fault or a hunt "
    "named no culprit set; 2 bad input, usage or a testbed another run holds (nothing touched); 3 a gate of the "
    "matrix failed; 130 interrupted; 141 stdout closed early (| head)"
)
# `orch restore`'s (sweep.apitypes.RestoreOutcome.exit_code; a lock held is errors.LockError's 2)
RESTORE_EXIT_CODES = (
    "Exit codes: 0 every host put back; 1 a host not restored or a runtime fault; 2 bad input, usage or a "
    "testbed another run holds (nothing touched); 130 interrupted"
)
# `orch run`'s and `orch resume`'s --webhook (cli.main._webhooks reads ORCH_WEBHOOKS only when one is given)
SWEEP_WEBHOOK_HELP = (
    "POST a summary here when the sweep ends (repeatable; slack+https://... for Slack; "
    "$ORCH_WEBHOOKS's URLs too when one --webhook is given)"
)
# `orch hunt`'s own: a script reads "found" from its exit code (sweep.apitypes.SweepOutcome.unanswered)
HUNT_EXIT_CODES = (
    "Exit codes: 0 a culprit set named; 1 none named (the failing configuration did not fail, or the session "
    "budget ran out first), trials failed or hosts not restored; 2 bad input, usage or a testbed another run "
    "holds (nothing touched); 130 interrupted"
)


SEED_HELP = "seed for the randomized order and the repro's {seed}/{trial_seed} (default: matrix seed or random)"
REPLICATES_HELP = "replicate rounds (default: the matrix's replicates:, 1 if it sets none)"


def run_choice_args(cmd: argparse.ArgumentParser) -> None:
    """--replicates, --seed, --fail-fast and --retries: how `orch run` runs a sweep, and what
    `orch queue add` keeps with its item for `orch queue run` (team.queuestore.RunChoices)."""
    from orchestrator.cli.argtypes import bounded_int, positive
    from orchestrator.core.bounds import MAX_RETRIES, MAX_SEED

    cmd.add_argument("--replicates", type=positive, help=REPLICATES_HELP)
    cmd.add_argument("--seed", type=bounded_int(0, MAX_SEED), help=SEED_HELP)
    cmd.add_argument("--fail-fast", action="store_true", help="stop at the first failed trial")
    cmd.add_argument(
        "--retries",
        type=bounded_int(0, MAX_RETRIES),
        default=1,
        help="extra attempts for infrastructure failures (default 1)",
    )


class HelpWithDefaults(argparse.HelpFormatter):
    """Every option's help shows its default, unless the help already says it (or there is none
    worth showing: a flag, an unset option)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_ = action.help
        shown = action.default not in (None, False, [], argparse.SUPPRESS)
        if not help_ or "default" in help_ or not action.option_strings or not shown:
            return help_
        return f"{help_} (default: %(default)s)"


class OrchParser(argparse.ArgumentParser):
    """Every orch parser (subcommands inherit the class): no abbreviated options, so a typo like
    `--replicate 2` is refused instead of silently meaning --replicates; defaults in the help,
    and the command's examples at its end, one a line as written (argparse would refill them)."""

    examples: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpWithDefaults)
        super().__init__(*args, **kwargs)
        self.set_defaults(_orch_parser=self)  # the innermost command's parser: main() reports unknown options with it

    def format_help(self) -> str:
        if not self.examples:
            return super().format_help()
        return super().format_help() + "\nexamples:\n" + "".join(f"  {line}\n" for line in self.examples)


RUN = "reports/20261205-090628-overlap_ablation"  # a run folder as `orch run` prints it
# Every command's examples, by its words after `orch` (tests/test_cli_ux.py parses each one and
# checks every command has some): a newcomer's first question after "what does it do" is "how".
EXAMPLES: dict[str, tuple[str, ...]] = {
    "run": (
        "orch run matrices/overlap_ablation.yaml            # the demo, on the bundled simulator",
        "orch run matrices/overlap_ablation.yaml -i inventory/my-cluster.yaml --dry-run",
        "orch run matrices/overlap_ablation.yaml -t tb1,tb2 --replicates 4 --fail-fast",
    ),
    "resume": (f"orch resume {RUN} --dry-run", f"orch resume {RUN}"),
    "validate": ("orch validate matrices/overlap_ablation.yaml -i inventory/example-pd.yaml",),
    "plan": ("orch plan matrices/overlap_ablation.yaml --replicates 4", "orch plan matrices/dsv4_hunt.yaml"),
    "report": (f"orch report {RUN}",),
    "restore": (
        f"orch restore {RUN}                  # after a kill -9 or a power cut",
        "orch restore --testbed dsv4-pd -i inventory/my-cluster.yaml   # the run folder is gone",
    ),
    "hunt": (
        "orch hunt matrices/dsv4_hunt.yaml --dry-run",
        "orch hunt matrices/dsv4_hunt.yaml --resume reports/20261205-101500-dsv4_hunt",
    ),
    "compare": ("orch compare reports/LAST_NIGHT reports/TONIGHT -o compare.html",),
    "export": (f"orch export {RUN} --format parquet", f"orch export {RUN} --format junit -o junit.xml"),
    "queue add": (
        "orch queue add matrices/overlap_ablation.yaml -i inventory/my-cluster.yaml --priority 5",
        "orch queue add matrices/overlap_ablation.yaml --replicates 4 --seed 7   # run with these, as orch run would",
    ),
    "queue list": ("orch queue list --all",),
    "queue remove": ("orch queue remove 3",),
    "queue run": ("orch queue run --until 07:00 --dry-run", "orch queue run --until 07:00"),
    "schedule install": ("orch schedule install nightly --on-calendar '*-*-* 01:00' --until 07:00 --dry-run",),
    "schedule list": ("orch schedule list",),
    "schedule remove": ("orch schedule remove nightly",),
    "serve": ("orch serve                      # http://127.0.0.1:8765", "orch serve --port 0 --reports /srv/reports"),
    "status": ("orch status", "orch status --json"),
    "notify": (f"orch notify {RUN} --webhook https://hooks.example/orch",),
}


def add_examples(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> None:
    """Give every command below `parser` its EXAMPLES (a command without any keeps none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                here = (*words, name)
                if isinstance(sub, OrchParser):
                    sub.examples = EXAMPLES.get(" ".join(here), ())
                add_examples(sub, here)


def command(
    sub: argparse._SubParsersAction, name: str, help_: str, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    cmd = sub.add_parser(name, help=help_, description=help_)
    cmd.set_defaults(func=func)
    return cmd


def matrix_args(cmd: argparse.ArgumentParser, example: str = "matrices/overlap_ablation.yaml") -> None:
    cmd.add_argument("matrix", type=Path, metavar="MATRIX", help=f"matrix YAML, e.g. {example}")
    cmd.add_argument(
        "-i",
        "--inventory",
        type=Path,
        default=DEFAULT_INVENTORY,
        help="inventory YAML (default: inventory/local.yaml, the bundled simulator: the one in the current "
        "folder, else the one beside the matrix's folder, e.g. /repo/inventory/local.yaml for "
        "/repo/matrices/m.yaml; a path given here is used as given)",
    )
    cmd.add_argument(
        "-t",
        "--testbed",
        help="testbed name in the inventory (default: the first); "
        "A,B or 'all': several testbeds at once (a sweep spreads its trials across them)",
    )


def sweep_request(args: argparse.Namespace, **more: Any) -> SweepRequest:
    """The sweep the matrix arguments name (MATRIX, -i, -t), with a command's further options."""
    from orchestrator.sweep.apitypes import SweepRequest, testbeds_from_spec  # the config models: only when run

    args.inventory = inventory_for(args.matrix, args.inventory)  # a command reading args.inventory later sees it too
    return SweepRequest(args.matrix, args.inventory, testbeds_from_spec(args.testbed), **more)


def inventory_for(matrix: Path, given: Path) -> Path:
    """The inventory a command uses: -i as given (never guessed); without -i, inventory/local.yaml
    in the current folder, else the one of the checkout the matrix is in (matrices/ and inventory/
    side by side), so `cd /tmp && orch validate /repo/matrices/m.yaml` finds /repo/inventory."""
    if given is not DEFAULT_INVENTORY or DEFAULT_INVENTORY.exists():
        return given
    beside = matrix.absolute().parent.parent / DEFAULT_INVENTORY
    return beside if beside.is_file() else DEFAULT_INVENTORY
