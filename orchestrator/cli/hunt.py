"""`orch hunt MATRIX`: find which of the matrix's suspect flags cause a failure (its `hunt:`
section), with the fewest sessions. The hunt runs through the sweep API like `orch run` (locks,
journal, restore, parallel testbeds, `orch resume`); this module adds its plan view and the
culprit summary and page at the end."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cli.args import REPORTS_HELP, sweep_request
from orchestrator.cli.argtypes import bounded_int
from orchestrator.core.bounds import MAX_RETRIES, MAX_SEED
from orchestrator.errors import ConfigError, OrchError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.core.model import Matrix
    from orchestrator.core.steps import Plan
    from orchestrator.sweep import api
    from orchestrator.sweep.progress import Progress


def add_options(cmd: argparse.ArgumentParser, reports: Path) -> None:
    """`orch hunt`'s options beyond MATRIX -i -t (cli.main registers the command: importing
    cli.args here would put the CLI one import level deeper than the layering test allows)."""
    cmd.add_argument("--dry-run", action="store_true", help="print the first wave and the expected cost; touch nothing")
    cmd.add_argument(
        "--seed", type=bounded_int(0, MAX_SEED), help="seed of the run (trial seeds; default: matrix seed or random)"
    )
    cmd.add_argument("--out", "--reports", type=Path, default=reports, metavar="DIR", help=REPORTS_HELP)
    cmd.add_argument("--run-id", help="name of the run directory (default: <utc time>-<matrix name>)")
    cmd.add_argument(
        "--retries",
        type=bounded_int(0, MAX_RETRIES),
        help="extra attempts for infrastructure failures (default 1; on --resume: the run's)",
    )
    cmd.add_argument("--break-lock", action="store_true", help="take over the testbed lock of a dead sweep")
    cmd.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue an interrupted hunt")


def cmd_hunt(args: argparse.Namespace) -> int:
    if args.resume is not None:
        return _resume(args)
    from orchestrator.cli import output  # the sweep API: only when a hunt runs
    from orchestrator.cli.console import out, warn
    from orchestrator.sweep.prepare import check_key_files, check_new_run, prepare

    request = sweep_request(
        args,
        seed=args.seed,
        reports_dir=args.out,
        run_id=args.run_id,
        retries=1 if args.retries is None else args.retries,
        break_lock=args.break_lock,
    )
    prepared = prepare(request, warn=warn)
    if prepared.plan.matrix.hunt is None:
        raise UsageError(
            f"{prepared.plan.matrix.path}: no hunt: section",
            hint="add hunt: {metric: ...} (see README 'Hunting a culprit')",
        )
    check_new_run(request, prepared)  # a bad or taken --run-id: refused by the dry run as by the hunt
    check_key_files(prepared.testbeds, prepared.inventory)  # a missing SSH file here: so too (api.run)
    if args.dry_run:
        print_hunt_plan(prepared.plan, out, [tb.name for tb in prepared.testbeds])
        out.print("dry run: nothing was changed")
        return 0
    from orchestrator.sweep import api  # the run machinery: for a real hunt

    outcome = api.run(request, _progress, warn=warn, prepared=prepared)
    output.show_outcome(outcome)
    after(outcome)
    return outcome.exit_code


def _resume(args: argparse.Namespace) -> int:
    """`orch hunt --resume RUN_DIR`: with the run's own --retries unless given again."""
    from orchestrator.cli import output  # the sweep API: only when a hunt resumes
    from orchestrator.cli.console import warn
    from orchestrator.sweep import api

    check_same_matrix(args.matrix, args.resume)
    if args.dry_run:  # it was ignored: the hunt resumed for real
        from orchestrator.cli.console import out
        from orchestrator.cli.planview import print_resume_dry_run

        return print_resume_dry_run(api.preview_resume(args.resume), out)
    retries = args.retries
    request = api.ResumeRequest(args.resume, retries=retries, break_lock=args.break_lock)
    outcome = api.resume(request, _progress, warn=warn)
    output.show_outcome(outcome)
    after(outcome)
    return outcome.exit_code


def check_same_matrix(path: Path, run_dir: Path) -> None:
    """`orch hunt MATRIX --resume RUN_DIR` resumes RUN_DIR's hunt, so MATRIX must be its matrix:
    a changed one is refused at its first differing line (exit 2, nothing touched), as `orch
    resume` refuses a run whose matrix changed. Why: MATRIX was ignored, and a hunt resumed with
    `posterior: 0.99999` edited in went on to the run's old target, exit 0."""
    from orchestrator.core.config import read_matrix  # the config models: only when resuming
    from orchestrator.store.manifest import load_manifest

    manifest = load_manifest(run_dir, plan=False)
    matrix = read_matrix(path)
    if matrix.sha256 == manifest.matrix_sha256:
        return
    line, what = _first_difference(matrix.redactor.text(matrix.text), manifest.matrix_text)  # masked as run.json's
    raise UsageError(
        f"differs from the matrix of run {manifest.run_id}: {what}",
        file=str(path),
        line=line,
        hint=f"a hunt resumes with its own matrix: `orch resume {run_dir}`; to hunt with this one, start a new "
        "hunt (without --resume)",
    )


def _first_difference(given: str, run: str) -> tuple[int | None, str]:
    """The first line (1-based) where two matrix texts differ, and how; (None, why) when every
    line reads the same (a masked secret or the line ends differ)."""
    a, b = given.splitlines(), run.splitlines()
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    if at >= max(len(a), len(b)):
        return None, "in a secret's value or in whitespace (its lines read the same)"
    here, there = (lines[at].strip() if at < len(lines) else "(the end of the file)" for lines in (a, b))
    return at + 1, f"{here!r} here, {there!r} in the run"


def not_a_run(matrix: Matrix) -> ConfigError:
    """`orch run` on a hunt matrix: refused (exit 2, nothing touched). A hunt picks its trials as
    it goes and stops on its own rule, which is not what `orch run` promises (every planned
    trial); running the first wave only, or hunting under `orch run`, would both surprise."""
    from orchestrator.core.huntconfig import section_line  # the config models (pydantic): loaded by now

    return ConfigError(
        f"this matrix declares a hunt; run `orch hunt {matrix.path}`",
        file=matrix.path,
        line=section_line(matrix.text, "hunt"),
        hint="`orch hunt --dry-run` shows its first wave and expected cost",
    )


def _progress(started: api.Started) -> Progress:
    from orchestrator.cli import output
    from orchestrator.sweep.progress import Tee
    from orchestrator.team.livestatus import LiveStatus

    return Tee(output.terminal(started), LiveStatus(started.run_dir, cell_name=started.cell_name))


def after(outcome: api.SweepOutcome) -> None:
    """A finished (or stopped) hunt: the culprit summary on the terminal and hunt.html, and last,
    why it exits 1 when it named no culprit set."""
    from orchestrator.cli.console import out

    _summary(outcome.run_dir)
    if outcome.unanswered is not None and outcome.exit_code == 1:
        out.print(f"{outcome.unanswered}: exit code 1", markup=False)


def _summary(run_dir: Path) -> None:
    from rich.markup import escape

    from orchestrator.cli.console import err, out
    from orchestrator.report.hunt import hunt_report, summary_lines, write_hunt_page
    from orchestrator.report.render import fresh_summary
    from orchestrator.report.site import write_index

    try:
        report = hunt_report(run_dir)
        if report is None:
            return
        path = write_hunt_page(run_dir)
        write_index(run_dir.parent, fresh_summary)  # the run's link now leads to hunt.html
    except OrchError as exc:
        err.print(f"[yellow]hunt report not written:[/yellow] {escape(str(exc))}")
        return
    for line in summary_lines(report):
        out.print(line, markup=False)
    out.print(f"hunt report: {path}", markup=False)


def print_hunt_plan(plan: Plan, console: Console, testbeds: Sequence[str]) -> None:
    """The hunt before it starts: suspects, the first wave, and the expected sessions and hours on
    `testbeds` (the ones -t names). Why the names are required: `orch plan -t all` printed the
    time on 1 testbed and `orch hunt -t all --dry-run` on 2, for the same hunt."""
    from rich.markup import escape  # rich: only when printing

    from orchestrator.core.words import counted

    spec = plan.matrix.hunt
    assert spec is not None
    where = f"on {testbeds[0]}" if len(testbeds) == 1 else f"across {len(testbeds)} testbeds ({', '.join(testbeds)})"
    console.print(
        f"[bold]{escape(plan.matrix.name)}[/bold]: hunt over {len(spec.flags)} suspect flags "
        f"(metric {escape(spec.metric)}, posterior target {spec.posterior}) {escape(where)}"
    )
    for flag in spec.flags:
        console.print(f"  {escape(flag)}: fails at {escape(spec.failing[flag])}, clean at {escape(spec.clean[flag])}")
    console.print(f"first wave: {len(plan.steps)} trials (both endpoints, then each flag dropped once):")
    for s in plan.steps:
        config = spec.config_of(dict(s.trial.cell.levels))
        label = s.trial.cell.id if config is None else spec.in_words(config)
        console.print(f"  trial {s.trial.index}: {escape(label)}")
    from orchestrator.cli.planview import human_duration  # the statistics stack loads only for a plan
    from orchestrator.core.huntplan import budget_note, expected_sessions  # numpy/scipy: only here

    median, p90 = expected_sessions(spec)
    per_trial = plan.steps[0].estimate_s if plan.steps else 0.0
    beds = len(testbeds)  # trials run side by side, one per testbed
    took = [human_duration(sessions / spec.sessions_per_trial * per_trial / beds) for sessions in (median, p90)]
    console.print(
        f"expected: ~{median} sessions (p90 {p90}) = ~{median // spec.sessions_per_trial} trials of "
        f"{spec.sessions_per_trial} sessions, ~{took[0]} (p90 {took[1]}) on {counted(beds, 'testbed')} at "
        f"{per_trial:.0f} s a trial (bench/bench_hunt.py model); one flag at a time: "
        f"{(len(spec.flags) + 1) * 80:,} sessions; full factorial: {2 ** len(spec.flags):,} configurations"
    )
    note = budget_note(spec)  # the figures above are capped at the budget: say so when it binds
    if note is not None:
        console.print(f"  [yellow]{escape(note)}[/yellow]")
